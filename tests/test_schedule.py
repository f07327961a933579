"""The order of the kit's own tests (tests/_schedule.py): long ones first, the rest kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import _schedule
from tests._paths import ROOT

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_short" time="0.4"/>
<testcase classname="tests.chaos.test_b" name="test_long[x]" time="95.27"/>
<testcase classname="tests.test_c.TestGroup" name="test_m" time="30.0"/>
<testcase classname="tests.test_a" name="test_skipped" time="0.0"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_the_long_tests_go_first_longest_first_and_the_rest_keep_their_order() -> None:
    ids = ["t::a", "t::long2", "t::b", "t::long1", "t::c", "t::mid"]
    items = [_Item(i) for i in ids]
    seconds = {"t::long1": 200.0, "t::long2": 40.0, "t::mid": _schedule.LONG_S - 1, "t::a": 3}
    _schedule.longest_first(items, seconds)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["t::long1", "t::long2", "t::a", "t::b", "t::c", "t::mid"]


def test_durations_are_read_from_junit_by_node_id(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    for module in ("tests/test_a.py", "tests/chaos/test_b.py", "tests/test_c.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    assert _schedule.from_junit(junit, keep=2, root=tmp_path) == {
        "tests/chaos/test_b.py::test_long[x]": 95.3,
        "tests/test_c.py::TestGroup::test_m": 30.0,
    }


def test_the_committed_durations_name_tests_that_exist() -> None:
    """A renamed test would silently lose its place at the front: every entry must name a
    module that exists and a test function defined in it (refresh the file with
    ``python -m tests._schedule JUNIT.xml``)."""
    stale = []
    for nodeid in _schedule.load():
        module, *_, name = nodeid.split("::")
        path = ROOT / module
        function = name.split("[")[0]
        if not path.is_file() or f"def {function}(" not in path.read_text():
            stale.append(nodeid)
    assert _schedule.load(), "tests/durations.json is empty"
    assert not stale, f"tests/durations.json names tests that do not exist: {stale[:5]}"


def test_a_broken_durations_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "durations.json"
    bad.write_text("{not json")
    with pytest.raises(pytest.UsageError, match="cannot read the recorded durations"):
        _schedule.load(bad)
    assert _schedule.load(tmp_path / "missing.json") == {}
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"t::x": 3}))
    assert _schedule.load(good) == {"t::x": 3.0}


def test_a_run_keeps_its_seconds_and_the_file_is_refreshed_from_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of tests using these hooks keeps each test's seconds (its phases summed, a
    skipped test left out) in pytest's cache, and ``from_cache`` reads the slowest back."""
    pytester.makeconftest(
        "from tests import _schedule\n"
        "def pytest_runtest_logreport(report):\n    _schedule.record(report)\n"
        "def pytest_sessionfinish(session):\n    _schedule.save(session.config)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(
        test_m="import time, pytest\n"
        "@pytest.fixture\ndef slow_setup():\n    time.sleep(0.3)\n"
        "def test_slow(slow_setup):\n    time.sleep(0.3)\n"
        "def test_fast():\n    pass\n"
        "def test_skipped():\n    pytest.skip('no')\n"
    )
    junit = pytester.path / "junit.xml"
    pytester.runpytest_subprocess(f"--junitxml={junit}").assert_outcomes(passed=2, skipped=1)
    times = _schedule.from_cache(pytester.path)
    assert set(times) == {"test_m.py::test_slow", "test_m.py::test_fast"}
    assert times["test_m.py::test_slow"] >= 0.6  # its setup's sleep and its call's
    # each test's figure is its own, all its phases: the one JUnit reports for it (both
    # rounded to 0.1 s), however long a busy machine made the empty test
    reported = _schedule.from_junit(junit, root=pytester.path)
    assert times == {k: pytest.approx(v, abs=0.11) for k, v in reported.items()}, reported
    # a later run of one test keeps the others' figures
    pytester.runpytest_subprocess("-k", "fast").assert_outcomes(passed=1, deselected=2)
    assert set(_schedule.from_cache(pytester.path)) == set(times)
    with pytest.raises(SystemExit, match="no recorded run"):
        _schedule.from_cache(pytester.path / "elsewhere")
