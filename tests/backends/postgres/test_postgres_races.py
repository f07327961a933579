"""Reclaim races on PostgreSQL with leases of microseconds.

A claim's statement snapshot can predate an attempt that another transaction commits on a
row the claim then locks (FOR UPDATE hands it the newest version of the row, but the
``MAX(attempt_no)`` it reads comes from the older snapshot). The unique key
``(task_id, attempt_no)`` refuses the duplicate number, the statement rolls back whole and
runs again on a fresh snapshot. Threads claiming, reporting, abandoning and redriving with
tiny leases must never see an error other than StaleClaim, every history stays numbered
1, 2, 3, ... (invariant H), and every claim returned exactly the history its task had
(whichever of the claim's paths, fresh or full, served it).
"""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

from rdq_postgres.storage import PostgresStorage

from rdq_core.errors import StaleClaim
from rdq_core.model import Claim, ErrorInfo, NewTask, Outcome, Status
from tests.backends.postgres._pg_support import require_server

DSN = require_server()
TASKS = 20
THREADS = 6
#: How long the threads churn: a busy runner only makes fewer rounds, and one abandoned
#: claim or one lease of microseconds among them is the reclaim the test asks for.
SECONDS = 3.0


def _worker(
    namespace: str, seed: int, errors: list[str], counts: dict[str, int], claims: list[Claim]
) -> None:
    rng = random.Random(seed)
    storage = PostgresStorage(DSN, namespace)
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            lease = timedelta(microseconds=rng.choice([1, 50, 500, 3000]))
            for claim in storage.claim_due("q", rng.randint(1, 4), lease):
                claims.append(claim)
                counts["claims"] += 1
                counts["reclaims"] += claim.reclaimed
                roll = rng.random()
                try:
                    if roll < 0.6:
                        storage.reschedule(
                            claim.task_id, claim.token, timedelta(0), ErrorInfo("E", "again")
                        )
                    elif roll < 0.7:
                        storage.extend_lease(claim.task_id, claim.token, lease)
                    elif roll < 0.75:
                        storage.dead_letter(claim.task_id, claim.token)
                        storage.redrive("q", [claim.task_id])
                    # else: abandon the claim; its lease expires and it is reclaimed
                except StaleClaim:
                    counts["stale"] += 1
    except Exception as exc:  # anything but StaleClaim is a failure
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        storage.close()


def test_tiny_leases_never_break_history_numbering(storage):
    for i in range(TASKS):
        storage.enqueue(NewTask(f"t{i}", "q", "h"))
    errors: list[str] = []
    counts = {"claims": 0, "reclaims": 0, "stale": 0}
    claims: list[Claim] = []
    threads = [
        threading.Thread(target=_worker, args=(storage.schema, i, errors, counts, claims))
        for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 60)
    assert not errors, errors[:5]
    assert counts["reclaims"] > 0, counts
    for i in range(TASKS):
        task = storage.get(f"t{i}")
        numbers = [a.attempt_no for a in task.attempts]
        assert numbers == list(range(1, len(numbers) + 1)), (task.id, numbers)
        if task.status is Status.IN_FLIGHT:
            assert task.lease_expires_at is not None
        lost = sum(a.outcome is Outcome.LEASE_EXPIRED for a in task.attempts)
        assert lost <= len(numbers)
    _claims_saw_their_exact_history(storage, claims)


def _claims_saw_their_exact_history(storage: PostgresStorage, claims: list[Claim]) -> None:
    """Each claim returned the task's whole history at the claim, nothing more or less.

    History is append-only here (no purge), numbered max + 1: the attempts a claim saw are
    those numbered below its ``next_attempt_no``, and the attempt with that number, if any,
    was appended after the claim — by its outcome or by the reclaim that took it over,
    both starting at its ``claimed_at`` (while a claim is current nobody else appends).
    A claim that missed an attempt would show an earlier claim's attempt there.
    """
    final = {task_id: storage.get(task_id) for task_id in {c.task_id for c in claims}}
    problems = []
    for claim in claims:
        attempts = final[claim.task_id].attempts
        no = claim.task.next_attempt_no
        if tuple(a for a in attempts if a.attempt_no < no) != claim.task.attempts:
            problems.append(f"{claim.task_id}: claimed with {claim.task.attempts}, has {attempts}")
        following = [a for a in attempts if a.attempt_no == no]
        if following and following[0].started_at != claim.claimed_at:
            problems.append(
                f"{claim.task_id}: claimed at {claim.claimed_at} as #{no}, but #{no} is "
                f"{following[0]}: the claim missed an attempt"
            )
    assert not problems, f"{len(problems)} of {len(claims)} claims: " + "; ".join(problems[:5])
