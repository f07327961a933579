"""``rdq-chaos deployed``: ``list`` names the installed systems with their declaration
problems; a usage error (an unknown system, profile or scenario, an incomplete
declaration, a hosts file that is not there) exits 2 with one line; a campaign with a
finding exits 1 -- the control on a backend whose claim ignores the lease, where the
finding names the rule, the job and both workers, and cites the promise it breaks, and
exits 0 when the system declares that finding known upstream, reported confirmed; a
campaign whose workers never start exits 2 naming the worker, not with the jobs it could
not run as findings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rdq_compliance.chaos.cli import main
from rdq_compliance.deployed.control import CoreSystem
from tests._paths import pythonpath
from tests.deployed.broken_control import KNOWN_DOUBLE_RUN, NO_FAULTS, ONE_JOB
from tests.deployed.toy_system import ToySystem


def incomplete() -> ToySystem:
    """A system that promises nothing."""
    return ToySystem(promises=())


def test_list_names_the_installed_systems_and_their_problems(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["deployed", "list"]) == 0
    out = capsys.readouterr().out
    for name, backend in (("rdq-core-sqlite", "sqlite"), ("rdq-core-postgres", "postgres")):
        (row,) = [line for line in out.splitlines() if f" {name} " in line]
        assert f"{CoreSystem(backend).name}" in row and "none" in row


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "no rdq deployed system named 'nope'; installed deployed systems: "),
        (
            ["rdq-core-sqlite", "--profile", "slow"],
            "system 'rdq-core-sqlite' has no profile 'slow' (its profiles: defaults, fast)",
        ),
        (["rdq-core-sqlite", "--scenario", "nowhere.toml"], "no scenario 'nowhere.toml'"),
        (
            [f"{__name__}:incomplete"],
            f"system '{__name__}:incomplete' declares itself incompletely: toy==1.0: no "
            "promise forbids 'lost'",
        ),
        (["rdq-core-sqlite", "--campaigns", "0"], "--campaigns must be at least 1, not 0"),
        (
            ["rdq-core-sqlite", "--fleet", "nowhere-hosts.toml"],
            "no hosts file at nowhere-hosts.toml: give the path of a TOML file",
        ),
    ],
)
def test_a_usage_error_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["deployed", "run", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("rdq-chaos: error: ") and message in line


def _run_no_faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, factory: str, out: Path) -> int:
    """``rdq-chaos deployed run`` of ``tests.deployed.broken_control:<factory>`` on the
    scenario with no fault, seed 1, its report into ``out``; the exit status."""
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    scenario = tmp_path / "no-faults.toml"
    scenario.write_text(NO_FAULTS)
    system = f"tests.deployed.broken_control:{factory}"
    argv = ["deployed", "run", system, "--scenario", str(scenario), "--seed", "1"]
    return main([*argv, "--out", str(out)])


def test_a_finding_exits_1_naming_the_job_and_both_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "report"
    assert _run_no_faults(tmp_path, monkeypatch, "reclaim_ignores_lease", out) == 1
    printed = capsys.readouterr().out
    assert "[handed-out-while-held]" in printed and "finding(s)" in printed
    data = json.loads((out / "results.json").read_text())
    assert data["fault_errors"] == [] and data["plan"]["faults"] == []
    findings = [v for v in data["verdicts"] if v["kind"] == "finding"]
    held = [v for v in findings if v["rule"] == "handed-out-while-held"]
    assert held, [v["message"] for v in data["verdicts"]]
    v = held[0]
    assert v["key"].endswith("-sleep") and len(set(v["workers"])) == 2 and v["causes"] == []
    assert {x["worker"] for x in v["executions"]} == set(v["workers"])
    assert v["message"].startswith("[handed-out-while-held]")
    assert f"job {v['job']!r}, workers {', '.join(v['workers'])}:" in v["message"]
    assert v["promise"]["id"] == "rdq-one-rule"
    assert v["promise"]["link"] == "docs/contract.md#1-the-one-rule-and-what-the-kit-is-for"
    report = (out / "report.md").read_text()
    assert report.index("## Findings") < report.index("[handed-out-while-held]")
    assert report.index("[handed-out-while-held]") < report.index("## Gaps")
    assert "> At no moment may two workers both hold a live claim on the same task." in report


def test_a_finding_known_upstream_is_reported_confirmed_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "report"
    assert _run_no_faults(tmp_path, monkeypatch, "reclaim_ignores_lease_known", out) == 0
    printed = capsys.readouterr().out
    assert " 0 finding(s), " in printed and "confirmed upstream" in printed
    assert "known upstream, still present: rdq-tests/broken-sqlite#1" in printed
    data = json.loads((out / "results.json").read_text())
    held = [v for v in data["verdicts"] if v["rule"] == "handed-out-while-held"]
    # and a run after another's handler returned, when one started after such a return
    known = [v for v in data["verdicts"] if v["rule"] in KNOWN_DOUBLE_RUN.rules]
    assert held and all(v["kind"] == "finding" for v in known)
    assert all(v["known_upstream"]["issue"] == "rdq-tests/broken-sqlite#1" for v in known)
    (entry,) = data["known_upstream"]
    assert entry["state"] == "still present" and entry["count"] == len(known)
    assert data["counts"]["verdicts"]["findings"] == 0
    report = (out / "report.md").read_text()
    assert report.index("## Findings\n\nNone.") < report.index("## Confirmed upstream")
    section = report[report.index("## Confirmed upstream") : report.index("## Gaps")]
    assert "[handed-out-while-held]" in section
    assert "Confirmed upstream: [rdq-tests/broken-sqlite#1](" in section


def test_a_worker_that_never_starts_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    scenario = tmp_path / "one-job.toml"
    scenario.write_text(ONE_JOB)
    system = "tests.deployed.broken_control:never_starts"
    out = tmp_path / "report"
    argv = ["deployed", "run", system, "--scenario", str(scenario), "--out", str(out)]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("rdq-chaos: error: campaign 1 (seed ")
    assert "worker w1 never ran a job and exited on its own" in line
    assert "(last status 1): it does not start; see " in line
    data = json.loads((out / "results.json").read_text())
    assert data["error"].startswith("worker w1 never ran a job")
    assert {e["cause"] for e in data["workers"]["exits"]} >= {"on its own"}


def test_a_relative_report_folder_reaches_workers_that_run_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out report``, relative, with workers started in another folder: the probe's
    path they are given is absolute, so the job's run is journaled where the report is
    (a relative one made every job of such a system fail unjournaled, exit 0)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "one-job.toml").write_text(ONE_JOB)
    system = "tests.deployed.broken_control:runs_elsewhere"
    argv = ["deployed", "run", system, "--scenario", "one-job.toml", "--seed", "1"]
    assert main([*argv, "--out", "report"]) == 0
    data = json.loads((tmp_path / "report" / "results.json").read_text())
    assert [x["outcome"] for x in data["executions"]] == ["succeeded"]
    assert list((tmp_path / "report" / "probe").glob("w1.*.jsonl"))
