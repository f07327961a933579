"""``benchmarks/_steadiness.py``: what ``benchmarks/ci_steadiness.py`` reads from a CI run
(pytest's closing line, the JUnit file's failed tests and the proofs' attempts), the
environment it gives the run, and the tables it prints. Crafted inputs; one real pytest
run of a crafted test file checks that the JUnit file pytest writes is read back."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "_steadiness", ROOT / "benchmarks" / "_steadiness.py"
)
assert _spec is not None and _spec.loader is not None
st = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("_steadiness", st)  # dataclasses look their module up by name
_spec.loader.exec_module(st)


# ---- pytest's closing line ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "counts", "seconds"),
    [
        (
            "=========== 1 failed, 1304 passed, 11 skipped in 1148.07s (0:19:08) ===========",
            {"failed": 1, "passed": 1304, "skipped": 11},
            1148.07,
        ),
        ("3 passed in 0.12s", {"passed": 3}, 0.12),
        (
            "==== 2 passed, 1 warning, 2 errors in 4.50s ====",
            {"passed": 2, "warning": 1, "error": 2},
            4.5,
        ),
        (
            "\x1b[31m===== \x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m3 passed\x1b[0m\x1b[31m "
            "in 0.12s\x1b[0m\x1b[31m =====\x1b[0m",
            {"failed": 1, "passed": 3},
            0.12,
        ),
        ("no tests ran in 0.01s", {}, 0.01),
    ],
)
def test_the_closing_line_gives_its_counts_and_time(line, counts, seconds) -> None:
    closing = st.parse_closing(line)
    assert closing is not None
    assert dict(closing.counts) == counts and closing.seconds == seconds
    assert "=" not in closing.text and "\x1b" not in closing.text


@pytest.mark.parametrize(
    "line",
    [
        "tests/test_x.py ....                                    [ 50%]",
        "E       AssertionError: summary was '2 passed in 3.0s' not ...",
        "ok: 3 passed in 2 runs",
        "",
    ],
)
def test_other_lines_are_not_a_closing_line(line) -> None:
    assert st.parse_closing(line) is None


CI_OUTPUT = """\
.ci/run: local images ready in 0s
........F...s.
=================================== FAILURES ===================================
______________________ test_conformance_suite_passes[x] ________________________
E   AssertionError: conformance suite failed on x:
E   1 failed, 500 passed in 30.20s
=========================== short test summary info ============================
FAILED tests/test_builtin_backends.py::test_conformance_suite_passes[x] - Asse...
================== CPU seconds per test (tests/_cpu.py) ==================
13 tests spent 90 CPU seconds; the 2 dearest 50:
    30.0  tests/test_builtin_backends.py::test_conformance_suite_passes[x]
    20.0  tests/test_y.py::test_z
the machine was busy 120 CPU seconds over the run (every process, the shared servers ...)
============ 1 failed, 12 passed, 1 skipped in 61.00s (0:01:01) ============
.ci/run: --- examples/rdq-mysql, dsn rung ---
........
620 passed, 3 skipped in 200.10s (0:03:20)
.ci/run: --- examples/rdq-mysql, local rung ---
....F
1 failed, 622 passed in 250.00s (0:04:10)
.ci/run: the kit failed on examples/rdq-mysql (local rung)
.ci/run: examples/rdq-mysql took 455s
"""


def test_ci_runs_own_closing_line_is_the_last_before_the_examples_logs() -> None:
    own, rungs = st.ci_closings(CI_OUTPUT)
    assert own is not None
    assert own.text == "1 failed, 12 passed, 1 skipped in 61.00s (0:01:01)"
    assert dict(own.counts) == {"failed": 1, "passed": 12, "skipped": 1}
    assert {k: v.text if v else None for k, v in rungs.items()} == {
        "dsn": "620 passed, 3 skipped in 200.10s (0:03:20)",
        "local": "1 failed, 622 passed in 250.00s (0:04:10)",
    }
    no_example = CI_OUTPUT.split(".ci/run: ---")[0]
    assert st.ci_closings(no_example) == (own, {})
    assert st.last_closing(CI_OUTPUT).text == "1 failed, 622 passed in 250.00s (0:04:10)"
    assert st.ci_closings("ruff: 3 errors\n") == (None, {})


def test_the_cpu_table_is_the_test_commands_not_an_examples() -> None:
    table = st.cpu_table(CI_OUTPUT)
    assert table[0] == "13 tests spent 90 CPU seconds; the 2 dearest 50:"
    seconds, nodeid = table[1].split()
    assert (seconds, nodeid.rpartition("::")[2]) == ("30.0", "test_conformance_suite_passes[x]")
    assert table[-1].startswith("the machine was busy 120 CPU seconds")
    assert len(table) == 4
    example_only = CI_OUTPUT.replace("CPU seconds per test", "something else")
    example_only += "=== CPU seconds per test (tests/_cpu.py) ===\n1 tests spent 1 CPU seconds\n"
    assert st.cpu_table(example_only) == []
    assert st.cpu_table("ruff: 3 errors\n") == []


# ---- the JUnit file ----------------------------------------------------------------------------

RETRIED = """\
--------------------------------- Captured Out ---------------------------------
lease-respected (postgres): attempt 1 of at most 3, seed 7: not shown in 21.4 s; victims 0
lease-respected (postgres): attempt 2 of at most 3, seed 8: shown in 19.0 s; victims 5
lease-respected (postgres): shown on seed 8, attempt 2 of at most 3
"""

JUNIT = f"""<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests">
<testsuite name="pytest" errors="1" failures="1" skipped="1" tests="7" time="61.5">
<testcase classname="tests.chaos.test_chaos_partition" name="test_partition[postgres]" time="45.0">
<system-out>{RETRIED}</system-out></testcase>
<testcase classname="tests.chaos.test_chaos_finds_bugs" name="test_finds[class4]" time="9.0">
<failure message="AssertionError: [numbering-from-counter] not shown&#10;line 2">tb</failure>
<system-out>-- Captured Out --
numbering-from-counter: attempt 1 of at most 1, seed 3: not shown in 8.0 s
numbering-from-counter: not shown on any of seeds 3 (1 attempt(s))
</system-out></testcase>
<testcase classname="tests.test_proof.TestGroup" name="test_once" time="0.1">
<system-out>-- Captured Out --
F2: shown on seed 5, attempt 1 of at most 4
</system-out></testcase>
<testcase classname="tests.test_x" name="test_skipped" time="0.0">
<skipped type="pytest.skip" message="no docker">skip</skipped></testcase>
<testcase classname="tests.test_x" name="test_teardown" time="0.2"/>
<testcase classname="tests.test_x" name="test_teardown" time="0.1">
<error message="failed on teardown with &quot;OSError: busy&quot;">trace</error></testcase>
<testcase classname="" name="tests.test_broken" time="0.0">
<error message="collection failure">SyntaxError</error></testcase>
</testsuite>
</testsuites>
"""


def _checkout(tmp_path: Path) -> Path:
    for module in ("tests/chaos/test_chaos_partition.py", "tests/chaos/test_chaos_finds_bugs.py",
                   "tests/test_proof.py", "tests/test_x.py"):  # fmt: skip
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    return tmp_path


def test_a_junit_file_gives_the_failed_tests_and_the_proofs_that_retried(tmp_path: Path) -> None:
    junit = st.read_junit(JUNIT, root=_checkout(tmp_path))
    assert (junit.tests, junit.passed, junit.skipped, junit.seconds) == (6, 2, 1, 61.5)
    assert [(f.test, f.kind, f.message) for f in junit.failures] == [
        (
            "tests/chaos/test_chaos_finds_bugs.py::test_finds[class4]",
            "failure",
            "AssertionError: [numbering-from-counter] not shown",
        ),
        ("tests/test_x.py::test_teardown", "error", 'failed on teardown with "OSError: busy"'),
        ("tests.test_broken", "error", "collection failure"),
    ]
    assert [(p.test, p.wanted, p.attempts, p.of, p.shown) for p in junit.proofs] == [
        ("tests/chaos/test_chaos_partition.py::test_partition[postgres]",
         "lease-respected (postgres)", 2, 3, True),
        ("tests/chaos/test_chaos_finds_bugs.py::test_finds[class4]",
         "numbering-from-counter", 1, 1, False),
        ("tests/test_proof.py::TestGroup::test_once", "F2", 1, 4, True),
    ]  # fmt: skip
    assert [p.test for p in junit.retried] == [
        "tests/chaos/test_chaos_partition.py::test_partition[postgres]"
    ]
    assert junit.retried[0].cell() == "2 of at most 3"


def test_a_proofs_report_printed_again_counts_once_and_a_proof_not_shown_counts_its_seeds() -> None:
    output = (
        "fencing: attempt 1 of at most 3, seed 1: not shown in 1.0 s\n"
        "fencing: attempt 2 of at most 3, seed 2: not shown in 1.0 s\n"
        "fencing: attempt 3 of at most 3, seed 3: not shown in 1.0 s\n"
        "fencing: not shown on any of seeds 1, 2, 3 (3 attempt(s))\n"
        "fencing: not shown on any of seeds 1, 2, 3 (3 attempt(s))\n"  # proof.report() printed
        "  attempt 1 of at most 3, seed 1: not shown in 1.0 s\n"
        "  attempt 2 of at most 3, seed 2: not shown in 1.0 s\n"
        "  attempt 3 of at most 3, seed 3: not shown in 1.0 s\n"
        'one-claim: attempt 1 of at most 2, seed 9: shown in 2.0 s; rules ["one-claim"]\n'
    )
    proofs = st.proof_attempts("t", output)
    assert [(p.wanted, p.attempts, p.of, p.shown) for p in proofs] == [
        ("fencing", 3, 3, False),
        ("one-claim", 1, 2, True),
    ]
    assert proofs[0].cell() == "3 of at most 3, not shown" and proofs[0].retried
    assert not proofs[1].retried
    assert st.proof_attempts("t", "no proof here\nattempts: 3\n") == []


def test_a_verdict_printed_after_a_tests_own_text_is_the_same_proof() -> None:
    wanted = "postgres's asynchronous pair caught under outcome-recorded or execution-count"
    output = (
        f"{wanted}: attempt 1 of at most 1, seed 14: shown in 10.6 s; report r, rules fired "
        '["execution-count", "fencing"]\n'
        f"{wanted}: shown on seed 14, attempt 1 of at most 1\n"
        "postgres async failover: 86 violations (['execution-count', 'fencing']) in 10.3s; "
        f"{wanted}: shown on seed 14, attempt 1 of at most 1\n"
    )
    proofs = st.proof_attempts("t", output)
    assert [(p.wanted, p.attempts, p.of, p.shown) for p in proofs] == [(wanted, 1, 1, True)]
    # printed that way only (no line of the proof's own): the text after the last "; "
    alone = st.proof_attempts("t", output.splitlines()[-1])
    assert [(p.wanted, p.attempts) for p in alone] == [(wanted, 1)]


@pytest.mark.parametrize(
    ("classname", "name", "want"),
    [
        ("tests.chaos.test_x", "test_y[a.b]", "tests/chaos/test_x.py::test_y[a.b]"),
        ("tests.test_x.TestGroup", "test_y", "tests/test_x.py::TestGroup::test_y"),
        ("", "tests.test_broken", "tests.test_broken"),
    ],
)
def test_a_node_id_without_the_checkout_is_guessed_from_the_names(classname, name, want) -> None:
    assert st.node_id(classname, name) == want


def test_a_node_id_takes_the_module_that_exists_in_the_checkout(tmp_path: Path) -> None:
    (tmp_path / "tests" / "testing").mkdir(parents=True)
    (tmp_path / "tests" / "testing" / "helpers.py").write_text("")
    # the last part looks like a module, but the file is tests/testing/helpers.py
    assert st.node_id("tests.testing.helpers.test_group", "test_y", tmp_path) == (
        "tests/testing/helpers.py::test_group::test_y"
    )


def test_the_junit_file_pytest_writes_is_read_back(tmp_path: Path) -> None:
    """The options the script gives a run, on a crafted test file in a real pytest: its
    JUnit file lands where the script looks and holds the failure and the retry."""
    (tmp_path / "test_crafted.py").write_text(
        "def test_retried():\n"
        f"    print({RETRIED!r})\n"
        "def test_failing():\n"
        "    assert 1 == 2, 'one is not two'\n"
    )
    env, _ = st.ci_environment(os.environ)
    opts, path = st.junit_addopts(tmp_path / "junit", tmp_path)
    env.update(PYTEST_ADDOPTS=opts, PWD=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         "test_crafted.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert path.is_file(), f"no JUnit file at {path}:\n{proc.stdout}"
    junit = st.read_junit(path, root=tmp_path)
    assert [f.test for f in junit.failures] == ["test_crafted.py::test_failing"]
    assert "one is not two" in junit.failures[0].message
    assert [(p.test, p.attempts) for p in junit.retried] == [("test_crafted.py::test_retried", 2)]
    closing = st.last_closing(proc.stdout)
    assert closing is not None and dict(closing.counts) == {"failed": 1, "passed": 1}


# ---- the run's environment and where its JUnit file lands ------------------------------------


def test_a_ci_run_gets_no_credential_no_venv_and_no_pytest_option() -> None:
    venv = "/work/checkout/.venv"
    environ = {
        "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin",
        "HOME": "/root",
        "VIRTUAL_ENV": venv,
        "PYTHONPATH": "/somewhere",
        "GITHUB_TOKEN": "t",
        "AWS_SECRET_ACCESS_KEY": "s",
        "PGPASSWORD": "p",
        "PYTEST_ADDOPTS": "-x",
        "PYTEST_XDIST_WORKER": "gw1",
        "RDQ_MYSQL_DSN": "mysql://root@127.0.0.1:3306/test",
        "CI": "false",
    }
    env, dropped = st.ci_environment(environ, venv)
    assert env == {
        "PATH": "/usr/local/bin:/usr/bin",
        "HOME": "/root",
        "RDQ_MYSQL_DSN": "mysql://root@127.0.0.1:3306/test",
        "CI": "true",
    }
    assert dropped == [
        "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PGPASSWORD", "PYTEST_ADDOPTS",
        "PYTEST_XDIST_WORKER", "PYTHONPATH", "VIRTUAL_ENV",
    ]  # fmt: skip


def test_only_the_outermost_pytest_writes_the_junit_file_the_script_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest expands variables in the path (``os.path.expandvars``): the test command
    started by ``.ci/run`` from the clone's root gets the path the script reads; a pytest a
    test starts (in an xdist worker) and the example's runs (from their folder) another."""
    clone = tmp_path / "clone"
    opts, path = st.junit_addopts(tmp_path / "junit", clone)
    argv = shlex.split(opts)
    assert argv[1:] == ["-o", "junit_logging=system-out"]
    pattern = argv[0].removeprefix("--junitxml=")

    def lands(pwd: Path, worker: str | None) -> Path:
        monkeypatch.setenv("PWD", str(pwd))
        if worker is None:
            monkeypatch.delenv(st.XDIST_WORKER, raising=False)
        else:
            monkeypatch.setenv(st.XDIST_WORKER, worker)
        return Path(os.path.normpath(os.path.expandvars(pattern)))

    assert lands(clone, None) == path
    assert lands(clone, "gw0") != path
    assert lands(clone / "examples" / "rdq-mysql", None) != path
    assert path.is_relative_to(tmp_path / "junit")


# ---- the tables --------------------------------------------------------------------------------


def _runs(tmp_path: Path) -> list:
    junit = st.read_junit(JUNIT, root=_checkout(tmp_path))
    clean = st.Junit(tests=6, skipped=1, seconds=60.0, proofs=(
        st.ProofAttempts("tests/chaos/test_chaos_partition.py::test_partition[postgres]",
                         "lease-respected (postgres)", 1, 3, True),
    ))  # fmt: skip
    closing = st.parse_closing("1 failed, 12 passed, 1 skipped in 61.00s (0:01:01)")
    return [
        st.Run(1, 1, 1164.4, closing, junit, "load 2.0-5.1 on 2 cores", 2),
        st.Run(
            2, 0, 1100.0, st.parse_closing("13 passed in 60.00s"), clean, "load 3.0 on 2 cores", 2
        ),
        st.Run(3, None, 3600.0, None, None, "load 4.0-6.0 on 2 cores", 2),
    ]


def test_the_runs_table_has_a_row_per_run(tmp_path: Path) -> None:
    assert st.runs_table(_runs(tmp_path)).splitlines() == [
        "| run | rc | wall | pytest's closing line | failed | retried | load | busy |",
        "|:--|--:|--:|:--|--:|--:|:--|--:|",
        "| #1 | 1 | 1,164 s (19.4 min) | 1 failed, 12 passed, 1 skipped in 61.00s (0:01:01) "
        "| 3 | 1 | load 2.0-5.1 on 2 cores | 2 |",
        "| #2 | 0 | 1,100 s (18.3 min) | 13 passed in 60.00s | 0 | 0 | load 3.0 on 2 cores | 2 |",
        "| #3 | did not end | 3,600 s (60.0 min) | (no closing line) | ? | ? "
        "| load 4.0-6.0 on 2 cores | 2 |",
    ]


def test_a_wall_time_is_in_minutes_too_from_two_minutes_on() -> None:
    assert [st.wall(s) for s in (7.46, 119.9, 120.0)] == ["7.5 s", "119.9 s", "120 s (2.0 min)"]


def test_failures_are_counted_per_test_over_the_runs_that_wrote_a_junit_file(
    tmp_path: Path,
) -> None:
    runs = _runs(tmp_path)
    runs[1].junit = runs[0].junit  # the same failures again in run 2
    lines = st.failures_table(runs).splitlines()
    assert lines[:2] == ["| test | failed | in runs |", "|:--|--:|:--|"]
    assert lines[2:] == [
        "| `tests.test_broken` | 2 of 2 | #1, #2 |",
        "| `tests/chaos/test_chaos_finds_bugs.py::test_finds[class4]` | 2 of 2 | #1, #2 |",
        "| `tests/test_x.py::test_teardown` | 2 of 2 | #1, #2 |",
    ]
    assert st.failures_table(_runs(tmp_path)[1:]) == "no test failed in any of the 1 runs read"
    assert st.failures_table(_runs(tmp_path)[2:]).startswith("no run wrote a JUnit file")


def test_a_proof_that_retried_in_any_run_shows_its_attempts_in_every_run(tmp_path: Path) -> None:
    assert st.retries_table(_runs(tmp_path)).splitlines() == [
        "| test | proof | run #1 | run #2 |",
        "|:--|:--|:--|:--|",
        "| `tests/chaos/test_chaos_partition.py::test_partition[postgres]` "
        "| lease-respected (postgres) | 2 of at most 3 | 1 of at most 3 |",
    ]
    assert st.retries_table(_runs(tmp_path)[1:]) == (
        "no proof made more than one attempt (1 distinct proofs seen over 1 runs)"
    )
