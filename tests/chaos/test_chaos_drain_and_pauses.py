"""The drain that ends on a stall, the pause that waits for a reclaim, a handler's own
spread: each shown to do what it says and to fail where it should."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rdq_compliance.chaos import runner
from rdq_compliance.chaos.nemesis import ClaimTracker, RunTracker
from rdq_compliance.chaos.scenario import ScenarioError, load_scenario, scenario_from_dict
from rdq_core.model import QueueStats
from tests._waiting import HANG_S


class _Nemesis:
    def tick(self) -> None:
        pass


class _Storage:
    """``stats`` answers from a list, repeating the last entry."""

    def __init__(self, stats: list[QueueStats]) -> None:
        self._stats = stats

    def stats(self, queue: str) -> QueueStats:
        return self._stats.pop(0) if len(self._stats) > 1 else self._stats[0]


def _drain(stats: list[QueueStats], stall: float, budget: float = HANG_S) -> tuple[bool, bool]:
    """The runner's drain over ``stats``; by default ``budget`` is a hang guard (a drain
    that ends drained or stalled ends long before it)."""
    return runner._drain(
        _Storage(stats),  # type: ignore[arg-type]
        "q",
        _Nemesis(),  # type: ignore[arg-type]
        time.monotonic() + budget,
        stall,
        lambda: None,
    )


def test_a_wedged_task_ends_the_drain_as_stalled_not_drained() -> None:
    budget = 30.0
    t0 = time.monotonic()
    ended = _drain([QueueStats(in_flight=1, succeeded=9)], stall=0.3, budget=budget)
    assert ended == (False, True)
    assert time.monotonic() - t0 < budget / 2  # ended by the stall, long before the budget


def test_counts_that_move_are_no_stall() -> None:
    moving = [QueueStats(pending=50 - i, succeeded=i) for i in range(50)]
    moving.append(QueueStats(succeeded=50))
    assert _drain(moving, stall=0.3) == (True, False)


def test_a_stall_longer_than_the_budget_is_a_timeout() -> None:
    assert _drain([QueueStats(in_flight=1)], stall=10.0, budget=0.5) == (False, False)


def test_the_stall_bound_covers_a_task_overrunning_every_attempt() -> None:
    s = scenario_from_dict(
        {
            "duration": "5s",
            "workers": {"lease": "1.5s", "max_attempts": 4},
            "workload": {"handlers": {"overrun": {"weight": 1, "factor": 1.8}}},
        }
    )
    assert s.stall >= s.workers.max_attempts * s.workers.lease * 1.8
    given = scenario_from_dict({"duration": "5s", "limits": {"drain_stall": "7s"}})
    assert given.stall == 7.0


def _write(path: Path, *events: dict[str, object]) -> None:
    with open(path, "a") as fh:
        for e in events:
            fh.write(json.dumps(e, separators=(",", ":")) + "\n")


def test_a_reclaim_is_seen_in_another_workers_journal(tmp_path: Path) -> None:
    w0, w1 = tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"
    claim = {"op": "claim", "type": "ok", "claims": [{"task": "t1", "token": "a"}]}
    _write(w0, claim, {"op": "run", "type": "invoke", "task": "t1", "token": "a"})
    runs, claims = RunTracker(), ClaimTracker()
    held = dict(runs.held(w0, "w0"))
    assert held == {"a": "t1"}
    claims.update(tmp_path)
    assert claims.latest == {"t1": "a"}  # only the paused worker's own claim: no zombie
    _write(w1, {"op": "claim", "type": "ok", "claims": [{"task": "t1", "token": "b"}]})
    claims.update(tmp_path)
    assert claims.latest["t1"] == "b"  # reclaimed: the paused worker is now a zombie
    _write(w0, {"op": "run", "type": "ok", "task": "t1", "token": "a"})
    assert runs.held(w0, "w0") == {}


def test_the_newest_claim_wins_whichever_journal_is_read_last(tmp_path: Path) -> None:
    """w0's journal sorts first but holds the reclaim; w1's, read last, the older claim."""
    w0, w1 = tmp_path / "w0.jsonl", tmp_path / "w1.jsonl"
    old = {"task": "t1", "token": "old", "claimed_at": 1_000}
    new = {"task": "t1", "token": "new", "claimed_at": 2_000}
    _write(w1, {"op": "claim", "type": "ok", "claims": [old]})
    _write(w0, {"op": "claim", "type": "ok", "claims": [new]})
    claims = ClaimTracker()
    claims.update(tmp_path)
    assert claims.latest == {"t1": "new"}
    _write(
        w1, {"op": "claim", "type": "ok", "claims": [{**old, "token": "older", "claimed_at": 500}]}
    )
    claims.update(tmp_path)
    assert claims.latest == {"t1": "new"}


def test_a_handlers_own_spread_bounds_its_due_times() -> None:
    s = scenario_from_dict(
        {
            "duration": "40s",
            "workload": {
                "tasks": 400,
                "handlers": {
                    "ok": {"weight": 1},
                    "early": {"kind": "ok", "weight": 1, "spread": "2s"},
                },
            },
        }
    )
    tasks = runner.make_tasks(s)
    delays = sorted(t.delay.total_seconds() for t in tasks if t.delay is not None)
    assert delays[-1] > 20  # the rest spread over the window
    assert sum(1 for d in delays if d <= 2.0) >= 180  # the early half within 2 s
    with pytest.raises(ScenarioError, match=r"workload\.handlers\.early\.spread"):
        scenario_from_dict(
            {
                "duration": "5s",
                "workload": {"handlers": {"early": {"kind": "ok", "spread": "soon"}}},
            }
        )


# ---- a backend whose lease model gives every claim its own lease ------------------------------


def test_a_fixed_lease_longer_than_the_scenarios_runs_the_campaign_with_it():
    from datetime import timedelta

    from rdq_compliance.chaos.runner import fit_lease
    from rdq_core.model import Capabilities

    standard = load_scenario("standard")
    same, note = fit_lease(standard, Capabilities())
    assert same is standard and note is None
    shorter = Capabilities(lease_model="fixed", fixed_lease=timedelta(seconds=1))
    assert fit_lease(standard, shorter) == (standard, None)
    five = Capabilities(lease_model="reclaimer_threshold", fixed_lease=timedelta(seconds=5))
    fitted, note = fit_lease(standard, five)
    ratio = 5 / standard.workers.lease
    assert fitted.workers.lease == 5.0
    assert fitted.limits.deadline == pytest.approx(standard.limits.deadline * ratio)
    assert fitted.limits.drain_timeout == pytest.approx(standard.limits.drain_timeout * ratio)
    assert fitted.stall > standard.stall
    assert fitted.duration == standard.duration and fitted.workload == standard.workload
    assert note is not None and "'reclaimer_threshold' gives every claim 5s" in note
    assert f"lease {standard.workers.lease:g}s asked" in note
