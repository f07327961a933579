"""Functions run in child processes ('spawn') by the sqlite backend tests.

Kept in a plain module (not a test module) so a spawned child imports only this.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path

from rdq_sqlite.storage import SqliteStorage

from rdq_core.model import NewTask


def claim_until_empty(path: str, queue: str, start: object, out: object, seed: int) -> None:
    """Claim (1..4 at a time) and complete until the queue is drained; report ids claimed.

    ``start`` is a Barrier passed twice: every process has opened the file before any
    claims, and every process has made its first claim (all at once, right after the
    first pass) before any goes on, so each takes part in the race however the machine
    schedules them."""
    import random

    rng = random.Random(seed)
    claimed: list[str] = []
    with SqliteStorage(path) as storage:
        start.wait()  # type: ignore[attr-defined]
        first = True
        empty_rounds = 0
        while empty_rounds < 3:
            claims = storage.claim_due(queue, rng.randint(1, 4), timedelta(hours=1))
            if first:
                start.wait()  # type: ignore[attr-defined]
                first = False
            if not claims:
                empty_rounds += 1
                continue
            empty_rounds = 0
            for claim in claims:
                claimed.append(claim.task_id)
                storage.complete(claim.task_id, claim.token)
    out.put((os.getpid(), claimed))  # type: ignore[attr-defined]


def open_fresh_and_enqueue(path: str, start: object, task_id: str) -> None:
    """Open (creating) the same fresh file as other processes at once, then enqueue.

    ``start`` is a Barrier so the processes race on the fresh file.
    """
    start.wait()  # type: ignore[attr-defined]
    with SqliteStorage(path, create=True) as storage:
        storage.enqueue(NewTask(task_id, "q", "h"))


def enqueue_then_sigkill(path: str, n: int) -> None:
    """Enqueue n tasks (each its own committed transaction), then die without cleanup."""
    storage = SqliteStorage(Path(path))
    for i in range(n):
        storage.enqueue(NewTask(f"k{i}", "q", "h", payload=bytes([i % 256]) * 10))
    os.kill(os.getpid(), signal.SIGKILL)
