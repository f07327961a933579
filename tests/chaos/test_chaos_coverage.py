"""A campaign says what it exercised: a clock-skew scenario whose handlers all
finish before the first heartbeat never has a skewed worker heartbeat, so the fault's
``storage-clock`` promise is not met; the run fails, naming the rule, and every report
says "not exercised" instead of "passed". The same scenario with long handlers meets it
and passes. On SQLite (the clock of a correct backend is the storage's either way)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import load_scenario
from tests._skew_support import need_libfaketime
from tests.chaos._chaos_support import start_session

SCENARIO = """
name = "{name}"
seed = 22
duration = "4s"

[workers]
count = 2
concurrency = 2
lease = "{lease}"
heartbeat_fraction = {fraction}
poll_interval = "20ms"
max_poll_interval = "100ms"

[workload]
tasks = 40
spread = "3s"

[workload.handlers]
{handlers}

[faults]
warmup = 0.5

[faults.clock_skew]
workers = 2
offset = ["-2s", "2s"]
drift = [0.95, 1.05]

[limits]
deadline = "30s"
drain_timeout = "20s"
"""
#: Every handler returns within 50 ms; a task's first heartbeat is due 3.6 s after its
#: claim (a 4 s lease, beats at 0.9 of it): 70 times the handler's time, so no handler
#: outlives it however busy the machine.
SHORT = ('ok = { weight = 100, duration = ["10ms", "50ms"] }', "4s", 0.9)
#: Each handler runs past two heartbeats (a 1 s lease, beats at 0.3 of it), and reports after.
LONG = ('ok = { weight = 100, duration = ["0.7s", "0.9s"] }', "1s", 0.3)


@pytest.fixture
def sqlite_session(tmp_path: Path):
    need_libfaketime()
    session = start_session("sqlite", tmp_path / "server")
    try:
        yield session
    finally:
        session.close()
        shutil.rmtree(tmp_path / "server", ignore_errors=True)


def _run(session, tmp_path: Path, name: str, handlers: tuple[str, str, float]):
    body, lease, fraction = handlers
    path = tmp_path / f"{name}.toml"
    path.write_text(SCENARIO.format(name=name, handlers=body, lease=lease, fraction=fraction))
    return run_campaign(load_scenario(str(path)), session=session, outdir=tmp_path / name)


def test_a_skew_no_worker_heartbeats_through_fails_the_run_as_not_exercised(
    sqlite_session, tmp_path: Path
):
    result = _run(sqlite_session, tmp_path, "starved", SHORT)
    assert result.counters.as_dict().get("clock_skews", 0) >= 2, result.counters.as_dict()
    assert result.violations == [] and result.checker_error is None
    assert result.coverage is not None and result.coverage.count("extend", "skewed worker") == 0
    assert not result.ok
    messages = result.unmet_messages()
    assert [r.rule for r in result.unmet] == ["storage-clock"], messages
    assert messages[0].startswith("[storage-clock] ") and "'skewed worker' window" in messages[0]
    # every report says so
    out = tmp_path / "starved"
    results = json.loads((out / "results.json").read_text())
    assert results["verdict"] == "not-exercised"
    assert results["rules"]["storage-clock"] == "not exercised (required)"
    assert results["coverage"]["extend"]["skewed worker"] == {"ok": 0, "fail": 0, "unknown": 0}
    assert results["coverage"]["complete"]["skewed worker"]["ok"] > 0
    junit = (out / "junit.xml").read_text()
    assert 'name="storage-clock"><failure message="[storage-clock]' in junit, junit
    assert 'name="lease-respected"><skipped message="not exercised' in junit, junit
    page = (out / "timeline.html").read_text()
    assert "Required and not exercised" in page and "not exercised (required)" in page


def test_the_same_skew_with_long_handlers_is_exercised_and_passes(
    sqlite_session, tmp_path: Path
):
    result = _run(sqlite_session, tmp_path, "exercised", LONG)
    assert result.coverage is not None
    assert result.coverage.count("extend", "skewed worker", "ok") > 0
    assert result.unmet == [] and result.ok, (result.unmet_messages(), result.violations[:3])
    results = json.loads((tmp_path / "exercised" / "results.json").read_text())
    assert results["verdict"] == "pass" and results["rules"]["storage-clock"] == "passed"


def test_the_cli_exits_1_and_prints_the_rule_it_did_not_exercise(tmp_path: Path):
    need_libfaketime()
    path = tmp_path / "starved.toml"
    body, lease, fraction = SHORT
    path.write_text(SCENARIO.format(name="starved", handlers=body, lease=lease, fraction=fraction))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    env["COLUMNS"] = "300"
    run = subprocess.run(
        [sys.executable, "-m", "rdq_compliance.chaos.cli", "run", str(path),
         "--backend", "sqlite", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=170, env=env,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert (
        "required, not exercised: [storage-clock] due-ness and leases follow the storage's "
        "clock: not exercised: the campaign made no extend call (ok or refused) in "
        "the 'skewed worker' window"
    ) in " ".join(run.stdout.split()), run.stdout[-2000:]
