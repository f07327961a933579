"""Broken PostgreSQL backends for the clock-skew campaign (issue 14, item 2).

``client_clock``: the claim, heartbeat and outcome statements take the time from the
client — ``%(client_now)s``, the worker's ``datetime.now(UTC)`` bound as a parameter —
instead of the server's ``now()``. Every lease is then stamped and judged on whichever
worker's clock made the call. On one host that clock is the server's, so nothing but
skewed client clocks tells the two apart (``test_postgres_clock_skew.py``).

Use as ``--rdq-backend=rdq_broken_postgres:client_clock`` with this folder on the path
(``PYTHONPATH``, so the chaos worker processes import it too).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from rdq_postgres import queries, rows
from rdq_postgres.connection import cursor_of
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.storage import PostgresStorage

from rdq_core.model import ErrorInfo, Outcome

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


class ClientClockStorage(PostgresStorage):
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
    """The ``postgres`` backend (same rungs) opening :class:`ClientClockStorage`."""

    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return ClientClockStorage(dsn, namespace)


client_clock = ClientClockBackend()
