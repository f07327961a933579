"""Rows as the model: tasks with their histories, times as aware UTC datetimes.

What is decoded here are rows of this backend's own tables, written by its statements
from validated input, each column of a fixed type: the values are built with the model's
trusted constructors (:func:`rdq_core.model.trusted_task` and the others), each field
converted to its exact type first (a status or outcome the model does not know still
raises, as the model's own constructors would).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg

from rdq_core.model import (
    UTC,
    Attempt,
    Outcome,
    Status,
    Task,
    trusted_attempt,
    trusted_error,
    trusted_task,
)
from rdq_postgres.connection import cursor_of

Row = Sequence[Any]
#: How many leading columns of a row are ``queries.TASK_COLUMNS``.
TASK_WIDTH = 11

_STATUS: dict[str, Status] = {s.value: s for s in Status}
_OUTCOME: dict[str, Outcome] = {o.value: o for o in Outcome}


def utc(value: datetime) -> datetime:
    """``value`` in UTC (itself when it already is: psycopg hands out timestamps in the
    session's time zone, which for this backend's sessions is usually UTC)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def opt_utc(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def status(value: str) -> Status:
    return _STATUS.get(value) or Status(value)


def outcome(value: str) -> Outcome:
    return _OUTCOME.get(value) or Outcome(value)


def histories(
    conn: psycopg.Connection, statement: bytes, ids: Sequence[str]
) -> dict[str, list[Attempt]]:
    """The attempts of each task in ``ids``, oldest first (one query: ``statement`` is
    ``Queries.history``)."""
    out: dict[str, list[Attempt]] = {i: [] for i in ids}
    if not ids:
        return out
    rows = cursor_of(conn).execute(statement, (list(ids),), binary=True).fetchall()
    for task_id, no, started, finished, outcome_, etype, emsg, edetail in rows:
        error = None if etype is None else trusted_error(etype, emsg or "", edetail)
        out[task_id].append(
            trusted_attempt(no, utc(started), utc(finished), outcome(outcome_), error)
        )
    return out


def task(row: Row, attempts: Sequence[Attempt]) -> Task:
    """A Task from the first :data:`TASK_WIDTH` columns of ``row``."""
    next_at, lease_at = row[8], row[9]
    return trusted_task(
        row[0],
        row[1],
        row[2],
        bytes(row[3]),
        row[4],  # jsonb: a fresh dict per row, handed over
        status(row[5]),
        row[6],
        row[7],
        None if next_at is None else utc(next_at),
        None if lease_at is None else utc(lease_at),
        utc(row[10]),
        attempts if type(attempts) is tuple else tuple(attempts),
    )


def with_history(row: Row) -> Task:
    """A Task from its columns followed by the seven history arrays of
    ``queries._HISTORY_ARRAYS`` (all NULL when it has no attempt)."""
    nos, started, finished, outcomes, etypes, emsgs, edetails = row[TASK_WIDTH : TASK_WIDTH + 7]
    attempts = tuple(
        trusted_attempt(
            nos[i],
            utc(started[i]),
            utc(finished[i]),
            outcome(outcomes[i]),
            None if etypes[i] is None else trusted_error(etypes[i], emsgs[i] or "", edetails[i]),
        )
        for i in range(len(nos or ()))
    )
    return task(row, attempts)
