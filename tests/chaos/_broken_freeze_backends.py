"""Server backends with one deliberate bug that only a frozen server exposes.

``*_acks_timed_out_reports``: the real PostgreSQL / Redis storage, except that an
outcome report (``complete``) runs as an explicit transaction and, when the server has not
answered within :data:`ACK_TIMEOUT` seconds, the client tears the connection down and
takes the report as applied — the optimistic client that "knows" its write went through,
instead of raising :class:`~rdq_core.errors.BackendUnavailable` (outcome unknown). The
server, once it runs again, sees the transaction's connection gone before its ``COMMIT``
(PostgreSQL) or ``EXEC`` (Redis ``MULTI``) and drops it; the worker has journaled an
accepted outcome that no history holds: rule ``outcome-recorded``.

Nothing else the nemesis does makes a report hang that long: a killed server or a cut
connection fails the call at once (a reset, not a hang), and a paused *worker* does not
wait on its own calls. A server frozen past the lease (``server_pause``) does.

The victims (tasks whose report was taken as applied without an answer) are appended to
``$RDQ_FREEZE_VICTIMS`` (``task id`` per line), so a test can check that the violation
the checker names is one the bug produced. This folder must be on ``PYTHONPATH`` for the
worker processes (as for ``_broken_chaos_backends``).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import redis
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.storage import PostgresStorage
from rdq_redis.plugin import RedisBackend
from rdq_redis.storage import RedisStorage, _stale

from rdq_core.errors import BackendUnavailable

T = TypeVar("T")
#: Seconds after which an unanswered report is taken as applied (well under a freeze of
#: 2-3 leases; far above any report's latency while the server runs).
ACK_TIMEOUT = 1.0
VICTIMS_ENV = "RDQ_FREEZE_VICTIMS"


def _victim(task_id: str) -> None:
    path = os.environ.get(VICTIMS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(task_id + "\n")


class _PgStorage(PostgresStorage):
    _calling = threading.local()

    def _complete(self, task_id: str, token: str) -> None:
        self._calling.task = task_id
        super()._complete(task_id, token)

    def _run(self, action: str, fn: Callable[[psycopg.Connection], T]) -> T:
        if action != "complete":
            return super()._run(action, fn)
        task_id = self._calling.task
        abandoned = threading.Event()
        used: list[psycopg.Connection] = []
        done = threading.Event()
        failure: list[BaseException] = []

        def transactional(conn: psycopg.Connection) -> T:
            if abandoned.is_set():  # no retry on a fresh connection once given up
                raise BackendUnavailable("report abandoned")
            used.append(conn)
            with conn.transaction():  # BEGIN ... COMMIT, each its own round trip
                return fn(conn)

        def call() -> None:
            try:
                super(_PgStorage, self)._run(action, transactional)
            except BaseException as exc:
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name=f"complete-{task_id}", daemon=True).start()
        if done.wait(ACK_TIMEOUT):
            if failure:
                raise failure[0]
            return None  # type: ignore[return-value]
        abandoned.set()
        for conn in used:  # the bug: give up on the connection, and call it applied
            with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        _victim(task_id)
        return None  # type: ignore[return-value]


class _RedisStorage(RedisStorage):
    def _finish(self, action: str, task_id: str, keys_: list[str], args: list[Any]) -> None:
        if action != "complete":
            return super()._finish(action, task_id, keys_, args)
        client, scripts = self._scripts()
        kw = client.connection_pool.connection_kwargs
        conn = redis.Connection(
            host=kw.get("host", "127.0.0.1"),
            port=kw.get("port", 6379),
            db=kw.get("db", 0),
            socket_timeout=ACK_TIMEOUT,
        )
        try:
            conn.send_command("MULTI")
            conn.read_response()
            conn.send_command("EVALSHA", scripts.sha("complete"), len(keys_), *keys_, *args)
            conn.read_response()
            conn.send_command("EXEC")
            (reply,) = conn.read_response()
        except redis.TimeoutError:
            _victim(task_id)
            return  # the bug: no answer, so the connection is dropped and "it went through"
        finally:
            conn.disconnect()
        if isinstance(reply, Exception):  # e.g. NOSCRIPT: the plain path loads the script
            return super()._finish(action, task_id, keys_, args)
        if int(reply[0]) != 1:
            raise _stale(task_id, args[1], reply[1])


class PgAcksTimedOutReports(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return _PgStorage(dsn, namespace)


class RedisAcksTimedOutReports(RedisBackend):
    def open(self, dsn: str, namespace: str) -> RedisStorage:
        return _RedisStorage(dsn, namespace)


postgres_acks_timed_out_reports = PgAcksTimedOutReports()
redis_acks_timed_out_reports = RedisAcksTimedOutReports()
