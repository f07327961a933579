"""A fault family's set-up and tear-down (``FaultFamily.setup`` / ``teardown``).

The families of the scenario are set up in order before the workers start and torn down
in reverse order once they stopped, through ``Families``: a set-up that fails tears
down the families set up before it, a tear-down that fails does not keep the others
from theirs. In a campaign (SQLite): two crafted families see their set-up before any
worker's first event and their tear-down after every worker's last one, with no worker
left; a third one sets up the network the harness's own storage goes through, which the
runner opens its storage past and closes only after that storage; when the fleet fails
to start, everything set up is torn down all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from rdq_compliance.chaos.events import read_journal
from rdq_compliance.chaos.faults.combined import Families
from rdq_compliance.chaos.faults.family import Counts, FaultFamily, SetupContext
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.scenario import Scenario, scenario_from_dict
from rdq_core.spi import Storage
from tests.chaos._chaos_support import start_session


@dataclass(frozen=True)
class NoSettings:
    pass


@dataclass
class NoCounts(Counts):
    pass


class Traced(FaultFamily[NoSettings, NoCounts]):
    """A family that records its set-up and tear-down in ``calls`` (``(what, name, at)``,
    with what it saw then: the worker journals written so far, the workers running)."""

    def __init__(self, name: str, calls: list[tuple[str, str, Any]], fail: str = "") -> None:
        self.name = name  # type: ignore[misc]
        self.calls = calls
        self.fail = fail

    def parse(self, faults: Table) -> NoSettings:
        return NoSettings()

    def new_counts(self) -> NoCounts:
        return NoCounts()

    def _record(self, what: str, ctx: SetupContext) -> None:
        self.calls.append((what, self.name, _seen(ctx)))
        if self.fail == what:
            raise RuntimeError(f"{self.name}'s {what} failed")

    def setup(self, ctx: SetupContext) -> None:
        self._record("setup", ctx)

    def teardown(self, ctx: SetupContext) -> None:
        self._record("teardown", ctx)


def _seen(ctx: Any) -> dict[str, Any]:
    """When a hook ran, the worker journals already written and the workers running."""
    history = getattr(getattr(ctx, "launcher", None), "history_dir", None)
    journals = sorted(p.name for p in history.glob("w*.jsonl")) if history else []
    return {"t": time.time(), "journals": journals, "workers": _workers()}


def _workers() -> list[int]:
    """This process's worker processes still running."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "rdq_compliance.chaos.worker_main" in p.cmdline() and p.status() != "zombie":
                out.append(p.pid)
        except psutil.NoSuchProcess:
            continue
    return out


# ---- through Families -------------------------------------------------------------------------


def _steps(calls: list[tuple[str, str, Any]]) -> list[tuple[str, str]]:
    return [(what, name) for what, name, _ in calls]


def test_families_are_set_up_in_order_and_torn_down_in_reverse() -> None:
    calls: list[tuple[str, str, Any]] = []
    families = Families(Traced("a", calls), Traced("b", calls), Traced("c", calls))
    families.setup(None)  # type: ignore[arg-type]
    families.teardown(None)  # type: ignore[arg-type]
    assert _steps(calls) == [
        ("setup", "a"), ("setup", "b"), ("setup", "c"),
        ("teardown", "c"), ("teardown", "b"), ("teardown", "a"),
    ]  # fmt: skip


def test_a_failed_set_up_tears_down_the_families_set_up_before_it() -> None:
    calls: list[tuple[str, str, Any]] = []
    families = Families(
        Traced("a", calls), Traced("b", calls), Traced("c", calls, fail="setup"), Traced("d", calls)
    )
    with pytest.raises(RuntimeError, match="c's setup failed"):
        families.setup(None)  # type: ignore[arg-type]
    assert _steps(calls) == [
        ("setup", "a"), ("setup", "b"), ("setup", "c"), ("teardown", "b"), ("teardown", "a"),
    ]  # fmt: skip


def test_a_failed_tear_down_leaves_the_others_to_theirs_and_is_raised() -> None:
    calls: list[tuple[str, str, Any]] = []
    families = Families(
        Traced("a", calls), Traced("b", calls, fail="teardown"), Traced("c", calls, fail="teardown")
    )
    families.setup(None)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="c's teardown failed"):
        families.teardown(None)  # type: ignore[arg-type]
    assert _steps(calls)[3:] == [("teardown", "c"), ("teardown", "b"), ("teardown", "a")]


# ---- in a campaign ----------------------------------------------------------------------------


class Route:
    """A network that cuts nothing: it records the harness's storage opened past it, and
    its own close (with whether that storage was closed by then)."""

    def __init__(self) -> None:
        self.storage: _Watched | None = None
        self.closed_after_storage: bool | None = None

    def harness_storage(self, open_storage: Callable[[str | None], Storage]) -> Storage:
        self.storage = _Watched(open_storage(None))
        return self.storage  # type: ignore[return-value]

    def span(self, slots: Sequence[int]) -> list[int]:
        return sorted(slots)

    def partition(self, slots: Sequence[int]) -> None:
        raise AssertionError("no partition is planned")

    lose = heal = partition

    def close(self) -> None:
        self.closed_after_storage = self.storage is not None and self.storage.closed


class _Watched:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.closed = False
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        self.calls += 1
        return getattr(self._storage, name)

    def close(self) -> None:
        self.closed = True
        self._storage.close()


class Routed(Traced):
    """A family that sets up the network the harness's storage goes through (kept in
    ``ctx.network``, as the network family keeps its partitioner) and takes it down."""

    def __init__(self, calls: list[tuple[str, str, Any]]) -> None:
        super().__init__("routed", calls)
        self.route = Route()

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        ctx.network, ctx.no_network = self.route, None  # type: ignore[assignment]

    def teardown(self, ctx: SetupContext) -> None:
        super().teardown(ctx)
        network, ctx.network = ctx.network, None
        assert network is self.route
        network.close()


SCENARIO = {
    "name": "setup",
    "duration": "2s",
    "seed": 5,
    "workers": {"count": 2, "lease": "1s", "poll_interval": "30ms"},
    "workload": {"tasks": 40, "spread": "1s"},
    "faults": {"warmup": 0.5, "sigkill": {"random": 1}},
    "limits": {"deadline": "30s", "drain_timeout": "20s"},
}


def _scenario(*families: FaultFamily[Any, Any]) -> Scenario:
    return scenario_from_dict(SCENARIO, families=BUILTIN.plus(*families))


@pytest.fixture
def sqlite(tmp_path: Path):
    session = start_session("sqlite", tmp_path / "server")
    try:
        yield session
    finally:
        session.close()


@pytest.mark.chaos
def test_a_campaign_sets_its_families_up_before_the_workers_and_down_after(sqlite, tmp_path):
    from rdq_compliance.chaos.runner import run_campaign

    calls: list[tuple[str, str, Any]] = []
    routed = Routed(calls)
    scenario = _scenario(Traced("first", calls), routed, Traced("last", calls))
    result = run_campaign(scenario, session=sqlite, outdir=tmp_path / "run")
    assert result.checked and result.violations == [], [str(v)[:300] for v in result.violations]
    assert result.counters.total_kills == 1 and result.drained, result.counters.notes
    assert _steps(calls) == [
        ("setup", "first"), ("setup", "routed"), ("setup", "last"),
        ("teardown", "last"), ("teardown", "routed"), ("teardown", "first"),
    ]  # fmt: skip
    history = tmp_path / "run" / "history"
    times = [e["t"] for p in history.glob("w*.jsonl") for e in read_journal(p)]
    assert len(times) > 100
    for what, name, seen in calls:
        if what == "setup":
            assert seen["journals"] == [] and seen["workers"] == [], (name, seen)
            assert seen["t"] < min(times), name
        else:
            assert seen["workers"] == [], (name, seen)
            assert seen["t"] > max(times), name
    # the harness's storage went through the network the family set up, which was taken
    # down after that storage was closed
    assert routed.route.storage is not None and routed.route.storage.calls > 40
    assert routed.route.closed_after_storage is True


@pytest.mark.chaos
def test_what_was_set_up_is_torn_down_when_the_fleet_fails_to_start(sqlite, tmp_path, monkeypatch):
    from rdq_compliance.chaos import runner

    def no_start(self: runner.Fleet) -> None:
        raise RuntimeError("the fleet did not start")

    monkeypatch.setattr(runner.Fleet, "start", no_start)
    calls: list[tuple[str, str, Any]] = []
    routed = Routed(calls)
    scenario = _scenario(Traced("first", calls), routed)
    with pytest.raises(RuntimeError, match="the fleet did not start"):
        runner.run_campaign(scenario, session=sqlite, outdir=tmp_path / "run")
    assert _steps(calls) == [
        ("setup", "first"), ("setup", "routed"), ("teardown", "routed"), ("teardown", "first"),
    ]  # fmt: skip
    assert routed.route.closed_after_storage is True
    assert _workers() == []


@pytest.mark.chaos
def test_a_family_whose_set_up_fails_leaves_nothing_set_up(sqlite, tmp_path):
    from rdq_compliance.chaos.runner import run_campaign

    calls: list[tuple[str, str, Any]] = []
    routed = Routed(calls)
    scenario = _scenario(routed, Traced("broken", calls, fail="setup"))
    with pytest.raises(RuntimeError, match="broken's setup failed"):
        run_campaign(scenario, session=sqlite, outdir=tmp_path / "run")
    assert _steps(calls) == [("setup", "routed"), ("setup", "broken"), ("teardown", "routed")]
    assert routed.route.storage is None  # the campaign stopped before its storage opened
    assert not list((tmp_path / "run" / "history").glob("w*.jsonl"))
