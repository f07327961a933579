"""The standard chaos suite finds the bug classes it must catch, naming the rule.

For each of the bug classes ``double-claim``, ``live-lease-stolen``,
``unfenced-outcome``, ``numbering-from-counter``, ``lost-task`` and ``stale-heartbeat``
(``contract.md``, "Bug classes"; the catalogue's campaigns on the standard scenario), a
broken multi-process backend (``tests.broken.sqlite``: the SQLite backend with one piece
done the way a real queue once got it wrong) goes through the built-in ``standard``
scenario, its budget unchanged (8 worker processes, 2,000 tasks, 40 s of faults, a 60 s
drain), exactly as ``pytest --rdq-backend=... -m chaos`` would run it. The run must
report violations, one of them of the rule that class breaks, naming the task and the
workers; how long after the campaign's start the history first showed the bug ("found
after", see ``tests.chaos._bug_hunt``) and the run's whole time are printed and recorded
as test properties.

``numbering-from-counter`` needs a redriven task to lose its lease: the standard
workload's poison tasks (overrun on every attempt, so dead-lettered by lease expiries,
redriven, and expired again) make that happen on every run; a kill that lands on a
redriven task does too.

Cost: about 45 s per class (``numbering-from-counter`` waits out the 60 s drain timeout:
~100 s), ~5.5 min in all, ~3.5 min with ``-n 2``. ``--rdq-chaos-scenario`` runs another
scenario instead. ``python benchmarks/chaos_bugs.py`` runs this module and tabulates the
line each case records (BENCHMARKS.md, "Chaos suite: bug classes found").
"""

from __future__ import annotations

import json
import os

import pytest

from rdq_compliance.chaos.events import read_history
from rdq_compliance.chaos.scenario import load_scenario
from tests._paths import pythonpath
from tests._proof import AttemptResult, prove
from tests.chaos import _bug_hunt as bugs

pytestmark = [pytest.mark.chaos]


@pytest.fixture
def workers_import_broken_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes inherit the environment: let them import the broken backends."""
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))


def _class_specific(hunt: bugs.Hunt, where: str) -> None:
    """What each class must show beyond the rule's name."""
    found = hunt.first
    assert found is not None
    v = found.violation
    bug_class = hunt.case.bug_class
    if bug_class in ("double-claim", "live-lease-stolen"):  # two claims of one task, both live
        assert len(v.tokens) == 2 and len(set(v.tokens)) == 2, f"{v}\n{where}"
    if bug_class == "double-claim":
        assert len(set(v.workers)) == 2, f"two workers got one task: {v}\n{where}"
    if bug_class == "unfenced-outcome":
        assert any(op in v.message for op in ("complete", "reschedule", "dead_letter")), v
    if bug_class == "stale-heartbeat":
        assert "heartbeat" in v.message, v
    if bug_class == "numbering-from-counter":
        # the cause: reclaims refused by UNIQUE(task_id, attempt_no) ...
        events = read_history((hunt.result.outdir / "history").glob("w*.jsonl"))
        refused = [
            e
            for e in events
            if e.get("op") == "claim"
            and "UNIQUE constraint failed: attempts.task_id, attempts.attempt_no"
            in str(e.get("error", ""))
        ]
        assert refused, f"no claim was refused by the unique constraint; {where}"
        # ... on a redriven task, wedged IN_FLIGHT and named by the drain check
        final = bugs.final_state(hunt.result)
        stuck = {
            x.task
            for x in hunt.result.violations
            if x.rule in hunt.case.rules
            and final.get(x.task, {}).get("status") == "IN_FLIGHT"
            and final.get(x.task, {}).get("redrive_count", 0) > 0
        }
        assert stuck, f"no redriven task named as wedged IN_FLIGHT; {where}"
        assert not hunt.result.drained
    if bug_class == "lost-task":
        assert hunt.result.tasks["missing"] > 0, hunt.result.tasks
        assert bugs.final_state(hunt.result)[v.task]["status"] == "MISSING"  # get() says so


@pytest.mark.parametrize("bug", bugs.CASES, ids=lambda b: f"{b.bug_class}-{b.attr}")
def test_the_standard_chaos_suite_finds_the_bug_class(
    bug: bugs.BugCase,
    tmp_path,
    workers_import_broken_backends: None,
    record_property,
    pytestconfig,
) -> None:
    chosen = pytestconfig.getoption("rdq_chaos_scenario")
    scenario = load_scenario(chosen or "standard")

    def attempt(seed: int, number: int) -> AttemptResult[bugs.Hunt]:
        workdir = tmp_path if number == 1 else tmp_path / f"attempt-{number}"
        hunt = bugs.hunt(bug, workdir, scenario.with_seed(seed))
        r = hunt.result
        # the benchmark's line (benchmarks/chaos_bugs.py), found or not
        record_property("backend", bug.backend_name)
        record_property("row", json.dumps(hunt.row()))
        record_property("first", hunt.first.violation.message[:300] if hunt.first else "")
        where = f"report folder: {r.outdir} (backend {bug.backend_name}, seed {r.seed})"
        assert r.checker_error is None, f"{r.checker_error}; {where}"
        assert r.checked, f"the history was not checked; {where}"
        facts = {"report": str(r.outdir), "violations": dict(hunt.by_rule)}
        return AttemptResult(bool(hunt.found), hunt, facts)

    wanted = f"{bug.bug_class} {bug.attr} found under {' or '.join(bug.rules)}"
    proof = prove(wanted, (scenario.seed,), attempt)
    hunt = proof.value
    r = hunt.result
    where = f"report folder: {r.outdir} (backend {bug.backend_name}, seed {r.seed})"
    assert r.workers_left == [], f"worker processes left running: {r.workers_left}"
    found = hunt.first
    assert found is not None
    v = found.violation
    assert v.rule in bug.rules and f"[{v.rule}]" in v.message
    assert v.task and v.task in v.message, f"the violation names no task: {v}"
    assert v.workers and all(w in v.message for w in v.workers), f"names no worker: {v}"
    assert 0 <= found.after <= r.duration
    _class_specific(hunt, where)

    record_property("rule", found.rule)
    record_property("violations", len(r.violations))
    record_property("found_after_s", round(found.after, 2))
    record_property("run_time_s", round(r.duration, 2))
    print(
        f"\n{bug.bug_class} {bug.attr}: [{found.rule}] found {found.after:.1f} s after "
        f"the start; run {r.duration:.1f} s; {len(r.violations)} violation(s) "
        f"{dict(hunt.by_rule)}; {proof.verdict()}\n{v}"
    )
