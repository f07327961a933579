"""Broken PostgreSQL backends, each caught only by one chaos fault.

- ``client_clock`` (SPEC §5.11, the clock-skew campaign, issue 14 item 2): the claim,
  heartbeat and outcome statements take the time from the client — ``%(client_now)s``,
  the worker's ``datetime.now(UTC)`` bound as a parameter — instead of the server's
  ``now()``. Every lease is then stamped and judged on whichever worker's clock made the
  call. On one host that clock is the server's, so nothing but skewed client clocks tells
  the two apart (``tests/server_contract/test_clock_skew.py``).
- ``acks_timed_out_reports`` (only a server freeze exposes it) and
  ``hb_timeout_taken_as_extended`` (only a network partition): a call the server left
  unanswered taken as applied (:mod:`tests.broken._unanswered`).

Use as ``--rdq-backend=tests.broken.postgres:client_clock`` with the checkout root on
``PYTHONPATH`` (so the chaos worker processes import it too).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from rdq_postgres import queries, rows
from rdq_postgres.connection import cursor_of
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.storage import PostgresStorage

from rdq_core.errors import BackendUnavailable
from rdq_core.model import ErrorInfo, Outcome
from tests.broken._unanswered import ACK_TIMEOUT, FREEZE_VICTIMS_ENV, TimeoutTakenAsExtended, victim

T = TypeVar("T")

#: What replaces the server's clock in the variant's statements.
CLIENT_NOW = "%(client_now)s::timestamptz"


def _client(template: str) -> str:
    assert "now()" in template, "nothing to break: the statement has no now()"
    return template.replace("now()", CLIENT_NOW)


class ClientClockQueries(queries.Queries):
    """The claim, fresh claim, heartbeat and outcome statements on the client's clock."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.claim = self._sql(_client(queries._CLAIM))
        self.claim_fresh = self._sql(
            _client(queries._CLAIM_FRESH),
            declined=psycopg.sql.SQL(", ".join(["NULL"] * queries.CLAIM_WIDTH)),
        )
        self.extend = self._sql(_client(queries._EXTEND))
        self.finish = {
            name: self._sql(_client(queries._FINISH), transition=psycopg.sql.SQL(_client(t)))
            for name, t in (
                ("complete", queries._COMPLETE),
                ("reschedule", queries._RESCHEDULE),
                ("dead_letter", queries._DEAD_LETTER),
            )
        }


def client_now() -> datetime:
    return datetime.now(UTC)


class ClientClock(PostgresStorage):
    """:class:`PostgresStorage` sending its own clock with every claim, heartbeat and
    outcome."""

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        self._q = ClientClockQueries(self._source.schema)

    def _claim_fresh(self, conn: psycopg.Connection, params: dict[str, Any]) -> Any:
        return super()._claim_fresh(conn, {**params, "client_now": client_now()})

    def _claim_full(self, conn: psycopg.Connection, params: dict[str, Any]) -> Any:
        return super()._claim_full(conn, {**params, "client_now": client_now()})

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        params = {"id": task_id, "token": token, "lease": lease, "client_now": client_now()}

        def run(conn: psycopg.Connection) -> datetime:
            row = cursor_of(conn).execute(self._sql(conn).extend, params).fetchone()
            if row is None:
                self._raise_stale(conn, task_id, token)
            return rows.utc(row[0])

        return self._run("extend_lease", run)

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        **extra: Any,
    ) -> None:
        super()._finish(action, task_id, token, outcome, error, client_now=client_now(), **extra)


class ClientClockBackend(PostgresBackend):
    """The ``postgres`` backend (same rungs) opening :class:`ClientClock`."""

    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return ClientClock(dsn, namespace)


# ---- only a fault exposes them: an unanswered call taken as applied ----------------------------


class AcksTimedOutReports(PostgresStorage):
    """An outcome report unanswered within ``ACK_TIMEOUT`` (a frozen server) is taken as
    applied: its connection torn down, no error raised (:mod:`tests.broken._unanswered`)."""

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
                super(AcksTimedOutReports, self)._run(action, transactional)
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
        victim(FREEZE_VICTIMS_ENV, task_id)
        return None  # type: ignore[return-value]


class HbTimeoutTakenAsExtended(TimeoutTakenAsExtended, PostgresStorage):
    """A heartbeat unanswered within ``HB_TIMEOUT`` (a partition) is taken as applied
    while the lease had more than half its length left (:mod:`tests.broken._unanswered`)."""


class AcksTimedOutReportsBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return AcksTimedOutReports(dsn, namespace)


class HbTimeoutTakenAsExtendedBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return HbTimeoutTakenAsExtended(dsn, namespace)


client_clock = ClientClockBackend()
acks_timed_out_reports = AcksTimedOutReportsBackend()
hb_timeout_taken_as_extended = HbTimeoutTakenAsExtendedBackend()
