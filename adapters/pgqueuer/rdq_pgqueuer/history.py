"""A task as pgqueuer records it: its jobs' rows and ``pgqueuer_log`` read as rdq's model.

pgqueuer keeps no attempt table. What it keeps is a log: every write of
``Queries`` appends a row ``(job_id, status, traceback, created)`` to
``pgqueuer_log`` in the same statement (enqueue ``queued``; a pick ``picked``, also
when the stale branch of ``dequeue`` re-picks a job whose heartbeat is older than the
heartbeat timeout; ``log_jobs`` ``successful`` / ``failed`` / ``exception`` /
``canceled``; ``retry_job`` ``queued`` with the traceback; ``requeue_jobs`` ``queued``
without). The adapter reads a task's history from those rows, in order, and nothing
else (:func:`decode`):

- every ``picked`` row starts an attempt (``started_at`` = the pick's ``created``, the
  same ``NOW()`` as the row's ``updated``);
- an outcome row ends one: ``successful`` -> SUCCESS; ``queued`` with a traceback
  (``retry_job``) -> RETRYABLE_FAILURE; ``failed`` (``log_jobs``, the library's
  ``on_failure="hold"``) -> PERMANENT_FAILURE, or the outcome the adapter wrote into the
  traceback's ``additional_context``; ``exception`` (the library's own worker,
  ``on_failure="delete"``) -> PERMANENT_FAILURE. The attempt ended is the pick the
  outcome's claim token named (the adapter writes it into the traceback's
  ``additional_context``: pgqueuer's log records no owner), else the pick the row is in;
- a pick ends without an outcome of its own — a LEASE_EXPIRED attempt — when the stale
  branch of ``dequeue`` re-picks the job (ended by the re-pick), or when an outcome about
  an older pick moves the row out of ``picked`` (ended by that outcome: pgqueuer applies
  an outcome whatever pick it comes from, ADR-0004). pgqueuer itself records nothing
  else of a lost claim: no counter, no owner in the log;
- but a re-pick by the worker still running the job is no new run: ``QueueManager.run``
  skips a job its own dequeue re-picked while the job is in its ``job_context`` (its
  heartbeat was late), and the first run goes on. pgqueuer logs that re-pick like any
  other ``picked`` row; the worker that made it knows, and the adapter writes it into
  the outcome's traceback (``repicks``, the picks' ``created``). A ``picked`` row an
  outcome names so continues the pick that outcome is about: it ends any other pick the
  row was in, and no attempt of its own. Until that outcome is written the re-pick reads
  as any other (the log says no more);
- ``queued`` without a traceback right after ``failed`` is a redrive
  (``requeue_jobs``): ``redrive_count`` counts them and ``attempt_count`` (attempts
  since the last redrive) starts again at 0. (pgqueuer's own ``attempts`` column counts
  ``retry_job`` calls only and is reset by ``requeue_jobs``; it is not read.)

Status comes from the task's newest job: its row's ``queued`` / ``picked`` / ``failed``
(PENDING / IN_FLIGHT / DEAD); with no row (pgqueuer deletes a job when it is done), the
last log row: ``successful`` SUCCEEDED, ``exception`` DEAD, ``canceled`` / ``deleted``
gone. Payload and headers live only in the row: a SUCCEEDED task has none left.

Pure: the standard library and :mod:`rdq_core` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    Attempt,
    ErrorInfo,
    Outcome,
    Status,
    Task,
    trusted_attempt,
    trusted_task,
    utc_from_micros,
)

__all__ = ["CONTEXT_KEY", "Decoded", "JobRecord", "LogRow", "decode", "traceback_context"]

#: The key of ``TracebackRecord.additional_context`` where the adapter notes what pgqueuer's
#: traceback cannot say: the rdq outcome, and whether there was an error and a detail.
CONTEXT_KEY = "rdq"
#: The message of a LEASE_EXPIRED attempt (as the reference store writes it).
LEASE_EXPIRED_MESSAGE = "lease expired before an outcome"
#: Header keys the adapter itself puts on a job (stripped when reading).
RESERVED_PREFIX = "rdq."

_LEASE_EXPIRED = ErrorInfo(LEASE_EXPIRED_ERROR, LEASE_EXPIRED_MESSAGE)
_ROW_STATUS = {"queued": Status.PENDING, "picked": Status.IN_FLIGHT, "failed": Status.DEAD}
_ENDED = {"successful": Status.SUCCEEDED, "exception": Status.DEAD}


@dataclass(frozen=True)
class LogRow:
    """One ``pgqueuer_log`` row: its id, ``created`` (µs since the epoch), status and
    traceback (the decoded JSON of a ``TracebackRecord``, or None)."""

    id: int
    created_us: int
    status: str
    traceback: Mapping[str, Any] | None


@dataclass(frozen=True)
class JobRecord:
    """One pgqueuer job of a task: the map's queue and handler, the job's row (None once
    pgqueuer deleted it) and its log rows in order."""

    job_id: int
    queue: str
    handler: str
    row: Mapping[str, Any] | None
    log: Sequence[LogRow] = field(default_factory=tuple)


@dataclass(frozen=True)
class Decoded:
    """A task and whether its newest pick re-picked a job another pick still held."""

    task: Task
    reclaimed: bool


def traceback_context(
    outcome: Outcome,
    error: ErrorInfo | None,
    claim_us: int | None,
    repicks: Sequence[int] = (),
) -> dict[str, object]:
    """The ``additional_context`` the adapter writes with a traceback record: the rdq
    outcome, whether there was an error and a detail, the pick the outcome is about (its
    ``created``, µs: what the claim token names) and the picks of the job the reporting
    worker's own dequeue made while it ran that pick (µs), which it skipped."""
    return {
        CONTEXT_KEY: {
            "outcome": outcome.value,
            "error": error is not None,
            "detail": error is not None and error.detail is not None,
            "claim": claim_us,
            "repicks": [int(r) for r in repicks],
        }
    }


def _own_repicks(log: Sequence[LogRow]) -> dict[int, int]:
    """``re-pick µs -> the pick it continues``, from the outcomes of one job's log."""
    out: dict[int, int] = {}
    for row in log:
        mine = _context(row.traceback)
        claim, repicks = mine.get("claim"), mine.get("repicks")
        if not isinstance(claim, int) or not isinstance(repicks, list):
            continue
        for r in repicks:
            if isinstance(r, int):
                out[r] = claim
    return out


def _context(tb: Mapping[str, Any] | None) -> Mapping[str, Any]:
    ctx = tb.get("additional_context") if tb else None
    mine = ctx.get(CONTEXT_KEY) if isinstance(ctx, Mapping) else None
    return mine if isinstance(mine, Mapping) else {}


def _error(tb: Mapping[str, Any] | None) -> ErrorInfo | None:
    if tb is None:
        return None
    mine = _context(tb)
    if mine.get("error") is False:
        return None
    detail = tb.get("traceback")
    if mine:
        detail = detail if mine.get("detail") else None
    elif not detail:
        detail = None
    kind, message = str(tb.get("exception_type", "")), str(tb.get("exception_message", ""))
    return ErrorInfo(kind, message, detail)


def _failure_outcome(tb: Mapping[str, Any] | None, default: Outcome) -> Outcome:
    written = _context(tb).get("outcome")
    try:
        return Outcome(written) if written else default
    except ValueError:
        return default


def decode(task_id: str, jobs: Sequence[JobRecord], lease: timedelta) -> Decoded | None:
    """The task ``task_id`` from its jobs (oldest first), or None if it is gone.

    ``lease`` is the heartbeat timeout the adapter deploys: an IN_FLIGHT task's
    ``lease_expires_at`` is its row's ``heartbeat`` + ``lease``."""
    if not jobs:
        return None
    attempts: list[Attempt] = []
    life = 0
    redrives = 0
    reclaimed = False

    def add(start: int, end: int, outcome: Outcome, error: ErrorInfo | None) -> None:
        nonlocal life
        attempts.append(
            trusted_attempt(
                len(attempts) + 1, utc_from_micros(start), utc_from_micros(end), outcome, error
            )
        )
        life += 1

    for job in jobs:
        open_pick: int | None = None  # the pick pgqueuer's row is in (status 'picked')
        last_pick: int | None = None
        picks: set[int] = set()
        prev: str | None = None
        own = _own_repicks(job.log)
        for row in job.log:
            status, at, tb = row.status, row.created_us, row.traceback
            continued = own.get(at) if status == "picked" else None
            if continued is not None and continued in picks:
                # the worker running the pick ``continued`` re-picked the job and went on
                if open_pick is not None and open_pick != continued:
                    add(open_pick, at, Outcome.LEASE_EXPIRED, _LEASE_EXPIRED)
                open_pick = continued
            elif status == "picked":
                reclaimed = open_pick is not None
                if open_pick is not None:  # the stale branch of dequeue re-picked it
                    add(open_pick, at, Outcome.LEASE_EXPIRED, _LEASE_EXPIRED)
                open_pick = last_pick = at
                picks.add(at)
            elif status == "queued" and tb is None and prev is None:
                pass  # enqueued
            elif status == "queued" and tb is None and prev == "failed":
                redrives += 1  # requeue_jobs
                life = 0
            elif status in ("queued", "successful", "failed", "exception"):
                claim = _context(tb).get("claim")
                if not (isinstance(claim, int) and claim in picks):
                    claim = open_pick if open_pick is not None else last_pick
                if open_pick is not None and claim != open_pick:
                    # an outcome about an older pick ended the pick the row was in
                    add(open_pick, at, Outcome.LEASE_EXPIRED, _LEASE_EXPIRED)
                outcome = {
                    "queued": Outcome.RETRYABLE_FAILURE,
                    "successful": Outcome.SUCCESS,
                }.get(status) or _failure_outcome(tb, Outcome.PERMANENT_FAILURE)
                add(at if claim is None else claim, at, outcome, _error(tb))
                open_pick = None
            elif status in ("canceled", "deleted"):
                open_pick = None
            prev = status

    newest = jobs[-1]
    row = newest.row
    lease_expires_at = next_attempt_at = None
    payload, headers = b"", {}
    if row is not None:
        status = _ROW_STATUS.get(str(row["status"]))
        if status is None:  # pragma: no cover - pgqueuer keeps only these three in its table
            return None
        payload = bytes(row["payload"] or b"")
        raw = row["headers"] or {}
        headers = {str(k): str(v) for k, v in raw.items() if not str(k).startswith(RESERVED_PREFIX)}
        if status is Status.PENDING:
            next_attempt_at = utc_from_micros(int(row["execute_after_us"]))
        elif status is Status.IN_FLIGHT:
            lease_expires_at = utc_from_micros(int(row["heartbeat_us"])) + lease
    else:
        ended = newest.log[-1].status if newest.log else None
        found = _ENDED.get(ended) if ended else None
        if found is None:
            return None  # canceled / deleted: the job is gone
        status = found
    first = jobs[0]
    if first.log:
        created_at = utc_from_micros(first.log[0].created_us)
    elif first.row is not None:
        created_at = utc_from_micros(int(first.row["created_us"]))
    else:  # pragma: no cover - every job has its enqueue logged
        created_at = utc_from_micros(0)
    task = trusted_task(
        task_id,
        newest.queue,
        newest.handler,
        payload,
        headers,
        status,
        life,
        redrives,
        next_attempt_at,
        lease_expires_at,
        created_at,
        tuple(attempts),
    )
    return Decoded(task, reclaimed and status is Status.IN_FLIGHT)
