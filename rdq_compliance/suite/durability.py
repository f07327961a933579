"""The durability check (rule ``durability``): acknowledged work survives a kill and restart of
the server. Runner-neutral — :func:`run_durability_check` needs only a
:class:`~rdq_compliance.provision.backend.Server` that can be killed and restarted and a
way to open storage on one namespace — so the conformance suite
(``test_durability.py``) and the kit's own tests call the same code.

**The load.** Worker threads (each with its own storage handle) enqueue fresh tasks,
claim them (a lease far longer than the run, so no claim is ever taken over) and report
outcomes — mostly ``complete``, some ``reschedule`` (the task comes back and is claimed
again) and ``dead_letter`` — in a tight loop, keeping a few claims open at any time.
Every call that *returned* is recorded as acknowledged; a call that raised
``BackendUnavailable`` (the server was down, or its reply was lost) is only counted: it
may or may not have taken effect, and nothing is expected of it.

**The fault.** After :attr:`DurabilityPlan.before_kill` seconds of load the server is
SIGKILLed (``Server.kill``), left down for :attr:`~DurabilityPlan.down` seconds while the
workers keep calling, restarted (``Server.restart``: same address, same data), and the
load runs :attr:`~DurabilityPlan.after_restart` seconds more.

**The check** (:func:`durability_problems`), on a fresh handle after the workers stopped:

- every acknowledged enqueue: the task exists (``get``);
- every acknowledged claim is visible: the task is IN_FLIGHT under that claim (its lease
  expiry is the claim's), or "later": its history has the attempt that claim started
  (an attempt with the claim's ``claimed_at``) — a claim that was lost shows up as a task
  PENDING again, or held by a later claim with no attempt for this one;
- every acknowledged outcome is in the history: an attempt started at its claim, with its
  outcome; a completed task is SUCCEEDED, a dead-lettered one DEAD.

Anything else fails with rule ``durability``, naming the tasks lost. A run that
acknowledged too little before the kill to mean anything is a failure too, never a pass.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rdq_compliance.invariants import MAX_LISTED, close_to, short
from rdq_compliance.provision.backend import Server
from rdq_compliance.rules import message
from rdq_core.errors import BackendUnavailable, NotFound, RdqError
from rdq_core.model import ErrorInfo, NewTask, Outcome, Status, Task
from rdq_core.spi import Storage

__all__ = [
    "OUTLIVES",
    "AckedClaim",
    "AckedOutcome",
    "DurabilityPlan",
    "DurabilityReport",
    "Ledger",
    "durability_problems",
    "run_durability_check",
]

#: A lease no durability run outlives: no claim is ever taken over during the run.
LEASE = timedelta(minutes=30)
#: The shortest lease a durability run is sure not to outlive (its server restart
#: included, on a loaded machine): on a backend whose lease model fixes a shorter one,
#: the test is skipped.
OUTLIVES = timedelta(seconds=60)
ERROR = ErrorInfo("rdq.durability", "failing on purpose")


@dataclass(frozen=True)
class DurabilityPlan:
    """How long each phase lasts, how many workers, and what the run must have done."""

    workers: int = 4
    before_kill: float = 1.5
    down: float = 0.5
    after_restart: float = 0.5
    #: at least this many acknowledged enqueues, claims and outcomes before the kill: the
    #: load runs past ``before_kill`` until it has them, for up to ``most_before_kill``
    #: seconds (a slow or loaded server gets there later; the bar is not lowered)
    least_before_kill: int = 20
    most_before_kill: float = 30.0
    queue: str = "durability"
    seed: int = 5130


@dataclass(frozen=True)
class AckedClaim:
    task_id: str
    token: str
    claimed_at: datetime
    lease_expires_at: datetime
    worker: str
    after_kill: bool


@dataclass(frozen=True)
class AckedOutcome:
    task_id: str
    claimed_at: datetime
    outcome: Outcome
    worker: str
    after_kill: bool


@dataclass
class Ledger:
    """What the workers were told happened (acknowledged), and what they could not know."""

    enqueued: dict[str, bool] = field(default_factory=dict)  # id -> after the kill
    claims: list[AckedClaim] = field(default_factory=list)
    outcomes: list[AckedOutcome] = field(default_factory=list)
    unknown: int = 0
    refused: list[str] = field(default_factory=list)
    killed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def before_kill(self) -> tuple[int, int, int]:
        return (
            sum(1 for after in self.enqueued.values() if not after),
            sum(1 for c in self.claims if not c.after_kill),
            sum(1 for o in self.outcomes if not o.after_kill),
        )


@dataclass
class DurabilityReport:
    ledger: Ledger
    problems: list[str]
    message: str
    origin: str

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        e, c, o = self.ledger.before_kill()
        return (
            f"{len(self.ledger.enqueued)} enqueues, {len(self.ledger.claims)} claims, "
            f"{len(self.ledger.outcomes)} outcomes acknowledged ({e}, {c}, {o} before the "
            f"kill); {self.ledger.unknown} calls with an unknown outcome"
        )


# ---- the load ------------------------------------------------------------------------------


def _worker(
    storage: Storage, plan: DurabilityPlan, name: str, ledger: Ledger, stop: threading.Event
) -> None:
    rng = random.Random(f"{plan.seed}:{name}")
    held: list[AckedClaim] = []
    n = 0
    while not stop.is_set():
        try:
            for _ in range(rng.randint(1, 2)):
                task_id = f"{name}-{n}"
                n += 1
                if storage.enqueue(NewTask(task_id, plan.queue, "durability.h", b"\x00d")):
                    with ledger.lock:
                        ledger.enqueued[task_id] = ledger.killed
                else:
                    with ledger.lock:
                        ledger.refused.append(f"enqueue of the new task {task_id!r} said False")
            for claim in storage.claim_due(plan.queue, rng.randint(1, 3), LEASE):
                acked = AckedClaim(
                    claim.task_id,
                    claim.token,
                    claim.claimed_at,
                    claim.lease_expires_at,
                    name,
                    ledger.killed,
                )
                with ledger.lock:
                    ledger.claims.append(acked)
                held.append(acked)
            while len(held) > 3:
                _report(storage, held.pop(rng.randrange(len(held))), rng, ledger)
        except BackendUnavailable:
            with ledger.lock:
                ledger.unknown += 1
            time.sleep(0.01)
        except RdqError as exc:
            with ledger.lock:
                ledger.refused.append(f"{name}: {type(exc).__name__}: {exc}")
            time.sleep(0.01)


def _report(storage: Storage, claim: AckedClaim, rng: random.Random, ledger: Ledger) -> None:
    roll = rng.random()
    if roll < 0.7:
        storage.complete(claim.task_id, claim.token)
        outcome = Outcome.SUCCESS
    elif roll < 0.85:
        storage.reschedule(claim.task_id, claim.token, timedelta(0), ERROR)
        outcome = Outcome.RETRYABLE_FAILURE
    else:
        storage.dead_letter(claim.task_id, claim.token, ERROR, Outcome.PERMANENT_FAILURE)
        outcome = Outcome.PERMANENT_FAILURE
    with ledger.lock:
        ledger.outcomes.append(
            AckedOutcome(claim.task_id, claim.claimed_at, outcome, claim.worker, ledger.killed)
        )


def run_durability_check(
    server: Server,
    connect: Callable[[], Storage],
    plan: DurabilityPlan | None = None,
) -> DurabilityReport:
    """Load, SIGKILL the server mid-load, restart it, load a little more, check.

    ``connect`` opens a new storage handle on one (empty) namespace; every handle it
    opens is the caller's to close. Raises whatever ``server.kill``/``restart`` raise.
    """
    plan = plan or DurabilityPlan()
    ledger = Ledger()
    stop = threading.Event()
    handles = [connect() for _ in range(plan.workers)]
    threads = [
        threading.Thread(
            target=_worker, args=(h, plan, f"w{i}", ledger, stop), name=f"rdq-durability-w{i}"
        )
        for i, h in enumerate(handles)
    ]
    for t in threads:
        t.start()
    try:
        time.sleep(plan.before_kill)
        give_up = time.monotonic() + max(0.0, plan.most_before_kill - plan.before_kill)
        while time.monotonic() < give_up:
            with ledger.lock:
                if min(ledger.before_kill()) >= plan.least_before_kill:
                    break
            time.sleep(0.05)
        with ledger.lock:
            ledger.killed = True
        server.kill()
        time.sleep(plan.down)
        server.restart()
        time.sleep(plan.after_restart)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    checker = connect()
    problems = durability_problems(checker, ledger, plan)
    origin = getattr(server, "origin", type(server).__name__)
    if problems:
        text = message(
            "durability",
            f"after a SIGKILL and restart of {origin}: " + "; ".join(problems),
        )
    else:
        text = ""
    return DurabilityReport(ledger, problems, text, origin)


# ---- the check -----------------------------------------------------------------------------


def _read(storage: Storage, task_id: str, attempts: int = 50) -> Task | None:
    for i in range(attempts):
        try:
            return storage.get(task_id)
        except NotFound:
            return None
        except BackendUnavailable:
            if i == attempts - 1:
                raise
            time.sleep(0.1)
    return None  # pragma: no cover


def _state(task: Task | None) -> str:
    if task is None:
        return "gone (NotFound)"
    return (
        f"now {task.status.value}, attempt_count {task.attempt_count}, "
        f"{len(task.attempts)} attempt(s) in the history"
    )


def _listed(kind: str, total: int, lost: list[str]) -> str:
    shown = ", ".join(lost[:MAX_LISTED])
    more = f" and {len(lost) - MAX_LISTED} more" if len(lost) > MAX_LISTED else ""
    return f"{len(lost)} of {total} acknowledged {kind} lost: {shown}{more}"


def _held(task: Task, claim: AckedClaim) -> bool:
    """The task is IN_FLIGHT under this claim (its lease is the claim's)."""
    return task.status is Status.IN_FLIGHT and close_to(
        task.lease_expires_at, claim.lease_expires_at
    )


def durability_problems(storage: Storage, ledger: Ledger, plan: DurabilityPlan) -> list[str]:
    """What of the acknowledged work is gone (see the module docstring); ``[]`` if none."""
    ids = set(ledger.enqueued) | {c.task_id for c in ledger.claims}
    tasks = {task_id: _read(storage, task_id) for task_id in sorted(ids)}
    lost_enqueues = [f"task {i!r}" for i, t in sorted(tasks.items()) if t is None]

    lost_claims = []
    for c in ledger.claims:
        task = tasks.get(c.task_id)
        if task is not None and (
            _held(task, c) or any(close_to(a.started_at, c.claimed_at) for a in task.attempts)
        ):
            continue
        lost_claims.append(
            f"task {c.task_id!r} claimed by {c.worker} at {c.claimed_at.isoformat()} "
            f"(token {short(c.token)}), {_state(task)}"
        )

    lost_outcomes = []
    final = {Outcome.SUCCESS: Status.SUCCEEDED, Outcome.PERMANENT_FAILURE: Status.DEAD}
    for o in ledger.outcomes:
        task = tasks.get(o.task_id)
        recorded = task is not None and any(
            close_to(a.started_at, o.claimed_at) and a.outcome is o.outcome for a in task.attempts
        )
        status_ok = task is not None and (o.outcome not in final or task.status is final[o.outcome])
        if recorded and status_ok:
            continue
        lost_outcomes.append(
            f"task {o.task_id!r}: {o.outcome.value} by {o.worker} of the claim at "
            f"{o.claimed_at.isoformat()}, {_state(task)}"
        )

    problems = []
    if lost_enqueues:
        problems.append(_listed("enqueues", len(ledger.enqueued), lost_enqueues))
    if lost_claims:
        problems.append(_listed("claims", len(ledger.claims), lost_claims))
    if lost_outcomes:
        problems.append(_listed("outcomes", len(ledger.outcomes), lost_outcomes))
    least = plan.least_before_kill
    before = ledger.before_kill()
    if min(before) < least:
        problems.append(
            f"the load was too thin to show anything: {before[0]} enqueues, {before[1]} "
            f"claims and {before[2]} outcomes acknowledged before the kill (at least {least} "
            "of each are needed)"
        )
    return problems
