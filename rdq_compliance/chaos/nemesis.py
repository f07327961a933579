"""The nemesis: a seeded fault schedule, and the loop that applies it.

:func:`plan_faults` turns a scenario and a seed into a list of :class:`PlannedFault`
(time in the fault window, kind, target slot, kill point, duration) — a pure function,
the same for the same seed, gated on what the server declares in ``Server.faults``:
a fault the server cannot inject is left out with a note saying why. Server kills and
restarts are planned only when, in addition, the backend declares ``durable``
(:class:`rdq_core.model.Capabilities`): restarting a server that keeps nothing would
lose acknowledged work by design, which the checker would report as lost tasks — not
the bug a campaign looks for. The note then says so, with how durability was decided.

:class:`Nemesis` applies the plan to a live :class:`~rdq_compliance.chaos.fleet.Fleet`
and server, journaling each fault in the harness journal *before* it acts
(``fault`` events, type ``info``; ``redrive`` as invoke → ok/info):

- ``kill`` at ``random``: the harness SIGKILLs the worker at once;
- ``kill`` at a point (``after_claim``, ``in_handler``, ``before_report``,
  ``after_report``): the worker is armed and SIGKILLs itself at the next occurrence (it
  journals ``self_kill``); the harness journals the ``fault`` when it sees the death. A
  worker that has not reached the point within :data:`ARM_TIMEOUT` leases is disarmed
  and SIGKILLed by the harness instead (counted as ``random``, noted);
- ``pause``: SIGSTOP for ``lease * factor`` (longer than the lease), then SIGCONT
  (``resume``): the zombie's late heartbeat and outcome must be refused. The target is
  the planned slot's worker or, if it holds no task right now (by its journal), the next
  worker that does — a pause of an idle worker would test nothing;
- ``kill_server`` then, ``server_down`` seconds later, ``restart_server``;
- ``pause_server`` (the whole server frozen: SIGSTOP of its process group, or
  ``docker pause``) for ``lease * factor``, then ``resume_server``: calls in flight hang
  (no reset, no error), leases run out by the storage clock while nobody can act, and
  after the resume the expired ones are reclaimed while the late reports of their old
  holders must be refused. While the server is frozen, faults that talk to it
  (connection cuts, redrives, a restart) and the progress poll wait for the resume; the
  worker faults go on;
- ``cut_connections``: the server terminates the namespace's sessions;
- ``failover`` (a replicated server only: ``failover`` in ``Server.faults``): the
  replication link is held for ``replica_lag`` seconds (if > 0), the primary SIGKILLed, the
  replica promoted and the server's address moved to it (:meth:`Server.failover`; the
  nemesis loop waits for it, a few seconds at most). Planned while tasks are still
  becoming due, so that the kill lands under write load. Not gated on ``durable``: the
  old primary's data is discarded either way, and what survives is what replication
  carried — which is what the fault measures;
- ``partition`` of one or several worker slots for ``lease * factor``, then ``heal``:
  every packet between those slots' namespaces and the server is dropped both ways (see
  :mod:`rdq_compliance.chaos.partitions`), so their calls hang — no reset, no error —
  while the rest of the fleet goes on and reclaims their expired leases; after the heal
  their late heartbeats and outcomes must be refused. The first slot is the planned one
  or, if its worker runs no handler now, the next one that does. Planned only when the
  campaign built the namespaces (root, ``ip``, ``nft``, a server reached at one TCP
  address); else left out with a note saying why;
- ``loss``, the milder variant: the same, but only ``percent`` % of those slots' packets
  are dropped (TCP retransmits: calls slow down, some past the lease), then ``heal``;
- ``redrive`` every ``redrive_interval`` seconds: the DLQ's tasks, listed by id, are
  redriven by id (so the journal names exactly the tasks redriven).

A killed worker (by the harness or itself) is replaced at once by a fresh process.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rdq_compliance.chaos.events import INFO, INVOKE, OK
from rdq_compliance.chaos.fleet import Fleet, WorkerProc
from rdq_compliance.chaos.journal_observer import LockedJournal, error_text
from rdq_compliance.chaos.scenario import KILL_POINTS, Scenario
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    FAILOVER,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    Server,
)
from rdq_core.model import ByIds, DlqFilter, Task
from rdq_core.spi import Storage

#: An armed worker that has not killed itself after this many leases is killed by us.
ARM_TIMEOUT = 4.0
#: Kinds in the order faults planned for the same instant are applied.
_ORDER = (
    "failover",
    "server_restart",
    "server_pause",
    "cut_connections",
    "partition",
    "loss",
    "pause",
    "kill",
    "redrive",
)
#: Why partitions are left out when the runner built no network for them.
NO_NETWORK = "the campaign built no network namespaces for its workers"
#: Kinds that need the server to answer: held back while it is frozen.
_TALKS_TO_SERVER = frozenset(
    {"failover", "server_restart", "server_pause", "cut_connections", "redrive"}
)


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule: ``at`` seconds into the fault window."""

    at: float
    kind: str  # kill | pause | server_restart | server_pause | cut_connections | partition
    #         | loss | failover | redrive
    slot: int | None = None
    point: str | None = None
    duration: float | None = None
    #: How many consecutive worker slots a partition or a loss affects (from ``slot``).
    width: int | None = None

    def describe(self) -> str:
        bits = [f"{self.at:7.3f}s {self.kind}"]
        if self.slot is not None:
            bits.append(f"slot {self.slot}")
        if self.width is not None and self.width > 1:
            bits.append(f"and the next {self.width - 1}")
        if self.point is not None:
            bits.append(f"at {self.point}")
        if self.duration is not None:
            bits.append(f"for {self.duration:.3f}s")
        return " ".join(bits)


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
    rng = random.Random(f"rdq-nemesis:{scenario.seed}")
    f = scenario.faults
    window = scenario.duration
    start = min(f.warmup, window)
    slots = scenario.workers.count
    lease = scenario.workers.lease
    # Worker faults land while tasks are still becoming due (so every kill point occurs).
    busy = min(window, scenario.spread)
    faults: list[PlannedFault] = []
    skipped: list[str] = []

    def when(end: float) -> float:
        return round(rng.uniform(start, max(start, end)), 6)

    for point in KILL_POINTS:
        for _ in range(f.sigkill.get(point, 0)):
            faults.append(PlannedFault(when(busy * 0.95), "kill", rng.randrange(slots), point))
    for _ in range(f.pauses):
        length = round(lease * rng.uniform(*f.pause_factor), 6)
        faults.append(
            PlannedFault(
                when(min(busy, window - length)), "pause", rng.randrange(slots), None, length
            )
        )
    if f.server_restarts:
        missing = {KILL_SERVER, RESTART_SERVER} - set(supported)
        if missing:
            skipped.append(
                f"server_restart x{f.server_restarts}: skipped, {server_name} does not support "
                + " and ".join(sorted(missing))
            )
        elif not durable:
            why = f" ({durability})" if durability else ""
            skipped.append(
                f"server_restart x{f.server_restarts}: skipped, the backend does not declare "
                f"durable{why}: a kill and restart of {server_name} would lose acknowledged "
                "work by design"
            )
        else:
            for _ in range(f.server_restarts):
                faults.append(
                    PlannedFault(
                        when(max(start, window - f.server_down - 2 * lease)),
                        "server_restart",
                        None,
                        None,
                        f.server_down,
                    )
                )
    if f.server_pauses:
        if PAUSE_SERVER not in supported:
            skipped.append(
                f"server_pause x{f.server_pauses}: skipped, {server_name} does not support "
                "pause_server"
            )
        else:
            for _ in range(f.server_pauses):
                length = round(lease * rng.uniform(*f.server_pause_factor), 6)
                faults.append(
                    PlannedFault(
                        when(max(start, window - length - 2 * lease)),
                        "server_pause",
                        None,
                        None,
                        length,
                    )
                )
    if f.connection_cuts:
        if CUT_CONNECTIONS not in supported:
            skipped.append(
                f"cut_connections x{f.connection_cuts}: skipped, {server_name} does not support "
                "cut_connections"
            )
        else:
            for _ in range(f.connection_cuts):
                faults.append(PlannedFault(when(window * 0.95), "cut_connections"))
    faults += _plan_failovers(scenario, supported, server_name, when, busy, skipped)
    if f.partitions:
        if no_network is not None:
            skipped.append(f"partition x{f.partitions}: skipped, {no_network}")
        else:
            for _ in range(f.partitions):
                length = round(lease * rng.uniform(*f.partition_factor), 6)
                faults.append(
                    PlannedFault(
                        when(min(busy, window - length)),
                        "partition",
                        rng.randrange(slots),
                        None,
                        length,
                        f.partition_workers,
                    )
                )
    if f.losses:
        if no_network is not None:
            skipped.append(f"loss x{f.losses}: skipped, {no_network}")
        else:
            for _ in range(f.losses):
                length = round(lease * rng.uniform(*f.loss_factor), 6)
                faults.append(
                    PlannedFault(
                        when(min(busy, window - length)),
                        "loss",
                        rng.randrange(slots),
                        None,
                        length,
                        f.loss_workers,
                    )
                )
    if f.redrive_interval:
        k = 1
        while k * f.redrive_interval <= window:
            faults.append(PlannedFault(round(k * f.redrive_interval, 6), "redrive"))
            k += 1
    faults.sort(key=lambda x: (x.at, _ORDER.index(x.kind), x.slot or 0))
    return FaultPlan(tuple(faults), tuple(skipped))


def _plan_failovers(
    scenario: Scenario,
    supported: frozenset[str] | set[str],
    server_name: str,
    when: Callable[[float], float],
    busy: float,
    skipped: list[str],
) -> list[PlannedFault]:
    """``[faults.failover]``: ``count`` failovers while tasks are still becoming due."""
    f = scenario.faults
    if not f.failovers:
        return []
    if FAILOVER not in supported:
        skipped.append(
            f"failover x{f.failovers}: skipped, {server_name} does not support failover (it "
            "has no replica: start a replicated server, e.g. --rdq-option pg_replica=async "
            "or redis_replica=async)"
        )
        return []
    return [
        PlannedFault(when(busy * 0.8), "failover", None, None, f.failover_lag)
        for _ in range(f.failovers)
    ]


@dataclass
class Counters:
    """What the nemesis did (and the fleet suffered)."""

    kills: Counter[str] = field(default_factory=Counter)
    pauses: int = 0
    resumes: int = 0
    server_kills: int = 0
    server_restarts: int = 0
    server_pauses: int = 0
    server_resumes: int = 0
    cuts: int = 0
    connections_cut: int = 0
    failovers: int = 0
    redrives: int = 0
    redriven_tasks: int = 0
    partitions: int = 0
    partitioned_workers: int = 0
    losses: int = 0
    heals: int = 0
    #: Workers started under a skewed clock (a respawn in a skewed slot counts again).
    clock_skews: int = 0
    #: The skew of each skewed slot (``"+4.213s, rate x1.0420"``), by slot.
    skewed_slots: dict[int, str] = field(default_factory=dict)
    arm_timeouts: int = 0
    unexpected_exits: int = 0
    spawned: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "kills": dict(sorted(self.kills.items())),
            "total_kills": self.total_kills,
            "pauses": self.pauses,
            "resumes": self.resumes,
            "server_kills": self.server_kills,
            "server_restarts": self.server_restarts,
            "server_pauses": self.server_pauses,
            "server_resumes": self.server_resumes,
            "connection_cuts": self.cuts,
            "connections_cut": self.connections_cut,
            "failovers": self.failovers,
            "redrives": self.redrives,
            "redriven_tasks": self.redriven_tasks,
            "partitions": self.partitions,
            "partitioned_workers": self.partitioned_workers,
            "losses": self.losses,
            "heals": self.heals,
            "clock_skews": self.clock_skews,
            "skewed_slots": {str(k): v for k, v in sorted(self.skewed_slots.items())},
            "arm_timeouts": self.arm_timeouts,
            "unexpected_exits": self.unexpected_exits,
            "workers_spawned": self.spawned,
        }


class RunTracker:
    """Which workers are running a handler right now, read from their journals' tails."""

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._open: dict[str, set[str]] = {}

    def open_runs(self, journal: Path, proc: str) -> int:
        runs = self._open.setdefault(proc, set())
        try:
            with open(journal, "rb") as fh:
                fh.seek(self._offsets.get(proc, 0))
                data = fh.read()
        except OSError:
            return 0
        end = data.rfind(b"\n") + 1
        self._offsets[proc] = self._offsets.get(proc, 0) + end
        for raw in data[:end].splitlines():
            if b'"op":"run"' not in raw:
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            token = str(event.get("token"))
            if event.get("type") == INVOKE:
                runs.add(token)
            else:
                runs.discard(token)
        return len(runs)


class Partitioner(Protocol):
    """What the nemesis needs of a network to partition worker slots from the server."""

    def partition(self, slots: Sequence[int]) -> None: ...

    def lose(self, slots: Sequence[int]) -> None: ...

    def heal(self, slots: Sequence[int]) -> None: ...


@dataclass
class _Pending:
    due: float
    action: Callable[[], bool]  # returns False to be retried at the next tick
    what: str


class Nemesis:
    """Applies a :class:`FaultPlan` to a fleet and a server, step by step (:meth:`tick`)."""

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
        self.fleet = fleet
        self.server = server
        self.storage = storage
        self.namespace = namespace
        self.journal = journal
        self.counters = counters if counters is not None else Counters()
        self.clock = clock
        self.queue = scenario.workload.queue
        self.lease = scenario.workers.lease
        self._todo = list(plan.faults)
        self._pending: list[_Pending] = []
        self._server_down = False
        self._server_frozen = False
        self._draining = False
        self._runs = RunTracker()
        self.network = network
        self._cut_slots: set[int] = set()
        self.started: float | None = None

    # ---- the loop ---------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Every planned fault applied and settled (no pause, arm or restart pending)."""
        return not self._todo and not self._pending and not self._armed()

    @property
    def server_frozen(self) -> bool:
        """The server is paused right now: a call to it would hang until the resume."""
        return self._server_frozen

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
        self._check_arm_timeouts(now)
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
            if on_tick is not None and not self._server_frozen:
                on_tick()
            time.sleep(interval)
        return True

    def stop_faults(self) -> None:
        """Start of the drain: no more faults or redrives; disarm, resume, restart now."""
        self._draining = True
        self._todo.clear()
        for w in self.fleet.workers():
            if w.armed is not None and w.running:
                self.fleet.arm(w, "none")
        for pending in list(self._pending):
            if pending.action():
                self._pending.remove(pending)
            else:
                pending.due = self.clock()  # retried at the drain's next tick
        self.supervise()

    def supervise(self) -> None:
        """Replace every worker that ended by itself (a self-kill, or a crash)."""
        for ex in self.fleet.exited():
            w = ex.worker
            if ex.armed is not None and ex.returncode == -9:
                self._journal_fault("kill", w, point=ex.armed, by="self")
                self.counters.kills[ex.armed] += 1
            else:
                self.counters.unexpected_exits += 1
                tail = w.process.log_tail(5)
                self.counters.notes.append(
                    f"worker {w.name} (pid {w.pid}) exited unexpectedly with status "
                    f"{ex.returncode}" + (f": {tail}" if tail else "")
                )
            self._respawn(w)

    # ---- applying ---------------------------------------------------------------------------

    def _apply(self, fault: PlannedFault) -> bool:
        if fault.kind in _TALKS_TO_SERVER and self._server_frozen:
            return False
        if fault.kind == "kill":
            return self._kill(fault)
        if fault.kind == "pause":
            return self._pause(fault)
        if fault.kind == "server_restart":
            return self._kill_server(fault)
        if fault.kind == "server_pause":
            return self._pause_server(fault)
        if fault.kind == "cut_connections":
            self._cut()
            return True
        if fault.kind == "failover":
            return self._failover(fault)
        if fault.kind == "redrive":
            self.redrive()
            return True
        if fault.kind in ("partition", "loss"):
            return self._partition(fault)
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _target(self, slot: int | None) -> WorkerProc | None:
        """The worker in ``slot``, or the next free one (not paused, armed or dead)."""
        n = self.fleet.size
        first = slot or 0
        for i in range(n):
            w = self.fleet.in_slot((first + i) % n)
            if w is not None and w.running and not w.paused and w.armed is None:
                return w
        return None

    def _kill(self, fault: PlannedFault) -> bool:
        w = self._target(fault.slot)
        if w is None:
            return False
        if fault.point in (None, "random"):
            self._journal_fault("kill", w)
            self.fleet.kill(w)
            self.counters.kills["random"] += 1
            self._spawn_in(w.slot)
        else:
            self.fleet.arm(w, fault.point)
        return True

    def _check_arm_timeouts(self, now: float) -> None:
        limit = ARM_TIMEOUT * self.lease
        for w in self.fleet.workers():
            if w.armed is None or now - w.armed_at < limit or not w.running:
                continue
            point = w.armed
            self.fleet.arm(w, "none")
            time.sleep(0.01)
            if not w.running:
                continue  # it fired meanwhile: supervise() journals it
            self.counters.arm_timeouts += 1
            self.counters.notes.append(
                f"{w.name} did not reach {point} within {limit:.1f}s; killed by the harness"
            )
            self._journal_fault("kill", w, armed=point)
            self.fleet.kill(w)
            self.counters.kills["random"] += 1
            self._spawn_in(w.slot)

    def _armed(self) -> bool:
        return any(w.armed is not None and w.running for w in self.fleet.workers())

    def _busy_target(self, slot: int | None) -> WorkerProc | None:
        """Like :meth:`_target`, preferring a worker that is running a handler."""
        first = self._target(slot)
        if first is None:
            return None
        n = self.fleet.size
        for i in range(n):
            w = self._target((first.slot + i) % n)
            if w is None:
                continue
            journal = self.fleet.history_dir / f"{w.name}.jsonl"
            if self._runs.open_runs(journal, w.name):
                return w
        return first

    def _pause(self, fault: PlannedFault) -> bool:
        w = self._busy_target(fault.slot)
        if w is None:
            return False
        assert fault.duration is not None
        self._journal_fault("pause", w, duration=fault.duration)
        self.fleet.pause(w)
        self.counters.pauses += 1

        def resume() -> bool:
            if w.paused:
                self.fleet.resume(w)
                self._journal_fault("resume", w)
                self.counters.resumes += 1
            return True

        self._pending.append(_Pending(self.clock() + fault.duration, resume, f"resume {w.name}"))
        return True

    def _kill_server(self, fault: PlannedFault) -> bool:
        if self._server_down:
            return False
        self.journal.write(INFO, "fault", kind="kill_server", target="server")
        try:
            self.server.kill()
        except Exception as exc:
            self.counters.notes.append(f"kill_server failed: {error_text(exc)}")
            return True
        self.counters.server_kills += 1
        self._server_down = True
        attempts = [0]

        def restart() -> bool:
            if not self._server_down:
                return True
            try:
                self.server.restart()
            except Exception as exc:
                attempts[0] += 1
                self.counters.notes.append(f"restart_server failed: {error_text(exc)}")
                return attempts[0] >= 5
            self._server_down = False
            self.journal.write(INFO, "fault", kind="restart_server", target="server")
            self.counters.server_restarts += 1
            return True

        self._pending.append(
            _Pending(self.clock() + (fault.duration or 1.0), restart, "restart server")
        )
        return True

    def _pause_server(self, fault: PlannedFault) -> bool:
        if self._server_down:
            return False
        assert fault.duration is not None
        self.journal.write(
            INFO, "fault", kind="pause_server", target="server", duration=fault.duration
        )
        try:
            self.server.pause()
        except Exception as exc:
            self.counters.notes.append(f"pause_server failed: {error_text(exc)}")
            return True
        self.counters.server_pauses += 1
        self._server_frozen = True

        def resume() -> bool:
            if not self._server_frozen:
                return True
            try:
                self.server.resume()
            except Exception as exc:
                self.counters.notes.append(f"resume_server failed: {error_text(exc)}")
                return False  # never leave the server frozen: retried at the next tick
            self._server_frozen = False
            self.journal.write(INFO, "fault", kind="resume_server", target="server")
            self.counters.server_resumes += 1
            return True

        self._pending.append(_Pending(self.clock() + fault.duration, resume, "resume server"))
        return True

    def _failover(self, fault: PlannedFault) -> bool:
        if self._server_down:
            return False
        lag = fault.duration or 0.0
        self.journal.write(INFO, "fault", kind="failover", target="server", replica_lag=lag)
        try:
            promoted = self.server.failover(lag)
        except Exception as exc:
            self.counters.notes.append(f"failover failed: {error_text(exc)}")
            return True
        self.journal.write(INFO, "fault", kind="promoted", target="server", promoted=promoted)
        self.counters.failovers += 1
        return True

    def _partition(self, fault: PlannedFault) -> bool:
        """Cut ``fault.width`` slots off the server (``partition``) or make them lose
        packets (``loss``), the first running a handler if one does; heal them
        ``fault.duration`` seconds later (or at the drain)."""
        kind = fault.kind
        if self.network is None:
            self.counters.notes.append(f"{kind}: skipped, no network to partition")
            return True
        busy = self._busy_target(fault.slot)
        first = busy.slot if busy is not None else (fault.slot or 0)
        n = self.fleet.size
        slots = sorted({(first + i) % n for i in range(min(fault.width or 1, n))})
        if self._cut_slots & set(slots):
            return False  # still cut off by an earlier partition: try again later
        assert fault.duration is not None
        names = [w.name for s in slots if (w := self.fleet.in_slot(s)) is not None]
        extra: dict[str, object] = {}
        if kind == "loss":
            extra["percent"] = self.scenario.faults.loss_percent
        self.journal.write(
            INFO, "fault", kind=kind, target=",".join(names), targets=names,
            slots=slots, duration=fault.duration, **extra,
        )  # fmt: skip
        try:
            if kind == "loss":
                self.network.lose(slots)
            else:
                self.network.partition(slots)
        except Exception as exc:
            self.counters.notes.append(f"{kind} of slots {slots} failed: {error_text(exc)}")
            return True
        self._cut_slots |= set(slots)
        if kind == "loss":
            self.counters.losses += 1
        else:
            self.counters.partitions += 1
            self.counters.partitioned_workers += len(slots)

        def heal() -> bool:
            assert self.network is not None
            try:
                self.network.heal(slots)
            except Exception as exc:
                self.counters.notes.append(f"heal of slots {slots} failed: {error_text(exc)}")
                return False  # never leave a slot cut off: retried at the next tick
            self._cut_slots -= set(slots)
            now = [w.name for s in slots if (w := self.fleet.in_slot(s)) is not None]
            self.journal.write(
                INFO, "fault", kind="heal", target=",".join(now), targets=now, slots=slots
            )
            self.counters.heals += 1
            return True

        self._pending.append(_Pending(self.clock() + fault.duration, heal, f"heal {slots}"))
        return True

    def _cut(self) -> None:
        try:
            n = self.server.cut_connections(self.namespace)
        except Exception as exc:
            self.counters.notes.append(f"cut_connections failed: {error_text(exc)}")
            return
        self.journal.write(INFO, "fault", kind="cut_connections", target="server", count=n)
        self.counters.cuts += 1
        self.counters.connections_cut += n

    def redrive(self) -> int:
        """Redrive every task of the DLQ now (by id); journal it; how many were redriven."""
        try:
            ids = dlq_ids(self.storage, self.queue)
        except Exception as exc:
            self.counters.notes.append(f"redrive: listing the DLQ failed: {error_text(exc)}")
            return 0
        if not ids:
            return 0
        self.journal.write(INVOKE, "redrive", tasks=ids)
        try:
            n = self.storage.redrive(self.queue, ByIds(ids))
        except Exception as exc:
            self.journal.write(INFO, "redrive", tasks=ids, error=error_text(exc))
            return 0
        self.journal.write(OK, "redrive", tasks=ids, count=n)
        self.counters.redrives += 1
        self.counters.redriven_tasks += n
        if n != len(ids):
            self.counters.notes.append(f"redrive of {len(ids)} dead tasks redrove {n}")
        return n

    # ---- helpers ----------------------------------------------------------------------------

    def _journal_fault(self, kind: str, w: WorkerProc, **extra: object) -> None:
        self.journal.write(INFO, "fault", kind=kind, target=w.name, target_pid=w.pid, **extra)

    def _respawn(self, w: WorkerProc) -> None:
        self.fleet.retire(w)
        self._spawn_in(w.slot)

    def _spawn_in(self, slot: int) -> None:
        try:
            self.fleet.spawn(slot)
            self.counters.spawned += 1
        except Exception as exc:
            self.counters.notes.append(f"could not start a worker in slot {slot}: {exc}")


def dlq_ids(storage: Storage, queue: str) -> list[str]:
    """Ids of every task in ``queue``'s DLQ (paging through it)."""
    return [t.id for t in dlq_tasks(storage, queue)]


def dlq_tasks(storage: Storage, queue: str, page: int = 100) -> list[Task]:
    """Every task of ``queue``'s DLQ, oldest dead-letter first (paging through it)."""
    out: list[Task] = []
    cursor: str | None = None
    while True:
        result = storage.dlq_list(queue, DlqFilter(everything=True), cursor, page)
        out.extend(result.tasks)
        cursor = result.next_cursor
        if cursor is None:
            return out
