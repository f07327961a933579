"""The stateful machine through the plugin, as a third party runs it.

``pytest --rdq-backend=NAME -m stateful`` in a project of its own (pytester's): the
machine runs on a backend that is not one of ours, passes on a correct one, and on a
broken one fails with the violated rule, the shrunk program, the seed and the command
that replays it; the failing program is kept in the project's example database and the
next run replays it first.
"""

from __future__ import annotations

import os

import pytest

from tests._paths import pythonpath

pytestmark = pytest.mark.stateful


THIRD_PARTY = """
from rdq_core.memory import MemoryStore
from rdq_memory.plugin import MemoryBackend


class TheirStore(MemoryStore):
    '''A third party's store (here: the reference one, under their own name).'''


backend = MemoryBackend(TheirStore, name="theirs")
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    for name in [n for n in os.environ if n.startswith("RDQ_")]:
        monkeypatch.delenv(name)
    pytester.makepyfile(rdq_theirs=THIRD_PARTY)
    pytester.makepyfile(test_own="def test_their_own_test():\n    pass\n")
    return pytester


def test_third_party_backend_passes_the_machine(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess(
        "--rdq-backend=rdq_theirs:backend", "-m", "stateful", "-q", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 passed*"])


def test_broken_backend_fails_with_program_seed_and_replay(project: pytest.Pytester) -> None:
    args = ("--rdq-backend=tests.broken.memory:limit_ignored", "-m", "stateful", "-p",
            "no:cacheprovider")  # fmt: skip
    first = project.runpytest_subprocess(*args)
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(
        [
            "*[[]claim-limit[]] claim_due never returns more than `limit` tasks*",
            "*state = BackendVsModel()*",
            "*state.start_with_tasks(*",
            "*reproduce_failure*",
            "*rdq stateful machine: backend 'tests.broken.memory:limit_ignored', profile 'ci',"
            " seed 0*",
            "*Replay: pytest --rdq-backend=tests.broken.memory:limit_ignored -m stateful "
            "--rdq-hypothesis-profile=ci --rdq-hypothesis-seed=0*",
        ]
    )
    kept = project.path / ".hypothesis" / "rdq-stateful" / "tests.broken.memory_limit_ignored"
    assert kept.is_dir() and any(kept.rglob("*")), f"no failing program kept in {kept}"

    # The next run replays the kept program first: it fails again, at once.
    again = project.runpytest_subprocess(*args)
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*[[]claim-limit[]]*", "*state.start_with_tasks(*"])

    # Another seed, as the note says how to pass one.
    other = project.runpytest_subprocess(*args, "--rdq-hypothesis-seed=7")
    other.assert_outcomes(failed=1)
    other.stdout.fnmatch_lines(["*seed 7*"])


def test_the_run_says_what_it_should_take_and_then_what_the_last_one_took(
    project: pytest.Pytester,
) -> None:
    """The first line gives the profile's figure; the next run, the last run's seconds
    (kept in pytest's cache)."""
    args = ("--rdq-backend=rdq_theirs:backend", "-m", "stateful", "-q")
    first = project.runpytest_subprocess(*args)
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(
        ["rdq stateful (ci profile, rdq_theirs:backend): 100 programs of up to 30 steps; "
         "expected: about * on sqlite*"]
    )  # fmt: skip
    second = project.runpytest_subprocess(*args)
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(
        ["rdq stateful (ci profile, *): * expected: * s (the last run here)"]
    )


def test_progress_lines_estimate_the_time_left_from_the_runs_rate() -> None:
    from rdq_compliance.stateful.records import RunStats
    from rdq_compliance.stateful.runner import EXPECTED, PROGRESS_EVERY_S, Progress

    now = [100.0]
    lines: list[str] = []
    progress = Progress(
        lines.append, backend="b", profile="deep", total=2000, steps=60, clock=lambda: now[0]
    )
    assert lines == [
        "rdq stateful (deep profile, b): 2000 programs of up to 60 steps; expected: "
        + EXPECTED["deep"]
    ]
    stats = RunStats(on_example=progress)
    for _ in range(499):
        stats.begin_example()
    assert len(lines) == 1, "no line before PROGRESS_EVERY_S"
    now[0] += PROGRESS_EVERY_S * 2  # 20 s for 500 programs: 1,500 left, 60 s
    stats.steps = 9000
    stats.begin_example()
    assert lines[-1] == (
        "rdq stateful (deep profile, b): 500/2000 programs, 9000 steps, 20 s; about 60 s left"
    )
    stats.begin_example()
    assert len(lines) == 2, "at most one line per PROGRESS_EVERY_S"
    stats.failed(5)
    now[0] += PROGRESS_EVERY_S
    stats.begin_example()
    assert lines[-1].endswith("a rule broke: shrinking the failing program")
