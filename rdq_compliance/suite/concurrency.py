"""Helpers for the claim, lease, history and transition suites.

- storage-clock comparisons, with a small slack for backends whose clock is coarser
  than a microsecond (e.g. milliseconds);
- :func:`assert_history`: invariant H on one task;
- claim races: :func:`claim_loop` is the worker loop shared by the thread race and the
  process race, :func:`process_claim_worker` is what a spawned process runs (it lives
  here, in an importable module, because a ``spawn`` child cannot import a test file),
  and :func:`one_claim_problems` checks what the workers reported.

Nothing here knows about a particular backend: a child process opens the storage with
:func:`rdq_compliance.session.open_storage` from the picklable ``StorageSpec``.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rdq_compliance import rules
from rdq_compliance.provision.backend import StorageSpec
from rdq_core.errors import StaleClaim
from rdq_core.model import Status, Task
from rdq_core.spi import Storage

#: How far a stored timestamp may sit outside the storage clock readings around the call
#: that wrote it (a backend may store milliseconds while ``now()`` reads microseconds).
CLOCK_SLACK = timedelta(milliseconds=1)

#: How many problems a failure message lists before it says "and N more".
MAX_LISTED = 10


# ---- time --------------------------------------------------------------------------------


def between(
    value: datetime | None, low: datetime, high: datetime, slack: timedelta = CLOCK_SLACK
) -> bool:
    """``low - slack <= value <= high + slack`` (False for ``None``)."""
    return value is not None and low - slack <= value <= high + slack


def close_to(value: datetime | None, expected: datetime, slack: timedelta = CLOCK_SLACK) -> bool:
    """``value`` within ``slack`` of ``expected`` (False for ``None``)."""
    return value is not None and abs(value - expected) <= slack


def short(token: str) -> str:
    """A token as failure messages show it."""
    return f"{token[:8]}…"


def listed(problems: Sequence[str]) -> str:
    """Problems joined for a failure message, at most :data:`MAX_LISTED` of them."""
    shown = "; ".join(problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    return shown + (f"; and {more} more" if more > 0 else "")


# ---- invariant H ---------------------------------------------------------------------------


def history_problem(task: Task) -> str | None:
    """What breaks invariant H in ``task.attempts``, or ``None``."""
    numbers = [a.attempt_no for a in task.attempts]
    if any(n < 1 for n in numbers):
        return f"attempt numbers {numbers} include one below 1"
    if any(b <= a for a, b in itertools.pairwise(numbers)):
        return f"attempt numbers {numbers} are not unique and strictly increasing"
    return None


def assert_history(task: Task, context: str = "") -> None:
    """Fail with rule ``history-numbering`` unless ``task`` keeps invariant H."""
    problem = history_problem(task)
    where = f" ({context})" if context else ""
    assert problem is None, rules.message(
        "history-numbering", f"task {task.id!r}{where}: {problem}"
    )


def numbers(task: Task) -> list[int]:
    return [a.attempt_no for a in task.attempts]


def outcomes(task: Task) -> list[str]:
    return [a.outcome.value for a in task.attempts]


# ---- claim races ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimRecord:
    """One claim a race worker got, and what completing it did."""

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
    records: list[ClaimRecord] = field(default_factory=list)
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
                    ClaimRecord(
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
    by_task: dict[str, list[ClaimRecord]] = defaultdict(list)
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
