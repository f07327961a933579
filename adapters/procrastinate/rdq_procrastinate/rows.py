"""An rdq task in procrastinate's tables, and back (storage half).

**Writing.** A task is one procrastinate job: ``queue_name`` is the rdq queue,
``task_name`` the handler, ``queueing_lock`` the rdq task id (procrastinate's only
deduplication: one ``todo`` job per queueing lock, see :mod:`rdq_procrastinate.storage`),
and the job's arguments (``args``, jsonb) are :func:`job_args`: the id again, the payload
in base64 (jsonb holds no NUL and no raw bytes) and the headers.

**Reading** (plain SQL over procrastinate's tables, :data:`TASK_COLUMNS`): a job row, the
heartbeat of the worker that fetched it, and its ``procrastinate_events`` in insertion
order. procrastinate keeps no attempt rows, no error and no outcome: the history is
*derived* from its status events (:func:`attempts_of`):

- each ``started`` event (todo -> doing, written by the fetch) opens an attempt;
- the next ``succeeded`` (SUCCESS), ``failed`` (PERMANENT_FAILURE: procrastinate does not
  say why a job failed), ``aborted`` (PERMANENT_FAILURE) or ``deferred_for_retry``
  (doing -> todo: RETRYABLE_FAILURE — whether a worker's retry or the stalled-jobs
  recipe requeueing a job, procrastinate writes the same event, so no attempt is ever
  LEASE_EXPIRED) closes it; attempts are numbered 1, 2, ... in that order;
- ``redrive_count`` is the number of ``retried`` events (failed -> todo, the manual retry);
  ``attempt_count`` is procrastinate's own ``attempts`` column; ``created_at`` the
  ``deferred`` event.

Statuses: ``todo`` PENDING (due at ``scheduled_at``, or at creation when it has none),
``doing`` IN_FLIGHT (claimed at the open attempt's start, the lease running until the
worker's ``last_heartbeat`` + the stalled threshold), ``succeeded`` SUCCEEDED, ``failed``
DEAD (and ``cancelled``/``aborted``, which the adapter never causes, DEAD too).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from rdq_core.model import Attempt, Outcome, Status, Task

__all__ = [
    "TASK_COLUMNS",
    "attempts_of",
    "dead_at",
    "job_args",
    "task_of",
]

UTC = timezone.utc

#: What a task read selects (``j`` a procrastinate_jobs row, ``w`` its worker).
TASK_COLUMNS = """
    j.id, j.queue_name, j.task_name, j.args, j.status::text AS status, j.scheduled_at,
    j.attempts, j.worker_id, w.last_heartbeat,
    ARRAY(SELECT e.type::text FROM procrastinate_events e
           WHERE e.job_id = j.id ORDER BY e.id) AS event_types,
    ARRAY(SELECT e.at FROM procrastinate_events e
           WHERE e.job_id = j.id ORDER BY e.id) AS event_ats
"""
#: The join every task read uses.
TASK_FROM = """
    procrastinate_jobs j LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
"""

_CLOSING: Mapping[str, Outcome] = {
    "succeeded": Outcome.SUCCESS,
    "failed": Outcome.PERMANENT_FAILURE,
    "aborted": Outcome.PERMANENT_FAILURE,
    "deferred_for_retry": Outcome.RETRYABLE_FAILURE,
}
_STATUS: Mapping[str, Status] = {
    "todo": Status.PENDING,
    "doing": Status.IN_FLIGHT,
    "succeeded": Status.SUCCEEDED,
    "failed": Status.DEAD,
    "cancelled": Status.DEAD,
    "aborted": Status.DEAD,
    "aborting": Status.DEAD,
}
#: Events of a transition into a terminal status (``cancelled``: todo -> failed/succeeded).
_TERMINAL_EVENTS = frozenset({"failed", "succeeded", "cancelled", "aborted"})


def job_args(task_id: str, payload: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
    """The job arguments that carry an rdq task."""
    return {
        "rdq_id": task_id,
        "payload_b64": base64.b64encode(payload).decode("ascii"),
        "headers": dict(headers),
    }


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def attempts_of(
    types: Sequence[str], ats: Sequence[datetime]
) -> tuple[tuple[Attempt, ...], datetime | None]:
    """The attempts the events show, and the start of the one still open (or ``None``)."""
    attempts: list[Attempt] = []
    opened: datetime | None = None
    for kind, at in zip(types, ats, strict=True):
        if kind == "started":
            opened = _utc(at)
        elif opened is not None and kind in _CLOSING:
            attempts.append(Attempt(len(attempts) + 1, opened, _utc(at), _CLOSING[kind]))
            opened = None
    return tuple(attempts), opened


def dead_at(types: Sequence[str], ats: Sequence[datetime]) -> datetime | None:
    """When the job last went to a terminal status (the DLQ's order)."""
    last = None
    for kind, at in zip(types, ats, strict=True):
        if kind in _TERMINAL_EVENTS:
            last = _utc(at)
    return last


def _payload(args: Mapping[str, Any]) -> bytes:
    try:
        return base64.b64decode(str(args.get("payload_b64", "")), validate=True)
    except (binascii.Error, ValueError):
        return b""


def task_of(row: Mapping[str, Any], threshold: timedelta, task_id: str | None = None) -> Task:
    """The rdq :class:`Task` of one row selected with :data:`TASK_COLUMNS`."""
    args = row["args"] or {}
    types = list(row["event_types"] or ())
    ats = list(row["event_ats"] or ())
    attempts, opened = attempts_of(types, ats)
    status = _STATUS.get(row["status"], Status.DEAD)
    created_at = next((_utc(at) for k, at in zip(types, ats, strict=True) if k == "deferred"), None)
    if created_at is None:  # pragma: no cover - every job gets a 'deferred' event
        created_at = _utc(ats[0]) if ats else datetime.fromtimestamp(0, UTC)
    next_attempt_at = lease_expires_at = None
    if status is Status.PENDING:
        scheduled = row["scheduled_at"]
        next_attempt_at = _utc(scheduled) if scheduled is not None else created_at
    elif status is Status.IN_FLIGHT:
        beat = row["last_heartbeat"]
        if beat is not None:
            lease_expires_at = _utc(beat) + threshold
        else:
            # The worker row is gone (pruned or unregistered): the job counts as stalled
            # already; the claim's own start + threshold is the most it ever held.
            lease_expires_at = (opened or created_at) + threshold
    headers = args.get("headers") or {}
    return Task(
        id=task_id if task_id is not None else str(args.get("rdq_id", "")),
        queue=row["queue_name"],
        handler=row["task_name"],
        payload=_payload(args),
        headers={str(k): str(v) for k, v in headers.items()},
        status=status,
        attempt_count=int(row["attempts"]),
        redrive_count=types.count("retried"),
        next_attempt_at=next_attempt_at,
        lease_expires_at=lease_expires_at,
        created_at=created_at,
        attempts=attempts,
    )


def last_started(row: Mapping[str, Any]) -> datetime | None:
    """When the job was last fetched (its last ``started`` event): a claim's start."""
    last = None
    for kind, at in zip(row["event_types"] or (), row["event_ats"] or (), strict=True):
        if kind == "started":
            last = _utc(at)
    return last
