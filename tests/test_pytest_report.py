"""Reports CI can show: rule ids on every suite test (``-v``, JUnit XML
``rdq.rules``), the rule each failure violated (``rdq.rule``), the one-screen end-of-run
summary (also under ``pytest-xdist``), chaos failures naming their report folder, and one
clear error for a named server that does not answer.

The runs select a few suite tests with ``-k`` against ``memory``, ``sqlite`` and the
deliberately broken backends of ``tests/broken/``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rdq_compliance import rules, run_summary
from rdq_compliance.pytest_report import SUITE_DIR
from tests._paths import pythonpath

TESTS_DIR = Path(__file__).resolve().parent
LIMIT_TESTS = "test_claim_returns_exactly_limit_when_more_are_due or test_claims_come_out_oldest"


def _summary_block(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "rdq summary" in line)
    block = []
    for line in lines[start + 1 :]:
        if line.startswith("=") or line.startswith(("FAILED", "ERROR", "PASSED")):
            break
        block.append(line)
    return block


def _run(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


# ---- rules on tests -------------------------------------------------------------------------


def test_every_suite_test_declares_known_rules() -> None:
    missing = []
    for path in sorted(SUITE_DIR.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                if not rules.declared_by(ast.get_docstring(node)):
                    missing.append(f"{path.name}::{node.name}")
    assert not missing, f"suite tests whose docstring does not open 'Rule <id>': {missing}"


def test_declared_rules_are_read_from_the_docstring_and_a_typo_is_named() -> None:
    assert rules.declared_by("Rule claim-order: due tasks ...") == ("claim-order",)
    assert rules.declared_by("Rules claim-limit and claim-complete: with ...") == (
        "claim-limit",
        "claim-complete",
    )
    assert rules.declared_by("Rules one-claim, fencing\n    and no-loss: ...") == (
        "one-claim",
        "fencing",
        "no-loss",
    )
    assert rules.declared_by("Checks something.") == ()
    with pytest.raises(KeyError, match=r"unknown rule id 'claim-ordr'.*claim-order"):
        rules.declared_by("Rule claim-ordr: a typo")


def test_violated_rules_are_the_known_ids_a_failure_names() -> None:
    text = "AssertionError: [claim-limit] claim_due never ...: got 5 [sic] then [no-loss] again"
    assert rules.named_in(text) == ("claim-limit", "no-loss")
    assert rules.named_in("assert 1 == 2") == ()


def test_chaos_test_declares_every_rule_the_chaos_checker_proves() -> None:
    from rdq_compliance.chaos.checker import RULES as CHECKER_RULES
    from rdq_compliance.suite import test_chaos

    declared = rules.declared_by(test_chaos.test_chaos_campaign_finds_no_violation.__doc__)
    assert set(declared) == set(CHECKER_RULES)


# ---- -v and JUnit ---------------------------------------------------------------------------


def test_junit_xml_carries_the_rules_checked_and_the_rule_each_failure_broke(
    tmp_path: Path,
) -> None:
    xml = tmp_path / "out.xml"
    proc = _run(
        tmp_path, "--rdq-backend=tests.broken.memory:limit_ignored", "-k", LIMIT_TESTS,
        f"--junitxml={xml}", "-v",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    props = {
        name: [(p.get("name"), p.get("value")) for p in case.iter("property")]
        for name, case in cases.items()
    }
    failed = "test_claim_returns_exactly_limit_when_more_are_due"
    passed = "test_claims_come_out_oldest_due_first"
    assert cases[failed].find("failure") is not None
    assert ("rdq.rule", "claim-limit") in props[failed], props[failed]
    assert ("rdq.rules", "claim-limit, claim-complete") in props[failed]
    assert cases[passed].find("failure") is None
    assert props[passed] == [("rdq.rules", "claim-order")], props[passed]
    # -v shows the rules after the verdict
    assert f"::{passed} PASSED (rule claim-order)" in proc.stdout, proc.stdout[-3000:]
    assert f"::{failed} FAILED (rule claim-limit, claim-complete)" in proc.stdout


def test_parametrized_suite_ids_read_as_words(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--rdq-backend=memory", "--collect-only", "-q")
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(ids) > 500, proc.stdout[-2000:]
    soup = [i for i in ids if "[" in i and not any(c.isalpha() for c in i.partition("[")[2])]
    soup += [i for i in ids if i.endswith(" ]") or "[ " in i]
    assert not soup, f"parameter ids that are not words: {soup[:10]}"


# ---- the summary ------------------------------------------------------------------------------


def test_summary_counts_by_suite_and_lists_every_skip_with_its_reason(tmp_path: Path) -> None:
    proc = _run(
        tmp_path, "--rdq-backend=memory", "-q",
        "-k", "test_processes_never_share_a_claim or test_claims_come_out_oldest or "
        "test_stats_are_per_queue",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    block = _summary_block(proc.stdout)
    assert 3 <= len(block) <= run_summary.MAX_LINES, block
    assert block[0] == ("rdq: memory server: in-process [the reference store, rdq_core.memory]"), (
        block
    )
    row = next(line for line in block if line.strip().startswith("conformance"))
    assert row.split() == ["conformance", "2", "0", "0", "1", "0", "0"], row
    assert "  violations by rule: none" in block
    assert "  skipped: 1" in block
    assert (
        "    1 x backend 'memory' does not declare capability 'multi_process' "
        "(test_processes_never_share_a_claim)"
    ) in block, block


def test_summary_reaches_the_xdist_controller_from_the_workers(tmp_path: Path) -> None:
    xml = tmp_path / "out.xml"
    proc = _run(
        tmp_path, "-n", "2", "--rdq-backend=tests.broken.memory:limit_ignored",
        "-k", LIMIT_TESTS + " or test_stats_are_per_queue or test_processes_never",
        f"--junitxml={xml}",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    block = _summary_block(proc.stdout)
    # the server is described by a worker: only the workers provisioned one
    assert block[0].startswith("rdq: tests.broken.memory:limit_ignored server: in-process ["), block
    row = next(line for line in block if line.strip().startswith("conformance"))
    assert row.split() == ["conformance", "2", "1", "0", "1", "0", "0"], block
    assert "  violations by rule (1 failed tests):" in block, block
    assert "    claim-limit: 1 (test_claim_returns_exactly_limit_when_more_are_due)" in block
    assert f"    what each rule forbids: {rules.CONTRACT}, section 4" in block, block
    assert any("does not declare capability 'multi_process'" in line for line in block), block
    failed = [c for c in ET.parse(xml).getroot().iter("testcase") if c.find("failure") is not None]
    assert [p.get("value") for p in failed[0].iter("property") if p.get("name") == "rdq.rule"] == [
        "claim-limit"
    ]


def test_summary_shows_faults_chaos_report_and_fits_one_screen() -> None:
    report = run_summary.Summary(
        "pg", "backend pg (from command line), server provisioned by the kit"
    )
    server = json.dumps({"origin": "local binary /usr/bin/postgres", "version": "PostgreSQL 15"})
    faults = json.dumps(
        {"total_kills": 7, "pauses": 2, "server_kills": 1, "server_pauses": 1, "redrives": 0}
    )
    report.add(
        run_summary.Outcome(
            "suite/test_chaos.py::test_chaos", "chaos", "failed",
            properties=(
                (run_summary.PROP_SERVER, server), (run_summary.PROP_FAULTS, faults),
                (run_summary.PROP_CHAOS_REPORT, "/tmp/chaos-standard0"),
                (run_summary.PROP_RULE, "one-claim"), (run_summary.PROP_RULE, "no-loss"),
                (run_summary.PROP_NOT_EXERCISED, json.dumps(["redrive", "storage-clock"])),
            ),
        )
    )  # fmt: skip
    for n in range(40):  # many distinct skip reasons and violated rules
        report.add(run_summary.Outcome(f"m.py::test_s{n}", "conformance", "skipped", f"why {n}"))
        report.add(
            run_summary.Outcome(
                f"m.py::test_f{n}", "conformance", "failed",
                properties=((run_summary.PROP_RULE, f"rule-{n}"),),
            )
        )  # fmt: skip
    lines = report.lines()
    assert len(lines) <= run_summary.MAX_LINES, "\n".join(lines)
    assert lines[0] == "rdq: pg server: local binary /usr/bin/postgres [PostgreSQL 15]"
    assert (
        "  chaos faults injected: 7 worker kills, 2 worker pauses, 1 server kills, "
        "1 server freezes"
    ) in lines
    assert "  chaos report: /tmp/chaos-standard0" in lines
    assert (
        "  chaos rules not exercised (no call they judge; not passed): redrive, storage-clock"
    ) in lines
    assert any(line.startswith("    ... and ") and "more rules" in line for line in lines), lines
    assert any(line.startswith("    ... and ") and "more reasons" in line for line in lines)
    assert "  skipped: 40" in lines


def test_summary_on_sqlite_with_junit(tmp_path: Path) -> None:
    """The issue's check, on a few tests: readable ids, rule properties and the summary."""
    xml = tmp_path / "out.xml"
    proc = _run(
        tmp_path, "--pyargs", "rdq_compliance.suite", "--rdq-backend=sqlite",
        f"--junitxml={xml}", "-k", "test_bad_task_id_is_rejected or test_dlq_pages_return",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    assert len(cases) > 50
    assert all([p.get("name") for p in c.iter("property")] == ["rdq.rules"] for c in cases), (
        "every test case names the rules it checks"
    )
    names = {c.get("name") for c in cases}
    assert "test_dlq_pages_return_every_dead_task_once_in_dead_letter_order[page-size-7]" in names
    block = _summary_block(proc.stdout)
    assert block[0].startswith("rdq: sqlite server: embedded (directory "), block
    assert block[0].endswith(" (the Python process's sqlite3)]"), block


# ---- a named server that does not answer ------------------------------------------------------


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_named_server_that_does_not_answer_is_one_error(tmp_path: Path, workers) -> None:
    pytest.importorskip("psycopg")
    proc = _run(
        tmp_path, *workers, "--rdq-backend=postgres",
        "--rdq-dsn=postgresql://kit:s3cret@127.0.0.1:1/nowhere",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    assert len(out.splitlines()) < 12, out[-3000:]
    assert out.count("does not answer, so no test ran") == 1, out
    assert "postgresql://kit:***@127.0.0.1:1/nowhere (from command line)" in out
    assert "s3cret" not in out
    assert "Start that server, correct the address, or remove the DSN" in out
    assert "ERROR at setup" not in out and "INTERNALERROR" not in out


# ---- chaos ------------------------------------------------------------------------------------


def test_a_failing_chaos_campaign_names_its_report_folder(tmp_path: Path) -> None:
    """A backend that deletes dead-lettered tasks, on the tiny scenario (a few seconds)."""
    xml = tmp_path / "out.xml"
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "chaos",
         "--rdq-backend=tests.broken.sqlite:dead_letter_deletes",
         f"--rdq-chaos-scenario={TESTS_DIR / 'chaos' / 'tiny.toml'}", f"--junitxml={xml}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    (case,) = ET.parse(xml).getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    folder = Path(str(props["rdq.chaos-report"]))
    assert (folder / "results.json").is_file(), props
    assert props["rdq.rule"] == "no-loss"
    assert json.loads(str(props["rdq.faults"]))["total_kills"] >= 1
    failure = case.find("failure")
    assert failure is not None and f"report folder: {folder}" in str(failure.get("message"))
    block = _summary_block(proc.stdout)
    assert f"  chaos report: {folder}" in block, block
    assert any(line.startswith("  chaos faults injected: ") for line in block), block
    assert "    no-loss: 1 (test_chaos_campaign_finds_no_violation)" in block, block
