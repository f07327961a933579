"""A lazily opened, fork-aware connection pool for one namespace.

:class:`ConnectionSource` opens nothing until the first call in a process. Then it makes
one direct *probe* connection — so an unreachable server fails at once with the real
reason, instead of after the pool's patience — checks (and if needed completes) the
namespace's migrations on it, and opens a ``psycopg_pool.ConnectionPool`` whose first
connection is that probe.

Every connection is in **autocommit** mode (a single statement is its own transaction;
multi-statement operations use an explicit ``conn.transaction()``), has
``application_name`` ``rdq:<schema>`` by default (so a namespace's connections can be
found and cut), client encoding UTF-8 and a ``connect_timeout`` (unless the DSN sets one).

**Fork safety.** A child process never uses nor closes a pool or connection it inherited
through ``fork`` (closing would end the parent's sessions): an at-fork hook forgets the
inherited pool (keeping it referenced so nothing is finalised), and the child opens its
own on first use. Processes started with ``spawn`` inherit nothing.

**Liveness.** Before lending a pooled connection :func:`is_cut` looks at its socket: if the
idle socket has anything to read, the server has most likely sent a termination notice
(``pg_terminate_backend``, restart), so one round trip confirms it, and a dead connection
is closed and replaced before the caller's statement is sent. (The pool's own ``check``
hook is not used: after a failed check it backs off for about a second.)

**A connection made ahead.** Whoever made a namespace may also have made its first
connection, in the background (the kit's namespace stock does): :func:`offer_connection`
leaves it for the next source of this process on that DSN and schema with the default
``application_name``, which takes it as its probe instead of connecting (a new session
costs 5-15 ms: fork of a server process, start-up, catalog caches). An offered
connection that died meanwhile is closed and a new one made; :func:`withdraw_connection`
closes one nobody took.

**Failing fast while the server is down.** A pool whose connections died gets them back
only through its background worker, which retries with a growing back-off (1, 2, 4 …
seconds): waiting for it would make every call of an already open storage wait the whole
pool timeout while the server is down, and for a while after it is back. So once a
connection is found cut or broken the source is *degraded*: it waits for a pooled
connection only :data:`DEGRADED_WAIT_S`, then opens a direct connection for the call
(closed afterwards) — refused at once while the server is down (``BackendUnavailable``
with the real reason), working as soon as it is back. The first live pooled connection
lent ends the degraded state; a healthy pool waits the full pool timeout as before (for
a busy pool, the wait is the pool's to bound).

**The spare.** Borrowing from ``psycopg_pool`` costs a few microseconds of locking and
bookkeeping each way, paid by every statement. So a connection given back idle (no
transaction open, not broken) is kept lent as the source's *spare*, and the next borrow
takes it first (its liveness checked as any other's); a second connection given back
while there is a spare, one given back while a caller is queued for the pool (it is
served at once), one given back in any other state, and the spare once it has been kept
:data:`SPARE_REFRESH_S` go back to the pool as before, so the pool's lifetime
and reset rules still see every connection at least that often. ``close()`` and the
at-fork hook account for the spare like the pool (closed; forgotten, never used in a child).
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from rdq_core.errors import BackendUnavailable
from rdq_postgres import schema
from rdq_postgres.errors import map_error, mask_dsn

#: Seconds to wait for a TCP connection (only when the DSN does not say).
CONNECT_TIMEOUT_S = 5
#: Seconds a call waits for a pooled connection before ``BackendUnavailable``.
POOL_TIMEOUT_S = 10.0
#: Seconds a call waits for a pooled connection after connections were found dead, before
#: it connects directly instead (see "Failing fast" above).
DEGRADED_WAIT_S = 0.05
#: Seconds a connection is kept as the spare before it goes back to the pool once.
SPARE_REFRESH_S = 1.0
_IDLE = psycopg.pq.TransactionStatus.IDLE

#: Pools inherited through fork: kept referenced, never used nor closed in the child.
_INHERITED: list[object] = []
_SOURCES: weakref.WeakSet[ConnectionSource] = weakref.WeakSet()
#: Connections made ahead, by (dsn, schema): (the pid that made it, the connection).
_OFFERED: dict[tuple[str, str], tuple[int, psycopg.Connection]] = {}
_OFFERED_LOCK = threading.Lock()


def default_application_name(schema_: str) -> str:
    return f"rdq:{schema_}"


def connection_kwargs(dsn: str, application_name: str) -> dict[str, Any]:
    """Keyword arguments for every connection (they override the DSN's own settings)."""
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise BackendUnavailable(f"invalid postgres DSN {mask_dsn(dsn)!r}: {exc}") from None
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "application_name": application_name,
        "client_encoding": "utf8",
    }
    if "connect_timeout" not in given:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
    return kwargs


def connect_for(dsn: str, schema_: str) -> psycopg.Connection:
    """A new connection for ``schema_`` as a source with the default ``application_name``
    makes its own (what :func:`offer_connection` wants). Raises raw ``psycopg.Error``."""
    name = default_application_name(schema.schema_name(schema_))
    return psycopg.Connection.connect(dsn, **connection_kwargs(dsn, name))


def offer_connection(dsn: str, schema_: str, conn: psycopg.Connection) -> None:
    """Leave ``conn`` (from :func:`connect_for`, idle) for the next source of this process
    on ``dsn`` and ``schema_`` (see "A connection made ahead"); replaces one offered
    before, which is closed."""
    with _OFFERED_LOCK:
        old = _OFFERED.pop((dsn, schema_), None)
        _OFFERED[(dsn, schema_)] = (os.getpid(), conn)
    if old is not None and old[0] == os.getpid():
        old[1].close()


def withdraw_connection(dsn: str, schema_: str) -> None:
    """Close the connection offered for ``schema_`` if no source took it."""
    with _OFFERED_LOCK:
        offered = _OFFERED.pop((dsn, schema_), None)
    if offered is not None and offered[0] == os.getpid():
        offered[1].close()


def _take_offered(dsn: str, schema_: str) -> psycopg.Connection | None:
    with _OFFERED_LOCK:
        offered = _OFFERED.pop((dsn, schema_), None)
    if offered is None or offered[0] != os.getpid():
        return None  # none, or the parent's (never used nor closed in a child)
    conn = offered[1]
    if is_cut(conn):
        conn.close()
        return None
    return conn


def is_cut(conn: psycopg.Connection) -> bool:
    """Whether an idle pooled connection was ended by the server (terminated, restarted).

    Nothing should arrive on an idle connection we do not LISTEN on; if something did
    (most likely the server's termination notice), one round trip tells a live connection
    from a dead one. No round trip otherwise.
    """
    if conn.closed or conn.broken:
        return True
    try:
        if hasattr(select, "poll"):
            poller = conn.__dict__.get("_rdq_poll")  # one per connection, made once
            if poller is None:
                poller = conn.__dict__["_rdq_poll"] = select.poll()
                poller.register(conn.fileno(), select.POLLIN)
            readable = bool(poller.poll(0))
        else:  # pragma: no cover - not Linux
            readable = bool(select.select([conn.fileno()], [], [], 0)[0])
        if readable:
            conn.execute("SELECT 1")
    except (psycopg.Error, OSError, ValueError):
        return True
    return False


def _waited_for(pool: psycopg_pool.ConnectionPool[psycopg.Connection]) -> bool:
    """Whether a caller is queued for one of ``pool``'s connections (it would wait out its
    pool timeout while the connection sat idle as a spare)."""
    return bool(pool.get_stats().get("requests_waiting", 0))


def cursor_of(conn: psycopg.Connection) -> psycopg.Cursor[Any]:
    """The connection's own cursor, made once and reused by every statement on it (a fresh
    cursor per statement costs about 20 µs of adapter set-up, a fifth of a claim's client
    time). A borrowed connection serves one call at a time, so one cursor is enough."""
    cur: psycopg.Cursor[Any] | None = conn.__dict__.get("_rdq_cursor")
    if cur is None:
        cur = conn.__dict__["_rdq_cursor"] = conn.cursor()
    return cur


def _handoff_class(handoff: list[psycopg.Connection]) -> type[psycopg.Connection]:
    """A connection class whose ``connect`` first hands out the connections in
    ``handoff`` (the probe that checked the namespace becomes the pool's first one)."""

    class HandoffConnection(psycopg.Connection):  # type: ignore[type-arg]
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> HandoffConnection:  # type: ignore[override]
            if handoff:
                conn = handoff.pop()
                if not conn.closed:
                    return conn  # type: ignore[return-value]
            return super().connect(conninfo, **kwargs)  # type: ignore[return-value]

    return HandoffConnection


class ConnectionSource:
    """Pooled autocommit connections to ``dsn`` for namespace ``schema_``."""

    def __init__(
        self,
        dsn: str,
        schema_: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        application_name: str | None = None,
        timeout: float = POOL_TIMEOUT_S,
    ) -> None:
        self.dsn = dsn
        self.schema = schema.schema_name(schema_)
        self.where = f"postgres {mask_dsn(dsn)!r} namespace {self.schema!r}"
        self._kwargs = connection_kwargs(
            dsn, application_name or default_application_name(self.schema)
        )
        #: whether a connection offered for the schema may be taken (default name only)
        self._may_take_offered = application_name is None
        self._min_size = min_size
        self._max_size = max_size
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection] | None = None
        self._closed = False
        #: connections were found dead and the pool may have none live (a hint)
        self._degraded = False
        #: The spare (see the module docstring): lent by the pool, kept idle for the next
        #: borrow; normally at most one (threads racing may leave two).
        self._spare: list[psycopg.Connection] = []
        #: When the spare was last returned to the pool (``time.monotonic()``).
        self._spare_refreshed = time.monotonic()
        _SOURCES.add(self)

    @property
    def degraded(self) -> bool:
        """Whether connections were found dead and no live pooled one was lent since."""
        return self._degraded

    @property
    def application_name(self) -> str:
        return str(self._kwargs["application_name"])

    def _open_pool(self) -> psycopg_pool.ConnectionPool[psycopg.Connection]:
        handoff: list[psycopg.Connection] = []
        connection_class = _handoff_class(handoff)
        probe = _take_offered(self.dsn, self.schema) if self._may_take_offered else None
        if probe is not None:
            try:
                schema.migrate(probe, self.schema)
            except psycopg.Error:
                probe.close()  # as if it had not been offered: connect and check anew
                probe = None
            except BaseException:
                probe.close()
                raise
        if probe is None:
            try:
                probe = connection_class.connect(self.dsn, **self._kwargs)
            except psycopg.Error as exc:
                raise map_error(exc, "connect", self.where) from exc
            try:
                schema.migrate(probe, self.schema)
            except BaseException as exc:
                probe.close()
                if isinstance(exc, psycopg.Error):
                    raise map_error(exc, "open", self.where) from exc
                raise
        handoff.append(probe)  # the pool's first connection: no second connect
        pool: psycopg_pool.ConnectionPool[psycopg.Connection] = psycopg_pool.ConnectionPool(
            self.dsn,
            connection_class=connection_class,
            kwargs=self._kwargs,
            min_size=self._min_size,
            max_size=self._max_size,
            open=False,
            timeout=self._timeout,
            name=self.application_name,
            num_workers=1,
        )
        pool.open(wait=True, timeout=self._timeout)  # instant: the probe is handed over
        return pool

    def pool(self) -> psycopg_pool.ConnectionPool[psycopg.Connection]:
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"{self.where}: the storage is closed; open a new one")
            if self._pool is None:
                self._pool = self._open_pool()
            return self._pool

    def borrow(self) -> tuple[psycopg.Connection, bool]:
        """A live connection, and whether it is pooled; hand it back with
        :meth:`give_back`. Raw psycopg (and psycopg_pool) errors propagate: callers map them.

        Pooled connections the server has cut are skipped (and replaced by the pool). When
        degraded, a pooled connection is awaited only briefly, then a direct one is opened.
        """
        if self._closed:
            raise BackendUnavailable(f"{self.where}: the storage is closed; open a new one")
        spare = self._spare
        if spare:
            try:
                conn = spare.pop()
            except IndexError:  # another thread took it meanwhile
                pass
            else:
                if not is_cut(conn):
                    self._degraded = False
                    return conn, True
                self._degraded = True
                conn.close()
                self._put(conn)
        pool = self._pool
        if pool is None:
            pool = self.pool()
        for _ in range(self._max_size + 1):
            if self._degraded:
                try:
                    conn = pool.getconn(min(DEGRADED_WAIT_S, self._timeout))
                except psycopg_pool.PoolTimeout:
                    return self._connect_direct(), False
            else:
                conn = pool.getconn()
            if not is_cut(conn):
                self._degraded = False
                return conn, True
            self._degraded = True
            conn.close()
            pool.putconn(conn)  # the pool discards it and opens a replacement
        return self._connect_direct(), False  # every connection tried was dead

    def _connect_direct(self) -> psycopg.Connection:
        """A connection outside the pool (refused at once when the server is down)."""
        return psycopg.Connection.connect(self.dsn, **self._kwargs)

    def give_back(self, conn: psycopg.Connection, pooled: bool) -> None:
        """Return what :meth:`borrow` lent (a broken connection makes the source degraded)."""
        if conn.broken:
            self._degraded = True
        if not pooled:
            conn.close()
            return
        pool = self._pool
        if pool is None:  # closed meanwhile (or inherited: never ours to return to)
            conn.close()
            return
        if not self._spare and not conn.closed and conn.pgconn.transaction_status == _IDLE:
            now = time.monotonic()
            if now - self._spare_refreshed >= SPARE_REFRESH_S:
                self._spare_refreshed = now
            elif not _waited_for(pool):
                self._spare.append(conn)
                if self._pool is pool and not _waited_for(pool):
                    return
                try:
                    self._spare.remove(conn)
                except ValueError:  # a borrower, or close(), took it meanwhile
                    return
                if self._pool is not pool:  # closed meanwhile: close() missed it
                    conn.close()
                    return
        pool.putconn(conn)

    def _put(self, conn: psycopg.Connection) -> None:
        """Give ``conn`` back to the pool it was lent by (if the source still has it)."""
        pool = self._pool
        if pool is not None:
            pool.putconn(conn)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """Borrow a live connection (raw psycopg errors propagate; callers map them)."""
        conn, pooled = self.borrow()
        try:
            yield conn
        finally:
            self.give_back(conn, pooled)

    def close(self) -> None:
        """Close this process's pool; idempotent."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            spares, self._spare = self._spare, []
        for conn in spares:
            if pool is None:
                conn.close()
            else:
                pool.putconn(conn)
        if pool is not None:
            try:
                pool.close(timeout=5.0)
            except Exception:  # closing must not fail; the server reaps dead sessions
                pass

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        _INHERITED.extend(self._spare)
        self._spare = []
        if self._pool is not None:
            _INHERITED.append(self._pool)
            self._pool = None


def _forget_inherited_pools() -> None:
    for source in list(_SOURCES):
        source._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_pools)
