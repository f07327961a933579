"""``late_outcome.late_problems`` on crafted races: each way a late holder and a reclaim
can both win (or neither) is named by its rule, with the task and the workers; a fair
race passes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from rdq_compliance.suite.late_outcome import Held, LateCall, Reclaim, SideReport, late_problems
from rdq_core.errors import NotFound
from rdq_core.model import Attempt, Outcome, Status, Task

T0 = datetime(2026, 12, 2, 12, tzinfo=timezone.utc)
CLAIMED, EXPIRED, RECLAIMED = T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)


class Tasks:
    """A storage whose ``get`` returns the crafted final state."""

    def __init__(self, *tasks: Task) -> None:
        self.tasks = {t.id: t for t in tasks}

    def get(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise NotFound(task_id) from None


#: Whose claim an attempt is of: the late holder's (started at its claim) or the thief's.
HOLDER, THIEF = CLAIMED, RECLAIMED
E = Outcome.LEASE_EXPIRED


def task(status: Status, *attempts: tuple[Outcome, datetime], tid: str = "t-1") -> Task:
    """The final state: ``attempts`` are (outcome, started at), oldest first."""
    history = tuple(Attempt(i, at, RECLAIMED, o) for i, (o, at) in enumerate(attempts, 1))
    return Task(tid, "q", "h", b"", {}, status, len(history), 0, None, None, T0, history)


def held(op: str, tid: str = "t-1") -> Held:
    return Held(tid, "tok-holder", CLAIMED, EXPIRED, op)


def race(
    h: Held, accepted: bool, *, taken: bool, extended_to: datetime | None = None,
    then_complete: bool | None = None, completed: bool = True,
) -> list[SideReport]:  # fmt: skip
    call = LateCall(h, "holder-0", accepted, extended_to, then_complete)
    late = SideReport("holder-0", calls=[call])
    reclaims = [Reclaim(h.task_id, "tok-thief", "reclaimer-1", RECLAIMED, True, completed)]
    return [late, SideReport("reclaimer-1", reclaims=reclaims if taken else [])]


def judged(storage: Tasks, h: Held, reports: list[SideReport]) -> dict[str, list[str]]:
    return late_problems(storage, [h], reports)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "final"),
    [
        ("complete", task(Status.SUCCEEDED, (Outcome.SUCCESS, HOLDER))),
        ("dead_letter", task(Status.DEAD, (Outcome.PERMANENT_FAILURE, HOLDER))),
        ("reschedule", task(Status.PENDING, (Outcome.RETRYABLE_FAILURE, HOLDER))),
    ],
)
def test_a_holder_that_won_alone_passes(op: str, final: Task):
    assert judged(Tasks(final), held(op), race(held(op), True, taken=False)) == {}


def test_a_reclaim_that_won_alone_passes():
    final = task(Status.SUCCEEDED, (E, HOLDER), (Outcome.SUCCESS, THIEF))
    assert judged(Tasks(final), held("complete"), race(held("complete"), False, taken=True)) == {}


@pytest.mark.parametrize(
    ("op", "recorded", "rule"),
    [
        ("complete", Outcome.SUCCESS, "terminal-final"),
        ("dead_letter", Outcome.PERMANENT_FAILURE, "terminal-final"),
        ("reschedule", Outcome.RETRYABLE_FAILURE, "claim-due-only"),
    ],
)
def test_a_reclaim_after_an_accepted_outcome_names_what_it_took(op, recorded, rule):
    final = task(Status.SUCCEEDED, (recorded, HOLDER), (E, HOLDER), (Outcome.SUCCESS, THIEF))
    got = judged(Tasks(final), held(op), race(held(op), True, taken=True))
    assert list(got) == [rule], got
    (line,) = got[rule]
    assert "'t-1'" in line and "reclaimer-1" in line and f"its {op} was accepted" in line, line


def test_an_outcome_accepted_after_the_reclaim_is_fencing():
    final = task(Status.SUCCEEDED, (E, HOLDER), (Outcome.SUCCESS, THIEF), (Outcome.SUCCESS, HOLDER))
    got = judged(Tasks(final), held("complete"), race(held("complete"), True, taken=True))
    assert list(got) == ["fencing"], got
    assert "accepted after reclaimer-1" in got["fencing"][0]


def test_both_winning_with_no_order_in_the_history_is_two_holders():
    final = task(Status.SUCCEEDED)  # a store that keeps no history
    got = judged(Tasks(final), held("complete"), race(held("complete"), True, taken=True))
    assert list(got) == ["one-claim"], got
    assert "does not order the two" in got["one-claim"][0]


def test_a_refusal_with_no_reclaim_is_fencing():
    final = task(Status.PENDING)
    got = judged(Tasks(final), held("complete"), race(held("complete"), False, taken=False))
    assert list(got) == ["fencing"], got
    assert "refused (StaleClaim) although no claim took the task" in got["fencing"][0]


def test_a_renewed_lease_taken_before_it_ran_out_is_lease_respected():
    h = held("extend_lease")
    final = task(Status.SUCCEEDED, (E, HOLDER), (Outcome.SUCCESS, THIEF))
    reports = race(h, True, taken=True, extended_to=RECLAIMED + timedelta(minutes=10),
                   then_complete=False)  # fmt: skip
    got = judged(Tasks(final), h, reports)
    assert list(got) == ["lease-respected"], got


def test_a_renewed_lease_that_ran_out_may_be_reclaimed():
    h = held("extend_lease")
    final = task(Status.SUCCEEDED, (E, HOLDER), (Outcome.SUCCESS, THIEF))
    reports = race(h, True, taken=True, extended_to=RECLAIMED - timedelta(milliseconds=1),
                   then_complete=False)  # fmt: skip
    assert judged(Tasks(final), h, reports) == {}


def test_a_wrong_final_state_is_outcome_recorded():
    final = task(Status.SUCCEEDED, (Outcome.SUCCESS, THIEF))  # the reclaim won, no expiry
    got = judged(Tasks(final), held("complete"), race(held("complete"), False, taken=True))
    assert list(got) == ["outcome-recorded"], got


def test_two_reclaims_are_one_claim_and_a_stopped_worker_is_named():
    h = held("complete")
    reports = race(h, False, taken=True)
    reports[1].reclaims.append(Reclaim("t-1", "tok-2", "reclaimer-2", RECLAIMED, True, True))
    reports.append(SideReport("reclaimer-3", error="BackendUnavailable: gone"))
    final = task(Status.SUCCEEDED, (E, HOLDER), (Outcome.SUCCESS, THIEF))
    got = judged(Tasks(final), h, reports)
    assert set(got) == {"one-claim", "claim-complete"}, got
    assert "reclaimer-2" in got["one-claim"][0] and "reclaimer-3" in got["claim-complete"][0]
