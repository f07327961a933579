"""One document per task, and how it decodes into the model (storage half).

A task of a namespace is one document of the namespace database's ``tasks`` collection::

    _id            the task id (so the id is unique across the namespace's queues)
    queue          the queue name (in every claim filter: the shard key of a sharded
                   deployment)
    handler        the handler name
    payload        BSON binary (any bytes)
    headers        [[name, value], ...] (names may hold '.' or '$', never field names)
    status         "PENDING" | "IN_FLIGHT" | "SUCCEEDED" | "DEAD"
    attempt_count  attempts in the current life (redrive resets it)
    redrive_count  redrives so far
    seq            enqueue order in the namespace (ties between equal due times)
    created_us     when it was enqueued
    due_us         PENDING: next_attempt_at; IN_FLIGHT: lease_expires_at; else null —
                   one field, so the claim is one index range (queue, due_us, seq)
    token          the current claim token while IN_FLIGHT, else null
    claimed_us     when the current claim was made, else null
    reclaimed      whether the current claim took an expired lease
    dead_us        when it was dead-lettered (the DLQ order), else null
    finished_us    when it succeeded, else null
    last_error_type  the error type of the attempt that dead-lettered it (DLQ filter)
    enq            a nonce of the enqueue call that created it (a retried insert whose
                   first reply was lost recognises its own document)
    attempts       the history, oldest first: {n, s, f, o, e: null | {t, m, d}, k, c}
                   (number, started, finished, outcome code, error, the claim token it
                   was written under, the nonce of the call that wrote it)

Every time is **integer microseconds** since the epoch, taken from the server's ``$$NOW``
(milliseconds) * 1000 — never a BSON date, because SecantusDB compares stored dates with
``$$NOW`` wrongly, while integer comparisons are right on both servers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bson import Binary

from rdq_core.model import Attempt, Claim, ErrorInfo, NewTask, Outcome, Status, Task
from rdq_core.model import utc_from_micros as utc

OUTCOME_CODE = {
    Outcome.SUCCESS: "S",
    Outcome.RETRYABLE_FAILURE: "R",
    Outcome.PERMANENT_FAILURE: "P",
    Outcome.LEASE_EXPIRED: "L",
}
OUTCOME = {code: outcome for outcome, code in OUTCOME_CODE.items()}
STATUS = {s.value: s for s in Status}


class CorruptDocument(ValueError):
    """A stored document rdq_mongo cannot read (written by something else)."""


def new_document(task: NewTask, seq: int, now_us: int, delay_us: int, nonce: str) -> dict:
    """The document of a freshly enqueued task."""
    return {
        "_id": task.id,
        "queue": task.queue,
        "handler": task.handler,
        "payload": Binary(bytes(task.payload)),
        "headers": [[k, v] for k, v in task.headers.items()],
        "status": Status.PENDING.value,
        "attempt_count": 0,
        "redrive_count": 0,
        "seq": seq,
        "created_us": now_us,
        "due_us": now_us + delay_us,
        "token": None,
        "claimed_us": None,
        "reclaimed": False,
        "dead_us": None,
        "finished_us": None,
        "last_error_type": None,
        "enq": nonce,
        "attempts": [],
    }


def error_value(error: ErrorInfo | None) -> dict | None:
    if error is None:
        return None
    return {"t": error.type, "m": error.message, "d": error.detail}


def _error(raw: Any) -> ErrorInfo | None:
    if raw is None:
        return None
    return ErrorInfo(str(raw["t"]), str(raw["m"]), None if raw.get("d") is None else str(raw["d"]))


def _attempt(raw: Mapping[str, Any]) -> Attempt:
    return Attempt(
        int(raw["n"]),
        utc(int(raw["s"])),
        utc(int(raw["f"])),
        OUTCOME[raw["o"]],
        _error(raw.get("e")),
    )


def task(doc: Mapping[str, Any]) -> Task:
    """The model's task from a stored document."""
    try:
        status = STATUS[doc["status"]]
        due = doc.get("due_us")
        return Task(
            id=str(doc["_id"]),
            queue=str(doc["queue"]),
            handler=str(doc["handler"]),
            payload=bytes(doc["payload"]),
            headers={str(k): str(v) for k, v in doc["headers"]},
            status=status,
            attempt_count=int(doc["attempt_count"]),
            redrive_count=int(doc["redrive_count"]),
            next_attempt_at=utc(int(due)) if status is Status.PENDING else None,
            lease_expires_at=utc(int(due)) if status is Status.IN_FLIGHT else None,
            created_at=utc(int(doc["created_us"])),
            attempts=tuple(_attempt(a) for a in doc["attempts"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptDocument(
            f"task document {doc.get('_id')!r} does not decode ({type(exc).__name__}: {exc})"
        ) from None


def claim(doc: Mapping[str, Any]) -> Claim:
    """The claim a claimed document stands for (status IN_FLIGHT, its token)."""
    t = task(doc)
    if t.lease_expires_at is None or doc.get("token") is None or doc.get("claimed_us") is None:
        raise CorruptDocument(f"claimed task document {doc.get('_id')!r} is not IN_FLIGHT")
    return Claim(
        t,
        token=str(doc["token"]),
        claimed_at=utc(int(doc["claimed_us"])),
        lease_expires_at=t.lease_expires_at,
        reclaimed=bool(doc.get("reclaimed")),
    )
