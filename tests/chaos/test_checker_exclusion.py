"""The checker's exclusion rules on crafted histories (``one-claim``,
``lease-respected``, ``reclaim-expired``, ``lease-expired-recorded``): each history it
rejects names the rule, the task, the workers and the tokens; its clean twin passes."""

from __future__ import annotations

import pytest

from rdq_compliance.chaos.checker import FinalState, check
from rdq_core.model import Status
from tests.chaos.crafted_history import (
    EXPIRED,
    RETRY,
    SUCCESS,
    A,
    B,
    C,
    H,
    assert_names,
    att,
    clean,
    final,
    of,
    reclaimed_at,
    task,
)

# ---- rule 1: mutual exclusion ---------------------------------------------------------------


def overlapping(second_at: float, *, first_outcome_at: float | None = None) -> tuple[H, FinalState]:
    """w0 claims t1 at 0 (lease 10 s); w1 claims it again (not as a reclaim) at ``second_at``."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    attempts = []
    if first_outcome_at is not None:
        h.report(first_outcome_at, "w0", "t1", A, "reschedule")
        attempts.append(att(1, 0, first_outcome_at, RETRY))
    h.claim(second_at, "w1", "t1", B, no=len(attempts) + 1, count=len(attempts))
    h.run(second_at, "w1", "t1", B, end=second_at + 1).report(second_at + 1, "w1", "t1", B)
    attempts.append(att(len(attempts) + 1, second_at, second_at + 1, SUCCESS))
    return h, final(task("t1", Status.SUCCEEDED, *attempts))


def test_overlapping_claims_are_rejected() -> None:
    h, state = overlapping(4)
    got = of(check(h.events, state), "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))
    assert "was live" in got[0].message


def test_two_workers_given_one_task_at_one_instant_are_rejected() -> None:
    """Check-then-act: both claims read the task PENDING and stamp the same instant."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).claim(0, "w1", "t1", B)
    h.run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "complete", "fail")
    h.run(0, "w1", "t1", B, end=1).report(1, "w1", "t1", B)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
             "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))


def test_a_claim_after_the_outcome_is_accepted() -> None:
    h, state = overlapping(4, first_outcome_at=3)
    clean(h.events, state)


def test_a_claim_in_the_same_microsecond_as_the_outcome_is_accepted() -> None:
    h, state = overlapping(3, first_outcome_at=3)  # a clock that stood still
    clean(h.events, state)


def test_two_acknowledged_outcomes_for_one_token_are_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A).report(2, "w0", "t1", A)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
             "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0",), (A,))
    assert "2 outcome calls" in got[0].message


def test_two_outcome_attempts_for_one_claim_are_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS), att(2, 0, 2, SUCCESS)))
    got = of(check(h.events, state), "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0",), (A,))


# ---- rule 3: reclaim only after the lease expired --------------------------------------------


def test_a_reclaim_of_a_live_lease_is_rejected() -> None:
    h, state = reclaimed_at(6)
    got = check(h.events, state)
    stolen = of(got, "lease-respected")
    assert len(stolen) == 1, got
    assert_names(stolen[0], "t1", ("w0", "w1"), (A, B))
    assert not of(got, "one-claim")
    # the excerpt shows both claims and the kill of w0
    ops = [(e["proc"], e["op"]) for e in stolen[0].excerpt]
    assert ("w0", "claim") in ops and ("w1", "claim") in ops and ("harness", "fault") in ops


def test_a_reclaim_of_a_lease_extended_by_a_heartbeat_is_rejected() -> None:
    h, state = reclaimed_at(12, beat="ok")  # the heartbeat at 8 s extended the lease to 18 s
    stolen = of(check(h.events, state), "lease-respected")
    assert len(stolen) == 1
    assert_names(stolen[0], "t1", ("w0", "w1"), (A, B))
    assert "extended by heartbeats" in stolen[0].message


@pytest.mark.parametrize("beat", [None, "info", "fail"])
def test_a_reclaim_after_expiry_is_accepted(beat: str | None) -> None:
    # without a heartbeat the lease ends at 10 s; an unknown or refused heartbeat is not
    # assumed to have extended it
    h, state = reclaimed_at(12 if beat else 10, beat=beat)
    clean(h.events, state)


def test_a_reclaim_after_the_extended_lease_is_accepted() -> None:
    h, state = reclaimed_at(18, beat="ok")
    clean(h.events, state)


def unknown_victim(reclaim_at: float) -> tuple[H, FinalState]:
    """w0's claim reply is lost at 0 (the claim happened); w1 reclaims at ``reclaim_at``."""
    h = H().enqueue("t1")
    h.claim(-20, "w2", "t0", C).report(-19, "w2", "t0", C)  # shows the run's lease: 10 s
    h.lost_claim(0, "w0").kill(1, "w0")
    h.claim(reclaim_at, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(reclaim_at, "w1", "t1", B, end=reclaim_at + 1).report(reclaim_at + 1, "w1", "t1", B)
    state = final(
        task("t0", Status.SUCCEEDED, att(1, -20, -19, SUCCESS)),
        task(
            "t1", Status.SUCCEEDED,
            att(1, 0, reclaim_at, EXPIRED), att(2, reclaim_at, reclaim_at + 1, SUCCESS),
        ),
    )
    return h, state


def test_a_stolen_lease_of_a_claim_whose_reply_was_lost_is_rejected() -> None:
    h, state = unknown_victim(3)
    stolen = of(check(h.events, state), "lease-respected")
    assert len(stolen) == 1
    assert_names(stolen[0], "t1", ("w1",), (B,))
    assert "no worker learnt of" in stolen[0].message


def test_a_reclaim_of_a_claim_whose_reply_was_lost_is_accepted() -> None:
    h, state = unknown_victim(10)
    clean(h.events, state)


def test_a_reclaim_not_reported_as_such_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(5, "w0")
    h.claim(12, "w1", "t1", B).run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 12, 13, SUCCESS))))
    hidden = of(got, "reclaim-expired")
    assert len(hidden) == 1
    assert_names(hidden[0], "t1", ("w0", "w1"), (A, B))
    assert "reclaimed=False" in hidden[0].message
    missing = of(got, "lease-expired-recorded")  # ... and it wrote no LEASE_EXPIRED either
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w0", "w1"), (A, B))


# ---- rule 4: LEASE_EXPIRED recorded ----------------------------------------------------------


def test_a_missing_lease_expired_attempt_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(5, "w0")
    h.claim(12, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, att(2, 12, 13, SUCCESS))))
    missing = of(got, "lease-expired-recorded")
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w0", "w1"), (A, B))
    assert "LEASE_EXPIRED attempt is missing" in missing[0].message


def test_a_missing_lease_expired_attempt_of_an_unknown_claim_is_rejected() -> None:
    h = H().enqueue("t1")
    h.lost_claim(0, "w0").kill(1, "w0")
    h.claim(12, "w1", "t1", B, reclaimed=True, no=1, count=0)
    h.run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 12, 13, SUCCESS))))
    missing = of(got, "lease-expired-recorded")
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w1",), (B,))
    assert "ending at that reclaim" in missing[0].message


def test_a_lease_expired_attempt_for_a_claim_with_an_outcome_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "reschedule")
    h.claim(12, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    state = final(task(
        "t1", Status.SUCCEEDED,
        att(1, 0, 1, RETRY), att(2, 0, 12, EXPIRED), att(3, 12, 13, SUCCESS),
    ))
    got = of(check(h.events, state), "lease-expired-recorded")
    assert got and got[0].task == "t1"
    assert_names(got[0], "t1", ("w0",), (A,))


def test_a_worker_killed_mid_run_costs_one_lease_and_is_accepted() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).beat(3, "w0", "t1", A).kill(4, "w0")
    h.claim(13, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(13, "w1", "t1", B, end=14).report(14, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 13, EXPIRED), att(2, 13, 14, SUCCESS)))
    clean(h.events, state)


@pytest.mark.parametrize("applied", [True, False])
def test_a_worker_killed_mid_report_is_accepted_either_way(applied: bool) -> None:
    """The complete invoke is left open (the process died): it may or may not have acted."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A, "complete", "open").kill(1, "w0")
    if applied:
        state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))
    else:
        h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
        h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
        state = final(
            task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS))
        )
    clean(h.events, state)


def test_a_worker_killed_mid_claim_is_accepted() -> None:
    """The claim invoke is left open; the claim happened and was later reclaimed."""
    h = H().enqueue("t1")
    h.ev(0, "w0", "invoke", "claim", limit=1)
    h.kill(0.5, "w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS)))
    clean(h.events, state)
