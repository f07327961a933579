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

``[faults.failover]`` needs a replicated server (``Server.faults`` has ``failover``:
e.g. ``--rdq-option pg_replica=async`` or ``redis_replica=async``); otherwise it is
skipped with a note. ``count`` failovers are spread over the fault window; each SIGKILLs
the primary, promotes the replica and moves the server's address to it (a fresh replica
of the new primary is started for the next one). ``replica_lag`` (a positive duration;
leave it out for none) first holds the replication link for that long — the replica
lags — while the primary goes on acknowledging writes: with asynchronous replication
what it acknowledged meanwhile is lost at the failover; with synchronous replication the
writes wait (or fail) instead.

``[faults.clock_skew]``: ``workers`` slots (which ones, and each one's offset and drift,
drawn from the seed) run every worker they hold under libfaketime
(``FAKETIME="<offset> x<drift>"``): the worker's time of day is off by ``offset`` at its
start and runs ``drift`` times as fast; its timers (the monotonic clock) and its journal
stay true. ``offset`` is a signed duration or ``[min, max]`` of them (default
``["-3s", "3s"]``); ``drift`` a rate in (0, 10] or ``[min, max]`` (default ``1``: no
drift). A correct backend judges leases by the storage's clock and is unaffected; one
that takes the time from its client is caught by the ``storage-clock`` rule. Skipped,
with a note, where libfaketime is not installed.
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

from rdq_core.validation import NAME_RE

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
#: Handler behaviours a task can have (the workload's mix).
HANDLER_KINDS: tuple[str, ...] = ("ok", "flaky", "permanent", "overrun")


class ScenarioError(ValueError):
    """A scenario file is missing, malformed, or holds a bad value (the key is named)."""


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
    mix may hold several entries of one behaviour.
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


@dataclass(frozen=True)
class Workload:
    tasks: int = 2000
    queue: str = "chaos"
    #: Seconds over which the tasks' due times are spread (``None``: the fault window).
    spread: float | None = None
    handlers: tuple[HandlerMix, ...] = (HandlerMix("ok", 1.0, name="ok"),)


@dataclass(frozen=True)
class Faults:
    """What the nemesis injects during the fault window."""

    sigkill: Mapping[str, int] = field(default_factory=dict)
    pauses: int = 0
    #: A pause lasts ``lease * factor`` with factor drawn from this range (> 1: past the lease).
    pause_factor: tuple[float, float] = (2.0, 3.0)
    server_restarts: int = 0
    #: Seconds the server stays down before it is restarted.
    server_down: float = 1.0
    #: Freezes of the whole server (SIGSTOP of its process group, or ``docker pause``).
    server_pauses: int = 0
    #: A server freeze lasts ``lease * factor`` with factor drawn from this range (> 1).
    server_pause_factor: tuple[float, float] = (1.5, 2.5)
    connection_cuts: int = 0
    #: Failovers of a replicated server: primary SIGKILLed, replica promoted.
    failovers: int = 0
    #: Seconds the replication link is held (the replica lags) before each failover's kill.
    failover_lag: float = 0.0
    #: Network partitions: ``partition_workers`` worker slots cut off from the server (every
    #: packet dropped both ways: their calls hang) for ``lease * factor``, then healed.
    partitions: int = 0
    partition_workers: int = 1
    partition_factor: tuple[float, float] = (2.0, 3.0)
    #: Packet loss, the milder variant: ``loss_workers`` slots lose ``loss_percent`` % of
    #: their packets (both ways) for ``lease * factor``. (A delay needs ``tc netem``.)
    losses: int = 0
    loss_workers: int = 1
    loss_percent: int = 20
    loss_factor: tuple[float, float] = (2.0, 3.0)
    #: Seconds between redrives of the DLQ (``None``: no redrive).
    redrive_interval: float | None = None
    #: No fault before this many seconds into the window (workers start up).
    warmup: float = 1.0
    #: Worker slots run under libfaketime (``[faults.clock_skew] workers``).
    skewed_workers: int = 0
    #: A skewed slot's offset from true time (seconds), drawn from this range.
    skew_offset: tuple[float, float] = (-3.0, 3.0)
    #: A skewed slot's clock rate, drawn from this range (1.0: true rate).
    skew_drift: tuple[float, float] = (1.0, 1.0)

    @property
    def kills(self) -> int:
        return sum(self.sigkill.values())


@dataclass(frozen=True)
class Limits:
    #: Wall-clock budget of the fault phase and the drain together (seconds).
    deadline: float = 170.0
    #: How long the drain may take (seconds) before the run is declared not quiesced.
    drain_timeout: float = 60.0


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int
    #: The fault window (seconds): faults are scheduled within it.
    duration: float
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    workload: Workload = field(default_factory=Workload)
    faults: Faults = field(default_factory=Faults)
    limits: Limits = field(default_factory=Limits)
    source: Path | None = None

    def with_seed(self, seed: int) -> Scenario:
        return replace(self, seed=check_seed(seed, "seed"))

    @property
    def spread(self) -> float:
        return self.duration if self.workload.spread is None else self.workload.spread


# ---- parsing helpers ----------------------------------------------------------------------

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)\s*")
DURATION_HELP = 'a number of seconds or a string like "500ms", "1.5s", "2m"'


class _Table:
    """A TOML table being read: every key taken is remembered; leftovers are errors."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(f"{where or 'the file'}: expected a table, got {_show(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self.taken: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str, default: Any = None) -> Any:
        self.taken.add(name)
        return self.data.get(name, default)

    def has(self, name: str) -> bool:
        return name in self.data

    def table(self, name: str) -> _Table:
        self.taken.add(name)
        return _Table(self.data.get(name, {}), self.key(name))

    def done(self, accepted: tuple[str, ...] | None = None) -> None:
        unknown = sorted(set(self.data) - self.taken)
        if unknown:
            names = accepted or tuple(sorted(self.taken))
            raise ScenarioError(
                f"unknown key{'s' if len(unknown) > 1 else ''} "
                + ", ".join(repr(self.key(k)) for k in unknown)
                + f"; accepted here: {', '.join(names)}"
            )


def _show(value: object) -> str:
    return f"{type(value).__name__} {value!r}"


def check_seed(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ScenarioError(f"{key}: expected an integer in [0, 2**63), got {_show(value)}")
    return value


def _flag(t: _Table, name: str, default: bool) -> bool:
    value = t.get(name, default)
    if not isinstance(value, bool):
        raise ScenarioError(f"{t.key(name)}: must be true or false, got {value!r}")
    return value


def _int(t: _Table, name: str, default: int, *, low: int, high: int | None = None) -> int:
    value = t.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{t.key(name)}: expected an integer, got {_show(value)}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise ScenarioError(f"{t.key(name)}: expected an integer {bound}, got {value}")
    return value


def _number(
    t: _Table,
    name: str,
    default: float,
    *,
    low: float,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    value = t.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{t.key(name)}: expected a number, got {_show(value)}")
    value = float(value)
    bad = value < low or (open_low and value == low)
    if high is not None:
        bad = bad or value > high or (open_high and value == high)
    if bad:
        lo = "(" if open_low else "["
        hi = ")" if open_high else "]"
        span = f"{lo}{low}, {high}{hi}" if high is not None else f"{lo}{low}, ∞)"
        raise ScenarioError(f"{t.key(name)}: expected a number in {span}, got {value}")
    return value


def parse_duration(value: object, key: str) -> float:
    """Seconds from a number or a ``"1.5s"``-style string; > 0."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.fullmatch(value)
        if m:
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds is None or not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ScenarioError(
            f"{key}: expected a positive duration ({DURATION_HELP}), got {_show(value)}"
        )
    return seconds


_OFFSET_RE = re.compile(r"\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)\s*")
OFFSET_HELP = 'a signed number of seconds or a string like "-4.5s", "+500ms", "0s"'


def parse_offset(value: object, key: str) -> float:
    """Signed seconds from a number or a ``"-4.5s"``-style string (zero allowed)."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        m = _OFFSET_RE.fullmatch(value)
        if m:
            seconds = float(m.group(2)) * _UNITS[m.group(3)] * (-1 if m.group(1) == "-" else 1)
    if seconds is None or seconds != seconds or abs(seconds) > 86_400:
        raise ScenarioError(
            f"{key}: expected an offset ({OFFSET_HELP}; at most a day), got {_show(value)}"
        )
    return seconds


def _offset_range(t: _Table, name: str, default: tuple[float, float]) -> tuple[float, float]:
    value = t.get(name, None)
    if value is None:
        return default
    if not isinstance(value, list):
        one = parse_offset(value, t.key(name))
        return (one, one)
    if len(value) != 2:
        raise ScenarioError(f"{t.key(name)}: expected [min, max] (two offsets), got {_show(value)}")
    lo = parse_offset(value[0], f"{t.key(name)}[0]")
    hi = parse_offset(value[1], f"{t.key(name)}[1]")
    if lo > hi:
        raise ScenarioError(f"{t.key(name)}: min {lo}s is greater than max {hi}s")
    return (lo, hi)


def _duration(t: _Table, name: str, default: float | None) -> float | None:
    value = t.get(name, None)
    if value is None:
        return default
    return parse_duration(value, t.key(name))


def _duration_range(t: _Table, name: str, default: tuple[float, float]) -> tuple[float, float]:
    value = t.get(name, None)
    if value is None:
        return default
    if not isinstance(value, list):
        one = parse_duration(value, t.key(name))
        return (one, one)
    if len(value) != 2:
        raise ScenarioError(
            f"{t.key(name)}: expected [min, max] (two durations), got {_show(value)}"
        )
    lo = parse_duration(value[0], f"{t.key(name)}[0]")
    hi = parse_duration(value[1], f"{t.key(name)}[1]")
    if lo > hi:
        raise ScenarioError(f"{t.key(name)}: min {lo}s is greater than max {hi}s")
    return (lo, hi)


def _number_range(
    t: _Table, name: str, default: tuple[float, float], *, low: float, integer: bool = False
) -> tuple[float, float]:
    value = t.get(name, None)
    if value is None:
        return default
    items = value if isinstance(value, list) else [value, value]
    what = "integers" if integer else "numbers"
    ok_type = (int,) if integer else (int, float)
    if (
        len(items) != 2
        or any(isinstance(x, bool) or not isinstance(x, ok_type) for x in items)
        or items[0] > items[1]
        or items[0] < low
    ):
        raise ScenarioError(
            f"{t.key(name)}: expected one of {what} or [min, max] of {what}, "
            f">= {low}, min <= max; got {_show(value)}"
        )
    return (items[0], items[1])


# ---- sections -----------------------------------------------------------------------------


def _workers(t: _Table) -> WorkerSettings:
    d = WorkerSettings()
    lease = _duration(t, "lease", d.lease)
    assert lease is not None
    poll = _duration(t, "poll_interval", d.poll_interval)
    max_poll = _duration(t, "max_poll_interval", d.max_poll_interval)
    base = _duration(t, "retry_base", d.retry_base)
    cap = _duration(t, "retry_cap", d.retry_cap)
    assert poll is not None and max_poll is not None and base is not None and cap is not None
    if max_poll < poll:
        raise ScenarioError(
            f"{t.key('max_poll_interval')}: must be >= poll_interval ({poll}s), got {max_poll}s"
        )
    if cap < base:
        raise ScenarioError(f"{t.key('retry_cap')}: must be >= retry_base ({base}s), got {cap}s")
    out = WorkerSettings(
        count=_int(t, "count", d.count, low=1, high=256),
        concurrency=_int(t, "concurrency", d.concurrency, low=1, high=64),
        batch=_int(t, "batch", d.batch, low=1, high=1000),
        lease=lease,
        heartbeat_fraction=_number(
            t,
            "heartbeat_fraction",
            d.heartbeat_fraction,
            low=0,
            high=1,
            open_low=True,
            open_high=True,
        ),
        max_attempts=_int(t, "max_attempts", d.max_attempts, low=1, high=1000),
        poll_interval=poll,
        max_poll_interval=max_poll,
        retry_base=base,
        retry_cap=cap,
    )
    t.done()
    return out


_HANDLER_KEYS: dict[str, tuple[str, ...]] = {
    "ok": ("kind", "weight", "duration"),
    "flaky": ("kind", "weight", "duration", "failures"),
    "permanent": ("kind", "weight", "duration"),
    "overrun": ("kind", "weight", "factor", "times", "abandon"),
}


def _handler(t: _Table, name: str) -> HandlerMix:
    kind = t.get("kind", name)
    if kind not in HANDLER_KINDS:
        what = f"{t.key('kind')}" if t.has("kind") else f"{t.where} (no 'kind' key)"
        raise ScenarioError(
            f"{what}: the behaviour must be one of {', '.join(HANDLER_KINDS)}, got {kind!r}; "
            'name an entry after its behaviour, or give it kind = "..."'
        )
    d = HandlerMix(kind, 1.0)
    weight = _number(t, "weight", 1.0, low=0)
    default_duration = (0.005, 0.02) if kind == "permanent" else d.duration
    mix = HandlerMix(
        kind=kind,
        name=name,
        weight=weight,
        duration=_duration_range(t, "duration", default_duration)
        if "duration" in _HANDLER_KEYS[kind]
        else d.duration,
        failures=tuple(
            int(x) for x in _number_range(t, "failures", d.failures, low=1, integer=True)
        )  # type: ignore[arg-type]
        if kind == "flaky"
        else d.failures,
        factor=_number(t, "factor", d.factor, low=1, open_low=True)
        if kind == "overrun"
        else d.factor,
        times=_int(t, "times", d.times, low=1) if kind == "overrun" else d.times,
        abandon=_flag(t, "abandon", d.abandon) if kind == "overrun" else d.abandon,
    )
    t.done(_HANDLER_KEYS[kind])
    return mix


def _workload(t: _Table) -> Workload:
    d = Workload()
    queue = t.get("queue", d.queue)
    if not isinstance(queue, str) or not NAME_RE.fullmatch(queue):
        raise ScenarioError(
            f"{t.key('queue')}: expected a queue name matching [a-z0-9._-]{{1,240}}, "
            f"got {_show(queue)}"
        )
    tasks = _int(t, "tasks", d.tasks, low=1, high=10_000_000)
    spread = _duration(t, "spread", None) if t.has("spread") else None
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


def _faults(t: _Table) -> Faults:
    d = Faults()
    sigkill: dict[str, int] = {}
    if t.has("sigkill"):
        kt = t.table("sigkill")
        for point in KILL_POINTS:
            if kt.has(point):
                sigkill[point] = _int(kt, point, 0, low=0, high=100_000)
        kt.done(KILL_POINTS)
    pt = t.table("pause")
    pauses = _int(pt, "count", 0, low=0, high=100_000)
    factor = _number_range(pt, "factor", d.pause_factor, low=1.0)
    if factor[0] <= 1.0:
        raise ScenarioError(
            f"{pt.key('factor')}: a pause must outlast the lease: factor(s) > 1, got {factor}"
        )
    pt.done(("count", "factor"))
    st = t.table("server_restart")
    restarts = _int(st, "count", 0, low=0, high=1000)
    down = _duration(st, "down", d.server_down)
    st.done(("count", "down"))
    zt = t.table("server_pause")
    server_pauses = _int(zt, "count", 0, low=0, high=1000)
    zfactor = _number_range(zt, "factor", d.server_pause_factor, low=1.0)
    if zfactor[0] <= 1.0:
        raise ScenarioError(
            f"{zt.key('factor')}: a server freeze must outlast the lease: factor(s) > 1, "
            f"got {zfactor}"
        )
    zt.done(("count", "factor"))
    kt2 = t.table("clock_skew")
    skewed = _int(kt2, "workers", 0, low=0, high=256)
    offset = _offset_range(kt2, "offset", d.skew_offset)
    drift = _number_range(kt2, "drift", d.skew_drift, low=0.0)
    if drift[0] <= 0 or drift[1] > 10:
        raise ScenarioError(
            f"{kt2.key('drift')}: a clock rate must be in (0, 10] (1 = true rate), got {drift}"
        )
    kt2.done(("workers", "offset", "drift"))
    ct = t.table("cut_connections")
    cuts = _int(ct, "count", 0, low=0, high=100_000)
    ct.done(("count",))
    failovers, failover_lag = _failover(t)
    nt = t.table("partition")
    partitions = _int(nt, "count", 0, low=0, high=10_000)
    partition_workers = _int(nt, "workers", d.partition_workers, low=1, high=256)
    nfactor = _number_range(nt, "factor", d.partition_factor, low=1.0)
    if nfactor[0] <= 1.0:
        raise ScenarioError(
            f"{nt.key('factor')}: a partition must outlast the lease: factor(s) > 1, "
            f"got {nfactor}"
        )
    nt.done(("count", "workers", "factor"))
    lt = t.table("loss")
    losses = _int(lt, "count", 0, low=0, high=10_000)
    loss_workers = _int(lt, "workers", d.loss_workers, low=1, high=256)
    loss_percent = _int(lt, "percent", d.loss_percent, low=1, high=99)
    lfactor = _number_range(lt, "factor", d.loss_factor, low=0.0)
    if lfactor[0] <= 0:
        raise ScenarioError(f"{lt.key('factor')}: factor(s) > 0, got {lfactor}")
    lt.done(("count", "workers", "percent", "factor"))
    redrive = _duration(t, "redrive_interval", None)
    warmup = _number(t, "warmup", d.warmup, low=0)
    t.done(
        (
            "sigkill",
            "pause",
            "server_restart",
            "server_pause",
            "clock_skew",
            "cut_connections",
            "failover",
            "partition",
            "loss",
            "redrive_interval",
            "warmup",
        )
    )
    assert down is not None
    return Faults(
        sigkill=sigkill,
        pauses=pauses,
        pause_factor=(float(factor[0]), float(factor[1])),
        server_restarts=restarts,
        server_down=down,
        server_pauses=server_pauses,
        server_pause_factor=(float(zfactor[0]), float(zfactor[1])),
        connection_cuts=cuts,
        failovers=failovers,
        failover_lag=failover_lag,
        partitions=partitions,
        partition_workers=partition_workers,
        partition_factor=(float(nfactor[0]), float(nfactor[1])),
        losses=losses,
        loss_workers=loss_workers,
        loss_percent=loss_percent,
        loss_factor=(float(lfactor[0]), float(lfactor[1])),
        redrive_interval=redrive,
        warmup=warmup,
        skewed_workers=skewed,
        skew_offset=offset,
        skew_drift=(float(drift[0]), float(drift[1])),
    )


def _failover(t: _Table) -> tuple[int, float]:
    """``[faults.failover]``: ``count`` and ``replica_lag`` (see the module docstring)."""
    ft = t.table("failover")
    count = _int(ft, "count", 0, low=0, high=100)
    lag = _duration(ft, "replica_lag", 0.0)
    ft.done(("count", "replica_lag"))
    assert lag is not None
    return count, lag


def _limits(t: _Table) -> Limits:
    d = Limits()
    deadline = _duration(t, "deadline", d.deadline)
    drain = _duration(t, "drain_timeout", d.drain_timeout)
    t.done(("deadline", "drain_timeout"))
    assert deadline is not None and drain is not None
    return Limits(deadline=deadline, drain_timeout=drain)


_TOP_KEYS = ("name", "seed", "duration", "workers", "workload", "faults", "limits")


def scenario_from_dict(
    data: Mapping[str, Any], *, source: Path | None = None, default_name: str = "scenario"
) -> Scenario:
    """Validate a parsed scenario (e.g. a TOML document); raises :class:`ScenarioError`."""
    top = _Table(dict(data), "")
    name = top.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name):
        raise ScenarioError(
            f"name: expected 1-100 characters from [A-Za-z0-9._-], got {_show(name)}"
        )
    seed = check_seed(top.get("seed", 0), "seed")
    duration = _duration(top, "duration", None)
    if duration is None:
        raise ScenarioError(f"duration: required: the fault window ({DURATION_HELP})")
    workers = _workers(top.table("workers"))
    workload = _workload(top.table("workload"))
    faults = _faults(top.table("faults"))
    limits = _limits(top.table("limits"))
    top.done(_TOP_KEYS)
    if faults.skewed_workers > workers.count:
        raise ScenarioError(
            f"faults.clock_skew.workers: {faults.skewed_workers} skewed slots, but the fleet "
            f"has {workers.count} (workers.count); give at most {workers.count}"
        )
    if faults.warmup >= duration and (
        faults.kills
        or faults.pauses
        or faults.server_restarts
        or faults.server_pauses
        or faults.connection_cuts
        or faults.failovers
        or faults.partitions
        or faults.losses
    ):
        raise ScenarioError(
            f"faults.warmup ({faults.warmup}s) must be shorter than duration ({duration}s)"
        )
    if faults.partitions and faults.partition_workers > workers.count:
        raise ScenarioError(
            f"faults.partition.workers ({faults.partition_workers}) must be at most "
            f"workers.count ({workers.count})"
        )
    if faults.losses and faults.loss_workers > workers.count:
        raise ScenarioError(
            f"faults.loss.workers ({faults.loss_workers}) must be at most "
            f"workers.count ({workers.count})"
        )
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


def load_scenario(path: str | Path) -> Scenario:
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
        return scenario_from_dict(data, source=path.resolve(), default_name=path.stem)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None
