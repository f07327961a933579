"""The report folder from a campaign's result, without running a campaign: the checker's
violations as JSON, one JUnit case per checker rule, the final state; and a checker
that raises, which fails the run as a checker error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rdq_compliance.chaos import runner
from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.checker import RULES, FinalState, check, read_final_state
from rdq_compliance.chaos.nemesis import Counters, FaultPlan
from rdq_compliance.chaos.report import write_report
from rdq_compliance.chaos.scenario import load_scenario
from rdq_core.memory import MemoryStore
from rdq_core.model import NewTask
from tests.chaos._chaos_support import SMOKE


def _result(outdir: Path, **fields: object) -> CampaignResult:
    scenario = load_scenario(SMOKE)
    return CampaignResult(
        scenario=scenario,
        seed=scenario.seed,
        backend="memory",
        server_origin="none",
        outdir=outdir,
        plan=FaultPlan(()),
        counters=Counters(),
        **fields,  # type: ignore[arg-type]
    )


def test_a_checker_that_raises_is_a_checker_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(events: object, final: object) -> list:
        raise RuntimeError("boom")

    monkeypatch.setattr(runner, "check", broken)
    got = runner.run_checker([], FinalState({}, []))
    assert got == ([], "the checker failed: RuntimeError: boom")


def test_the_report_of_a_checker_error(tmp_path: Path) -> None:
    result = _result(tmp_path, checker_error="the checker failed: RuntimeError: boom")
    assert not result.ok
    files = write_report(result, [], FinalState({}, []))
    results = json.loads(Path(files["results"]).read_text())
    assert results["verdict"] == "checker-error" and results["checked"] is False
    assert results["checker_error"] == "the checker failed: RuntimeError: boom"
    junit = Path(files["junit"]).read_text()
    assert (
        '<testcase classname="rdq-chaos.smoke.memory" name="checker">'
        '<failure message="the checker failed: RuntimeError: boom"/></testcase>'
    ) in junit
    assert 'tests="1" failures="1" errors="0" skipped="0"' in junit


def test_the_report_of_violations(tmp_path: Path) -> None:
    """Two tasks left PENDING after the drain, one enqueued id gone: the checker's
    violations go into results.json as JSON, the JUnit file has one case per rule of
    the checker (the broken ones failed), final-state.jsonl every task and the lost one."""
    store = MemoryStore()
    for task_id in ("t1", "t2"):
        store.enqueue(NewTask(task_id, "q", "h"))
    final = read_final_state(store, "q", ["t1", "t2", "t3"], drained=True)
    assert final.missing == ["t3"]
    events = [
        {"seq": i, "proc": "harness", "pid": 1, "t": 1.0 + i, "type": "ok", "op": "enqueue",
         "task": t, "handler": "h", "created": True}
        for i, t in enumerate(("t1", "t2", "t3"))
    ]
    violations = check(events, final)
    assert [(v.rule, v.task) for v in violations] == [
        ("no-loss", "t3"), ("drain-complete", "t1"), ("drain-complete", "t2")
    ]
    result = _result(tmp_path, violations=violations, checked=True)
    files = write_report(result, events, final)

    results = json.loads(Path(files["results"]).read_text())
    assert results["verdict"] == "violations" and results["checked"] is True
    assert results["violations"] == [v.as_json() for v in violations]
    first = results["violations"][0]
    assert first["rule"] == "no-loss" and first["task"] == "t3"
    assert first["message"].startswith("[no-loss] ") and first["excerpt"][0]["task"] == "t3"
    assert isinstance(first["workers"], list) and isinstance(first["tokens"], list)

    junit = Path(files["junit"]).read_text()
    assert f'tests="{len(RULES)}" failures="2" errors="0" skipped="0"' in junit
    for rule in RULES:
        assert f'name="{rule}"' in junit
    assert 'name="no-loss"><failure message="[no-loss]' in junit
    assert 'name="drain-complete"><failure message="[drain-complete]' in junit
    assert '<testcase classname="rdq-chaos.smoke.memory" name="fencing"/>' in junit

    lines = [json.loads(line) for line in Path(files["final_state"]).read_text().splitlines()]
    assert [(t["id"], t["status"]) for t in lines] == [
        ("t1", "PENDING"), ("t2", "PENDING"), ("t3", "MISSING")
    ]
    assert "drain-complete" in Path(files["timeline"]).read_text()
