"""A deployed campaign's scenario, and the plan one seed draws from it for one system.

A :class:`Scenario` says how many workers run, the job mix (how many jobs of each
handler behaviour, how many of them delayed), the fault window, the faults planned in it
and the drain's margin. :func:`make_plan` turns it into a :class:`Plan` for one system,
one settings profile and one provisioned server: every job (:class:`JobSpec`) and every
fault with its time and target (:class:`PlannedFault`), all drawn from the seed, so the
same seed gives the same plan. What the system or the server cannot do is said, never
dropped in silence:

- a behaviour the system lacks (:attr:`DeployedSystem.behaviours`) becomes ``succeed``,
  counted and named (:class:`Substitution`);
- ``sleep`` jobs sleep 1.5 x the profile's ``recovery_after`` (past the library's stall
  threshold, while its worker heartbeats), when that is set and fits under 0.8 x its
  ``execution_limit``; else they become ``succeed`` and the reason is given;
- a fault the system or the server cannot take is listed as not run, with the reason
  (:class:`NotRun`): a part kill needs a part of role ``descendants``, a pause needs a
  ``recovery_after`` to size it, each server fault needs the server's support
  (:attr:`rdq_compliance.provision.backend.Server.faults`).

A system whose library takes no retry count per job declares ``retries_per_job = False``
(read with ``getattr``, default ``True``); its jobs then ask for none (``retries``
``None``: the library's own budget applies) and the plan says so.

Two scenarios are built in (:data:`BUILTIN`): ``standard`` and a short ``smoke`` (for
tests). :func:`load_scenario` also reads a TOML file (see :data:`EXAMPLE`).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rdq_compliance.deployed.system import DeployedSystem, JobSpec, Profile
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
)
from rdq_core.errors import RdqError

__all__ = [
    "BUILTIN",
    "EXAMPLE",
    "NotRun",
    "Plan",
    "PlanKind",
    "PlannedFault",
    "Scenario",
    "ScenarioError",
    "Substitution",
    "load_scenario",
    "make_plan",
]

#: What the nemesis does (``part-kill``: SIGKILL of one process of one part of a worker).
PlanKind = Literal["kill", "pause", "part-kill", "server-kill", "server-freeze", "cut"]
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


class ScenarioError(RdqError, ValueError):
    """A scenario that cannot be read or planned (the key or the reason is named)."""


@dataclass(frozen=True)
class Scenario:
    """What a campaign runs. Counts are jobs or faults; times are seconds."""

    name: str
    workers: int = 3
    # the job mix
    succeed: int = 30
    succeed_seconds: tuple[float, float] = (0.05, 0.5)
    sleep: int = 8
    fail: int = 8
    retry: int = 6
    retries: int = 2  # asked of each fail and retry job
    hold: int = 4
    delayed: int = 12  # of all jobs, each due 0 to max_delay seconds after its enqueue
    max_delay: float = 10.0
    # the fault window and its faults
    window: float = 40.0
    kill: int = 3  # whole-worker SIGKILLs
    restart_after: float = 1.0  # the supervisor's restart delay after any exit
    pause: int = 2  # whole-worker SIGSTOPs of pause_factor x recovery_after
    pause_factor: float = 1.5
    part_kill: int = 2  # SIGKILL of one process of a descendants part
    server_kill: int = 1
    server_down: float = 3.0  # seconds before the killed server is restarted
    server_freeze: int = 1
    server_frozen: float = 3.0
    cut: int = 1
    # the drain: recovery_after + the longest job + this
    drain_margin: float = 30.0

    def check(self) -> Scenario:
        """Itself, or :class:`ScenarioError` naming the first bad value."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(value, str) or not value.strip():
                    raise ScenarioError("name: a non-empty string")
            elif f.name == "succeed_seconds":
                lo, hi = value
                if not (_number(lo) and _number(hi) and 0 <= lo <= hi):
                    raise ScenarioError(
                        f"succeed_seconds: [low, high] with 0 <= low <= high, not {list(value)}"
                    )
            elif f.type == "int":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ScenarioError(f"{f.name}: an integer >= 0, not {value!r}")
            elif not _number(value) or value < 0:
                raise ScenarioError(f"{f.name}: a number of seconds >= 0, not {value!r}")
        if self.workers < 1:
            raise ScenarioError("workers: at least 1")
        if self.window <= 0:
            raise ScenarioError("window: a positive number of seconds")
        if self.delayed > self.jobs:
            raise ScenarioError(f"delayed: {self.delayed} of only {self.jobs} jobs")
        if self.pause_factor <= 0:
            raise ScenarioError("pause_factor: a positive number")
        return self

    @property
    def jobs(self) -> int:
        return self.succeed + self.sleep + self.fail + self.retry + self.hold


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


#: The built-in scenarios: ``standard``, and ``smoke``, short, for tests.
BUILTIN: Mapping[str, Scenario] = {
    "standard": Scenario("standard"),
    "smoke": Scenario(
        "smoke",
        workers=2,
        succeed=6,
        succeed_seconds=(0.05, 0.3),
        sleep=2,
        fail=2,
        retry=2,
        hold=1,
        delayed=3,
        max_delay=3.0,
        window=12.0,
        kill=1,
        pause=1,
        part_kill=1,
        server_kill=1,
        server_down=2.0,
        server_freeze=1,
        server_frozen=2.0,
        cut=1,
        drain_margin=25.0,
    ),
}

#: A scenario file (TOML). A count not given is 0; any other value not given is the
#: ``standard`` scenario's.
EXAMPLE = """\
name = "mine"
workers = 2
window = 15          # seconds
drain_margin = 20

[jobs]
succeed = 6
succeed_seconds = [0.05, 0.3]
sleep = 2
fail = 2
retry = 2
retries = 2
hold = 1
delayed = 3
max_delay = 3

[faults]
kill = 1
restart_after = 1
pause = 1
pause_factor = 1.5
part_kill = 1
server_kill = 1
server_down = 2
server_freeze = 1
server_frozen = 2
cut = 1
"""

_TOP = {"name", "workers", "window", "drain_margin"}
_JOBS = {"succeed", "succeed_seconds", "sleep", "fail", "retry", "retries", "hold", "delayed",
         "max_delay"}  # fmt: skip
_FAULTS = {"kill", "restart_after", "pause", "pause_factor", "part_kill", "server_kill",
           "server_down", "server_freeze", "server_frozen", "cut"}  # fmt: skip
_COUNTS = {"succeed", "sleep", "fail", "retry", "hold", "delayed", "kill", "pause", "part_kill",
           "server_kill", "server_freeze", "cut"}  # fmt: skip


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name, or one read from a TOML file (:data:`EXAMPLE`)."""
    text = str(name_or_path)
    if text in BUILTIN:
        return BUILTIN[text]
    path = Path(name_or_path)
    if not path.is_file():
        raise ScenarioError(
            f"no scenario {text!r}: neither a built-in one ({', '.join(BUILTIN)}) nor a file"
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot be read as TOML: {exc}") from None
    values: dict[str, Any] = dict.fromkeys(_COUNTS, 0)
    values["name"] = path.stem
    for table, keys in (("", _TOP), ("jobs", _JOBS), ("faults", _FAULTS)):
        part = data if not table else data.get(table, {})
        if not isinstance(part, dict):
            raise ScenarioError(f"{path}: [{table}] is a table")
        for key, value in part.items():
            if not table and key in ("jobs", "faults"):
                continue
            if key not in keys:
                where = f"[{table}] " if table else ""
                raise ScenarioError(
                    f"{path}: unknown key {where}{key!r} (known: {', '.join(sorted(keys))})"
                )
            values[key] = value
    if "succeed_seconds" in values:
        pair = values["succeed_seconds"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise ScenarioError(f"{path}: succeed_seconds: [low, high], not {pair!r}")
        values["succeed_seconds"] = (pair[0], pair[1])
    try:
        return Scenario(**values).check()
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


# ---- the plan -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedFault:
    """One fault: ``at`` seconds after the window opens, lasting ``lasts`` seconds (a
    kill: the supervisor's restart delay; a pause or a freeze: until SIGCONT; a server
    kill: until the restart; a cut: 0), on ``worker`` (none for a server fault), for a
    part kill the ``part`` and ``pick`` (which of its processes: ``floor(pick * n)`` of
    the ``n`` found, in pid order)."""

    kind: PlanKind
    at: float
    lasts: float = 0.0
    worker: str | None = None
    part: str | None = None
    pick: float = 0.0

    def what(self) -> str:
        """What is done, in words."""
        return {
            "kill": f"SIGKILL worker {self.worker} (restarted {self.lasts:g} s after it exits)",
            "pause": f"SIGSTOP worker {self.worker} for {self.lasts:g} s",
            "part-kill": f"SIGKILL one {self.part} process of worker {self.worker}",
            "server-kill": f"SIGKILL the server, restart it after {self.lasts:g} s",
            "server-freeze": f"SIGSTOP the server for {self.lasts:g} s",
            "cut": "cut the namespace's connections to the server",
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


def _faults(
    scenario: Scenario,
    system: DeployedSystem,
    profile: Profile,
    server_faults: frozenset[str],
    workers: tuple[str, ...],
    rng: random.Random,
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
        if missing:
            has = ", ".join(sorted(server_faults)) or "none"
            why = f"the server provisioned cannot {' and '.join(missing)} (it supports: {has})"
            not_run.append(NotRun(kind, count, why))
        else:
            wanted += [(kind, lasts, span)] * count
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
    for kind, lasts, span in sorted(wanted, key=lambda w: -w[2]):
        for _ in range(2000):
            at = round(rng.uniform(_GAP, max(_GAP, window - span)), 3)
            worker = None if kind in _SERVER_NEEDS else rng.choice(workers)
            where = worker or "server"
            if all(at + span + _GAP <= a or b + _GAP <= at for a, b in busy.get(where, [])):
                break
        else:
            raise ScenarioError(
                f"scenario {scenario.name!r}: its faults do not fit in a window of {window:g} s "
                f"without two on one worker (or on the server) at once; lengthen 'window'"
            )
        busy.setdefault(where, []).append((at, at + span))
        part = rng.choice(parts).name if kind == "part-kill" else None
        pick = round(rng.random(), 6) if kind == "part-kill" else 0.0
        planned.append(PlannedFault(kind, at, lasts, worker, part, pick))
    planned.sort(key=lambda f: (f.at, f.kind))
    return planned, not_run, window, notes


def make_plan(
    scenario: Scenario,
    seed: int,
    *,
    system: DeployedSystem,
    profile: Profile,
    server_faults: frozenset[str],
) -> Plan:
    """The plan ``seed`` draws from ``scenario`` for ``system`` under ``profile`` on a
    server supporting ``server_faults`` (same arguments, same plan)."""
    scenario.check()
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ScenarioError(f"seed: an integer in [0, 2**63), not {seed!r}")
    workers = tuple(f"w{i}" for i in range(1, scenario.workers + 1))
    jobs, subs, job_notes = _jobs(scenario, system, profile, random.Random(f"jobs:{seed}"))
    faults, not_run, window, fault_notes = _faults(
        scenario, system, profile, server_faults, workers, random.Random(f"faults:{seed}")
    )
    return Plan(
        scenario, seed, profile.name, workers, tuple(jobs), tuple(faults), window,
        tuple(not_run), tuple(subs), tuple(job_notes + fault_notes),
    )  # fmt: skip
