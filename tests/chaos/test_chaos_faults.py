"""Adding a fault is one module and one line in the registry (README, "Adding a fault").

A toy fault family — what its module would hold — composed after the built-in ones as the
registry composes them, with nothing else edited: its TOML table is read and checked,
its faults are planned from the seed (after the built-in ones, which stay as they were),
applied by the nemesis against a fake fleet and server (held back while the server is
frozen), journaled, counted, and shown in the counters, every display and the timeline.
The composition refuses two families that claim the same table, kind or count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rdq_compliance.chaos.events import INFO, Journal, read_journal
from rdq_compliance.chaos.faults.display import (
    fault_phrases,
    live_rows,
    report_rows,
    summary_words,
)
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
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.nemesis import FaultPlan, Nemesis, plan_faults
from rdq_compliance.chaos.report import build_timeline, render_timeline
from rdq_compliance.chaos.scenario import ScenarioError, scenario_from_dict

# ---- the toy fault's module -------------------------------------------------------------------


@dataclass(frozen=True)
class FlipSettings:
    flips: int = 0


@dataclass
class FlipCounts(Counts):
    flipped: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"flips": self.flipped}


class FlipFaults(FaultFamily[FlipSettings, FlipCounts]):
    """``[faults.flip] count``: flips of a (pretend) server switch, journaled as ``flip``."""

    name = "flip"
    tables = ("flip",)
    kinds = (Kind("flip", 85, talks_to_server=True),)
    rows = (Row(95, "flips", label="switch flips", summary="switch flips"),)
    marks = ("flip",)
    styles = (Style("flip", "rule", "#123456"),)
    legend = (Legend(110, "switch flipped", "background:#123456"),)

    def parse(self, faults: Table) -> FlipSettings:
        t = faults.table("flip")
        flips = t.count(10)
        t.done(("count",))
        return FlipSettings(flips)

    def in_window(self, settings: FlipSettings) -> bool:
        return bool(settings.flips)

    def plan(self, settings: FlipSettings, ctx: PlanContext) -> list[PlannedFault]:
        return [PlannedFault(ctx.when(ctx.window), "flip") for _ in range(settings.flips)]

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        ctx.journal.write(INFO, "fault", kind="flip", target="server")
        ctx.counts(self).flipped += 1
        return True

    def new_counts(self) -> FlipCounts:
        return FlipCounts()

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        draft.marks.append(Mark(event["t"], "flip", "server", "switch flipped"))


FLIP = FlipFaults()
#: The registry with the toy's one line added.
FAMILIES = BUILTIN.plus(FLIP)

SCENARIO = {
    "duration": "4s",
    "seed": 11,
    "workers": {"count": 2},
    "faults": {"warmup": 0.5, "sigkill": {"random": 2}, "pause": {"count": 1}},
}


def _with_flips(n: int, **more: object) -> dict[str, object]:
    return {**SCENARIO, "faults": {**SCENARIO["faults"], "flip": {"count": n, **more}}}


# ---- the table, the plan ------------------------------------------------------------------------


def test_the_toy_table_is_read_and_checked() -> None:
    s = scenario_from_dict(_with_flips(3), families=FAMILIES)
    assert s.faults.of(FLIP) == FlipSettings(3) and s.faults.flips == 3
    assert s.faults.pauses == 1  # the built-in families read theirs as before
    with pytest.raises(ScenarioError, match=r"unknown key 'faults\.flip\.colour'; accepted here"):
        scenario_from_dict(_with_flips(1, colour="red"), families=FAMILIES)
    with pytest.raises(ScenarioError, match=r"faults\.flip\.count: expected an integer between"):
        scenario_from_dict(_with_flips(11), families=FAMILIES)
    with pytest.raises(ScenarioError, match=r"unknown key 'faults\.flop'; accepted here: .*flip"):
        scenario_from_dict({**SCENARIO, "faults": {"flop": {}}}, families=FAMILIES)
    # the warmup check counts the toy's faults too
    late = {**_with_flips(1), "duration": "0.5s"}
    late["faults"] = {"warmup": 0.5, "flip": {"count": 1}}
    with pytest.raises(ScenarioError, match=r"faults\.warmup \(0\.5s\) must be shorter"):
        scenario_from_dict(late, families=FAMILIES)
    # without the registry line, the table is unknown
    with pytest.raises(ScenarioError, match=r"unknown key 'faults\.flip'"):
        scenario_from_dict(_with_flips(1))


def test_the_toy_is_planned_after_the_built_in_faults_which_do_not_change() -> None:
    toy = scenario_from_dict(_with_flips(3), families=FAMILIES)
    plain = scenario_from_dict(SCENARIO)
    plan = plan_faults(toy, frozenset())
    assert plan == plan_faults(toy, frozenset()), "the same seed, another plan"
    flips = [f for f in plan.faults if f.kind == "flip"]
    assert len(flips) == 3 and all(0.5 <= f.at <= 4.0 for f in flips)
    assert [f for f in plan.faults if f.kind != "flip"] == list(plan_faults(plain, set()).faults)
    assert [f.at for f in plan.faults] == sorted(f.at for f in plan.faults)
    assert plan_faults(toy.with_seed(12), frozenset()).faults != plan.faults


# ---- the nemesis, the counters, the displays, the timeline ------------------------------------


class NoFleet:
    size = 2
    history_dir = Path("/nonexistent")

    def exited(self) -> list:
        return []

    def lost_hosts(self) -> list:
        return []

    def workers(self) -> list:
        return []


def test_the_toy_is_applied_journaled_counted_and_shown(tmp_path: Path) -> None:
    scenario = scenario_from_dict(_with_flips(2), families=FAMILIES)
    plan = FaultPlan((PlannedFault(1.0, "flip"), PlannedFault(1.5, "flip")))
    now = [100.0]
    nemesis = Nemesis(
        plan,
        scenario,
        NoFleet(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "ns",
        LockedJournal(Journal(tmp_path / "harness.jsonl", "harness")),
        clock=lambda: now[0],
    )
    nemesis.start()
    nemesis.server_frozen = True  # a fault that talks to the server waits for the resume
    for step in range(20):
        now[0] = 100.0 + step * 0.1
        nemesis.tick()
    assert not nemesis.finished and nemesis.counters.flipped == 0
    nemesis.server_frozen = False
    nemesis.tick()
    assert nemesis.finished

    counters = nemesis.counters
    assert counters.of(FLIP) == FlipCounts(2) and counters.flipped == 2
    counts = counters.as_dict()
    assert counts["flips"] == 2 and list(counts)[-3:] == ["flips", "unexpected_exits",
                                                         "workers_spawned"]  # fmt: skip
    events = list(read_journal(tmp_path / "harness.jsonl"))
    assert [(e["op"], e["kind"]) for e in events] == [("fault", "flip")] * 2
    # every display prints the toy's row
    assert ("switch flips", 2) in report_rows(counts, FAMILIES)
    assert summary_words(counts, FAMILIES) == ["2 switch flips"]
    assert ("switch flips", "2") in live_rows(counters)
    assert fault_phrases(counters)[-1] == "2 switch flips"
    # ... and the timeline draws its marks in its style, with its legend entry
    _, _, marks, _, _ = build_timeline(events, FAMILIES)
    flip = ("flip", "server", "switch flipped")
    assert [(m.kind, m.target, m.label) for m in marks] == [flip, flip]
    page = render_timeline(events, [], {"counters": counts}, FAMILIES)
    assert page.count('stroke="#123456" stroke-dasharray="4 3"><title>switch flipped') == 2
    assert '<i style="background:#123456"></i>switch flipped</span>' in page
    assert "<td>switch flips</td><td>2</td>" in page
    # the built-in composition knows nothing of it
    assert build_timeline(events)[2] == [] and "switch" not in render_timeline(events, [], {})


# ---- the composition refuses clashes ----------------------------------------------------------


class Clashing(FlipFaults):
    name = "clash"
    tables = ("pause",)


class CountClash(FlipFaults):
    name = "count-clash"
    tables = ("count_clash",)
    kinds = ()
    marks = ()
    styles = ()

    def new_counts(self) -> Any:
        @dataclass
        class Counts:
            pauses: int = 0

            def as_dict(self) -> dict[str, object]:
                return {}

        return Counts()


def test_families_that_clash_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"the key of \[faults\] 'pause' of 'clash' is already "):
        BUILTIN.plus(Clashing())
    with pytest.raises(ValueError, match=r"the count 'pauses' of 'count-clash' is already "):
        BUILTIN.plus(CountClash())
    with pytest.raises(ValueError, match=r"FlipFaults is named 'flip' twice"):
        FAMILIES.plus(FLIP)
    with pytest.raises(ValueError, match=r"unknown fault kind 'flop'"):
        FAMILIES.kind("flop")
