"""``tests/_cpu.py``: each test's CPU seconds, counted in its own process, in the
descendants it reaped and in those still alive at its end; the dearest listed at the end
of the run, with or without xdist.

The work is a fixed number of loop turns, not a stretch of time: its CPU seconds do not
shrink when the machine is busy, and a sleeping test spends next to none however long it
sleeps."""

from __future__ import annotations

import pytest

from tests._paths import ROOT

#: a child process spinning a fixed number of loop turns (about 0.4 CPU seconds here)
SPIN = "for _ in range(10_000_000):\n    pass\n"

TESTS = f'''
import subprocess, sys, time

SPIN = {SPIN!r}
#: the child sleeps until the process that started it is gone (an xdist worker may run
#: test_zz on another process, which cannot end this child)
OUTLIVE_NOT = (
    "import os, time\\nparent = os.getppid()\\n"
    "while os.getppid() == parent:\\n    time.sleep(0.2)\\n"
)
_left = []


def test_spins_in_a_reaped_child():
    subprocess.run([sys.executable, "-c", SPIN], check=True)


def test_spins_in_a_child_alive_at_its_end():
    child = subprocess.Popen(
        [sys.executable, "-c", SPIN + "print('done', flush=True)\\n" + OUTLIVE_NOT],
        stdout=subprocess.PIPE, text=True,
    )
    _left.append(child)
    assert child.stdout.readline() == "done\\n"


def test_spins_in_its_own_process():
    exec(SPIN)


def test_sleeps():
    time.sleep(1.0)


def test_zz_ends_the_child_left_alive():
    for child in _left:
        child.kill()
        child.wait()
'''


def _table(output: str) -> dict[str, float]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if " tests spent " in line)
    assert "CPU seconds per test" in "".join(lines[start - 2 : start]), lines[start - 2 : start]
    table: dict[str, float] = {}
    for line in lines[start + 1 :]:
        if "::" not in line:
            break
        seconds, nodeid = line.split(maxsplit=1)
        table[nodeid.rpartition("::")[2]] = float(seconds)
    return table


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "2"]], ids=["one", "xdist"])
def test_the_dearest_tests_are_the_ones_that_spun(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_work=TESTS)
    result = pytester.runpytest_subprocess("-p", "tests._cpu", *workers)
    result.assert_outcomes(passed=5)
    table = _table(result.stdout.str())
    sleeper = table["test_sleeps"]
    for spinner in (
        "test_spins_in_a_reaped_child",
        "test_spins_in_a_child_alive_at_its_end",
        "test_spins_in_its_own_process",
    ):
        # one spin is the same count of loop turns in each test; the sleeper spends what
        # pytest spends on any test
        assert table[spinner] > 0.1, (spinner, table)
        assert table[spinner] > 4 * sleeper, (spinner, table)
    # the child left alive was counted in the test that started it, not again when the
    # last test reaps it
    assert table["test_zz_ends_the_child_left_alive"] < 4 * sleeper + 0.1, table
    assert "the machine was busy" in result.stdout.str()


def test_without_a_test_there_is_no_table(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_none="")
    result = pytester.runpytest_subprocess("-p", "tests._cpu")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, result.stderr.str()
    assert "CPU seconds per test" not in result.stdout.str()
