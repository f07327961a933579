"""Namespaces created ahead of time, so that creating one costs a test nothing.

Creating a schema with its tables and indexes takes ~10-20 ms of catalog work; the kit
creates one per test. :class:`NamespaceStock` keeps a few fresh, never used namespaces
ready, made by a daemon thread on its own connection; :meth:`take` hands one out without
waiting (or ``None`` when none is ready, and the caller creates one itself). Errors in
the thread (server down, restarting) only pause it. In a forked child the stock is empty
(the thread does not exist there) and callers simply create synchronously.

Plugin half (only :class:`rdq_postgres.server.PostgresServer` uses it), although it
imports nothing of the kit: psycopg and the storage half's ``schema`` and ``connection``.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import deque

import psycopg

from rdq_postgres import schema
from rdq_postgres.connection import CONNECT_TIMEOUT_S

#: How many ready namespaces the stock keeps.
STOCK_SIZE = 2
#: Seconds the thread pauses after an error before trying again.
RETRY_PAUSE_S = 1.0


def new_namespace_name() -> str:
    return f"rdq_{uuid.uuid4().hex}"


class NamespaceStock:
    """Fresh namespaces on the server at ``dsn``, made in the background."""

    def __init__(self, dsn: str, size: int = STOCK_SIZE) -> None:
        self._dsn = dsn
        self._size = size
        self._ready: deque[str] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._fill, name="rdq-postgres-stock", daemon=True)
        self._thread.start()

    def take(self) -> str | None:
        """A ready namespace, or ``None`` (never waits)."""
        if os.getpid() != self._pid or self._stop.is_set():
            return None
        with self._lock:
            namespace = self._ready.popleft() if self._ready else None
        self._wake.set()
        return namespace

    def close(self) -> list[str]:
        """Stop the thread; returns the namespaces made but never handed out (to drop)."""
        if os.getpid() != self._pid:
            return []
        self._stop.set()
        self._wake.set()
        self._thread.join(30)
        with self._lock:
            unused, self._ready = list(self._ready), deque()
        return unused

    def _fill(self) -> None:
        conn: psycopg.Connection | None = None
        try:
            while not self._stop.is_set():
                with self._lock:
                    full = len(self._ready) >= self._size
                if full:
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
                    namespace = new_namespace_name()
                    schema.create_namespace(conn, namespace)
                except psycopg.Error:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._stop.wait(RETRY_PAUSE_S)
                    continue
                with self._lock:
                    self._ready.append(namespace)
        finally:
            if conn is not None:
                conn.close()
