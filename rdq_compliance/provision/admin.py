"""A server's admin handle: its own connection, the calls made on it, the namespaces it
made and the clean-up of those left over.

Every server backend's ``Server`` keeps one connection of its own (not a storage's) to
create and drop namespaces and to cut other clients' connections. What it does with it
is the same everywhere, so a backend's ``server.py`` hands :class:`AdminHandle` the
driver-specific parts and keeps only what its namespaces are::

    self.admin = AdminHandle(
        connect=lambda: open_checked(dsn),        # BackendUnavailable if it does not answer
        disconnect=lambda conn: conn.close(),
        errors=(driver.Error,),
        map_error=lambda exc, action: map_error(exc, action, where),
    )
    namespace = self.admin.call("create_namespace", lambda conn: create(conn, name))
    self.admin.created(name)

- **connect lazily**: the connection is opened on first use, and again when it was lost
  (``usable`` says it is closed, or ``lost`` said an error killed it) or when this object
  was inherited through ``fork`` (a child never uses, nor closes, its parent's
  connection);
- **call with a clear error**: :meth:`AdminHandle.call` runs one call at a time (a lock)
  and turns a driver error (``errors``) into the backend's own (``map_error``, naming the
  action and the server); ``retries`` calls again on a fresh connection when the error
  lost the old one;
- **forget**: :meth:`AdminHandle.forget` drops the connection after its server was
  killed, restarted or failed over (what a ``Server``'s ``forget_connections`` does), so
  the next call opens a new one;
- **close**: :meth:`AdminHandle.close` drops the namespaces made through it that are still
  there (stopping at the first ``BackendUnavailable``: a server that does not answer has
  nothing to drop them on) and closes the connection.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from rdq_core.errors import BackendUnavailable

__all__ = ["AdminHandle"]

C = TypeVar("C")
T = TypeVar("T")


def _always(conn: object) -> bool:
    return True


def _never(conn: object, exc: BaseException) -> bool:
    return False


@dataclass(kw_only=True, eq=False)
class AdminHandle(Generic[C]):
    """One server's admin connection and namespaces (see the module docstring).

    ``connect()`` returns a connection that answered, or raises ``BackendUnavailable``
    saying why; ``disconnect(conn)`` closes one (errors are ignored). ``usable(conn)``:
    whether a kept connection may be used again (default: yes). ``lost(conn, exc)``:
    whether ``exc`` left ``conn`` unusable (default: no; a driver that reconnects by
    itself never loses it). ``retries``: how many times a call whose error lost the
    connection is made again on a new one.
    """

    connect: Callable[[], C]
    disconnect: Callable[[C], object]
    errors: tuple[type[BaseException], ...]
    map_error: Callable[[BaseException, str], BaseException]
    usable: Callable[[C], bool] = _always
    lost: Callable[[C, BaseException], bool] = _never
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _conn: C | None = field(default=None, init=False, repr=False)
    _pid: int = field(default_factory=os.getpid, init=False, repr=False)
    _created: set[str] = field(default_factory=set, init=False, repr=False)

    def _open(self) -> C:
        conn = self._conn
        if conn is not None and self._pid == os.getpid() and self.usable(conn):
            return conn
        conn = self.connect()
        self._conn, self._pid = conn, os.getpid()
        return conn

    def connection(self) -> C:
        """The connection, opened if need be (for reads outside :meth:`call`)."""
        with self._lock:
            return self._open()

    def call(self, action: str, fn: Callable[[C], T]) -> T:
        """``fn(connection)``, one call at a time; a driver error becomes the backend's
        error for ``action``."""
        with self._lock:
            for attempt in range(self.retries + 1):
                conn = self._open()
                try:
                    return fn(conn)
                except self.errors as exc:
                    if self.lost(conn, exc):
                        self._conn = None
                        if attempt < self.retries:
                            continue  # the connection had died: once more on a new one
                    raise self.map_error(exc, action) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def created(self, namespace: str) -> None:
        """``namespace`` was made through this handle: :meth:`close` drops it if it is
        still there then."""
        with self._lock:
            self._created.add(namespace)

    def dropped(self, namespace: str) -> None:
        """``namespace`` is gone: :meth:`close` leaves it alone."""
        with self._lock:
            self._created.discard(namespace)

    def forget(self) -> None:
        """The connection died with its server (a kill, a restart, a failover): close
        what is left of it; the next call opens a new one."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            with contextlib.suppress(Exception):
                self.disconnect(conn)

    def close(self, drop: Callable[[str], object], also: Iterable[str] = ()) -> None:
        """Drop (``drop(namespace)``) ``also`` and the namespaces made through this handle
        that are still there, then close the connection. A namespace whose drop raises
        ``BackendUnavailable`` ends the clean-up: the server does not answer."""
        with self._lock:
            leftover, self._created = sorted(self._created), set()
        for namespace in [*also, *leftover]:
            try:
                drop(namespace)
            except BackendUnavailable:
                break
        self.forget()
