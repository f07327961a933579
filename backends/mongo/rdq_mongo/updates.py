"""The filters and pipeline updates of every state change (storage half).

Each SPI state change is ONE single-document atomic write whose *filter is the guard*:
the write happens only if the document is still in the state the change starts from,
and the pipeline update computes the new state from the document as it is at that
moment (MongoDB evaluates filter and update on the same document under its lock), so
nothing read earlier by the client can go stale. Redrive, purge and ``purge_succeeded``
are ``update_many``/``delete_many`` with the same guard per document.

**Time** is the server's: ``$$NOW`` (milliseconds) as integer microseconds, :data:`NOW_US`
(``{$toLong: "$$NOW"}`` * 1000 — not a BSON date: SecantusDB compares dates with
``$$NOW`` wrongly). A *filter* never holds ``$$NOW``: ``$expr`` in a filter makes
SecantusDB scan the whole collection, so a filter compares with a server time ``T`` read
just before (:func:`claim_guard`); ``T`` is never later than the write's own ``$$NOW``,
so "due by T" implies "due by now" and a lease is never taken before it expired.

**Numbering** (invariant H): the next attempt is ``max(attempts.n) + 1`` over the stored
history, computed with ``$reduce`` in the same pipeline (:data:`NEXT_ATTEMPT_NO`) —
``{$max: "$attempts.n"}`` would do on MongoDB but is null on SecantusDB — never from
``attempt_count``, which redrive resets.

**User data** (tokens, error texts) enters a pipeline only inside ``$literal``, so a
message starting with ``$`` is stored as text, never read as a field path.
"""

from __future__ import annotations

from typing import Any

from rdq_core.model import LEASE_EXPIRED_ERROR, ErrorInfo, Outcome, Status
from rdq_mongo.documents import OUTCOME_CODE, error_value

Doc = dict[str, Any]
Pipeline = list[Doc]

PENDING, IN_FLIGHT = Status.PENDING.value, Status.IN_FLIGHT.value
SUCCEEDED, DEAD = Status.SUCCEEDED.value, Status.DEAD.value
#: The message of the LEASE_EXPIRED attempt a reclaim records (as the reference store).
LEASE_EXPIRED_MESSAGE = "lease expired before an outcome"

#: The server's clock, integer microseconds (millisecond resolution).
NOW_US: Doc = {"$multiply": [{"$toLong": "$$NOW"}, 1000]}
#: Invariant H: one more than the highest attempt number stored, or 1.
NEXT_ATTEMPT_NO: Doc = {
    "$add": [
        {
            "$reduce": {
                "input": "$attempts",
                "initialValue": 0,
                "in": {"$max": ["$$value", "$$this.n"]},
            }
        },
        1,
    ]
}
#: The claimable states; their ``due_us`` is the due time or the lease's expiry.
CLAIMABLE = {"$in": [PENDING, IN_FLIGHT]}


def due_by(now_us: int) -> Doc:
    """``due_us ≤ now_us`` as SecantusDB answers it right: ``0 ≤ due_us < now_us + 1``.

    On a compound index whose field is followed by another (``claim``: queue, due_us,
    seq), SecantusDB's ``$lte`` drops the documents *equal* to the bound; ``due_us`` is an
    integer, so ``< now_us + 1`` is the same set on every server. The lower bound keeps
    the index range to numbers (the ``null`` of a finished task sorts first, and an
    open-below range makes SecantusDB walk them): no due time precedes the epoch."""
    return {"$gte": 0, "$lt": now_us + 1}


def claim_candidates(queue: str, now_us: int) -> Doc:
    """Filter of the tasks of ``queue`` claimable at server time ``now_us``: sorted by
    ``due_us, seq`` it is one range of the ``claim`` index. No status: ``due_us`` is set
    only while PENDING or IN_FLIGHT (an ``$in`` on status makes SecantusDB read every
    document of the queue); the guard checks the status."""
    return {"queue": queue, "due_us": due_by(now_us)}


def claim_guard(task_id: str, queue: str, now_us: int) -> Doc:
    """The claim's guard: this task, still claimable at ``now_us`` — PENDING and due, or
    IN_FLIGHT with an expired lease. A competing claim that won moved ``due_us`` past
    ``now_us`` (a lease is positive), so exactly one guarded write can match."""
    return {"_id": task_id, "queue": queue, "status": CLAIMABLE, "due_us": due_by(now_us)}


def claim_update(token: str, now_us: int, lease_us: int, number: Doc = NEXT_ATTEMPT_NO) -> Pipeline:
    """IN_FLIGHT with a fresh token, claimed at ``now_us`` (the claim's server time ``T``,
    one instant for every task of a batch, as the reference store stamps a batch) with a
    lease to ``now_us + lease_us``; if it was IN_FLIGHT (a reclaim), in the same step: the
    LEASE_EXPIRED attempt of the expired claim, ending at the reclaim and numbered by
    ``number`` (invariant H), and ``attempt_count + 1``. Every expression of one ``$set``
    stage reads the document as it was before the stage."""
    reclaim = {"$eq": ["$status", IN_FLIGHT]}
    expired = {
        "n": number,
        "s": "$claimed_us",
        "f": {"$literal": now_us},
        "o": OUTCOME_CODE[Outcome.LEASE_EXPIRED],
        "e": {"$literal": {"t": LEASE_EXPIRED_ERROR, "m": LEASE_EXPIRED_MESSAGE, "d": None}},
        "k": "$token",
        "c": None,
    }
    return [
        {
            "$set": {
                "attempts": {
                    "$cond": [reclaim, {"$concatArrays": ["$attempts", [expired]]}, "$attempts"]
                },
                "attempt_count": {
                    "$cond": [reclaim, {"$add": ["$attempt_count", 1]}, "$attempt_count"]
                },
                "reclaimed": reclaim,
                "status": {"$literal": IN_FLIGHT},
                "token": {"$literal": token},
                "claimed_us": {"$literal": now_us},
                "due_us": {"$literal": now_us + lease_us},
            }
        }
    ]


def fenced(task_id: str, token: str) -> Doc:
    """The guard of every outcome and heartbeat: IN_FLIGHT under this very token."""
    return {"_id": task_id, "status": IN_FLIGHT, "token": token}


def extend_update(lease_us: int) -> Pipeline:
    return [{"$set": {"due_us": {"$add": [NOW_US, lease_us]}}}]


def outcome_update(
    token: str,
    call: str,
    outcome: Outcome,
    error: ErrorInfo | None,
    status: str,
    delay_us: int | None = None,
    number: Doc = NEXT_ATTEMPT_NO,
) -> Pipeline:
    """Append the attempt of the current claim (from ``claimed_us`` to now, numbered by
    invariant H, carrying the claim's ``token`` and the ``call``'s nonce), count it, and
    move to ``status``: PENDING due in ``delay_us``, SUCCEEDED, or DEAD."""
    attempt = {
        "n": number,
        "s": "$claimed_us",
        "f": NOW_US,
        "o": OUTCOME_CODE[outcome],
        "e": {"$literal": error_value(error)},
        "k": {"$literal": token},
        "c": {"$literal": call},
    }
    fields: Doc = {
        "attempts": {"$concatArrays": ["$attempts", [attempt]]},
        "attempt_count": {"$add": ["$attempt_count", 1]},
        "status": {"$literal": status},
        "token": None,
        "claimed_us": None,
        "reclaimed": False,
        "due_us": None if delay_us is None else {"$add": [NOW_US, delay_us]},
        "finished_us": NOW_US if status == SUCCEEDED else None,
        "dead_us": NOW_US if status == DEAD else None,
    }
    if status == DEAD:
        fields["last_error_type"] = {"$literal": None if error is None else error.type}
    return [{"$set": fields}]


def redrive_update() -> Pipeline:
    """DEAD -> PENDING due now, ``attempt_count = 0``, ``redrive_count + 1``, history kept."""
    return [
        {
            "$set": {
                "status": {"$literal": PENDING},
                "attempt_count": 0,
                "redrive_count": {"$add": ["$redrive_count", 1]},
                "due_us": NOW_US,
                "dead_us": None,
            }
        }
    ]
