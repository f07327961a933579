"""Broken MongoDB storages: each breaks one rule the way a real MongoDB queue has, and
the kit must fail it naming the rule (SPEC §5). Plus a faithful control.

Each variant is a :class:`rdq_mongo.storage.MongoStorage` with one hook replaced, and is
registered for the suite as ``--rdq-backend=tests.broken.mongo:<name>`` (a ``Backend``
instance of this module). Every variant records the task ids its broken code path
actually mishandled in :data:`VICTIMS` (in this process: the suite tests that catch these
bugs run in-process, threads included), so a test can check that the kit's report names
a task the bug hit.

- ``check_then_act_claim``: the claim reads the candidate, checks in Python that it is
  claimable, then writes with ``update_one({_id})`` — no guard in the write's filter
  (§5.1: two workers get one task);
- ``outcome_ignores_token``: complete / reschedule / dead-letter filter on ``_id`` alone, not on
  token and status (§5.3: a stale worker's result is accepted);
- ``lease_expired_numbered_from_count``: the reclaim's LEASE_EXPIRED attempt is numbered
  ``attempt_count + 1`` (§5.4: after a redrive the number repeats);
- ``reclaim_in_two_writes``: the claim takes the expired lease in one write and appends
  the LEASE_EXPIRED attempt in a second one, after the claimed document was read (the
  claim hands out a task whose history lacks the attempt; a crash between the writes
  would lose it);
- ``client_clock``: the claim's instant ``T`` — its filter (due and expired leases) and
  the times it stamps — is the client's clock (``time.time_ns()``), not the server's
  ``$$NOW``: only skewed client clocks show it (the clock-skew campaign,
  ``tests/server_contract/test_clock_skew.py``);
- ``control``: the real storage through this same module.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from typing import Any, ClassVar

from rdq_mongo import documents, schema, updates
from rdq_mongo.plugin import MongoBackend
from rdq_mongo.storage import MongoStorage

from rdq_core.model import Claim

#: variant name -> task ids the broken path mishandled (this process).
VICTIMS: dict[str, set[str]] = {}
_LOCK = threading.Lock()


def victim(variant: str, task_id: str) -> None:
    with _LOCK:
        VICTIMS.setdefault(variant, set()).add(task_id)


class CheckThenActClaim(MongoStorage):
    """§5.1: check in the client, then an unguarded write."""

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
    """§5.3: the outcome's filter names the task, not the claim."""

    def _outcome_guard(self, task_id: str, token: str) -> dict[str, Any]:
        doc = self._run("peek", lambda db: db[schema.TASKS].find_one({"_id": task_id}))
        if doc is not None and (doc.get("token") != token or doc["status"] != "IN_FLIGHT"):
            victim("outcome_ignores_token", task_id)
        return {"_id": task_id}


#: The numbering of the incident: from attempt_count, which redrive resets.
FROM_COUNT = {"$add": ["$attempt_count", 1]}


class LeaseExpiredNumberedFromCount(MongoStorage):
    """§5.4: LEASE_EXPIRED numbered ``attempt_count + 1``."""

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
control = _Variant("control", MongoStorage)
