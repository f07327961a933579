"""Claim races for the exclusivity suite (rule ``one-claim``, bug class ``double-claim``).

:func:`claim_loop` is the worker loop shared by the thread race and the process race,
:func:`process_claim_worker` is what a spawned process runs (it lives here, in an
importable module, because a ``spawn`` child cannot import a test file), and
:func:`one_claim_problems` checks what the workers reported (each claim a
:class:`RaceClaim`). The storage-clock and invariant-H checks the suites share with the
stateful machine live in :mod:`rdq_compliance.invariants`.

Nothing here knows about a particular backend: a child process opens the storage with
:func:`rdq_compliance.session.open_storage` from the picklable ``StorageSpec``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rdq_compliance.invariants import short
from rdq_compliance.provision.backend import StorageSpec
from rdq_compliance.suite.helpers import outcomes
from rdq_core.errors import StaleClaim
from rdq_core.model import Status
from rdq_core.spi import Storage

# ---- claim races ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RaceClaim:
    """One claim a worker of a claim race got, and what completing it did."""

    task_id: str
    token: str
    worker: str
    claimed_at: datetime
    completed: bool
    complete_error: str | None = None


@dataclass
class WorkerReport:
    """Everything one race worker saw; ``error`` is what stopped it early, if anything."""

    worker: str
    records: list[RaceClaim] = field(default_factory=list)
    error: str | None = None


def claim_loop(
    storage: Storage,
    queue: str,
    worker: str,
    *,
    seed: int,
    max_limit: int,
    lease: timedelta,
    deadline_s: float,
    max_claims: int,
    start: Any = None,
    idle_rounds: int = 3,
) -> WorkerReport:
    """Claim from ``queue`` with random limits in ``1..max_limit`` and complete every claim.

    Waits on ``start`` (a barrier) first so the workers race. Stops after ``idle_rounds``
    empty claims in a row (with ``lease`` longer than the race, an empty claim means
    every task is taken), or, reported as an error, when ``deadline_s`` passes or it got
    more than ``max_claims`` claims (more than there are tasks: some were handed out again).
    Never raises: an unexpected exception ends the loop and is reported.
    """
    report = WorkerReport(worker)
    rng = random.Random(seed)
    try:
        if start is not None:
            start.wait(timeout=60)
        deadline = time.monotonic() + deadline_s
        idle = 0
        while idle < idle_rounds:
            if time.monotonic() > deadline:
                report.error = f"still claiming after {deadline_s:.0f} s"
                break
            if len(report.records) > max_claims:
                report.error = (
                    f"got {len(report.records)} claims, more than the {max_claims} tasks "
                    "enqueued; stopped"
                )
                break
            claims = storage.claim_due(queue, rng.randint(1, max_limit), lease)
            if not claims:
                idle += 1
                time.sleep(0.01)
                continue
            idle = 0
            for claim in claims:
                failure: Exception | None = None
                try:
                    storage.complete(claim.task_id, claim.token)
                except Exception as exc:
                    failure = exc
                report.records.append(
                    RaceClaim(
                        claim.task_id,
                        claim.token,
                        worker,
                        claim.claimed_at,
                        failure is None,
                        None if failure is None else f"{type(failure).__name__}: {failure}",
                    )
                )
                if failure is not None and not isinstance(failure, StaleClaim):
                    raise failure
    except threading.BrokenBarrierError:
        report.error = "the start barrier broke (another worker failed to start)"
    except Exception as exc:
        report.error = f"{type(exc).__name__}: {exc}"
        if start is not None:
            start.abort()
    return report


def process_claim_worker(
    spec: StorageSpec,
    queue: str,
    index: int,
    seed: int,
    max_limit: int,
    lease: timedelta,
    deadline_s: float,
    max_claims: int,
    start: Any,
    results: Any,
) -> None:
    """Entry point of one race process (``spawn`` context): open, race, report.

    Puts exactly one :class:`WorkerReport` on ``results``, whatever happens.
    """
    worker = f"process-{index} (pid {os.getpid()})"
    try:
        from rdq_compliance.session import open_storage

        storage = open_storage(spec)
    except Exception as exc:
        start.abort()
        results.put(WorkerReport(worker, [], f"cannot open storage: {type(exc).__name__}: {exc}"))
        return
    try:
        report = claim_loop(
            storage,
            queue,
            worker,
            seed=seed,
            max_limit=max_limit,
            lease=lease,
            deadline_s=deadline_s,
            max_claims=max_claims,
            start=start,
        )
    finally:
        try:
            storage.close()
        except Exception:
            pass
    results.put(report)


def one_claim_problems(task_ids: Iterable[str], reports: Iterable[WorkerReport]) -> list[str]:
    """Every task must have been claimed exactly once, by one worker, and completed."""
    wanted = list(task_ids)
    by_task: dict[str, list[RaceClaim]] = defaultdict(list)
    problems: list[str] = []
    for report in reports:
        if report.error is not None:
            problems.append(f"worker {report.worker} stopped: {report.error}")
        for record in report.records:
            by_task[record.task_id].append(record)
    for tid in wanted:
        records = by_task.get(tid, [])
        if len(records) == 1 and records[0].completed:
            continue
        if not records:
            problems.append(f"task {tid!r} was never claimed although it was due")
            continue
        held = ", ".join(
            f"{r.worker} (token {short(r.token)} at {r.claimed_at.isoformat()}"
            + ("" if r.completed else f", complete raised {r.complete_error}")
            + ")"
            for r in records
        )
        problems.append(f"task {tid!r} was claimed {len(records)} times: {held}")
    strangers = sorted(set(by_task) - set(wanted))
    if strangers:
        problems.append(f"claims returned task ids that were never enqueued here: {strangers}")
    return problems


def final_state_problems(storage: Storage, task_ids: Iterable[str]) -> list[str]:
    """After a race, every task is SUCCEEDED with exactly one SUCCESS attempt."""
    problems = []
    for tid in task_ids:
        task = storage.get(tid)
        if (
            task.status is not Status.SUCCEEDED
            or task.attempt_count != 1
            or len(task.attempts) != 1
        ):
            problems.append(
                f"task {tid!r} ended {task.status.value} with attempt_count "
                f"{task.attempt_count} and attempts {outcomes(task)} (expected SUCCEEDED, "
                f"one SUCCESS attempt)"
            )
    return problems


#: The fewest tasks per racing worker, whatever ``Server.race_size`` says.
MIN_TASKS_PER_WORKER = 25


def race_tasks(server: object, workers: int, per_worker: int) -> int:
    """The race's task count on ``server``: ``workers * per_worker`` scaled by its
    ``race_size`` (1.0 unless the server says it is slow), at least
    :data:`MIN_TASKS_PER_WORKER` a worker."""
    size = float(getattr(server, "race_size", 1.0))
    return workers * max(MIN_TASKS_PER_WORKER, round(per_worker * min(1.0, size)))
