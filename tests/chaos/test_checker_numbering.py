"""The checker's numbering rules on crafted histories (``history-numbering``, invariant
H, and ``execution-count``): rejected with the rule and task named, or accepted."""

from __future__ import annotations

from rdq_compliance.chaos.checker import FinalState, check
from rdq_core.model import Attempt, Status
from tests.chaos.crafted_history import (
    EXPIRED,
    PERM,
    SUCCESS,
    A,
    B,
    H,
    assert_names,
    att,
    clean,
    final,
    of,
    task,
)

# ---- rule 5: invariant H -----------------------------------------------------------------------


def redriven(second_no: int, attempts: tuple[Attempt, ...]) -> tuple[H, FinalState]:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "dead_letter")
    h.redrive(3, "t1")
    h.claim(5, "w1", "t1", B, no=second_no, count=0)
    h.run(5, "w1", "t1", B, end=6).report(6, "w1", "t1", B)
    return h, final(task("t1", Status.SUCCEEDED, *attempts, redrives=1))


def test_numbering_restarting_after_a_redrive_is_rejected() -> None:
    h, state = redriven(1, (att(1, 5, 6, SUCCESS),))  # history reset by the redrive
    got = check(h.events, state)
    restarted = of(got, "history-numbering")
    assert len(restarted) == 1
    assert_names(restarted[0], "t1", ("w0", "w1"), (A, B))
    assert "restarted" in restarted[0].message
    lost = of(got, "outcome-recorded")  # w0's acknowledged dead_letter is gone too
    assert len(lost) == 1
    assert_names(lost[0], "t1", ("w0",), (A,))


def test_numbering_continuing_after_a_redrive_is_accepted() -> None:
    h, state = redriven(2, (att(1, 0, 1, PERM), att(2, 5, 6, SUCCESS)))
    clean(h.events, state)


def test_a_duplicate_attempt_number_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(4, "w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(1, 10, 11, SUCCESS)))
    got = of(check(h.events, state), "history-numbering")
    dup = [v for v in got if "duplicate" in v.message]
    assert len(dup) == 1
    assert_names(dup[0], "t1", ("w0", "w1"), (A, B))


def test_an_attempt_numbered_below_its_claim_is_rejected() -> None:
    """The claim saw attempt 1 in the history (announced 2); its attempt reuses 1."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A, no=2, count=1).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
             "history-numbering")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0",), (A,))
    assert "already used" in got[0].message


def test_gaps_in_numbering_are_accepted() -> None:
    h, _ = redriven(4, ())
    state = final(
        task("t1", Status.SUCCEEDED, att(3, 0, 1, PERM), att(7, 5, 6, SUCCESS), redrives=1)
    )
    clean(h.events, state)


# ---- rule 6: executions ------------------------------------------------------------------------


def test_a_task_run_more_often_than_its_attempts_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).run(1, "w0", "t1", A, end=2, again=True)
    h.report(2, "w0", "t1", A)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 2, SUCCESS)))),
             "execution-count")
    assert len(got) == 2  # twice under one token, and 2 runs for 1 attempt
    for v in got:
        assert_names(v, "t1", ("w0",), (A,))


def test_runs_of_reclaimed_and_open_claims_are_accepted() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(2, "w0")  # ran, no outcome
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1).run(10, "w1", "t1", B)
    state = final(task("t1", Status.IN_FLIGHT, att(1, 0, 10, EXPIRED)), drained=False)
    got = check(h.events, state)
    assert [v.rule for v in got] == ["drain-timeout"]  # still running: no execution-count
