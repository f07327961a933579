"""Broken MongoDB storages: each breaks one rule the way a real MongoDB queue has, and
the kit must fail it naming the rule (``contract.md#8-bug-classes``). Plus a faithful control.

Each variant is a :class:`rdq_mongo.storage.MongoStorage` with one hook replaced, and is
registered for the suite as ``--rdq-backend=tests.broken.mongo:<name>`` (a ``Backend``
instance of this module). Every variant records the task ids its broken code path
actually mishandled in :data:`VICTIMS` (in this process: the suite tests that catch these
bugs run in-process, threads included), so a test can check that the kit's report names
a task the bug hit.

- ``check_then_act_claim``: the claim reads the candidate, checks in Python that it is
  claimable, then writes with ``update_one({_id})`` — no guard in the write's filter
  (``double-claim``: two workers get one task);
- ``outcome_ignores_token``: complete / reschedule / dead-letter filter on ``_id`` alone, not on
  token and status (``unfenced-outcome``: a stale worker's result is accepted);
- ``lease_expired_numbered_from_count``: the reclaim's LEASE_EXPIRED attempt is numbered
  ``attempt_count + 1`` (``numbering-from-counter``: after a redrive the number repeats);
- ``reclaim_in_two_writes``: the claim takes the expired lease in one write and appends
  the LEASE_EXPIRED attempt in a second one, after the claimed document was read (the
  claim hands out a task whose history lacks the attempt; a crash between the writes
  would lose it);
- ``client_clock``: the claim's instant ``T`` — its filter (due and expired leases) and
  the times it stamps — is the client's clock (``time.time_ns()``), not the server's
  ``$$NOW``: only skewed client clocks show it (the clock-skew campaign,
  ``tests/server_contract/test_clock_skew.py``);
- ``reclaim_overwrites_late_outcome``: claims are serialised by a lock document of their
  own (no outcome takes it); under it the claim reads the due documents and saves them
  as read, ``update_one({_id})`` with no status or token in the filter: a late outcome
  of the expired holder acknowledged in between is overwritten (only the conformance
  race of late outcomes shows it);
- ``control``: the real storage through this same module.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any, ClassVar

import pymongo.errors as px
from rdq_mongo import documents, schema, updates
from rdq_mongo.plugin import MongoBackend
from rdq_mongo.storage import MongoStorage

from rdq_core.model import LEASE_EXPIRED_ERROR, Claim, micros_from_delta

#: variant name -> task ids the broken path mishandled (this process).
VICTIMS: dict[str, set[str]] = {}
_LOCK = threading.Lock()


def victim(variant: str, task_id: str) -> None:
    with _LOCK:
        VICTIMS.setdefault(variant, set()).add(task_id)


class CheckThenActClaim(MongoStorage):
    """Bug class ``double-claim`` — check in the client, then an unguarded write."""

    claims: ClassVar[Counter[str]] = Counter()

    def _claim_one(
        self, db: Any, write: str, task_id: str, queue: str, now_us: int, lease_us: int
    ) -> Claim | None:
        tasks = db[schema.TASKS]
        doc = tasks.find_one({"_id": task_id})
        if doc is None or doc["status"] not in ("PENDING", "IN_FLIGHT"):
            return None
        if doc["due_us"] is None or doc["due_us"] > now_us:
            return None
        time.sleep(0.002)  # the client's think time between its check and its write
        token = secrets.token_hex(16)
        tasks.update_one({"_id": task_id}, updates.claim_update(token, now_us, lease_us))
        with _LOCK:
            self.claims[task_id] += 1
            twice = self.claims[task_id] > 1
        if twice:
            victim("check_then_act_claim", task_id)
        got = tasks.find_one({"_id": task_id, "token": token})
        return None if got is None else documents.claim(got)


class OutcomeIgnoresToken(MongoStorage):
    """Bug class ``unfenced-outcome`` — the outcome's filter names the task, not the claim."""

    def _outcome_guard(self, task_id: str, token: str) -> dict[str, Any]:
        doc = self._run("peek", lambda db: db[schema.TASKS].find_one({"_id": task_id}))
        if doc is not None and (doc.get("token") != token or doc["status"] != "IN_FLIGHT"):
            victim("outcome_ignores_token", task_id)
        return {"_id": task_id}


#: The numbering of the incident: from attempt_count, which redrive resets.
FROM_COUNT = {"$add": ["$attempt_count", 1]}


class LeaseExpiredNumberedFromCount(MongoStorage):
    """Bug class ``numbering-from-counter`` — LEASE_EXPIRED numbered ``attempt_count + 1``."""

    def _claim_pipeline(self, token: str, now_us: int, lease_us: int) -> updates.Pipeline:
        return updates.claim_update(token, now_us, lease_us, number=FROM_COUNT)

    def _claim_one(self, db: Any, *args: Any) -> Claim | None:
        claim = super()._claim_one(db, *args)
        if claim is not None and claim.reclaimed:
            numbers = [a.attempt_no for a in claim.task.attempts]
            if len(set(numbers)) != len(numbers) or numbers != sorted(numbers):
                victim("lease_expired_numbered_from_count", claim.task_id)
        return claim


class ReclaimInTwoWrites(MongoStorage):
    """The reclaim's LEASE_EXPIRED attempt is written by a second write, after the claim."""

    def _claim_pipeline(self, token: str, now_us: int, lease_us: int) -> updates.Pipeline:
        pipeline = updates.claim_update(token, now_us, lease_us)
        fields = pipeline[0]["$set"]
        fields["attempts"] = "$attempts"  # the history is left for a second write
        fields["attempt_count"] = "$attempt_count"
        # remember the expired claim's start, for the second write
        fields["expired_from"] = {"$cond": [{"$eq": ["$status", "IN_FLIGHT"]}, "$claimed_us", None]}
        return pipeline

    def _claim_one(
        self, db: Any, write: str, task_id: str, queue: str, now_us: int, lease_us: int
    ) -> Claim | None:
        claim = super()._claim_one(db, write, task_id, queue, now_us, lease_us)
        if claim is None or not claim.reclaimed:
            return claim
        victim("reclaim_in_two_writes", task_id)
        expired = {
            "n": updates.NEXT_ATTEMPT_NO,
            "s": "$expired_from",
            "f": {"$literal": now_us},
            "o": "L",
            "e": {"$literal": {"t": "rdq.LeaseExpired", "m": updates.LEASE_EXPIRED_MESSAGE}},
            "k": None,
            "c": None,
        }
        db[schema.TASKS].update_one(
            {"_id": task_id},
            [
                {
                    "$set": {
                        "attempts": {"$concatArrays": ["$attempts", [expired]]},
                        "attempt_count": {"$add": ["$attempt_count", 1]},
                    }
                }
            ],
        )
        return claim


class ClientClock(MongoStorage):
    """The claim filters and stamps with the client's datetime instead of ``$$NOW``."""

    @staticmethod
    def _now_us(db: Any) -> int:
        return time.time_ns() // 1000


#: The collection of ``reclaim_overwrites_late_outcome``'s claim locks (one per queue).
CLAIM_LOCKS = "claim_locks"
#: How long a claim lock is held at most (a claimer that died frees it after this).
CLAIM_LOCK_TTL_US = 30_000_000


class ReclaimOverwritesLateOutcome(MongoStorage):
    """Bug class ``unfenced-outcome`` — a reclaim that reads without a guard and saves unguarded: a
    late outcome acknowledged in between is overwritten.

    Claims are serialised by a lock of their own, a document per queue in
    ``claim_locks`` taken with an atomic guarded update (free, or held past its TTL) and
    freed afterwards; no outcome takes it, so no two claims ever meet and every race of
    claims passes. Under it the claim reads the due documents (expired leases included:
    the claim index's range, then a ``find`` of the documents), and saves each as read:
    ``update_one({_id})`` with no status or token in the filter, the pipeline stamping
    the status, token and times of the document it read (the terminal fields cleared
    with the rest) and, for an expired lease, a LEASE_EXPIRED attempt of the claim it
    read, appended to the history as it is now. A late ``complete``, ``reschedule``,
    ``dead_letter`` or heartbeat of the expired holder landing between the read and the
    save is acknowledged (its fenced write still matches), then the save makes the task
    IN_FLIGHT again with a LEASE_EXPIRED attempt after the accepted one. ``gap``
    (seconds, default 0) widens the window between the read and the save; none is
    needed: the round trips of a batch's saves are window enough.

    Each task whose document changed between the read and the save (seen by a re-read
    just before the saves, or by the history the save extended) is recorded in
    :data:`VICTIMS`. Incident: a PostgreSQL storage written from outside the project
    (claims by advisory lock, then a re-read without ``FOR UPDATE``) passed the whole
    kit while a 400-task script overwrote acknowledged results in 2 runs of 3.
    """

    gap: ClassVar[float] = 0.0

    def __init__(self, uri: str, namespace: str, **kwargs: Any) -> None:
        super().__init__(uri, namespace, **kwargs)
        self._holder = secrets.token_hex(8)

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        lease_us = micros_from_delta(lease)

        def run(db: Any) -> list[Claim]:
            key = self._lock_claims(db, queue)
            try:
                return self._claim_unguarded(db, queue, limit, lease_us)
            finally:
                db[CLAIM_LOCKS].update_one(
                    {"_id": key, "holder": self._holder}, {"$set": {"holder": None, "until": 0}}
                )

        return self._run("claim_due", run)

    def _lock_claims(self, db: Any, queue: str) -> str:
        """Take the queue's claim lock (a lock document; outcomes never look at it)."""
        locks, key = db[CLAIM_LOCKS], f"claims:{queue}"
        try:
            locks.update_one(
                {"_id": key}, {"$setOnInsert": {"holder": None, "until": 0}}, upsert=True
            )
        except px.DuplicateKeyError:
            pass  # another claimer created it meanwhile
        take = [
            {
                "$set": {
                    "holder": self._holder,
                    "until": {"$add": [updates.NOW_US, CLAIM_LOCK_TTL_US]},
                }
            }
        ]
        free = {"_id": key, "$expr": {"$lt": ["$until", updates.NOW_US]}}
        while not locks.update_one(free, take).matched_count:
            time.sleep(0.001)
        return key

    def _claim_unguarded(self, db: Any, queue: str, limit: int, lease_us: int) -> list[Claim]:
        tasks = db[schema.TASKS]
        now_us = self._now_us(db)
        ids = self._candidates(db, queue, now_us, limit)
        if not ids:
            return []
        due = {"_id": {"$in": ids}, **updates.claim_candidates(queue, now_us)}
        read = {d["_id"]: d for d in tasks.find(due)}  # the due documents, read unguarded
        if not read:
            return []
        time.sleep(self.gap)
        seen = {"status": 1, "token": 1, "due_us": 1, "attempts.n": 1}
        for doc in tasks.find({"_id": {"$in": list(read)}}, seen):  # to name the victims
            was = read[doc["_id"]]
            if [doc.get(f) for f in ("status", "token", "due_us")] != [
                was.get(f) for f in ("status", "token", "due_us")
            ] or len(doc["attempts"]) != len(was["attempts"]):
                victim("reclaim_overwrites_late_outcome", doc["_id"])
        claims = []
        for task_id in ids:
            was = read.get(task_id)
            if was is None:
                continue
            token = secrets.token_hex(16)
            tasks.update_one({"_id": task_id}, _save(was, token, now_us, lease_us))
            got = tasks.find_one({"_id": task_id, "token": token})
            if got is None:
                continue
            if len(got["attempts"]) > len(was["attempts"]) + int(bool(got["reclaimed"])):
                victim("reclaim_overwrites_late_outcome", task_id)  # an outcome in between
            claims.append(documents.claim(got))
        return claims


def _save(was: dict[str, Any], token: str, now_us: int, lease_us: int) -> updates.Pipeline:
    """The claim of document ``was`` as it was read: its status, claim and terminal
    fields (not the document's now), the expired claim's LEASE_EXPIRED attempt appended
    to the history as it is now."""
    reclaim = was["status"] == updates.IN_FLIGHT
    fields: dict[str, Any] = {
        "status": {"$literal": updates.IN_FLIGHT},
        "token": {"$literal": token},
        "claimed_us": {"$literal": now_us},
        "due_us": {"$literal": now_us + lease_us},
        "reclaimed": reclaim,
        "finished_us": {"$literal": was.get("finished_us")},
        "dead_us": {"$literal": was.get("dead_us")},
        "last_error_type": {"$literal": was.get("last_error_type")},
    }
    if reclaim:
        expired = {
            "n": updates.NEXT_ATTEMPT_NO,
            "s": {"$literal": was["claimed_us"]},
            "f": {"$literal": now_us},
            "o": "L",
            "e": {
                "$literal": {
                    "t": LEASE_EXPIRED_ERROR,
                    "m": updates.LEASE_EXPIRED_MESSAGE,
                    "d": None,
                }
            },
            "k": {"$literal": was["token"]},
            "c": None,
        }
        fields["attempts"] = {"$concatArrays": ["$attempts", [expired]]}
        fields["attempt_count"] = {"$add": ["$attempt_count", 1]}
    return [{"$set": fields}]


class _Variant(MongoBackend):
    def __init__(self, name: str, storage: type[MongoStorage]) -> None:
        self.name = "mongo"
        self.variant = name
        self.storage = storage

    def open(self, dsn: str, namespace: str) -> MongoStorage:
        return self.storage(dsn, namespace)


check_then_act_claim = _Variant("check_then_act_claim", CheckThenActClaim)
outcome_ignores_token = _Variant("outcome_ignores_token", OutcomeIgnoresToken)
lease_expired_numbered_from_count = _Variant(
    "lease_expired_numbered_from_count", LeaseExpiredNumberedFromCount
)
reclaim_in_two_writes = _Variant("reclaim_in_two_writes", ReclaimInTwoWrites)
client_clock = _Variant("client_clock", ClientClock)
reclaim_overwrites_late_outcome = _Variant(
    "reclaim_overwrites_late_outcome", ReclaimOverwritesLateOutcome
)
control = _Variant("control", MongoStorage)
