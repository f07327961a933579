"""Chaos scenarios: a declarative TOML file → a validated :class:`Scenario`.

A scenario says how many worker processes run, with which lease and retry settings,
which tasks are enqueued (a weighted mix of handler behaviours), which faults are
injected during the fault window, and the time limits. Every key is checked: an unknown
key, a wrong type or an out-of-range value is a :class:`ScenarioError` that names the
key (``workers.lease``) and says what is accepted. Durations are seconds (a number) or a
string with a unit: ``"500ms"``, ``"1.5s"``, ``"2m"``.

Example (``chaos/standard.toml`` is the full one)::

    name = "smoke"
    seed = 7
    duration = "10s"             # the fault window

    [workers]
    count = 4
    lease = "1s"

    [workload]
    tasks = 200

    [workload.handlers]
    ok = { weight = 90, duration = ["10ms", "50ms"] }
    permanent = { weight = 10 }

    [faults.sigkill]
    in_handler = 2

    [faults.pause]
    count = 1

    [faults.server_pause]        # freeze the whole server past the lease, then resume
    count = 1
    factor = [1.5, 2.5]

    [faults.partition]           # cut workers off the server (both ways) past the lease
    count = 2
    workers = 1                  # worker slots cut off together
    factor = [2.0, 3.0]

    [faults.loss]                # the milder variant: a share of their packets dropped
    count = 1
    workers = 2
    percent = 30
    factor = [2.0, 3.0]          # lasts lease x factor

    [faults.failover]            # kill the primary, promote its replica (chaos/failover.toml)
    count = 1
    replica_lag = "500ms"        # hold the replication link this long before the kill

    [faults.clock_skew]          # run 3 worker slots under libfaketime (chaos/clock.toml)
    workers = 3                  # how many slots are skewed (<= workers.count)
    offset = ["-4.5s", "4.5s"]   # each slot's offset from true time, drawn per slot
    drift = [0.9, 1.1]           # each slot's clock rate (1 = true rate), drawn per slot

Each ``[faults.*]`` table belongs to a fault family, which reads, checks and documents
it (:mod:`rdq_compliance.chaos.faults`: ``process``, ``server``, ``clock_skew``,
``connections``, ``failover``, ``network``, ``redrive``); ``[faults] warmup`` (no fault
before that many seconds into the window, default 1) belongs to none. This module reads
the rest (the top-level keys, ``[workers]``, ``[workload]``, ``[limits]``) with the same
:class:`~rdq_compliance.chaos.faults.tables.Table` readers.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rdq_compliance.chaos.faults.combined import Families, Faults
from rdq_compliance.chaos.faults.process import KILL_POINTS
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.faults.tables import (
    DURATION_HELP,
    ScenarioError,
    Table,
    check_seed,
    parse_duration,
    show,
)
from rdq_core.validation import NAME_RE

__all__ = [
    "DURATION_HELP",
    "HANDLER_KINDS",
    "KILL_POINTS",
    "Faults",
    "HandlerMix",
    "Limits",
    "Scenario",
    "ScenarioError",
    "WorkerSettings",
    "Workload",
    "builtin_scenarios",
    "check_seed",
    "load_scenario",
    "parse_duration",
    "scenario_from_dict",
]

#: Handler behaviours a task can have (the workload's mix).
HANDLER_KINDS: tuple[str, ...] = ("ok", "flaky", "permanent", "overrun")


# ---- the model ----------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSettings:
    """The worker fleet: processes and the settings of each process's worker loop."""

    count: int = 8
    concurrency: int = 2
    batch: int = 2
    lease: float = 1.5
    heartbeat_fraction: float = 1 / 3
    max_attempts: int = 4
    poll_interval: float = 0.05
    max_poll_interval: float = 0.5
    retry_base: float = 0.1
    retry_cap: float = 1.0


@dataclass(frozen=True)
class HandlerMix:
    """One behaviour of the mix and its weight.

    - ``ok``: works for a duration drawn from ``duration`` (seconds, a range), succeeds;
    - ``flaky``: fails with a retryable error ``failures`` times (a range), then works
      like ``ok``;
    - ``permanent``: works briefly, then fails with a permanent error (→ DLQ);
    - ``overrun``: its first ``times`` attempts run for ``lease * factor`` while the
      worker's heartbeats for it are dropped (a blocked loop): the lease expires under it,
      the task is reclaimed with LEASE_EXPIRED, and the zombie's late outcome must be
      refused; later attempts work like ``ok``. With ``abandon = true`` the
      zombie then gives the claim up without reporting anything, as a worker that died
      would (without the cost of a new process): the task is left to the reclaim, so a
      backend whose reclaim fails keeps it stuck instead of a late report rescuing it.

    An entry of ``[workload.handlers]`` is named after its behaviour (``ok = {...}``) or
    names it (``slow = { kind = "ok", duration = ["0.8s", "1.4s"], weight = 5 }``), so a
    mix may hold several entries of one behaviour. Any entry may give its own ``spread``
    (``spread = "3s"``): its tasks' due times are spread over that instead of the
    workload's (poison tasks due early have time to be dead-lettered, redriven and
    reclaimed again within a short fault window).
    """

    kind: str
    weight: float
    duration: tuple[float, float] = (0.02, 0.2)
    #: The entry's name in the scenario (the kind, unless the entry says ``kind = ...``).
    name: str = ""
    failures: tuple[int, int] = (1, 2)
    factor: float = 1.8
    times: int = 1
    abandon: bool = False
    #: Seconds over which this entry's due times are spread (``None``: the workload's).
    spread: float | None = None


@dataclass(frozen=True)
class Workload:
    tasks: int = 2000
    queue: str = "chaos"
    #: Seconds over which the tasks' due times are spread (``None``: the fault window).
    spread: float | None = None
    handlers: tuple[HandlerMix, ...] = (HandlerMix("ok", 1.0, name="ok"),)


@dataclass(frozen=True)
class Limits:
    #: Wall-clock budget of the fault phase and the drain together (seconds).
    deadline: float = 170.0
    #: How long the drain may take (seconds) before the run is declared not quiesced.
    drain_timeout: float = 60.0
    #: The drain also ends, not quiesced, once the queue's counts by status have not
    #: changed for this long (seconds; ``None``: :attr:`Scenario.stall`'s bound).
    drain_stall: float | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int
    #: The fault window (seconds): faults are scheduled within it.
    duration: float
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    workload: Workload = field(default_factory=Workload)
    faults: Faults = field(default_factory=BUILTIN.defaults)
    limits: Limits = field(default_factory=Limits)
    source: Path | None = None

    @property
    def stall(self) -> float:
        """How long the drain waits on counts that do not move: the limit given, else
        the longest a task of this workload can stay IN_FLIGHT without any count moving
        (every attempt an overrun past the lease, then the poll that reclaims it), plus a
        lease, and at least 10 s."""
        if self.limits.drain_stall is not None:
            return self.limits.drain_stall
        w = self.workers
        factor = max([h.factor for h in self.workload.handlers if h.kind == "overrun"] or [1.0])
        longest = max([h.duration[1] for h in self.workload.handlers] or [0.0])
        attempt = max(w.lease * factor, longest) + w.max_poll_interval
        return max(10.0, (w.max_attempts + 1) * attempt + w.lease + w.retry_cap)

    def with_seed(self, seed: int) -> Scenario:
        return replace(self, seed=check_seed(seed, "seed"))

    def with_lease(self, lease: float) -> Scenario:
        """This scenario with every worker asking for ``lease`` seconds (a backend whose
        lease model gives every claim a longer one than the scenario's): the faults sized
        in leases (pauses, partitions, overruns) and the drain's stall bound follow the
        lease; the deadline and the drain timeout grow by the same ratio, when it is
        above 1."""
        ratio = lease / self.workers.lease
        limits = self.limits
        if ratio > 1:
            limits = replace(
                limits,
                deadline=limits.deadline * ratio,
                drain_timeout=limits.drain_timeout * ratio,
                drain_stall=None if limits.drain_stall is None else limits.drain_stall * ratio,
            )
        return replace(self, workers=replace(self.workers, lease=lease), limits=limits)

    @property
    def spread(self) -> float:
        return self.duration if self.workload.spread is None else self.workload.spread


# ---- sections -----------------------------------------------------------------------------


def _workers(t: Table) -> WorkerSettings:
    d = WorkerSettings()
    lease = t.duration("lease", d.lease)
    assert lease is not None
    poll = t.duration("poll_interval", d.poll_interval)
    max_poll = t.duration("max_poll_interval", d.max_poll_interval)
    base = t.duration("retry_base", d.retry_base)
    cap = t.duration("retry_cap", d.retry_cap)
    assert poll is not None and max_poll is not None and base is not None and cap is not None
    if max_poll < poll:
        raise ScenarioError(
            f"{t.key('max_poll_interval')}: must be >= poll_interval ({poll}s), got {max_poll}s"
        )
    if cap < base:
        raise ScenarioError(f"{t.key('retry_cap')}: must be >= retry_base ({base}s), got {cap}s")
    out = WorkerSettings(
        count=t.integer("count", d.count, low=1, high=256),
        concurrency=t.integer("concurrency", d.concurrency, low=1, high=64),
        batch=t.integer("batch", d.batch, low=1, high=1000),
        lease=lease,
        heartbeat_fraction=t.number(
            "heartbeat_fraction",
            d.heartbeat_fraction,
            low=0,
            high=1,
            open_low=True,
            open_high=True,
        ),
        max_attempts=t.integer("max_attempts", d.max_attempts, low=1, high=1000),
        poll_interval=poll,
        max_poll_interval=max_poll,
        retry_base=base,
        retry_cap=cap,
    )
    t.done()
    return out


_HANDLER_KEYS: dict[str, tuple[str, ...]] = {
    "ok": ("kind", "weight", "duration", "spread"),
    "flaky": ("kind", "weight", "duration", "failures", "spread"),
    "permanent": ("kind", "weight", "duration", "spread"),
    "overrun": ("kind", "weight", "factor", "times", "abandon", "spread"),
}


def _handler(t: Table, name: str) -> HandlerMix:
    kind = t.get("kind", name)
    if kind not in HANDLER_KINDS:
        what = f"{t.key('kind')}" if t.has("kind") else f"{t.where} (no 'kind' key)"
        raise ScenarioError(
            f"{what}: the behaviour must be one of {', '.join(HANDLER_KINDS)}, got {kind!r}; "
            'name an entry after its behaviour, or give it kind = "..."'
        )
    d = HandlerMix(kind, 1.0)
    weight = t.number("weight", 1.0, low=0)
    default_duration = (0.005, 0.02) if kind == "permanent" else d.duration
    mix = HandlerMix(
        kind=kind,
        name=name,
        weight=weight,
        duration=t.duration_range("duration", default_duration)
        if "duration" in _HANDLER_KEYS[kind]
        else d.duration,
        failures=tuple(
            int(x) for x in t.number_range("failures", d.failures, low=1, integer=True)
        )  # type: ignore[arg-type]
        if kind == "flaky"
        else d.failures,
        factor=t.number("factor", d.factor, low=1, open_low=True)
        if kind == "overrun"
        else d.factor,
        times=t.integer("times", d.times, low=1) if kind == "overrun" else d.times,
        abandon=t.flag("abandon", d.abandon) if kind == "overrun" else d.abandon,
        spread=t.duration("spread", None) if t.has("spread") else None,
    )
    t.done(_HANDLER_KEYS[kind])
    return mix


def _workload(t: Table) -> Workload:
    d = Workload()
    queue = t.get("queue", d.queue)
    if not isinstance(queue, str) or not NAME_RE.fullmatch(queue):
        raise ScenarioError(
            f"{t.key('queue')}: expected a queue name matching [a-z0-9._-]{{1,240}}, "
            f"got {show(queue)}"
        )
    tasks = t.integer("tasks", d.tasks, low=1, high=10_000_000)
    spread = t.duration("spread", None) if t.has("spread") else None
    t.taken.add("spread")
    handlers: list[HandlerMix] = []
    if t.has("handlers"):
        ht = t.table("handlers")
        for name in list(ht.data):
            handlers.append(_handler(ht.table(name), name))
        ht.done()
        if not handlers or sum(h.weight for h in handlers) <= 0:
            raise ScenarioError(
                f"{ht.where}: give at least one of {', '.join(HANDLER_KINDS)} with a weight > 0"
            )
    else:
        handlers = list(d.handlers)
    t.done()
    return Workload(tasks=tasks, queue=queue, spread=spread, handlers=tuple(handlers))


def _limits(t: Table) -> Limits:
    d = Limits()
    deadline = t.duration("deadline", d.deadline)
    drain = t.duration("drain_timeout", d.drain_timeout)
    stall = t.duration("drain_stall", None) if t.has("drain_stall") else None
    t.done(("deadline", "drain_timeout", "drain_stall"))
    assert deadline is not None and drain is not None
    return Limits(deadline=deadline, drain_timeout=drain, drain_stall=stall)


_TOP_KEYS = ("name", "seed", "duration", "workers", "workload", "faults", "limits")


def scenario_from_dict(
    data: Mapping[str, Any],
    *,
    source: Path | None = None,
    default_name: str = "scenario",
    families: Families = BUILTIN,
) -> Scenario:
    """Validate a parsed scenario (e.g. a TOML document); raises :class:`ScenarioError`.
    ``[faults]`` is read by the fault ``families`` (the built-in ones by default)."""
    top = Table(dict(data), "")
    name = top.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name):
        raise ScenarioError(
            f"name: expected 1-100 characters from [A-Za-z0-9._-], got {show(name)}"
        )
    seed = check_seed(top.get("seed", 0), "seed")
    duration = top.duration("duration", None)
    if duration is None:
        raise ScenarioError(f"duration: required: the fault window ({DURATION_HELP})")
    workers = _workers(top.table("workers"))
    workload = _workload(top.table("workload"))
    faults = families.parse(top.table("faults"))
    limits = _limits(top.table("limits"))
    top.done(_TOP_KEYS)
    families.check(faults, workers=workers.count, duration=duration)
    if limits.deadline <= duration:
        raise ScenarioError(
            f"limits.deadline ({limits.deadline}s) must be longer than duration ({duration}s): "
            "it bounds the fault window and the drain together"
        )
    return Scenario(
        name=name,
        seed=seed,
        duration=duration,
        workers=workers,
        workload=workload,
        faults=faults,
        limits=limits,
        source=source,
    )


#: The scenarios shipped with the kit (``chaos/`` in the repository links to them).
BUILTIN_DIR = Path(__file__).parent / "scenarios"


def builtin_scenarios() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.toml"))


def load_scenario(path: str | Path, *, families: Families = BUILTIN) -> Scenario:
    """Read and validate a scenario file, or a built-in one by name (``"standard"``);
    every problem is a :class:`ScenarioError`."""
    path = Path(path)
    if not path.exists() and path.suffix == "" and (BUILTIN_DIR / f"{path}.toml").is_file():
        path = BUILTIN_DIR / f"{path}.toml"
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ScenarioError(
            f"{path}: no such scenario file (built-in scenarios: "
            f"{', '.join(builtin_scenarios())})"
        ) from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    try:
        return scenario_from_dict(
            data, source=path.resolve(), default_name=path.stem, families=families
        )
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
