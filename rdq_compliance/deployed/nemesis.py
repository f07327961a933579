"""The deployed nemesis: runs a plan's faults on the workers and the server, and records
each one as a :class:`~rdq_compliance.deployed.faults.Fault` span.

=============== ======================================== ===================================
planned         what is done                             the span
=============== ======================================== ===================================
``kill``        SIGKILL every process of the worker      from when they were all gone to
                (:meth:`Fleet.kill`); the supervisor     when the worker was started again
                restarts it
``pause``       SIGSTOP every process of the worker      from the SIGSTOP to the SIGCONT
``part-kill``   SIGKILL one process of a part, chosen    a leader: as a kill; a descendant:
                by the plan's ``pick``                   an instant
``server-kill`` ``Server.kill``, then ``Server.restart`` from the kill to the restart
``server-freeze`` ``Server.pause``, then ``Server.resume`` from the pause to the resume
``cut``         ``Server.cut_connections(namespace)``    an instant; ``targets``: every
                                                         worker alive, paused ones too
``partition``   the worker (on a fleet: its host) cut    from before the cut to after the
                off the server (:meth:`Fleet.partition`) heal; ``targets``: every worker cut
``clock-skew``  the worker's clock (on a fleet: its      from before the jump, never undone
                host's) jumps ``offset`` s ahead         in the window: :meth:`settle_skews`
                (:meth:`Fleet.skew`)                     ends it once the workers stopped
=============== ======================================== ===================================

A kill's span starts when the processes are gone, so every probe line the killed
processes wrote precedes it (the checker ends an execution with no end line at the first
kill that hit its process). A pause's span starts before the SIGSTOP and ends after the
SIGCONT, so it covers all the time the worker was stopped.

A fault that finds nothing to act on (no live worker, no process of the part, a cut that
closed no connection) or whose action fails is an error of the campaign
(:class:`FaultError`), never a silent no-op. At the end of the window everything is
healed: what is still paused, frozen or cut off is continued or healed, a server still
down is restarted. A clock skew stays: its workers' clocks are set right only once they
are stopped, after the drain (a clock set back would read some moments twice).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.fleet import Fleet
from rdq_compliance.deployed.plan import PlannedFault
from rdq_compliance.deployed.system import Part
from rdq_compliance.provision.backend import Server

__all__ = ["Done", "FaultError", "Nemesis", "NemesisResult"]

#: How long a kill's end waits for the supervisor's restart, beyond its delay.
_RESTART_WAIT = 30.0


@dataclass(frozen=True)
class FaultError:
    """A planned fault that could not be done as planned, and why."""

    planned: PlannedFault
    at: float
    message: str


@dataclass
class Done:
    """A planned fault as done: its span, the pids it hit, how late it started (seconds
    after its planned time) and how long its action took."""

    planned: PlannedFault
    fault: Fault
    late: float
    took: float
    detail: str = ""


@dataclass
class NemesisResult:
    done: list[Done] = field(default_factory=list)
    errors: list[FaultError] = field(default_factory=list)
    healed: list[str] = field(default_factory=list)

    @property
    def faults(self) -> list[Fault]:
        return [d.fault for d in self.done]


@dataclass
class _Open:
    """A fault started whose end is still to come."""

    planned: PlannedFault
    start: float
    late: float
    took: float
    targets: tuple[str, ...] = ()
    part: str | None = None
    pids: frozenset[int] | None = None
    detail: str = ""
    undo: Callable[[], Any] | None = None
    ends_at_restart: bool = False
    lasting: bool = False  # a clock skew: no end until settle_skews()
    offset: float = 0.0


class Nemesis:
    """Runs ``faults`` (times after ``t0``, the window's opening on ``clock``) on
    ``fleet`` and ``server`` (``namespace``: the campaign's, for cuts)."""

    def __init__(
        self,
        faults: Sequence[PlannedFault],
        fleet: Fleet,
        server: Server,
        namespace: str,
        parts: Sequence[Part],
        *,
        clock: Callable[[], float] = time.time,
        stop: threading.Event | None = None,
    ) -> None:
        self.faults = sorted(faults, key=lambda f: f.at)
        self.fleet = fleet
        self.server = server
        self.namespace = namespace
        self.parts = {p.name: p for p in parts}
        self.clock = clock
        self.stop = stop or threading.Event()
        self.result = NemesisResult()
        self._open: list[tuple[float, _Open]] = []  # (when to undo, the fault)
        self._restarts: list[_Open] = []

    # ---- the schedule --------------------------------------------------------------

    def run(self, t0: float, window: float) -> NemesisResult:
        """Do every fault at its time, undo each at its end, heal at ``t0 + window``."""
        todo = list(self.faults)
        while todo or self._open:
            next_start = t0 + todo[0].at if todo else math.inf
            next_end = min((t for t, _ in self._open), default=math.inf)
            due = min(next_start, next_end, t0 + window)
            if self.stop.wait(max(0.0, due - self.clock())):
                break
            if next_end <= next_start and next_end <= t0 + window:
                self._undo_due()
            elif todo and next_start <= t0 + window:
                self._start(todo.pop(0), t0)
            else:
                break
        for planned in todo:
            self._error(planned, "not started: the window closed first")
        self.heal()
        self._close_kills()
        self.result.done.sort(key=lambda d: (d.fault.start, d.planned.at))
        return self.result

    def _undo_due(self) -> None:
        self._open.sort(key=lambda x: x[0])
        _, f = self._open.pop(0)
        self._finish(f)

    def _finish(self, f: _Open) -> None:
        assert f.undo is not None
        try:
            f.undo()
        except Exception as exc:
            self._error(f.planned, f"could not be undone: {type(exc).__name__}: {exc}")
            self._record(f, None)
            return
        self._record(f, self.clock())

    def heal(self) -> None:
        """Undo every open fault now; continue any worker still paused."""
        while self._open:
            _, f = self._open.pop(0)
            self.result.healed.append(f.planned.describe())
            self._finish(f)
        for name in self.fleet.heal():
            self.result.healed.append(f"worker {name} continued")

    def settle_skews(self, end: float) -> None:
        """End every clock skew's span at ``end`` (when its workers' clocks were set
        right, once they were stopped)."""
        for d in self.result.done:
            if d.fault.kind == "clock-skew" and d.fault.end is None:
                d.fault = replace(d.fault, end=max(end, d.fault.start))

    def _close_kills(self) -> None:
        """A kill ends when its worker was started again (the supervisor's restart)."""
        for f in self._restarts:
            worker = f.targets[0]
            end = self.fleet.started_after(
                worker, f.start, self.fleet.restart_after + _RESTART_WAIT
            )
            if end is None:
                self._error(f.planned, f"worker {worker} was not started again after the kill")
            self._record(f, end)
        self._restarts.clear()

    # ---- recording -----------------------------------------------------------------

    def _record(self, f: _Open, end: float | None) -> None:
        kind = {"part-kill": "kill"}.get(f.planned.kind, f.planned.kind)
        fault = Fault(
            kind,  # type: ignore[arg-type]
            f.start,
            end,
            targets=f.targets,
            part=f.part,
            pids=f.pids,
            offset=f.offset,
        )
        self.result.done.append(Done(f.planned, fault, f.late, f.took, f.detail))

    def _error(self, planned: PlannedFault, message: str) -> None:
        text = f"{planned.kind} at +{planned.at:g} s ({planned.what()}): "
        self.result.errors.append(FaultError(planned, self.clock(), text + message))

    # ---- the faults ----------------------------------------------------------------

    def _start(self, planned: PlannedFault, t0: float) -> None:
        before = self.clock()
        late = before - (t0 + planned.at)
        try:
            opened = getattr(self, "_" + planned.kind.replace("-", "_"))(planned, before, late)
        except Exception as exc:
            self._error(planned, f"failed: {type(exc).__name__}: {exc}")
            return
        if opened is None:
            return
        if opened.undo is not None:
            self._open.append((opened.start + planned.lasts, opened))
        elif opened.ends_at_restart:
            self._restarts.append(opened)
        elif opened.lasting:
            self._record(opened, None)
        else:
            self._record(opened, opened.start)

    def _kill(self, planned: PlannedFault, before: float, late: float) -> _Open | None:
        assert planned.worker is not None
        hit = self.fleet.kill(planned.worker)
        if hit is None:
            self._error(planned, f"no live worker {planned.worker} to kill")
            return None
        gone, pids = hit
        return _Open(
            planned, gone, late, gone - before, (planned.worker,),
            detail=f"pids {', '.join(map(str, pids))}", ends_at_restart=True,
        )  # fmt: skip

    def _pause(self, planned: PlannedFault, before: float, late: float) -> _Open | None:
        worker = planned.worker
        assert worker is not None
        pids = self.fleet.pause(worker)
        if not pids:
            self._error(planned, f"no live process of worker {worker} to pause")
            return None
        return _Open(
            planned, before, late, self.clock() - before, (worker,),
            detail=f"pids {', '.join(map(str, pids))}", undo=lambda: self.fleet.resume(worker),
        )  # fmt: skip

    def _part_kill(self, planned: PlannedFault, before: float, late: float) -> _Open | None:
        worker, name = planned.worker, planned.part
        assert worker is not None and name is not None
        part = self.parts[name]
        pids = self.fleet.part_pids(worker, part)
        if not pids:
            self._error(planned, f"no live {name} process of worker {worker} to kill")
            return None
        pid = pids[min(len(pids) - 1, math.floor(planned.pick * len(pids)))]
        tree = [pid] if part.role != "leader" else [pid, *self.fleet.part_pids(
            worker, Part(name, role="descendants"))]  # fmt: skip
        gone = self.fleet.kill_pid(worker, pid)
        if gone is None:
            self._error(planned, f"the {name} process {pid} of worker {worker} was gone already")
            return None
        leader = part.role == "leader"
        return _Open(
            planned, gone, late, gone - before, (worker,), name, frozenset(tree),
            detail=f"pid {pid} of {len(pids)} {name} process(es)"
            + (" (the leader: the worker's tree ends with it)" if leader else ""),
            ends_at_restart=leader,
        )  # fmt: skip

    def _server_kill(self, planned: PlannedFault, before: float, late: float) -> _Open:
        self.server.kill()
        return _Open(planned, before, late, self.clock() - before, undo=self.server.restart)

    def _server_freeze(self, planned: PlannedFault, before: float, late: float) -> _Open:
        self.server.pause()
        return _Open(planned, before, late, self.clock() - before, undo=self.server.resume)

    def _cut(self, planned: PlannedFault, before: float, late: float) -> _Open | None:
        # every worker with processes: a paused worker's connections are closed too, and it
        # finds them gone when it is continued
        live = tuple(sorted(self.fleet.live(paused=True)))
        closed = self.server.cut_connections(self.namespace)
        if closed <= 0:
            self._error(planned, "the cut closed 0 connections: nothing was connected to cut")
            return None
        if not live:
            self._error(planned, "no live worker when the connections were cut")
            return None
        return _Open(
            planned, before, late, self.clock() - before, live,
            detail=f"{closed} connection(s) closed",
        )  # fmt: skip

    def _partition(self, planned: PlannedFault, before: float, late: float) -> _Open:
        worker = planned.worker
        assert worker is not None
        cut = self.fleet.partition(worker)
        return _Open(
            planned, before, late, self.clock() - before, cut,
            detail=f"{', '.join(cut)} cut off the server",
            undo=lambda: self.fleet.heal_partition(worker),
        )  # fmt: skip

    def _clock_skew(self, planned: PlannedFault, before: float, late: float) -> _Open:
        worker = planned.worker
        assert worker is not None
        skewed = self.fleet.skew(worker, planned.offset)
        return _Open(
            planned, before, late, self.clock() - before, skewed,
            detail=f"the clock of {', '.join(skewed)} {planned.offset:g} s ahead",
            lasting=True, offset=planned.offset,
        )  # fmt: skip
