"""Namespaces created ahead and dropped behind, so that neither costs a test anything.

Creating a schema with its tables and indexes takes ~15-25 ms of catalog work and
dropping it ~7-10 ms; the kit creates one per test and drops it after. A
:class:`NamespaceStock` does both on a daemon thread with its own connection: it keeps a
few fresh, never used namespaces ready (:meth:`take` hands one out without waiting, or
``None`` when none is ready, and the caller creates one itself), and drops the ones
handed to :meth:`discard` (with the ``drop`` function it was given, the server's own),
reporting each drop through ``on_dropped``. Keeping one namespace ready comes first, then
the drops, then filling the stock up. Errors in the thread (server down, restarting)
only pause it; a namespace whose drop failed stays queued. In a forked child the stock
is empty and drops nothing (the thread does not exist there): callers then create and
drop synchronously. :meth:`close` stops the thread and returns what it still held, to
be dropped by the caller.

Plugin half (only :class:`rdq_postgres.server.PostgresServer` uses it), although it
imports nothing of the kit: psycopg and the storage half's ``schema`` and ``connection``.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import deque
from collections.abc import Callable

import psycopg

from rdq_postgres import schema
from rdq_postgres.connection import CONNECT_TIMEOUT_S

#: How many ready namespaces the stock keeps.
STOCK_SIZE = 4
#: Seconds the thread pauses after an error before trying again.
RETRY_PAUSE_S = 1.0


def new_namespace_name() -> str:
    return f"rdq_{uuid.uuid4().hex}"


def _no_op(namespace: str) -> None:
    return None


class NamespaceStock:
    """Fresh namespaces on the server at ``dsn``, made (and discarded ones dropped) in the
    background. ``drop(conn, namespace)`` drops one on the thread's connection."""

    def __init__(
        self,
        dsn: str,
        size: int = STOCK_SIZE,
        *,
        drop: Callable[[psycopg.Connection, str], None] | None = None,
        on_dropped: Callable[[str], None] = _no_op,
    ) -> None:
        self._dsn = dsn
        self._size = size
        self._drop = drop or schema.drop_namespace
        self._on_dropped = on_dropped
        self._ready: deque[str] = deque()
        self._doomed: deque[str] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._work, name="rdq-postgres-stock", daemon=True)
        self._thread.start()

    def take(self) -> str | None:
        """A ready namespace, or ``None`` (never waits)."""
        if not self._alive():
            return None
        with self._lock:
            namespace = self._ready.popleft() if self._ready else None
        self._wake.set()
        return namespace

    def discard(self, namespace: str) -> bool:
        """Queue ``namespace`` to be dropped; False (nothing queued) when the thread is not
        there to do it (a forked child, a closed stock): the caller drops it itself."""
        if not self._alive():
            return False
        with self._lock:
            self._doomed.append(namespace)
        self._wake.set()
        return True

    def _alive(self) -> bool:
        return os.getpid() == self._pid and not self._stop.is_set()

    def close(self) -> list[str]:
        """Stop the thread; returns the namespaces made but never handed out and those
        discarded but not dropped yet (for the caller to drop)."""
        if os.getpid() != self._pid:
            return []
        self._stop.set()
        self._wake.set()
        self._thread.join(30)
        with self._lock:
            left = [*self._doomed, *self._ready]
            self._ready, self._doomed = deque(), deque()
        return left

    def _next(self) -> tuple[str, str | None]:
        """What to do now: ("drop", name), ("create", None) or ("wait", None)."""
        with self._lock:
            if self._doomed and (self._ready or self._size == 0):
                return "drop", self._doomed.popleft()
            if len(self._ready) < self._size:
                return "create", None
            if self._doomed:
                return "drop", self._doomed.popleft()
            return "wait", None

    def _work(self) -> None:
        conn: psycopg.Connection | None = None
        try:
            while not self._stop.is_set():
                action, namespace = self._next()
                if action == "wait":
                    self._wake.wait()
                    self._wake.clear()
                    continue
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(
                            self._dsn,
                            autocommit=True,
                            connect_timeout=CONNECT_TIMEOUT_S,
                            application_name="rdq:admin",
                        )
                    if action == "drop":
                        assert namespace is not None
                        self._drop(conn, namespace)
                    else:
                        namespace = new_namespace_name()
                        schema.create_new_namespace(conn, namespace)
                except psycopg.Error:
                    if action == "drop" and namespace is not None:
                        with self._lock:
                            self._doomed.appendleft(namespace)  # try again later
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._stop.wait(RETRY_PAUSE_S)
                    continue
                if action == "drop":
                    self._on_dropped(namespace)
                else:
                    with self._lock:
                        self._ready.append(namespace)
        finally:
            if conn is not None:
                conn.close()
