"""Each deployed rule failing on a deployed system broken on purpose: rdq's worker loop, in
real worker processes, on a SQLite backend with one bug (``tests.deployed.broken_control``).
``rdq-chaos deployed run`` exits 1 and reports a finding under the rule, its message
naming the rule, the job, the workers and the promise it breaks; the same system on the
unbroken SQLite backend, same scenario and seed, exits 0 with no verdict under that rule.
``handed-out-while-held`` is ``test_cli.py``'s. A system whose workers fail every job
before its handler runs (``never-ran`` on every job, the probe journalling nothing) is
an error of the campaign: it exits 2, saying how many jobs the library settled unseen,
which, and what to check.

Every wait is sized by the ``fast`` profile (a 4 s lease, idle polls backing off to 1 s,
``recovery_after`` 5 s) with seconds to spare, never by a race: a fault lands seconds
inside the run it must hit, and a run a rule needs starts seconds before what it must
precede (the first run's end, the drain's end).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rdq_compliance.chaos.cli import main
from rdq_compliance.deployed.control import PROFILES
from tests._paths import pythonpath

#: One worker, no fault (so no fault window either): a job that fails and two that
#: succeed after 1 s, one of them due 5.934 s after the enqueue (seed 3). The worker takes
#: the two due at once within its 1 s idle poll of the enqueue: the first success is
#: recorded by about +2.2 s, and the job due later keeps the drain open until about +7 s.
ONE_WORKER = """\
name = "one-worker"
workers = 1
window = 1
drain_margin = 3

[jobs]
succeed = 2
succeed_seconds = [1, 1]
fail = 1
delayed = 1
max_delay = 6
"""
ONE_WORKER_SEED = 3
ONE_WORKER_DELAYS = {"job-00-succeed": 0.0, "job-01-succeed": 5.934, "job-02-fail": 0.0}

#: One worker running one job of 8 s, SIGKILLed +4.377 s into the window (seed 9): the
#: worker took the job within its 1 s idle poll of the enqueue, so the kill lands 3 s or
#: more after the job started and 3.6 s before it would have ended.
KILL = """\
name = "kill"
workers = 1
window = 8
drain_margin = 1

[jobs]
succeed = 1
succeed_seconds = [8, 8]

[faults]
kill = 1
restart_after = 1
"""
KILL_SEED = 9
KILL_AT = 4.377

#: Two workers, one job that sleeps 7.5 s (1.5 x recovery_after): the idle worker's poll
#: (at most 1 s apart) takes it one lease (4 s) after it was claimed on a backend that
#: reclaims by age, 2.5 s or more before the first run ends.
TWO_WORKERS = """\
name = "two-workers"
workers = 2
window = 1
drain_margin = 1

[jobs]
sleep = 1
"""

#: One worker, no fault: a job that succeeds after 0.2 s and one that asks for a retry at
#: every run. rdq's worker reschedules the retry job 0.5-1, 1-2, 2-4 and 4-8 s after its
#: first four runs (1 s doubling, equal jitter) and dead-letters it after its fifth: the
#: drain stays open 7.5 s or more after its first run, seconds past the last rerun of the
#: succeeded job (five runs of 0.2 s), so the drain never ends between two reruns.
RERUNS = """\
name = "reruns"
workers = 1
window = 1
drain_margin = 20

[jobs]
succeed = 1
succeed_seconds = [0.2, 0.2]
retry = 1
"""

Run = tuple[int, dict[str, Any]]
Runner = Callable[[str, str, int], Run]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    """``campaign(system, scenario, seed)``: ``rdq-chaos deployed run`` of ``system`` (an
    ``rdq.systems`` name or ``module:attr``) on the scenario file ``scenario`` holds, its
    exit status and ``results.json``; each (system, scenario, seed) is run once per module,
    so the unbroken control's run serves every test of its scenario."""
    done: dict[tuple[str, str, int], Run] = {}
    with pytest.MonkeyPatch.context() as mp:
        # the workers import the broken backends and handler from this checkout
        mp.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))

        def run(system: str, scenario: str, seed: int) -> Run:
            key = (system, scenario, seed)
            if key not in done:
                folder = tmp_path_factory.mktemp("campaign")
                path = folder / "scenario.toml"
                path.write_text(scenario)
                out = folder / "report"
                argv = ["deployed", "run", system, "--scenario", str(path), "--seed", str(seed)]
                status = main([*argv, "--profile", "fast", "--out", str(out)])
                done[key] = status, json.loads((out / "results.json").read_text())
            return done[key]

        yield run


def _broken(system: str) -> str:
    return f"tests.deployed.broken_control:{system}"


def _finding(run: Run, rule: str, promise: str) -> dict[str, Any]:
    """The campaign's one verdict under ``rule``, checked to be a finding that breaks
    ``promise`` and names the rule, the job, every worker involved and the promise."""
    status, data = run
    said = "\n".join(v["message"] for v in data["verdicts"])
    assert status == 1, said
    assert data["error"] is None and data["fault_errors"] == [] and data["torn"] == []
    ours = [v for v in data["verdicts"] if v["rule"] == rule]
    assert len(ours) == 1, f"not one [{rule}] verdict among:\n{said}"
    v = ours[0]
    assert v["kind"] == "finding", v["message"]
    assert v["promise"]["id"] == promise
    assert v["message"].startswith(f"[{rule}] ")
    assert f"job {v['job']!r}, workers {', '.join(v['workers'])}:" in v["message"]
    assert f"finding: breaks promise {promise!r}" in v["message"]
    assert v["workers"] and {x["worker"] for x in v["executions"]} == set(v["workers"])
    return v


def _none_under(run: Run, rule: str) -> None:
    """The unbroken control's campaign: exit 0, no verdict under ``rule``."""
    status, data = run
    said = "\n".join(v["message"] for v in data["verdicts"])
    assert status == 0, said
    assert data["error"] is None and data["fault_errors"] == []
    assert [v for v in data["verdicts"] if v["rule"] == rule] == [], said
    assert data["drain"]["ended_by"] == "every accepted job was finished, failed for good or held"


def _delays(run: Run) -> dict[str, float]:
    return {j["key"]: j["delay"] for j in run[1]["plan"]["jobs"]}


def test_lost_a_job_failed_for_good_is_deleted(campaign: Runner) -> None:
    """The job told to fail is dead-lettered, then deleted: the library no longer knows it."""
    run = campaign(_broken("dead_letter_deletes"), ONE_WORKER, ONE_WORKER_SEED)
    assert _delays(run) == ONE_WORKER_DELAYS
    v = _finding(run, "lost", "rdq-never-lost")
    assert v["key"].endswith("-fail") and v["workers"] == ["w1"] and v["causes"] == []
    (x,) = v["executions"]
    assert x["outcome"] == "failed"
    assert "unknown to the library at the end of the drain" in v["message"]
    assert "the library says 'not found'" in v["message"]
    assert run[1]["final"][v["job"]]["state"] == "unknown"
    _none_under(campaign("rdq-core-sqlite", ONE_WORKER, ONE_WORKER_SEED), "lost")


def test_every_job_settled_with_no_execution_is_an_error_of_the_campaign(
    campaign: Runner,
) -> None:
    """rdq's worker dead-letters every job (no handler by their name) before any handler
    runs: the probe journals nothing, and the campaign cannot judge the library. It exits
    2 with the count, the jobs and the logs to read; each job is also a ``never-ran``
    finding. The unbroken control's campaign on the same plan has no such verdict."""
    status, data = campaign(_broken("handler_missing"), ONE_WORKER, ONE_WORKER_SEED)
    assert _delays((status, data)) == ONE_WORKER_DELAYS
    assert status == 2
    assert data["executions"] == [] and data["torn"] == []
    assert {s["state"] for s in data["final"].values()} == {"failed-for-good"}
    assert data["drain"]["ended_by"] == "every accepted job was finished, failed for good or held"
    error = data["error"]
    assert error.startswith(
        "the library settled 3 of the 3 accepted jobs (failed-for-good 3) without the probe "
        "ever seeing them run, and the probe journalled no execution at all: the workers "
        "never ran the probe's handler: see their logs ("
    ), error
    assert "logs/w1.log) and check that the handler the system names is importable" in error
    # the control's job ids are the keys
    unseen = "; jobs settled unseen: job-00-succeed, job-01-succeed, job-02-fail"
    assert error.endswith(unseen), error
    never = [v for v in data["verdicts"] if v["rule"] == "never-ran"]
    assert sorted(v["key"] for v in never) == sorted(ONE_WORKER_DELAYS)
    assert all(v["kind"] == "finding" and v["promise"]["id"] == "rdq-never-lost" for v in never)
    assert all("the library says 'DEAD after 1 attempt(s)'" in v["message"] for v in never)
    _none_under(campaign("rdq-core-sqlite", ONE_WORKER, ONE_WORKER_SEED), "never-ran")


def test_ran_after_done_a_succeeded_job_is_handed_out_again(campaign: Runner) -> None:
    """The first job to succeed is handed out again by every idle poll until the delayed
    one is due; the store keeps its first run's outcome."""
    run = campaign(_broken("hands_out_succeeded_tasks"), ONE_WORKER, ONE_WORKER_SEED)
    assert _delays(run) == ONE_WORKER_DELAYS
    v = _finding(run, "ran-after-done", "rdq-terminal")
    assert v["key"] == "job-00-succeed" and v["workers"] == ["w1"] and v["causes"] == []
    first, *again = sorted(v["executions"], key=lambda x: x["started"])
    assert first["attempt"] == 1 and first["outcome"] == "succeeded"
    assert again and all(x["started"] > first["ended"] for x in again)
    assert all(x["attempt"] == 2 for x in again)  # the store never recorded a second run
    assert "recorded finished ('SUCCEEDED after 1 attempt(s)')" in v["message"]
    assert ", then ran again: " in v["message"]
    _none_under(campaign("rdq-core-sqlite", ONE_WORKER, ONE_WORKER_SEED), "ran-after-done")


def test_ran_after_done_a_succeeded_job_is_run_again_and_recorded(campaign: Runner) -> None:
    """The job that succeeded is claimed again by every poll that finds nothing due, run,
    and its success recorded each time, until rdq's worker finds its attempts used up and
    dead-letters it: every run after the first success is a run after done, though the
    final state (failed for good) confirms none of them."""
    run = campaign(_broken("reruns_succeeded_tasks"), RERUNS, 1)
    v = _finding(run, "ran-after-done", "rdq-terminal")
    data = run[1]
    assert len(data["verdicts"]) == 1, [x["message"] for x in data["verdicts"]]
    assert v["key"].endswith("-succeed") and v["workers"] == ["w1"] and v["causes"] == []
    max_attempts = int({s.name: s.value for s in PROFILES["fast"].settings}["max_attempts"])
    runs = sorted((x for x in data["executions"] if x["job"] == v["job"]),
                  key=lambda x: x["started"])  # fmt: skip
    assert [x["attempt"] for x in runs] == list(range(1, max_attempts + 1))
    assert all(x["outcome"] == "succeeded" for x in runs)
    final = data["final"][v["job"]]
    assert final["state"] == "failed-for-good"
    assert final["words"] == f"DEAD after {max_attempts + 1} attempt(s)"
    # the first success, then its reruns (the second only if it started more than the
    # clock uncertainty after the first ended; the later ones started 0.2 s or more after)
    first, *again = sorted(v["executions"], key=lambda x: x["started"])
    assert first["exec"] == runs[0]["exec"]
    assert {x["exec"] for x in again} <= {x["exec"] for x in runs[1:]}
    assert {x["attempt"] for x in again} >= set(range(3, max_attempts + 1))
    assert all(x["started"] > first["ended"] for x in again)
    assert f"{first['exec']} on w1 (pid {first['pid']}) " in v["message"]
    assert (
        f"succeeded (its handler returned; final state failed-for-good "
        f"('DEAD after {max_attempts + 1} attempt(s)')), then ran again: "
    ) in v["message"]
    _none_under(campaign("rdq-core-sqlite", RERUNS, 1), "ran-after-done")


def test_superseded_outcome_a_taken_runs_outcome_stands(campaign: Runner) -> None:
    """The idle worker takes the running job a lease after its claim, under the same token;
    the first run, never told, succeeds and its outcome stands; the second is told its
    lease is lost at its next heartbeat and stops. No fault touches the first run's worker
    (a pause there would make the verdict a gap: the control's promise tolerates it)."""
    run = campaign(_broken("reclaim_by_age_keeps_token"), TWO_WORKERS, 1)
    v = _finding(run, "superseded-outcome", "rdq-token-fences-outcomes")
    assert v["key"].endswith("-sleep") and len(v["workers"]) == 2 and v["causes"] == []
    first, second = sorted(v["executions"], key=lambda x: x["started"])
    assert first["outcome"] == "succeeded" and second["outcome"] == "failed"
    assert first["started"] < second["started"] < first["ended"] < second["ended"]
    lease = 4.0  # the fast profile's: the second run took the job a lease after the first
    assert second["started"] - first["started"] >= lease
    assert "final state finished ('SUCCEEDED after 2 attempt(s)')" in v["message"]
    assert f"superseded by {second['exec']}" in v["message"]
    _none_under(campaign(_broken("cooperative"), TWO_WORKERS, 1), "superseded-outcome")


def test_stuck_a_killed_workers_job_is_never_reclaimed(campaign: Runner) -> None:
    """The worker is killed while it runs the job; restarted, it never takes it again."""
    run = campaign(_broken("expired_leases_never_reclaimed"), KILL, KILL_SEED)
    v = _finding(run, "stuck", "rdq-never-lost")
    data = run[1]
    (kill,) = data["faults_done"]
    assert kill["kind"] == "kill" and kill["planned"]["at"] == KILL_AT
    assert v["key"].endswith("-succeed") and v["workers"] == ["w1"]
    assert len(v["causes"]) == 1 and v["causes"][0].startswith("kill of w1 from ")
    (x,) = v["executions"]
    assert x["ended"] is None and x["started"] < kill["start"]
    assert data["final"][v["job"]]["state"] == "running"
    assert data["drain"]["live"] == ["w1"]  # restarted, yet it never took the job again
    assert "at the end of the drain" in v["message"] and "(alive: w1)" in v["message"]
    _none_under(campaign("rdq-core-sqlite", KILL, KILL_SEED), "stuck")


def test_the_waits_are_the_fast_profiles() -> None:
    """The sizes the scenarios above are drawn for."""
    fast = {s.name: s.value for s in PROFILES["fast"].settings}
    assert (fast["lease"], fast["max_poll_interval"]) == ("4s", "1s")
    assert PROFILES["fast"].recovery_after == 5.0
