"""Worker process faults: SIGKILL at a chosen point, SIGSTOP past the lease.

``[faults.sigkill]`` gives how many kills at each point of :data:`KILL_POINTS`
(``in_handler = 2``); ``[faults.pause]`` gives ``count`` pauses, each ``lease * factor``
long (``factor``: a number or ``[min, max]``, > 1: past the lease; default ``[2, 3]``).
Both land while tasks are still becoming due (so every kill point occurs):

- ``kill`` at ``random``: the harness SIGKILLs the worker at once;
- ``kill`` at a point (``after_claim``, ``in_handler``, ``before_report``,
  ``after_report``): the worker is armed and SIGKILLs itself at the next occurrence (it
  journals ``self_kill``); the harness journals the ``fault`` when it sees the death. A
  worker that has not reached the point within :data:`ARM_TIMEOUT` leases is disarmed
  and SIGKILLed by the harness instead (counted as ``random``, noted);
- ``pause``: SIGSTOP for ``lease * factor`` (longer than the lease), then SIGCONT
  (``resume``): the zombie's late heartbeat and outcome must be refused. The target is
  the planned slot's worker or, if it holds no task right now (by its journal), the next
  worker that does — a pause of an idle worker would test nothing. For the same reason
  the resume waits, up to :data:`EXTEND_UP_TO` times the planned length, until another
  worker has claimed one of the tasks the paused one was running (by the journals): on a
  loaded machine the other workers may be seconds behind the due work, and a worker
  resumed before anyone reclaimed its task is no zombie (counted as
  ``pauses_extended``; at the drain it is resumed at once);
- ``pause_near_lease`` (``[faults.pause_near_lease]``: ``count``, ``factor`` drawn
  *around* 1, default ``[0.9, 1.4]``): a busy worker SIGSTOPped until ``lease * factor``
  after its held lease was last stamped (the claim's or the heartbeat's
  ``lease_expires_at`` in its journal, minus the lease: factor 1 wakes it at the
  expiry), and resumed on time, never held for a reclaim; without a stamp in its
  journal, the pause lasts ``lease * factor``. It wakes while the other workers are
  reclaiming the same tasks. Its outcome,
  its heartbeat and their reclaim race (rule ``fencing``: the holder may still report while
  nobody has reclaimed; after the reclaim it is refused), where a pause well past the lease
  only ever meets an already reclaimed task.

A killed worker (by the harness or itself) is replaced at once by a fresh process. At
the drain, armed workers are disarmed and paused ones resumed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rdq_compliance.chaos.faults.family import (
    Counts,
    FaultFamily,
    Kind,
    Legend,
    Mark,
    NemesisContext,
    PlanContext,
    PlannedFault,
    Row,
    Style,
    TimelineDraft,
)
from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.faults.windows import WorkerSpan

if TYPE_CHECKING:
    from rdq_compliance.chaos.fleet import Exit

#: The moments at which a worker can be SIGKILLed. ``random`` is a SIGKILL from the
#: harness at an arbitrary moment; the others are self-kills of the worker at the next
#: occurrence of that point (see :mod:`rdq_compliance.chaos.worker_main`).
KILL_POINTS: tuple[str, ...] = (
    "after_claim",
    "in_handler",
    "before_report",
    "after_report",
    "random",
)
#: The ``point`` of a pause drawn around the lease (``[faults.pause_near_lease]``).
NEAR_LEASE = "near_lease"
#: An armed worker that has not killed itself after this many leases is killed by us.
ARM_TIMEOUT = 4.0
#: A pause whose worker's tasks nobody has reclaimed yet is held up to this many times
#: its planned length.
EXTEND_UP_TO = 2.0


@dataclass(frozen=True)
class ProcessSettings:
    sigkill: Mapping[str, int] = field(default_factory=dict)
    pauses: int = 0
    #: A pause lasts ``lease * factor`` with factor drawn from this range (> 1: past the lease).
    pause_factor: tuple[float, float] = (2.0, 3.0)
    #: Pauses that wake the worker around its lease's expiry, and their factor range.
    near_lease: int = 0
    near_lease_factor: tuple[float, float] = (0.9, 1.4)

    @property
    def kills(self) -> int:
        return sum(self.sigkill.values())


@dataclass
class ProcessCounts(Counts):
    kills: Counter[str] = field(default_factory=Counter)
    pauses: int = 0
    #: of ``pauses``, those drawn around the lease (``pause_near_lease``)
    near_lease: int = 0
    resumes: int = 0
    #: pauses held past their planned length until a task of the worker was reclaimed
    extended: int = 0
    arm_timeouts: int = 0

    @property
    def total_kills(self) -> int:
        return sum(self.kills.values())

    def points(self) -> str:
        """The kills by point: ``"in_handler 3, random 2"``."""
        return ", ".join(f"{k} {v}" for k, v in sorted(self.kills.items()))

    def as_dict(self) -> dict[str, object]:
        return {
            "kills": dict(sorted(self.kills.items())),
            "total_kills": self.total_kills,
            "pauses": self.pauses,
            "pauses_near_lease": self.near_lease,
            "resumes": self.resumes,
            "pauses_extended": self.extended,
            "arm_timeouts": self.arm_timeouts,
        }


class ProcessFaults(FaultFamily[ProcessSettings, ProcessCounts]):
    name = "process"
    tables = ("sigkill", "pause", "pause_near_lease")
    kinds = (Kind("pause", 70), Kind("kill", 80))
    rows = (
        Row(
            10,
            "kills",
            label="kills",
            live=lambda c: f"{c.total_kills}  ({c.points() or '-'})",
            said=lambda c: f"{c.total_kills} SIGKILLs ({c.points() or 'none'})",
        ),
        Row(10, "total_kills", summary="worker kills"),
        Row(
            20,
            "pauses",
            label="pauses",
            summary="worker pauses",
            said=lambda c: (
                f"{c.pauses - c.near_lease} pauses past the lease, {c.near_lease} around its expiry"
                if c.near_lease
                else f"{c.pauses} pauses past the lease"
            ),
        ),
        Row(21, "pauses_near_lease", summary="worker pauses around the lease expiry"),
    )
    marks = ("kill", "pause", "resume")
    windows = (
        WorkerSpan("worker paused", ("pause",), ("resume", "kill"), 10, late="after a pause"),
    )
    # No requirement: a pause that overlaps a server freeze or restart sees its reclaims
    # and its late report answered "unknown" (the smoke campaign on PostgreSQL, under
    # load); its rules are still reported "not exercised" when no call judged them.
    ops = ("self_kill",)
    styles = (
        Style("kill", "line", "#e74c3c"),
        Style("pause", "lanes", "#f1c40f", "0.35"),
    )
    legend = (
        Legend(10, "paused", "background:#f1c40f;opacity:.5"),
        Legend(20, "SIGKILL", "background:#e74c3c"),
    )

    # ---- the scenario ---------------------------------------------------------------------

    def parse(self, faults: Table) -> ProcessSettings:
        sigkill: dict[str, int] = {}
        if faults.has("sigkill"):
            kt = faults.table("sigkill")
            for point in KILL_POINTS:
                if kt.has(point):
                    sigkill[point] = kt.integer(point, 0, low=0, high=100_000)
            kt.done(KILL_POINTS)
        pt = faults.table("pause")
        pauses = pt.count(100_000)
        factor = pt.lease_factor(ProcessSettings.pause_factor, "a pause")
        pt.done(("count", "factor"))
        nt = faults.table("pause_near_lease")
        near = nt.count(100_000)
        near_factor = nt.number_range("factor", ProcessSettings.near_lease_factor, low=0.1)
        nt.done(("count", "factor"))
        return ProcessSettings(
            sigkill=sigkill,
            pauses=pauses,
            pause_factor=factor,
            near_lease=near,
            near_lease_factor=(float(near_factor[0]), float(near_factor[1])),
        )

    def in_window(self, settings: ProcessSettings) -> bool:
        return bool(settings.kills or settings.pauses or settings.near_lease)

    def plan(self, settings: ProcessSettings, ctx: PlanContext) -> list[PlannedFault]:
        rng = ctx.rng
        out = []
        for point in KILL_POINTS:
            for _ in range(settings.sigkill.get(point, 0)):
                at = ctx.when(ctx.busy * 0.95)
                out.append(PlannedFault(at, "kill", rng.randrange(ctx.slots), point))
        for _ in range(settings.pauses):
            length = round(ctx.lease * rng.uniform(*settings.pause_factor), 6)
            at = ctx.when(min(ctx.busy, ctx.window - length))
            out.append(PlannedFault(at, "pause", rng.randrange(ctx.slots), None, length))
        for _ in range(settings.near_lease):
            length = round(ctx.lease * rng.uniform(*settings.near_lease_factor), 6)
            at = ctx.when(min(ctx.busy, ctx.window - length))
            out.append(PlannedFault(at, "pause", rng.randrange(ctx.slots), NEAR_LEASE, length))
        return out

    # ---- applying -------------------------------------------------------------------------

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        return self._pause(fault, ctx) if fault.kind == "pause" else self._kill(fault, ctx)

    def _kill(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        w = ctx.target(fault.slot)
        if w is None:
            return False
        if fault.point in (None, "random"):
            ctx.journal_fault("kill", w)
            ctx.fleet.kill(w)
            ctx.counts(self).kills["random"] += 1
            ctx.spawn_in(w.slot)
        else:
            ctx.fleet.arm(w, fault.point)
        return True

    def _pause(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        w = ctx.busy_target(fault.slot)
        if w is None:
            return False
        assert fault.duration is not None
        counts = ctx.counts(self)
        near = fault.point == NEAR_LEASE
        duration = fault.duration
        ctx.fleet.pause(w)
        held = ctx.held_claims(w)
        if near:
            # Wake at (the lease's last stamp) + lease * factor: factor 1 is the expiry.
            # A pause around the lease is resumed on time: it is there to race the reclaim.
            expiry = ctx.lease_expiry(w, held)
            if expiry is not None:
                wake = expiry + fault.duration - ctx.lease
                duration = round(min(max(wake - time.time(), 0.05), fault.duration), 6)
            held = {}
            ctx.journal_fault("pause", w, duration=duration, near_lease=True)
        else:
            ctx.journal_fault("pause", w, duration=duration)
        paused_at = ctx.clock()
        counts.pauses += 1
        counts.near_lease += near

        def resume() -> bool:
            if not w.paused:
                return True
            waited = ctx.clock() - paused_at
            if (
                held
                and not ctx.draining
                and waited < duration * EXTEND_UP_TO
                and not ctx.reclaimed(held)
            ):
                return False  # no zombie yet: looked at again at the next tick
            if waited > duration + 0.25:
                counts.extended += 1
            ctx.fleet.resume(w)
            ctx.journal_fault("resume", w)
            counts.resumes += 1
            return True

        ctx.later(duration, resume, f"resume {w.name}")
        return True

    def tick(self, ctx: NemesisContext, now: float) -> None:
        """An armed worker that has not killed itself within :data:`ARM_TIMEOUT` leases
        is disarmed and SIGKILLed by the harness (noted)."""
        limit = ARM_TIMEOUT * ctx.lease
        counts = ctx.counts(self)
        for w in ctx.fleet.workers():
            if w.armed is None or now - w.armed_at < limit or not w.running:
                continue
            point = w.armed
            ctx.fleet.arm(w, "none")
            time.sleep(0.01)
            if not w.running:
                continue  # it fired meanwhile: the nemesis's supervise() journals it
            counts.arm_timeouts += 1
            ctx.note(f"{w.name} did not reach {point} within {limit:.1f}s; killed by the harness")
            ctx.journal_fault("kill", w, armed=point)
            ctx.fleet.kill(w)
            counts.kills["random"] += 1
            ctx.spawn_in(w.slot)

    def exited(self, ctx: NemesisContext, ex: Exit) -> bool:
        if ex.armed is not None and ex.returncode == -9:
            ctx.journal_fault("kill", ex.worker, point=ex.armed, by="self")
            ctx.counts(self).kills[ex.armed] += 1
            return True
        return False

    def drain(self, ctx: NemesisContext) -> None:
        for w in ctx.fleet.workers():
            if w.armed is not None and w.running:
                ctx.fleet.arm(w, "none")

    def settled(self, ctx: NemesisContext) -> bool:
        return not any(w.armed is not None and w.running for w in ctx.fleet.workers())

    def new_counts(self) -> ProcessCounts:
        return ProcessCounts()

    # ---- the timeline ---------------------------------------------------------------------

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        t = event.get("t", 0.0)
        if event.get("op") == "self_kill":
            proc = event.get("proc", "?")
            draft.deaths[proc] = t
            draft.marks.append(
                Mark(t, "kill", proc, f"{proc} SIGKILLed itself at {event.get('point')}")
            )
            return
        kind, target = event.get("kind"), str(event.get("target", ""))
        paused = draft.opened(self)
        if kind == "kill":
            if event.get("by") == "self":
                return  # marked at its self_kill event
            draft.deaths.setdefault(target, t)
            what = f" (armed for {event['armed']})" if event.get("armed") else ""
            draft.marks.append(Mark(t, "kill", target, f"harness SIGKILLed {target}{what}"))
        elif kind == "pause":
            paused[target] = Mark(
                t, "pause", target, f"{target} SIGSTOPped for {event.get('duration', '?')}s"
            )
            draft.marks.append(paused[target])
        elif kind == "resume" and target in paused:
            paused.pop(target).end = t


FAMILY = ProcessFaults()
