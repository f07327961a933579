"""A pytest plugin: where the CPU of a run of the kit's own tests goes. Each test's CPU
seconds, and the tests that spent the most, printed at the end of every run.

A test's CPU seconds are those of the process running it (an xdist worker, or pytest
itself) and of its descendants, from the start of its setup to the end of its teardown:

- the process's own user + system time (``RUSAGE_SELF``);
- the descendants it waited for, and theirs (``RUSAGE_CHILDREN``): the pytest runs,
  servers and worker processes a test starts and reaps;
- the descendants still alive at the end (``psutil``): what they spent since the start
  (all of it, for one started during the test); one alive at the start and waited for
  during the test counts only what it spent after the start.

Not counted: the servers this machine runs for everyone (PostgreSQL on 5432, Redis on
6379, ...) and containers (children of the Docker engine), whose CPU the tests cause but
do not own; a descendant that daemonized away from the tree, or that exited without being
waited for by a process of the tree. The closing table says how much of the machine's
CPU over the run the tests account for (``/proc/stat``), so that the gap is visible.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Generator
from dataclasses import dataclass, field

import psutil
import pytest

#: the key of a teardown report's user property carrying the test's CPU seconds
PROPERTY = "rdq_cpu_seconds"
#: how many of the dearest tests the closing table lists
TOP = 20
#: where a run keeps every test's CPU seconds in pytest's cache
CACHE_KEY = "rdq/cpu"


def _own_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def _live_descendants() -> dict[tuple[int, float], float]:
    """(pid, start time) -> CPU seconds so far, of every live descendant."""
    seen: dict[tuple[int, float], float] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            with child.oneshot():
                times = child.cpu_times()
                seen[(child.pid, child.create_time())] = (
                    times.user + times.system + times.children_user + times.children_system
                )
        except psutil.Error:
            continue
    return seen


@dataclass
class _Start:
    own: float
    live: dict[tuple[int, float], float]


def _snapshot() -> _Start:
    return _Start(own=_own_seconds(), live=_live_descendants())


def _spent_since(start: _Start) -> float:
    live = _live_descendants()
    grown = sum(seconds - start.live.get(key, 0.0) for key, seconds in live.items())
    # one alive at the start and waited for since: its whole life is in RUSAGE_CHILDREN
    # (or in its live parent's children times), and what it spent before the start
    # belongs to the tests before
    before = sum(seconds for key, seconds in start.live.items() if key not in live)
    return max(_own_seconds() - start.own + grown - before, 0.0)


_starts: dict[str, _Start] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _starts[item.nodeid] = _snapshot()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A teardown report carries its test's CPU seconds, which xdist takes to the
    controller."""
    report = yield
    if report.when == "teardown" and (start := _starts.pop(item.nodeid, None)) is not None:
        report.user_properties.append((PROPERTY, round(_spent_since(start), 3)))
    return report


def _machine_seconds() -> float | None:
    """The machine's busy CPU seconds since boot (every core, idle and iowait left out)."""
    try:
        fields = open("/proc/stat").readline().split()[1:]
    except OSError:
        return None
    ticks = [int(value) for value in fields]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass
class Ledger:
    """The controller's record of a run: each test's CPU seconds."""

    seconds: dict[str, float] = field(default_factory=dict)
    machine_at_start: float | None = field(default_factory=_machine_seconds)

    def record(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == PROPERTY:
                self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + value

    def lines(self) -> list[str]:
        if not self.seconds:
            return []
        total = sum(self.seconds.values())
        dearest = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:TOP]
        out = [
            f"{len(self.seconds)} tests spent {total:,.0f} CPU seconds; "
            f"the {len(dearest)} dearest {sum(s for _, s in dearest):,.0f}:"
        ]
        out += [f"{seconds:8.1f}  {nodeid}" for nodeid, seconds in dearest]
        now = _machine_seconds()
        if now is not None and self.machine_at_start is not None:
            out.append(
                f"the machine was busy {now - self.machine_at_start:,.0f} CPU seconds over "
                f"the run (every process, the shared servers and containers included)"
            )
        return out

    def save(self, config: pytest.Config) -> None:
        cache = getattr(config, "cache", None)
        if cache is not None and self.seconds:
            cache.set(CACHE_KEY, dict(sorted(self.seconds.items(), key=lambda kv: -kv[1])))


_ledger: Ledger | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The controller (or a run without xdist) keeps the ledger; a worker only measures."""
    global _ledger
    if not hasattr(config, "workerinput"):
        _ledger = Ledger()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _ledger is not None:
        _ledger.record(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _ledger is not None and (lines := _ledger.lines()):
        terminalreporter.section("CPU seconds per test (tests/_cpu.py)")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _ledger is not None:
        _ledger.save(session.config)
