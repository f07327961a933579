"""The plan one seed draws from a scenario for one system, profile and server.

:func:`make_plan` turns a :class:`~rdq_compliance.deployed.scenario.Scenario` into a
:class:`Plan`: every job (:class:`~rdq_compliance.deployed.system.JobSpec`) and every
fault with its time and target (:class:`PlannedFault`), all drawn from the seed, so the
same seed gives the same plan. What the system or the server cannot do is said, never
dropped in silence:

- a behaviour the system lacks (``DeployedSystem.behaviours``) becomes ``succeed``,
  counted and named (:class:`Substitution`);
- ``sleep`` jobs sleep 1.5 x the profile's ``recovery_after`` (past the library's stall
  threshold, while its worker heartbeats), when that is set and fits under 0.8 x its
  ``execution_limit``; else they become ``succeed`` and the reason is given;
- a fault the system, the server or the places the workers run in cannot take is listed
  as not run, with the reason (:class:`NotRun`): a part kill needs a part of role
  ``descendants``, a pause, a partition and a clock skew need a ``recovery_after`` to
  size them, each server fault needs the server's support
  (:attr:`rdq_compliance.provision.backend.Server.faults`), a partition or a clock skew
  the places' (:class:`~rdq_compliance.deployed.places.Reach`: network namespaces or
  libfaketime here, nftables or libfaketime on a fleet's host).

A system whose library takes no retry count per job declares ``retries_per_job = False``
(read with ``getattr``, default ``True``); its jobs then ask for none (``retries``
``None``: the library's own budget applies) and the plan says so. One whose workers'
connections do not carry the kit's namespace declares ``connections_in_namespace =
False``; its connection cut is then listed as not run (the server's cut would find none).

No two faults act on one worker, or on the server, at once (a partition of a fleet's host
acts on every worker of the host); the window is stretched to fit the longest fault. A
clock skew is no span of the window: its worker's clock jumps ahead at a time drawn in
the window's first quarter and stays ahead until the workers stop, whatever else befalls
the worker meanwhile; each skew is on another worker (on a fleet: another host).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rdq_compliance.deployed.places import Reach
from rdq_compliance.deployed.scenario import Scenario, ScenarioError
from rdq_compliance.deployed.system import DeployedSystem, JobSpec, Profile
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
)

__all__ = [
    "NotRun",
    "Plan",
    "PlanKind",
    "PlannedFault",
    "Substitution",
    "make_plan",
    "worker_names",
]

#: What the nemesis does (``part-kill``: SIGKILL of one process of one part of a worker).
PlanKind = Literal[
    "kill", "pause", "part-kill", "server-kill", "server-freeze", "cut", "partition", "clock-skew"
]  # fmt: skip
#: The kinds that act on the server, in the order they are planned.
_SERVER_NEEDS: Mapping[str, tuple[str, ...]] = {
    "server-kill": (KILL_SERVER, RESTART_SERVER),
    "server-freeze": (PAUSE_SERVER,),
    "cut": (CUT_CONNECTIONS,),
}
#: Seconds between two faults on one worker, or on the server.
_GAP = 0.5
#: Seconds a worker killed needs after its restart before it is a target again.
_SETTLE = 2.0


@dataclass(frozen=True)
class PlannedFault:
    """One fault: ``at`` seconds after the window opens, lasting ``lasts`` seconds (a
    kill: the supervisor's restart delay; a pause or a freeze: until SIGCONT; a server
    kill: until the restart; a partition: until the heal; a cut and a clock skew: 0), on
    ``worker`` (none for a server fault; on a fleet, a partition or a clock skew acts on
    every worker of its ``host``), for a part kill the ``part`` and ``pick`` (which of its
    processes: ``floor(pick * n)`` of the ``n`` found, in pid order), for a clock skew
    the ``offset`` (seconds ahead)."""

    kind: PlanKind
    at: float
    lasts: float = 0.0
    worker: str | None = None
    part: str | None = None
    pick: float = 0.0
    offset: float = 0.0
    host: str | None = None

    def what(self) -> str:
        """What is done, in words."""
        host = f" (host {self.host}, all its workers)" if self.host else ""
        on = f"worker {self.worker}{host}"
        return {
            "kill": f"SIGKILL worker {self.worker} (restarted {self.lasts:g} s after it exits)",
            "pause": f"SIGSTOP worker {self.worker} for {self.lasts:g} s",
            "part-kill": f"SIGKILL one {self.part} process of worker {self.worker}",
            "server-kill": f"SIGKILL the server, restart it after {self.lasts:g} s",
            "server-freeze": f"SIGSTOP the server for {self.lasts:g} s",
            "cut": "cut the namespace's connections to the server",
            "partition": f"partition {on} from the server for {self.lasts:g} s",
            "clock-skew": f"move the clock of {on} {self.offset:g} s ahead, until the workers stop",
        }[self.kind]

    def describe(self) -> str:
        """When and what, as the plan prints it."""
        return f"+{self.at:7.3f} s  {self.what()}"


@dataclass(frozen=True)
class NotRun:
    """Faults of one kind the scenario asks for that this campaign cannot run, and why."""

    kind: PlanKind
    count: int
    reason: str


@dataclass(frozen=True)
class Substitution:
    """Jobs asked with a ``behaviour`` the system cannot give, run as ``succeed``."""

    behaviour: str
    count: int
    reason: str


@dataclass(frozen=True)
class Plan:
    """Everything one campaign does, drawn from ``seed``: the jobs, the faults (by time),
    the faults not run and the behaviours substituted, with the notes that say why."""

    scenario: Scenario
    seed: int
    profile: str
    workers: tuple[str, ...]
    jobs: tuple[JobSpec, ...]
    faults: tuple[PlannedFault, ...]
    window: float
    not_run: tuple[NotRun, ...] = ()
    substituted: tuple[Substitution, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def longest_job(self) -> float:
        return max((j.seconds for j in self.jobs), default=0.0)

    def counts(self) -> dict[str, int]:
        """Jobs by the behaviour they run."""
        out: dict[str, int] = {}
        for j in self.jobs:
            out[j.behaviour] = out.get(j.behaviour, 0) + 1
        return out

    def lines(self) -> list[str]:
        """The plan in words, as printed and written to the report."""
        s = self.scenario
        counts = ", ".join(f"{n} {b}" for b, n in self.counts().items())
        delayed = sum(1 for j in self.jobs if j.delay > 0)
        out = [
            f"scenario {s.name}, seed {self.seed}, profile {self.profile}: "
            f"{len(self.workers)} workers ({', '.join(self.workers)})",
            f"jobs: {len(self.jobs)} ({counts}); {delayed} delayed"
            + (f" up to {s.max_delay:g} s" if delayed else ""),
        ]
        out += [f"  {b.count} {b.behaviour} -> succeed: {b.reason}" for b in self.substituted]
        out += [f"  {n}" for n in self.notes]
        out.append(f"fault window: {self.window:g} s, {len(self.faults)} faults")
        out += [f"  {f.describe()}" for f in self.faults]
        out += [f"  not run: {n.count} {n.kind}: {n.reason}" for n in self.not_run]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": asdict(self.scenario),
            "seed": self.seed,
            "profile": self.profile,
            "workers": list(self.workers),
            "window": self.window,
            "jobs": [asdict(j) for j in self.jobs],
            "faults": [asdict(f) for f in self.faults],
            "not_run": [asdict(n) for n in self.not_run],
            "substituted": [asdict(b) for b in self.substituted],
            "notes": list(self.notes),
        }


def _sleep_seconds(scenario: Scenario, profile: Profile) -> tuple[float | None, str]:
    """How long a ``sleep`` job sleeps under ``profile``, and why (or why none)."""
    rec, limit = profile.recovery_after, profile.execution_limit
    if rec is None:
        return None, (
            f"profile {profile.name!r} declares no recovery_after: no stall threshold to sleep past"
        )
    seconds = round(1.5 * rec, 3)
    if limit is not None and seconds >= 0.8 * limit:
        return None, (
            f"1.5 x recovery_after ({seconds:g} s) does not fit under 0.8 x the profile's "
            f"execution_limit ({limit:g} s): a sleep past the stall threshold would be "
            "stopped by the time limit"
        )
    return seconds, f"sleep jobs sleep {seconds:g} s (1.5 x recovery_after {rec:g} s)"


def _jobs(
    scenario: Scenario, system: DeployedSystem, profile: Profile, rng: random.Random
) -> tuple[list[JobSpec], list[Substitution], list[str]]:
    can = set(system.behaviours)
    per_job = bool(getattr(system, "retries_per_job", True))
    sleep_s, sleep_note = _sleep_seconds(scenario, profile)
    subs: list[Substitution] = []
    notes: list[str] = []
    if scenario.sleep:
        notes.append(sleep_note)
    if not per_job and (scenario.fail or scenario.retry):
        notes.append(
            f"retries: the library takes no retry count per job, so fail and retry jobs ask "
            f"for none (its own budget applies), not {scenario.retries}"
        )
    mix: list[tuple[str, int]] = [
        ("succeed", scenario.succeed), ("sleep", scenario.sleep), ("fail", scenario.fail),
        ("retry", scenario.retry), ("hold", scenario.hold),
    ]  # fmt: skip
    drafts: list[tuple[str, float, int | None]] = []
    lo, hi = scenario.succeed_seconds
    for behaviour, count in mix:
        if not count:
            continue
        runs = behaviour
        if behaviour not in can:
            runs = "succeed"
            subs.append(Substitution(behaviour, count, f"{system.name} has no {behaviour!r}"))
        elif behaviour == "sleep" and sleep_s is None:
            runs = "succeed"
            subs.append(Substitution(behaviour, count, sleep_note))
        for _ in range(count):
            if runs == "sleep":
                seconds = float(sleep_s or 0.0)
            elif runs == "succeed":
                seconds = round(rng.uniform(lo, hi), 3)
            else:
                seconds = 0.0
            retries = scenario.retries if runs in ("fail", "retry") and per_job else None
            drafts.append((runs, seconds, retries))
    rng.shuffle(drafts)
    delayed = set(rng.sample(range(len(drafts)), scenario.delayed))
    jobs = [
        JobSpec(
            key=f"job-{i:02d}-{runs}",
            behaviour=runs,  # type: ignore[arg-type]
            seconds=seconds,
            delay=round(rng.uniform(0.0, scenario.max_delay), 3) if i in delayed else 0.0,
            retries=retries,
        )
        for i, (runs, seconds, retries) in enumerate(drafts)
    ]
    return jobs, subs, notes


def _sized(
    kind: PlanKind, count: int, factor: float, profile: Profile, reach: Reach
) -> tuple[float | None, NotRun | None]:
    """A partition's length or a clock skew's offset (``factor`` x ``recovery_after``),
    or why the ``count`` of them asked cannot run."""
    if kind in reach.cannot:
        return None, NotRun(kind, count, reach.cannot[kind])
    if profile.recovery_after is None:
        why = f"profile {profile.name!r} declares no recovery_after to size a {kind} by"
        return None, NotRun(kind, count, why)
    return round(factor * profile.recovery_after, 3), None


def _skews(
    scenario: Scenario,
    offset: float,
    window: float,
    workers: tuple[str, ...],
    reach: Reach,
    rng: random.Random,
) -> tuple[list[PlannedFault], list[NotRun]]:
    """The clock skews: each on a worker of another host, early in the window."""
    groups = sorted({reach.host(w) for w in workers})
    n = min(scenario.clock_skew, len(groups))
    out = []
    for group in rng.sample(groups, n):
        worker = rng.choice([w for w in workers if reach.host(w) == group])
        at = round(rng.uniform(_GAP, max(_GAP, window / 4)), 3)
        host = group if reach.hosts else None
        out.append(PlannedFault("clock-skew", at, 0.0, worker, offset=offset, host=host))
    not_run = []
    if scenario.clock_skew > n:
        what = "hosts" if reach.hosts else "workers"
        why = f"a clock jumps once: only {len(groups)} {what} to skew"
        not_run.append(NotRun("clock-skew", scenario.clock_skew - n, why))
    return out, not_run


def _faults(
    scenario: Scenario,
    system: DeployedSystem,
    profile: Profile,
    server_faults: frozenset[str],
    workers: tuple[str, ...],
    rng: random.Random,
    reach: Reach,
) -> tuple[list[PlannedFault], list[NotRun], float, list[str]]:
    """The faults drawn on the window (stretched to fit the longest), and those not run."""
    not_run: list[NotRun] = []
    wanted: list[tuple[PlanKind, float, float]] = []  # kind, lasts, span it occupies
    settle = scenario.restart_after + _SETTLE
    wanted += [("kill", scenario.restart_after, settle)] * scenario.kill
    if scenario.pause:
        if profile.recovery_after is None:
            why = f"profile {profile.name!r} declares no recovery_after to size a pause by"
            not_run.append(NotRun("pause", scenario.pause, why))
        else:
            length = round(scenario.pause_factor * profile.recovery_after, 3)
            wanted += [("pause", length, length + _GAP)] * scenario.pause
    parts = [p for p in system.parts if p.role == "descendants"]
    if scenario.part_kill:
        if not parts:
            names = ", ".join(f"{p.name} ({p.role})" for p in system.parts)
            why = f"{system.name}'s workers have no part of role 'descendants' (parts: {names})"
            not_run.append(NotRun("part-kill", scenario.part_kill, why))
        else:
            wanted += [("part-kill", 0.0, settle)] * scenario.part_kill
    server_wanted: list[tuple[PlanKind, int, float, float]] = [
        ("server-kill", scenario.server_kill, scenario.server_down, scenario.server_down + 3.0),
        ("server-freeze", scenario.server_freeze, scenario.server_frozen,
         scenario.server_frozen + 1.0),
        ("cut", scenario.cut, 0.0, 1.0),
    ]  # fmt: skip
    for kind, count, lasts, span in server_wanted:
        if not count:
            continue
        missing = [n for n in _SERVER_NEEDS[kind] if n not in server_faults]
        if kind == "cut" and not getattr(system, "connections_in_namespace", True):
            why = (
                f"{system.name}'s connections do not carry the kit's namespace, so the "
                "server's cut_connections(namespace) would find none of them"
            )
            not_run.append(NotRun(kind, count, why))
        elif missing:
            has = ", ".join(sorted(server_faults)) or "none"
            why = f"the server provisioned cannot {' and '.join(missing)} (it supports: {has})"
            not_run.append(NotRun(kind, count, why))
        else:
            wanted += [(kind, lasts, span)] * count
    skew_offset: float | None = None
    if scenario.partition:
        length, no = _sized("partition", scenario.partition, scenario.partition_factor,
                            profile, reach)  # fmt: skip
        if no is not None:
            not_run.append(no)
        elif length is not None:
            wanted += [("partition", length, length + _GAP)] * scenario.partition
    if scenario.clock_skew:
        skew_offset, no = _sized("clock-skew", scenario.clock_skew, scenario.skew_factor,
                                 profile, reach)  # fmt: skip
        if no is not None:
            not_run.append(no)
    notes: list[str] = []
    window = scenario.window
    longest = max((span for _, _, span in wanted), default=0.0)
    if longest and window < 1.5 * longest + 1.0:
        window = round(1.5 * longest + 1.0, 3)
        notes.append(
            f"fault window stretched from {scenario.window:g} s to {window:g} s "
            f"to fit a fault of {longest:g} s"
        )
    busy: dict[str, list[tuple[float, float]]] = {}
    planned: list[PlannedFault] = []

    def free(where: str, a: float, b: float) -> bool:
        return all(b + _GAP <= x or y + _GAP <= a for x, y in busy.get(where, []))

    # the longest first; the cut last, at a time some worker is free of faults (a cut while
    # every worker is down or stopped would find no connection)
    for kind, lasts, span in sorted(wanted, key=lambda w: (w[0] == "cut", -w[2])):
        for _ in range(2000):
            at = round(rng.uniform(_GAP, max(_GAP, window - span)), 3)
            worker = None if kind in _SERVER_NEEDS else rng.choice(workers)
            hit = ("server",) if worker is None else (worker,)
            if kind == "partition" and worker is not None:
                hit = reach.together(worker)  # a fleet's host: every worker on it
            if all(free(where, at, at + span) for where in hit) and (
                kind != "cut" or any(free(w, at, at + span) for w in workers)
            ):
                break
        else:
            raise ScenarioError(
                f"scenario {scenario.name!r}: its faults do not fit in a window of {window:g} s "
                f"without two on one worker (or on the server) at once; lengthen 'window'"
            )
        for where in hit:
            busy.setdefault(where, []).append((at, at + span))
        part = rng.choice(parts).name if kind == "part-kill" else None
        pick = round(rng.random(), 6) if kind == "part-kill" else 0.0
        host = reach.host(worker) if kind == "partition" and worker and reach.hosts else None
        planned.append(PlannedFault(kind, at, lasts, worker, part, pick, host=host))
    if skew_offset is not None:
        skews, no_skews = _skews(scenario, skew_offset, window, workers, reach, rng)
        planned += skews
        not_run += no_skews
    planned.sort(key=lambda f: (f.at, f.kind))
    return planned, not_run, window, notes


def worker_names(scenario: Scenario) -> tuple[str, ...]:
    """The names of ``scenario``'s workers: ``w1``, ``w2``, ..."""
    return tuple(f"w{i}" for i in range(1, scenario.workers + 1))


def make_plan(
    scenario: Scenario,
    seed: int,
    *,
    system: DeployedSystem,
    profile: Profile,
    server_faults: frozenset[str],
    reach: Reach | None = None,
) -> Plan:
    """The plan ``seed`` draws from ``scenario`` for ``system`` under ``profile`` on a
    server supporting ``server_faults``, its workers where ``reach`` says (default: each
    worker its own host, every worker fault possible); same arguments, same plan."""
    scenario.check()
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ScenarioError(f"seed: an integer in [0, 2**63), not {seed!r}")
    workers = worker_names(scenario)
    jobs, subs, job_notes = _jobs(scenario, system, profile, random.Random(f"jobs:{seed}"))
    faults, not_run, window, fault_notes = _faults(
        scenario, system, profile, server_faults, workers, random.Random(f"faults:{seed}"),
        reach or Reach(),
    )  # fmt: skip
    return Plan(
        scenario, seed, profile.name, workers, tuple(jobs), tuple(faults), window,
        tuple(not_run), tuple(subs), tuple(job_notes + fault_notes),
    )  # fmt: skip
