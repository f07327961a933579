"""Per-thread, fork-aware PyMySQL connections to one database (storage half).

:func:`connect` opens one autocommit connection with the session settings every rdq
statement relies on:

- ``time_zone = '+00:00'``: ``UNIX_TIMESTAMP(NOW(6))`` is then exact (no daylight-saving
  fold);
- ``READ COMMITTED``: a locking read sees the newest committed row and locks only the
  rows that match (no gap locks), so ``SKIP LOCKED`` claims do not block one another;
- a strict ``sql_mode``: a value the server cannot store is an error, never truncated;
- ``innodb_lock_wait_timeout`` bounded (:data:`LOCK_WAIT_S`), and read/write timeouts
  (:data:`IO_TIMEOUT_S`) so a call on a paused server ends with ``BackendUnavailable``
  instead of hanging.

:class:`ConnectionSource` keeps one connection per thread (PyMySQL connections are not
thread-safe), opened on first use. **Fork safety**: a connection inherited through
``fork`` is never used nor closed by the child (closing would send ``COM_QUIT`` on the
parent's session); the child opens its own. **Liveness**: before a connection is lent,
its idle socket is polled; anything readable on an idle MySQL connection means the server
ended it (``KILL``, restart), so it is dropped and a new one opened before the caller's
statement is sent.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any

import pymysql

from rdq_mysql.dsn import Address
from rdq_mysql.errors import connect_error

#: Seconds a statement may wait for a row lock before it fails (and is retried).
LOCK_WAIT_S = 10
#: Seconds a read or write on the socket may take (a paused server ends a call after this).
IO_TIMEOUT_S = 30.0
SQL_MODE = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO"
_INIT = (
    f"SET time_zone = '+00:00', sql_mode = '{SQL_MODE}', innodb_lock_wait_timeout = {LOCK_WAIT_S}"
)


def connect(address: Address, *, database: str | None = None) -> pymysql.Connection:
    """An open autocommit connection (``database`` overrides the address's); raises
    ``BackendUnavailable`` saying why it could not be opened."""
    db = address.database if database is None else database
    try:
        conn = pymysql.connect(
            host=address.host,
            port=address.port,
            user=address.user,
            password=address.password,
            database=db,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=address.connect_timeout,
            read_timeout=IO_TIMEOUT_S,
            write_timeout=IO_TIMEOUT_S,
            init_command=_INIT,
        )
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    except (pymysql.err.MySQLError, OSError) as exc:
        raise connect_error(exc, address.where, db) from None
    return conn


def is_cut(conn: pymysql.Connection) -> bool:
    """Whether an idle connection was ended by the server (nothing else arrives unasked)."""
    sock: Any = getattr(conn, "_sock", None)  # PyMySQL keeps the socket there
    if sock is None or not conn.open:
        return True
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def discard(conn: pymysql.Connection) -> None:
    """Close a connection that is broken or unwanted, quietly."""
    try:
        conn.close()
    except Exception:
        try:
            conn._force_close()  # PyMySQL: close the socket without COM_QUIT
        except Exception:
            pass


class ConnectionSource:
    """One connection per thread to ``database`` on the server at ``address``."""

    def __init__(self, address: Address, database: str) -> None:
        self.address = address
        self.database = database
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[pymysql.Connection] = []
        self._pid = os.getpid()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def get(self) -> pymysql.Connection:
        """This thread's live connection (opened or replaced as needed)."""
        if os.getpid() != self._pid:  # forked: forget (never close) what the parent opened
            with self._lock:
                if os.getpid() != self._pid:
                    self._local = threading.local()
                    self._all = []
                    self._lock = threading.Lock()
                    self._pid = os.getpid()
        conn: pymysql.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and not is_cut(conn):
            return conn
        if conn is not None:
            self.drop(conn)
        conn = connect(self.address, database=self.database)
        with self._lock:
            self._all.append(conn)
        self._local.conn = conn
        return conn

    def drop(self, conn: pymysql.Connection) -> None:
        """Forget and close this thread's connection (after it broke)."""
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        discard(conn)

    def close(self) -> None:
        """Close every connection this object opened in this process; idempotent."""
        self._closed = True
        if os.getpid() != self._pid:
            return
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            discard(conn)
