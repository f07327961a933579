"""``rdq-chaos soak``: N campaigns with seeds drawn from one base seed, on one server,
and the count of runs that were not ok.

On SQLite with the tiny scenario (a few seconds a run): a correct backend's soak exits 0
with every run ok, each run's seed distinct and replayable; a broken backend's soak
exits 1 and names each failing run's seed, rules and replay command; bad usage exits 2
with a one-line reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rdq_compliance.chaos.soak import soak_seeds
from tests._paths import pythonpath

TINY = Path(__file__).parent / "tiny.toml"


def _soak(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in (env or os.environ).items() if not k.startswith("RDQ_")}
    run_env["PYTHONPATH"] = pythonpath(run_env.get("PYTHONPATH"))
    run_env["COLUMNS"] = "400"  # one line per run: rich wraps at 80
    return subprocess.run(
        [sys.executable, "-m", "rdq_compliance.chaos.cli", "soak", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=run_env,
    )


def test_soak_seeds_are_distinct_and_follow_the_base():
    assert soak_seeds(5, 20) == soak_seeds(5, 20)
    assert len(set(soak_seeds(5, 20))) == 20
    assert soak_seeds(5, 3) != soak_seeds(6, 3)
    assert soak_seeds(5, 3) == soak_seeds(5, 20)[:3]  # a longer soak starts the same


def test_soak_of_a_correct_backend_counts_no_alarm(tmp_path):
    out = tmp_path / "soak"
    proc = _soak(str(TINY), "--backend", "sqlite", "--runs", "3", "--seed", "41", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads((out / "soak.json").read_text())
    assert data["backend"] == "sqlite" and data["base_seed"] == 41
    assert data["runs_done"] == 3 and data["runs_not_ok"] == 0
    seeds = [r["seed"] for r in data["runs"]]
    assert seeds == soak_seeds(41, 3)
    for run in data["runs"]:
        assert run["ok"] and run["verdict"] == "ok" and run["violations"] == 0
        assert run["tasks"]["enqueued"] == 20 and run["tasks"]["missing"] == 0
        assert f"--seed {run['seed']}" in run["replay"]
        folder = Path(run["report"])
        assert (folder / "results.json").exists()
        assert not (folder / "history").exists()  # a passing run's history is not kept
        assert json.loads((folder / "results.json").read_text())["seed"] == run["seed"]
        assert f"seed {run['seed']}: ok" in proc.stdout
    assert "3 runs in" in proc.stdout and "0 not ok" in proc.stdout


def test_soak_of_a_broken_backend_names_every_failing_run(tmp_path):
    """A storage that deletes dead-lettered tasks loses them in every run: the soak exits
    1, each run is counted not ok with its rule, and the summary gives each one's replay
    command; the failing runs keep their history."""
    out = tmp_path / "soak"
    proc = _soak(
        str(TINY),
        "--backend",
        "tests.broken.sqlite:dead_letter_deletes",
        "--runs",
        "2",
        "--seed",
        "42",
        "--out",
        str(out),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((out / "soak.json").read_text())
    assert data["runs_done"] == 2 and data["runs_not_ok"] == 2
    for run in data["runs"]:
        assert not run["ok"] and run["violations"] > 0
        assert run["rules"] and all(n > 0 for n in run["rules"].values())
        assert (Path(run["report"]) / "history").is_dir()
        assert f"not ok: seed {run['seed']}" in proc.stdout
        assert run["replay"] in proc.stdout
    assert "2 not ok" in proc.stdout


def test_soak_bad_usage_exits_2_with_a_reason(tmp_path):
    cases = [
        (["--backend", "sqlite", "--runs", "0"], "--runs must be at least 1"),
        (["--backend", "nosuch", "--runs", "1"], "no rdq backend named 'nosuch'"),
        (["--backend", "sqlite", "--runs", "1", "--seed", "-1"], "--seed: expected"),
    ]
    for args, reason in cases:
        proc = _soak(str(TINY), *args, "--out", str(tmp_path / "x"))
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert reason in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    proc = _soak(str(TINY), "--backend", "sqlite")
    assert proc.returncode == 2 and "--runs" in proc.stderr
