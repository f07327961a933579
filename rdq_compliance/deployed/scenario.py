"""A deployed campaign's scenario: what it runs, before any seed or system is chosen.

A :class:`Scenario` says how many workers run, the job mix (how many jobs of each
handler behaviour, how many of them delayed), the fault window, the faults planned in it
and the drain's margin; :func:`rdq_compliance.deployed.plan.make_plan` draws a plan from
it for one seed, one system and one server. Two scenarios are built in
(:data:`BUILTIN`): ``standard`` and a short ``smoke`` (for tests); :func:`load_scenario`
also reads a TOML file (see :data:`EXAMPLE`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from rdq_core.errors import RdqError

__all__ = ["BUILTIN", "EXAMPLE", "Scenario", "ScenarioError", "load_scenario"]


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
    partition: int = 1  # a worker (on a fleet: its host) cut off the server for
    partition_factor: float = 1.5  # partition_factor x recovery_after
    clock_skew: int = 1  # a worker's clock (on a fleet: its host's) jumps ahead by
    skew_factor: float = 1.5  # skew_factor x recovery_after, until the workers stop
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
        for name in ("pause_factor", "partition_factor", "skew_factor"):
            if getattr(self, name) <= 0:
                raise ScenarioError(f"{name}: a positive number")
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
        partition=0,
        clock_skew=0,
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
partition = 1
partition_factor = 1.5
clock_skew = 1
skew_factor = 1.5
"""

_TOP = {"name", "workers", "window", "drain_margin"}
_JOBS = {"succeed", "succeed_seconds", "sleep", "fail", "retry", "retries", "hold", "delayed",
         "max_delay"}  # fmt: skip
_FAULTS = {"kill", "restart_after", "pause", "pause_factor", "part_kill", "server_kill",
           "server_down", "server_freeze", "server_frozen", "cut", "partition",
           "partition_factor", "clock_skew", "skew_factor"}  # fmt: skip
_COUNTS = {"succeed", "sleep", "fail", "retry", "hold", "delayed", "kill", "pause", "part_kill",
           "server_kill", "server_freeze", "cut", "partition", "clock_skew"}  # fmt: skip


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
