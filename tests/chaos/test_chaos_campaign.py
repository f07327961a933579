"""Whole campaigns: a small scenario end to end, the CLI, and the standard suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rdq_compliance.chaos.events import read_journal
from rdq_compliance.chaos.runner import provision_and_run
from rdq_compliance.chaos.scenario import load_scenario
from tests._paths import pythonpath
from tests.chaos._chaos_support import SMOKE

REPORT_FILES = ("results.json", "seed.txt", "timeline.html", "junit.xml", "final-state.jsonl")


def _no_worker_left(outdir: Path) -> None:
    """No process running a worker of this report folder (by its journal path)."""
    marker = str(outdir / "history")
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        assert not ("worker_main" in cmd and marker in cmd), f"left running: {p.pid} {cmd}"


def _assert_report(out: Path, scenario_name: str, backend: str) -> dict:
    for name in REPORT_FILES:
        assert (out / name).is_file(), name
    journals = sorted((out / "history").glob("*.jsonl"))
    assert (out / "history" / "harness.jsonl") in journals and len(journals) >= 2
    for path in journals:
        events = list(read_journal(path))
        assert [e["seq"] for e in events] == list(range(len(events)))
    results = json.loads((out / "results.json").read_text())
    assert results["scenario"] == scenario_name and results["backend"] == backend
    seed = (out / "seed.txt").read_text()
    assert str(results["seed"]) in seed and f"--backend {backend}" in seed
    html = (out / "timeline.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "<rect" in html
    junit = (out / "junit.xml").read_text()
    assert "<testsuite" in junit and "<testcase" in junit
    return results


def test_smoke_campaign_end_to_end(chaos_session, tmp_path):
    """4 workers, 200 tasks, a kill at every point, a pause past the lease: the history
    satisfies the checker and the report folder is complete."""
    name, server = chaos_session.name, chaos_session.server
    scenario = load_scenario(SMOKE)
    from rdq_compliance.chaos.runner import run_campaign

    result = run_campaign(scenario, session=chaos_session, outdir=tmp_path / "out")
    c = result.counters
    assert c.total_kills == scenario.faults.kills, c.notes
    assert c.pauses == c.resumes == 1
    assert c.unexpected_exits == 0, c.notes
    assert result.drained and result.tasks["missing"] == 0
    assert result.tasks["succeeded"] + result.tasks["dead"] == scenario.workload.tasks
    assert result.workers_left == []
    if "kill_server" in server.faults and chaos_session.capabilities().durable:
        assert c.server_restarts == 1 and c.cuts == 1
    else:
        assert any("server_restart x1: skipped" in n for n in c.notes)
    if "pause_server" in server.faults:
        assert c.server_pauses == c.server_resumes == 1, c.notes
    else:
        assert any("server_pause x1: skipped" in n for n in c.notes)
    results = _assert_report(tmp_path / "out", "smoke", name)
    assert result.checked and result.violations == [], [str(v) for v in result.violations]
    assert results["verdict"] == "pass"
    _no_worker_left(tmp_path / "out")
    events = [e for p in (tmp_path / "out" / "history").glob("w*.jsonl") for e in read_journal(p)]
    self_kills = {e["point"] for e in events if e["op"] == "self_kill"}
    assert self_kills <= {"after_claim", "in_handler", "before_report", "after_report"}


def _cli(
    *args: str, env: dict | None = None, timeout: float = 170, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``rdq-chaos`` in a subprocess; without ``env``, ours minus any ``RDQ_*`` setting."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    return subprocess.run(
        [sys.executable, "-m", "rdq_compliance.chaos.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def test_cli_run_writes_the_report_and_exits_0(tmp_path):
    out = tmp_path / "report"
    proc = _cli(
        "run", str(SMOKE), "--backend", "sqlite", "--seed", "11", "--out", str(out), "--quiet"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "SIGKILLs" in proc.stdout and "report:" in proc.stdout
    results = _assert_report(out, "smoke", "sqlite")
    assert results["seed"] == 11
    assert "rdq-chaos run" in (out / "seed.txt").read_text()
    assert "--seed 11" in (out / "seed.txt").read_text()
    assert (out / "logs" / "harness.log").exists()


def test_cli_exits_1_on_violations(tmp_path):
    """A backend that deletes dead-lettered tasks is caught: exit status 1."""
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    out = tmp_path / "report"
    proc = _cli(
        "run",
        str(SMOKE),
        "--backend",
        "tests.broken.sqlite:dead_letter_deletes",
        "--out",
        str(out),
        "--quiet",
        env=env,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "violation" in proc.stdout
    results = json.loads((out / "results.json").read_text())
    assert results["verdict"] == "violations" and results["violations"]
    assert all(v["rule"] for v in results["violations"])
    assert 'failures="0"' not in (out / "junit.xml").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", str(SMOKE), "--backend", "nosuch"], "no rdq backend named 'nosuch'"),
        (["run", "missing.toml", "--backend", "sqlite"], "no such scenario file"),
        (["run", str(SMOKE), "--backend", "sqlite", "--seed", "-3"], "--seed: expected"),
        (["run", str(SMOKE), "--backend", "sqlite", "--option", "novalue"], "KEY=VALUE"),
        (["run", str(SMOKE)], "no rdq backend selected: pass --backend NAME, set RDQ_BACKEND"),
        (["walk"], "invalid choice"),
    ],
)
def test_cli_usage_errors_exit_2_without_a_traceback(args, message, tmp_path):
    if args[0] == "run":  # in an empty folder: no pyproject.toml names a backend
        proc = _cli(*args, "--out", str(tmp_path / "o"), cwd=tmp_path)
    else:
        proc = _cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_provisioning_error_exits_2(tmp_path):
    proc = _cli(
        "run",
        str(SMOKE),
        "--backend",
        "postgres",
        "--dsn",
        "postgresql://nobody@127.0.0.1:1/none",
        "--out",
        str(tmp_path / "o"),
        "--quiet",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rdq-chaos: error:" in proc.stderr and "Traceback" not in proc.stderr


del provision_and_run  # imported to show it is public; the tests above use run_campaign
