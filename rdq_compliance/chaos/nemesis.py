"""The nemesis: a seeded fault schedule, and the loop that applies it.

:func:`plan_faults` turns a scenario and a seed into a list of :class:`PlannedFault`
(time in the fault window, kind, target slot, kill point, duration) — a pure function,
the same for the same seed. Each fault family of the scenario
(:mod:`rdq_compliance.chaos.faults`) plans its own faults in turn, drawing from one
seeded generator, gated on what the server declares in ``Server.faults`` (and, for a
server kill, on the backend's ``durable``; for a partition, on the network the runner
built): a fault that cannot be injected is left out with a note saying why. Faults due
at the same instant are applied in the order of their kinds' ranks.

:class:`Nemesis` applies the plan to a live :class:`~rdq_compliance.chaos.fleet.Fleet`
and server: at each :meth:`~Nemesis.tick` it replaces the workers that died, runs the
pending actions now due (a resume, a restart, a heal: retried at the next tick while
they fail), and hands each fault now due to its family, which journals it in the harness
journal *before* it acts (``fault`` events, type ``info``) and counts it. A fault whose
target is busy (no free worker, a slot still cut off, the server still down) waits for a
later tick; while the server is frozen, faults that talk to it wait for the resume. What
each family's faults do is said in its module (``process``, ``server``, ``clock_skew``,
``connections``, ``failover``, ``network``, ``redrive``).

At the drain (:meth:`~Nemesis.stop_faults`) no more faults are applied; every pending
action is run now (paused workers resumed, a killed server restarted, partitions
healed), and each family undoes what it still has armed.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rdq_compliance.chaos.events import INFO, INVOKE, OK
from rdq_compliance.chaos.faults.counters import Counters
from rdq_compliance.chaos.faults.family import (
    Counts,
    FaultFamily,
    Partitioner,
    PlanContext,
    PlannedFault,
)
from rdq_compliance.chaos.faults.network import NO_NETWORK
from rdq_compliance.chaos.fleet import Fleet, WorkerProc
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.scenario import Scenario
from rdq_compliance.provision.backend import Server
from rdq_core.spi import Storage

__all__ = [
    "NO_NETWORK",
    "Counters",
    "FaultPlan",
    "Nemesis",
    "Partitioner",
    "PlannedFault",
    "RunTracker",
    "plan_faults",
]

S = TypeVar("S")
C = TypeVar("C", bound=Counts)


@dataclass(frozen=True)
class FaultPlan:
    faults: tuple[PlannedFault, ...]
    #: Faults the scenario asked for but the server cannot inject, with the reason.
    skipped: tuple[str, ...] = ()


def plan_faults(
    scenario: Scenario,
    supported: frozenset[str] | set[str],
    server_name: str = "the server",
    *,
    durable: bool = False,
    durability: str = "",
    no_network: str | None = NO_NETWORK,
) -> FaultPlan:
    """The fault schedule of ``scenario`` for its seed (deterministic).

    ``supported`` are the server's faults (``Server.faults``); ``durable`` whether the
    backend declares durability (``Capabilities.durable``; ``durability`` says why, for
    the note): without it no server kill or restart is planned. ``no_network`` says why
    worker partitions cannot be made (``None``: the runner built their network).
    """
    faults = scenario.faults
    window = scenario.duration
    ctx = PlanContext(
        rng=random.Random(f"rdq-nemesis:{scenario.seed}"),
        start=min(faults.warmup, window),
        window=window,
        # Worker faults land while tasks are still becoming due (so every kill point occurs).
        busy=min(window, scenario.spread),
        slots=scenario.workers.count,
        lease=scenario.workers.lease,
        supported=frozenset(supported),
        server_name=server_name,
        durable=durable,
        durability=durability,
        no_network=no_network,
    )
    planned: list[PlannedFault] = []
    for family in faults.families:
        planned += family.plan(faults.of(family), ctx)
    families = faults.families
    planned.sort(key=lambda x: (x.at, families.kind(x.kind)[1].rank, x.slot or 0))
    return FaultPlan(tuple(planned), tuple(ctx.skipped))


class RunTracker:
    """Which workers are running a handler right now, read from their journals' tails."""

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._open: dict[str, dict[str, str]] = {}

    def open_runs(self, journal: Path, proc: str) -> int:
        return len(self.held(journal, proc))

    def held(self, journal: Path, proc: str) -> dict[str, str]:
        """The handlers ``proc`` is running: token -> task id."""
        runs = self._open.setdefault(proc, {})
        for event in _new_events(journal, proc, self._offsets, b'"op":"run"'):
            token = str(event.get("token"))
            if event.get("type") == INVOKE:
                runs[token] = str(event.get("task"))
            else:
                runs.pop(token, None)
        return runs


class LeaseTracker:
    """The lease expiry (µs, by the storage's clock) each claim token of a worker was last
    given, by a claim or a heartbeat, read from the worker's journal."""

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self.expiry: dict[str, int] = {}

    def update(self, journal: Path, proc: str) -> None:
        for event in _new_events(journal, proc, self._offsets, b'"lease_expires_at"'):
            if event.get("type") != OK:
                continue
            stamped = event.get("claims") if event.get("op") == "claim" else [event]
            for item in stamped or ():
                if isinstance(item, dict) and isinstance(item.get("lease_expires_at"), int):
                    self.expiry[str(item.get("token"))] = item["lease_expires_at"]


class ClaimTracker:
    """The newest claim token of every task, read from all the workers' journals."""

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self.latest: dict[str, str] = {}
        self._stamp: dict[str, Any] = {}  # task -> claimed_at of its newest claim read

    def update(self, history_dir: Path) -> None:
        """Read what the journals added; per task, the claim stamped latest by the storage
        (``claimed_at``) wins, whichever journal was read last."""
        for journal in sorted(history_dir.glob("w*.jsonl")):
            for event in _new_events(journal, journal.stem, self._offsets, b'"op":"claim"'):
                if event.get("type") != OK:
                    continue
                for claim in event.get("claims") or ():
                    if isinstance(claim, dict) and "task" in claim:
                        task, at = str(claim["task"]), claim.get("claimed_at")
                        seen = self._stamp.get(task)
                        if seen is not None and at is not None and at < seen:
                            continue
                        self._stamp[task] = at
                        self.latest[task] = str(claim.get("token"))


def _new_events(
    journal: Path, proc: str, offsets: dict[str, int], needle: bytes
) -> list[dict[str, Any]]:
    """The whole lines written to ``journal`` since the last look that hold ``needle``."""
    try:
        with open(journal, "rb") as fh:
            fh.seek(offsets.get(proc, 0))
            data = fh.read()
    except OSError:
        return []
    end = data.rfind(b"\n") + 1
    offsets[proc] = offsets.get(proc, 0) + end
    out = []
    for raw in data[:end].splitlines():
        if needle not in raw:
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


@dataclass
class _Pending:
    due: float
    action: Callable[[], bool]  # returns False to be retried at the next tick
    what: str


class Nemesis:
    """Applies a :class:`FaultPlan` to a fleet and a server, step by step (:meth:`tick`).

    It is the context its fault families apply their faults with
    (:class:`~rdq_compliance.chaos.faults.family.NemesisContext`): the fleet, the
    server, the journal, the counters, the pending actions (:meth:`later`) and the
    targeting (:meth:`target`, :meth:`busy_target`)."""

    def __init__(
        self,
        plan: FaultPlan,
        scenario: Scenario,
        fleet: Fleet,
        server: Server,
        storage: Storage,
        namespace: str,
        journal: LockedJournal,
        counters: Counters | None = None,
        clock: Callable[[], float] = time.monotonic,
        network: Partitioner | None = None,
    ) -> None:
        self.plan = plan
        self.scenario = scenario
        self.families = scenario.faults.families
        self.fleet = fleet
        self.server = server
        self.storage = storage
        self.namespace = namespace
        self.journal = journal
        self.counters = counters if counters is not None else Counters(self.families)
        self.clock = clock
        self.queue = scenario.workload.queue
        self.lease = scenario.workers.lease
        self.network = network
        #: The server is killed (not restarted yet) / paused right now: a call to a
        #: frozen server would hang until the resume.
        self.server_down = False
        self.server_frozen = False
        self.started: float | None = None
        self._todo = list(plan.faults)
        self._pending: list[_Pending] = []
        self._draining = False
        self._runs = RunTracker()
        self._claims = ClaimTracker()
        self._leases = LeaseTracker()
        self._states = {family.name: family.new_state() for family in self.families}

    # ---- the loop ---------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Every planned fault applied and settled (no pause, arm or restart pending)."""
        return (
            not self._todo
            and not self._pending
            and all(family.settled(self) for family in self.families)
        )

    def start(self) -> None:
        self.started = self.clock()

    def tick(self) -> None:
        """Replace dead workers, settle pending actions, apply the faults now due."""
        assert self.started is not None, "start() first"
        now = self.clock()
        self.supervise()
        for pending in [p for p in self._pending if p.due <= now]:
            if pending.action():
                self._pending.remove(pending)
            else:
                pending.due = now + 0.5
        for family in self.families:
            family.tick(self, now)
        if self._draining:
            return
        elapsed = now - self.started
        due = [f for f in self._todo if f.at <= elapsed]
        for fault in due:
            if self._apply(fault):
                self._todo.remove(fault)
            # else: no free target, or the server is frozen: try again at the next tick

    def run(
        self, stop_at: float, on_tick: Callable[[], None] | None = None, interval: float = 0.02
    ) -> bool:
        """Tick until the plan is done (True) or ``stop_at`` (monotonic) passes (False)."""
        if self.started is None:
            self.start()
        while not self.finished:
            if self.clock() >= stop_at:
                return False
            self.tick()
            if on_tick is not None and not self.server_frozen:
                on_tick()
            time.sleep(interval)
        return True

    def stop_faults(self) -> None:
        """Start of the drain: no more faults or redrives; disarm, resume, restart now."""
        self._draining = True
        self._todo.clear()
        for family in self.families:
            family.drain(self)
        for pending in list(self._pending):
            if pending.action():
                self._pending.remove(pending)
            else:
                pending.due = self.clock()  # retried at the drain's next tick
        self.supervise()

    def supervise(self) -> None:
        """Replace every worker that ended by itself (a self-kill, or a crash); journal
        a host the launcher lost (its workers are replaced on the hosts left)."""
        lost: dict[str, list[str]] = {}
        for host in self.fleet.lost_hosts():
            names = [w.name for w in self.fleet.workers() if w.host == host]
            lost[host] = names
            self.journal.write(INFO, "fault", kind="host-lost", target=host, targets=names)
            self.counters.notes.append(
                f"host {host} was lost mid-campaign (its connection dropped); its workers "
                f"{names} were replaced on the hosts left"
            )
        for ex in self.fleet.exited():
            w = ex.worker
            if w.host in lost:
                self._respawn(w)
                continue
            if not any(family.exited(self, ex) for family in self.families):
                self.counters.unexpected_exits += 1
                tail = w.log_tail(5)
                self.counters.notes.append(
                    f"worker {w.name} (pid {w.pid}) exited unexpectedly with status "
                    f"{ex.returncode}" + (f": {tail}" if tail else "")
                )
            self._respawn(w)

    def _apply(self, fault: PlannedFault) -> bool:
        family, kind = self.families.kind(fault.kind)
        if kind.talks_to_server and (self.server_frozen or self.server_down):
            return False  # held until the server answers again (a later tick)
        return family.apply(fault, self)

    # ---- what a family applies its faults with ------------------------------------------

    def settings(self, family: FaultFamily[S, Any]) -> S:
        return self.scenario.faults.of(family)

    def counts(self, family: FaultFamily[Any, C]) -> C:
        return self.counters.of(family)

    def state(self, family: FaultFamily[Any, Any]) -> Any:
        return self._states[family.name]

    def note(self, text: str) -> None:
        self.counters.notes.append(text)

    def later(self, delay: float, action: Callable[[], bool], what: str) -> None:
        """Run ``action`` in ``delay`` seconds (or at the drain); while it returns False,
        again at the next tick."""
        self._pending.append(_Pending(self.clock() + delay, action, what))

    def target(self, slot: int | None) -> WorkerProc | None:
        """The worker in ``slot``, or the next free one (not paused, armed or dead)."""
        n = self.fleet.size
        first = slot or 0
        for i in range(n):
            w = self.fleet.in_slot((first + i) % n)
            if w is not None and w.running and not w.paused and w.armed is None:
                return w
        return None

    def busy_target(self, slot: int | None) -> WorkerProc | None:
        """Like :meth:`target`, preferring a worker that is running a handler."""
        first = self.target(slot)
        if first is None:
            return None
        n = self.fleet.size
        for i in range(n):
            w = self.target((first.slot + i) % n)
            if w is None:
                continue
            journal = self.fleet.journal_path(w)
            if self._runs.open_runs(journal, w.name):
                return w
        return first

    @property
    def draining(self) -> bool:
        return self._draining

    def held_claims(self, w: WorkerProc) -> dict[str, str]:
        """The claims ``w`` is running a handler for, by its journal: token -> task id."""
        return dict(self._runs.held(self.fleet.journal_path(w), w.name))

    def lease_expiry(self, w: WorkerProc, tokens: Iterable[str]) -> float | None:
        """The earliest lease expiry (epoch seconds, storage clock) of ``w``'s claims
        ``tokens``, by its journal; ``None`` when none is known."""
        self._leases.update(self.fleet.journal_path(w), w.name)
        known = [self._leases.expiry[t] for t in tokens if t in self._leases.expiry]
        return min(known) / 1e6 if known else None

    def reclaimed(self, held: dict[str, str]) -> bool:
        """Whether another claim of one of these tasks has been made since (by the
        workers' journals)."""
        self._claims.update(self.fleet.history_dir)
        return any(self._claims.latest.get(task, token) != token for token, task in held.items())

    def journal_fault(self, kind: str, w: WorkerProc, **extra: object) -> None:
        self.journal.write(INFO, "fault", kind=kind, target=w.name, target_pid=w.pid, **extra)

    def spawn_in(self, slot: int) -> None:
        try:
            self.fleet.spawn(slot)
            self.counters.spawned += 1
        except Exception as exc:
            self.counters.notes.append(f"could not start a worker in slot {slot}: {exc}")

    def _respawn(self, w: WorkerProc) -> None:
        self.fleet.retire(w)
        self.spawn_in(w.slot)
