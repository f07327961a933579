"""A late outcome against a reclaim, for the conformance suite (rules ``fencing``,
``one-claim``).

A holder whose lease has just expired may still report while nobody has reclaimed its
task; once another claim has happened, its token is dead. When the holder's report and
another worker's reclaim arrive at the same moment, exactly one of the two wins:

- the holder's call is accepted, and then no claim may take the task (it is SUCCEEDED,
  DEAD, PENDING and not due, or IN_FLIGHT on a renewed lease), or
- the reclaim takes the task, and then the holder's call is refused (``StaleClaim``).

:func:`late_calls` is what a late holder does (one SPI call per claim it held, in the
order the leases expire: ``complete``, ``reschedule``, ``dead_letter``, or
``extend_lease`` then ``complete``); :func:`reclaim_loop` is what a reclaiming worker
does (claim until nothing is due, complete what it got); :func:`late_problems` judges
what both sides saw and the tasks' final state, naming the rule each problem breaks.
:func:`process_late_worker` and :func:`process_reclaim_worker` run them in ``spawn``
processes (they live here, in an importable module, because a ``spawn`` child cannot
import a test file). Nothing here knows about a particular backend.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rdq_compliance.invariants import short
from rdq_compliance.provision.backend import StorageSpec
from rdq_core.errors import NotFound, StaleClaim
from rdq_core.model import ErrorInfo, Outcome, Status, Task
from rdq_core.spi import Storage

#: The late calls, given to the claims in turn.
OPS = ("complete", "reschedule", "dead_letter", "extend_lease")
#: A rescheduled task is due this far ahead, so no claim of the race may take it.
RESCHEDULE_DELAY = timedelta(hours=1)
#: What a late holder's ``reschedule`` and ``dead_letter`` record.
LATE_ERROR = ErrorInfo("LateHolder", "reported after its lease expired")


@dataclass(frozen=True)
class Held:
    """A claim a holder made, and the late call it will make on it."""

    task_id: str
    token: str
    claimed_at: datetime
    lease_expires_at: datetime
    op: str


@dataclass(frozen=True)
class LateCall:
    """What a late holder's call did: ``accepted`` or refused (``StaleClaim``);
    ``then_complete`` is the ``complete`` after an accepted ``extend_lease`` (``None``
    when there was none)."""

    held: Held
    worker: str
    accepted: bool
    extended_to: datetime | None = None
    then_complete: bool | None = None


@dataclass(frozen=True)
class Reclaim:
    """A claim a reclaiming worker got, and whether completing it was accepted."""

    task_id: str
    token: str
    worker: str
    claimed_at: datetime
    reclaimed: bool
    completed: bool


@dataclass
class SideReport:
    """Everything one side's worker saw; ``error`` is what stopped it, if anything."""

    worker: str
    calls: list[LateCall] = field(default_factory=list)
    reclaims: list[Reclaim] = field(default_factory=list)
    error: str | None = None


def assign_ops(claims: Sequence[Any], seed: int) -> list[Held]:
    """Each claim with the late call it gets: every op of :data:`OPS` in turn, shuffled."""
    rng = random.Random(seed)
    ops = [OPS[i % len(OPS)] for i in range(len(claims))]
    rng.shuffle(ops)
    return [
        Held(c.task_id, c.token, c.claimed_at, c.lease_expires_at, op)
        for c, op in zip(claims, ops, strict=True)
    ]


def _refused(call: Any) -> bool:
    """Run ``call``: ``False`` when it was accepted, ``True`` when ``StaleClaim``."""
    try:
        call()
    except StaleClaim:
        return True
    return False


def _late_call(storage: Storage, h: Held, worker: str, long_lease: timedelta) -> LateCall:
    """Make ``h``'s late call; ``StaleClaim`` is a refusal, anything else propagates."""
    try:
        if h.op == "extend_lease":
            extended_to = storage.extend_lease(h.task_id, h.token, long_lease)
            done = not _refused(lambda: storage.complete(h.task_id, h.token))
            return LateCall(h, worker, True, extended_to, done)
        if h.op == "complete":
            storage.complete(h.task_id, h.token)
        elif h.op == "reschedule":
            storage.reschedule(h.task_id, h.token, RESCHEDULE_DELAY, LATE_ERROR)
        else:
            storage.dead_letter(h.task_id, h.token, LATE_ERROR)
    except StaleClaim:
        return LateCall(h, worker, False)
    return LateCall(h, worker, True)


def late_calls(
    storage: Storage, held: Iterable[Held], worker: str, long_lease: timedelta, start: Any
) -> SideReport:
    """Wait on ``start``, then make each claim's late call, earliest lease first.
    Never raises: an unexpected exception ends the loop and is reported."""
    report = SideReport(worker)
    try:
        start.wait(timeout=120)
        for h in sorted(held, key=lambda h: (h.lease_expires_at, h.task_id)):
            report.calls.append(_late_call(storage, h, worker, long_lease))
    except threading.BrokenBarrierError:
        report.error = "the start barrier broke (another worker failed to start)"
    except Exception as exc:
        report.error = f"{type(exc).__name__}: {exc}"
        start.abort()
    return report


def reclaim_loop(
    storage: Storage,
    queue: str,
    worker: str,
    *,
    seed: int,
    max_limit: int,
    long_lease: timedelta,
    deadline_s: float,
    start: Any,
    idle_rounds: int = 3,
) -> SideReport:
    """Wait on ``start``, then claim ``queue`` with random limits until ``idle_rounds``
    empty claims in a row, completing every claim at once. Never raises."""
    report = SideReport(worker)
    rng = random.Random(seed)
    try:
        start.wait(timeout=120)
        deadline = time.monotonic() + deadline_s
        idle = 0
        while idle < idle_rounds:
            if time.monotonic() > deadline:
                report.error = f"still claiming after {deadline_s:.0f} s"
                break
            claims = storage.claim_due(queue, rng.randint(1, max_limit), long_lease)
            if not claims:
                idle += 1
                time.sleep(0.005)
                continue
            idle = 0
            for c in claims:
                done = not _refused(lambda c=c: storage.complete(c.task_id, c.token))
                report.reclaims.append(
                    Reclaim(c.task_id, c.token, worker, c.claimed_at, c.reclaimed, done)
                )
    except threading.BrokenBarrierError:
        report.error = "the start barrier broke (another worker failed to start)"
    except Exception as exc:
        report.error = f"{type(exc).__name__}: {exc}"
        start.abort()
    return report


# ---- judging ---------------------------------------------------------------------------------

#: The rule a reclaim breaks when it takes a task after the holder's late call was
#: accepted: what the accepted call left the task as.
_TAKEN_AFTER = {
    "complete": ("terminal-final", "SUCCEEDED"),
    "dead_letter": ("terminal-final", "DEAD"),
    "reschedule": ("claim-due-only", "PENDING, due in an hour"),
    "extend_lease": ("lease-respected", "IN_FLIGHT on the lease the heartbeat renewed"),
}
#: The attempt an accepted late call records.
_RECORDS = {
    "complete": Outcome.SUCCESS,
    "extend_lease": Outcome.SUCCESS,
    "reschedule": Outcome.RETRYABLE_FAILURE,
    "dead_letter": Outcome.PERMANENT_FAILURE,
}


def _history(task: Task | None) -> str:
    if task is None:
        return "the task is gone"
    attempts = ", ".join(f"#{a.attempt_no} {a.outcome.value}" for a in task.attempts)
    return f"the task ended {task.status.value}, history [{attempts}]"


def _accepted_first(task: Task | None, call: LateCall) -> bool | None:
    """Whether the history puts the holder's accepted attempt before the reclaim's
    LEASE_EXPIRED attempt of the same claim; ``None`` when it shows neither order."""
    if task is None:
        return None
    mine = [
        a.attempt_no
        for a in task.attempts
        if a.started_at == call.held.claimed_at and a.outcome is _RECORDS[call.held.op]
    ]
    expired = [
        a.attempt_no
        for a in task.attempts
        if a.started_at == call.held.claimed_at and a.outcome is Outcome.LEASE_EXPIRED
    ]
    if mine and expired:
        return min(mine) < min(expired)
    return None


def _expected_end(call: LateCall | None) -> tuple[Status, list[Outcome]]:
    lost = call is None or not call.accepted
    if lost or (call.held.op == "extend_lease" and not call.then_complete):
        return Status.SUCCEEDED, [Outcome.LEASE_EXPIRED, Outcome.SUCCESS]
    status = {
        "complete": Status.SUCCEEDED,
        "extend_lease": Status.SUCCEEDED,
        "reschedule": Status.PENDING,
        "dead_letter": Status.DEAD,
    }[call.held.op]
    return status, [_RECORDS[call.held.op]]


def late_problems(
    storage: Storage, held: Sequence[Held], reports: Iterable[SideReport]
) -> dict[str, list[str]]:
    """What the race broke, by rule id: every task ends with exactly one of the late
    holder and a reclaim winning, the loser refused, and its final state and history
    those of the winner alone."""
    problems: dict[str, list[str]] = defaultdict(list)
    calls: dict[str, LateCall] = {}
    reclaims: dict[str, list[Reclaim]] = defaultdict(list)
    for report in reports:
        if report.error is not None:  # a late report that raised, or a claim that did
            late = report.worker.startswith(("holder", "late-"))
            rule = "fencing" if late else "claim-complete"
            problems[rule].append(f"worker {report.worker} stopped: {report.error}")
        for call in report.calls:
            calls[call.held.task_id] = call
        for r in report.reclaims:
            reclaims[r.task_id].append(r)
    for h in held:
        call, taken = calls.get(h.task_id), reclaims.get(h.task_id, [])
        try:
            task: Task | None = storage.get(h.task_id)
        except NotFound:
            task = None
        seen = _history(task)
        lease_end = h.lease_expires_at.isoformat()
        who = f"task {h.task_id!r}: holder (token {short(h.token)}, lease to {lease_end})"
        takers = ", ".join(
            f"{r.worker} (token {short(r.token)} at {r.claimed_at.isoformat()})" for r in taken
        )
        if call is None:
            continue  # the holder stopped early: reported above
        if len(taken) > 1:
            problems["one-claim"].append(
                f"{who}; claimed again by {len(taken)} workers: {takers}; {seen}"
            )
            continue
        won = call.accepted
        if h.op == "extend_lease" and won and not call.then_complete:
            renewed = (
                f"{who} extended its lease to {call.extended_to}, then its complete was refused"
            )
            if not taken:
                problems["fencing"].append(f"{renewed} although no claim took the task; {seen}")
                continue
            if call.extended_to is None or taken[0].claimed_at < call.extended_to:
                problems["lease-respected"].append(
                    f"{renewed}: {takers} took the renewed lease before it ran out; {seen}"
                )
                continue
            won = False  # the renewed lease ran out before the reclaim: a fair takeover
        if won and taken:
            first = _accepted_first(task, call)
            if first is False:
                problems["fencing"].append(
                    f"{who}: its {h.op} was accepted after {takers} reclaimed the task; {seen}"
                )
            elif first is True:
                rule, left = _TAKEN_AFTER[h.op]
                problems[rule].append(
                    f"{who}: its {h.op} was accepted (the task {left}), yet {takers} claimed "
                    f"it; {seen}"
                )
            else:  # the history does not say which came first: two holders, either way
                problems["one-claim"].append(
                    f"{who}: its {h.op} was accepted and {takers} claimed the task too (the "
                    f"history does not order the two); {seen}"
                )
            continue
        if not won and not taken:
            problems["fencing"].append(
                f"{who}: its {h.op} was refused (StaleClaim) although no claim took the task; "
                f"{seen}"
            )
            continue
        if taken and not taken[0].completed:
            problems["fencing"].append(
                f"{who}; reclaimed by {takers}, whose complete was refused; {seen}"
            )
            continue
        status, wanted = _expected_end(call if won else None)
        got = [a.outcome for a in task.attempts] if task is not None else None
        if task is None or task.status is not status or got != wanted:
            winner = f"the holder's {h.op}" if won else f"the reclaim by {takers}"
            problems["outcome-recorded"].append(
                f"{who}: {winner} won, so the task should end {status.value} with history "
                f"[{', '.join(o.value for o in wanted)}]; {seen}"
            )
    return dict(problems)


# ---- in spawned processes --------------------------------------------------------------------


def _in_process(
    spec: StorageSpec, worker: str, start: Any, results: Any, side: Callable[[Storage], SideReport]
) -> None:
    """Open the storage, run ``side`` on it, put exactly one report on ``results``
    (whatever happens), close it."""
    try:
        from rdq_compliance.session import open_storage

        storage = open_storage(spec)
    except Exception as exc:
        start.abort()
        results.put(SideReport(worker, error=f"cannot open storage: {type(exc).__name__}: {exc}"))
        return
    try:
        results.put(side(storage))
    finally:
        with contextlib.suppress(Exception):
            storage.close()


def process_late_worker(
    spec: StorageSpec, held: list[Held], index: int, long_lease: timedelta, start: Any, results: Any
) -> None:
    """A late holder in a ``spawn`` process: open, make the late calls, report once."""
    worker = f"late-process-{index} (pid {os.getpid()})"
    _in_process(
        spec, worker, start, results, lambda st: late_calls(st, held, worker, long_lease, start)
    )


def process_reclaim_worker(
    spec: StorageSpec,
    queue: str,
    index: int,
    seed: int,
    long_lease: timedelta,
    deadline_s: float,
    start: Any,
    results: Any,
) -> None:
    """A reclaiming worker in a ``spawn`` process: open, reclaim, report once."""
    worker = f"reclaim-process-{index} (pid {os.getpid()})"

    def side(st: Storage) -> SideReport:
        return reclaim_loop(
            st, queue, worker, seed=seed, max_limit=4, long_lease=long_lease,
            deadline_s=deadline_s, start=start,
        )  # fmt: skip

    _in_process(spec, worker, start, results, side)
