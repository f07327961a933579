"""Reclaim races on PostgreSQL with leases of microseconds.

A claim's statement snapshot can predate an attempt that another transaction commits on a
row the claim then locks (FOR UPDATE hands it the newest version of the row, but the
``MAX(attempt_no)`` it reads comes from the older snapshot). The unique key
``(task_id, attempt_no)`` refuses the duplicate number, the statement rolls back whole and
runs again on a fresh snapshot. Threads claiming, reporting, abandoning and redriving with
tiny leases must never see an error other than StaleClaim, and every history stays
numbered 1, 2, 3, ... (invariant H).
"""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

from _pg_support import require_server
from rdq_postgres.storage import PostgresStorage

from rdq_core.errors import StaleClaim
from rdq_core.model import ErrorInfo, NewTask, Outcome, Status

DSN = require_server()
TASKS = 20
THREADS = 6
SECONDS = 3.0


def _worker(namespace: str, seed: int, errors: list[str], counts: dict[str, int]) -> None:
    rng = random.Random(seed)
    storage = PostgresStorage(DSN, namespace)
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            lease = timedelta(microseconds=rng.choice([1, 50, 500, 3000]))
            for claim in storage.claim_due("q", rng.randint(1, 4), lease):
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
    threads = [
        threading.Thread(target=_worker, args=(storage.schema, i, errors, counts))
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
