"""Namespaces created ahead and dropped behind, so that neither costs a test anything.

Creating a schema with its tables and indexes takes ~15-25 ms of catalog work and
dropping it ~7-10 ms; the kit creates one per test and drops it after. A
:class:`NamespaceStock` does both on two daemon threads (one makes, one drops), each with
its own connection: it keeps a
few fresh, never used namespaces ready (:meth:`take` hands one out without waiting, or
``None`` when none is ready, and the caller creates one itself), and drops the ones
handed to :meth:`discard` (with the ``drop`` function it was given, the server's own),
reporting each drop through ``on_dropped``. (One thread doing both fell behind a
run of short tests on a loaded server, which then made ~15 % of their namespaces
themselves, at ~60 ms each.) With each namespace it makes the
namespace's first connection too, and :meth:`take` offers it to the storage that will
open the namespace (:func:`rdq_postgres.connection.offer_connection`): opening it then
costs no new session. Errors in a thread (server down, restarting) only pause it; a
namespace whose drop failed stays queued. In a forked child the stock is empty and
drops nothing (the threads do not exist there): callers then create and drop
synchronously. :meth:`close` stops the threads and returns what they still held, to
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
from rdq_postgres.connection import (
    CONNECT_TIMEOUT_S,
    connect_for,
    offer_connection,
    withdraw_connection,
)

#: How many ready namespaces the stock keeps.
STOCK_SIZE = 6
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
        record: Callable[[], str | None] = lambda: None,
    ) -> None:
        """``record()``: the comment stored with each namespace made (the kit's owner
        record, :func:`rdq_compliance.provision.owners.owner_record`)."""
        self._dsn = dsn
        self._record = record
        self._size = size
        self._drop = drop or schema.drop_namespace
        self._on_dropped = on_dropped
        self._ready: deque[tuple[str, psycopg.Connection | None]] = deque()
        self._doomed: deque[str] = deque()
        self._lock = threading.Lock()
        self._wake = {"create": threading.Event(), "drop": threading.Event()}
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._threads = [
            threading.Thread(
                target=self._work, args=(role,), name=f"rdq-postgres-stock-{role}", daemon=True
            )
            for role in ("create", "drop")
        ]
        for thread in self._threads:
            thread.start()

    def take(self) -> str | None:
        """A ready namespace, or ``None`` (never waits)."""
        if not self._alive():
            return None
        with self._lock:
            namespace, first = self._ready.popleft() if self._ready else (None, None)
        self._wake["create"].set()
        if namespace is not None and first is not None:
            offer_connection(self._dsn, namespace, first)
        return namespace

    def discard(self, namespace: str) -> bool:
        """Queue ``namespace`` to be dropped; False (nothing queued) when the thread is not
        there to do it (a forked child, a closed stock): the caller drops it itself."""
        if not self._alive():
            return False
        with self._lock:
            self._doomed.append(namespace)
        self._wake["drop"].set()
        return True

    def _alive(self) -> bool:
        return os.getpid() == self._pid and not self._stop.is_set()

    def close(self) -> list[str]:
        """Stop the thread; returns the namespaces made but never handed out and those
        discarded but not dropped yet (for the caller to drop)."""
        if os.getpid() != self._pid:
            return []
        self._stop.set()
        for wake in self._wake.values():
            wake.set()
        for thread in self._threads:
            thread.join(30)
        with self._lock:
            ready, doomed = list(self._ready), list(self._doomed)
            self._ready, self._doomed = deque(), deque()
        for _, first in ready:
            if first is not None:
                first.close()
        return [*doomed, *(namespace for namespace, _ in ready)]

    def _next(self, role: str) -> tuple[str, str | None]:
        """What the ``role`` thread does now: ("drop", name), ("create", None) or
        ("wait", None)."""
        with self._lock:
            if role == "drop":
                return ("drop", self._doomed.popleft()) if self._doomed else ("wait", None)
            return ("create", None) if len(self._ready) < self._size else ("wait", None)

    def _first_connection(self, namespace: str) -> psycopg.Connection | None:
        """The namespace's first connection, its catalog caches warmed by reading the
        ledger as a storage opening it does; ``None`` if it cannot be made (the storage
        then connects itself)."""
        try:
            first = connect_for(self._dsn, namespace)
        except psycopg.Error:
            return None
        try:
            schema.ledger_versions(first, namespace)
        except psycopg.Error:
            first.close()
            return None
        return first

    def _work(self, role: str) -> None:
        conn: psycopg.Connection | None = None
        wake = self._wake[role]
        try:
            while not self._stop.is_set():
                action, namespace = self._next(role)
                if action == "wait":
                    wake.wait()
                    wake.clear()
                    continue
                try:
                    if conn is None or conn.closed:
                        conn = psycopg.connect(
                            self._dsn,
                            autocommit=True,
                            connect_timeout=CONNECT_TIMEOUT_S,
                            application_name="rdq:admin",
                        )
                    first = None
                    if action == "drop":
                        assert namespace is not None
                        withdraw_connection(self._dsn, namespace)  # if nobody took it
                        self._drop(conn, namespace)
                    else:
                        namespace = new_namespace_name()
                        schema.create_new_namespace(conn, namespace, self._record())
                        first = self._first_connection(namespace)
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
                        self._ready.append((namespace, first))
        finally:
            if conn is not None:
                conn.close()
