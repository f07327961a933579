"""Rows as the model: tasks with their histories, times as aware UTC datetimes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from rdq_core.model import UTC, Attempt, ErrorInfo, Outcome, Status, Task
from rdq_postgres.connection import cursor_of

Row = Sequence[Any]
#: How many leading columns of a row are ``queries.TASK_COLUMNS``.
TASK_WIDTH = 11


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def opt_utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def histories(
    conn: psycopg.Connection, statement: bytes, ids: Sequence[str]
) -> dict[str, list[Attempt]]:
    """The attempts of each task in ``ids``, oldest first (one query: ``statement`` is
    ``Queries.history``)."""
    out: dict[str, list[Attempt]] = {i: [] for i in ids}
    if not ids:
        return out
    rows = cursor_of(conn).execute(statement, (list(ids),), binary=True).fetchall()
    for task_id, no, started, finished, outcome, etype, emsg, edetail in rows:
        error = None if etype is None else ErrorInfo(etype, emsg or "", edetail)
        out[task_id].append(Attempt(no, utc(started), utc(finished), Outcome(outcome), error))
    return out


def task(row: Row, attempts: Sequence[Attempt]) -> Task:
    """A Task from the first :data:`TASK_WIDTH` columns of ``row``."""
    return Task(
        id=row[0],
        queue=row[1],
        handler=row[2],
        payload=bytes(row[3]),
        headers=row[4],
        status=Status(row[5]),
        attempt_count=row[6],
        redrive_count=row[7],
        next_attempt_at=opt_utc(row[8]),
        lease_expires_at=opt_utc(row[9]),
        created_at=utc(row[10]),
        attempts=tuple(attempts),
    )


def with_history(row: Row) -> Task:
    """A Task from its columns followed by the seven history arrays of
    ``queries._HISTORY_ARRAYS`` (all NULL when it has no attempt)."""
    nos, started, finished, outcomes, etypes, emsgs, edetails = row[TASK_WIDTH : TASK_WIDTH + 7]
    attempts = [
        Attempt(
            nos[i],
            utc(started[i]),
            utc(finished[i]),
            Outcome(outcomes[i]),
            None if etypes[i] is None else ErrorInfo(etypes[i], emsgs[i] or "", edetails[i]),
        )
        for i in range(len(nos or ()))
    ]
    return task(row, attempts)
