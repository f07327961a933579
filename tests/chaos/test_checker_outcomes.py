"""The checker's outcome rules on crafted histories (``fencing`` of stale heartbeats and
outcomes, ``outcome-recorded``): rejected with the rule, task, workers and tokens named,
or accepted."""

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
    H,
    assert_names,
    att,
    clean,
    final,
    of,
    task,
)

# ---- rule 7: fencing ---------------------------------------------------------------------------


def stale_worker(beat: str | None, report: str | None, *, at_: float = 12) -> tuple[H, FinalState]:
    """w0 pauses past its lease; w1 reclaims t1 at 10; w0 wakes at ``at_``."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    h.ev(1, "harness", "info", "fault", kind="pause", target="w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1).run(10, "w1", "t1", B)
    h.ev(at_ - 0.5, "harness", "info", "fault", kind="resume", target="w0")
    if beat is not None:
        h.beat(at_, "w0", "t1", A, beat)
    if report is not None:
        h.report(at_ + 0.5, "w0", "t1", A, "complete", report)
    h.run(10, "w1", "t1", B, end=15).report(15, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 15, SUCCESS)))
    return h, state


def test_a_stale_heartbeat_accepted_is_rejected() -> None:
    h, state = stale_worker("ok", None)
    got = check(h.events, state)
    fenced = of(got, "fencing")
    assert len(fenced) == 1, got
    assert_names(fenced[0], "t1", ("w0", "w1"), (A, B))
    assert "heartbeat" in fenced[0].message and "after w1 claimed it" in fenced[0].message
    assert not of(got, "lease-respected")  # the stale beat does not make w1's claim early


def test_a_heartbeat_after_its_own_outcome_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    h.beat(3, "w0", "t1", A)
    fenced = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
                "fencing")
    assert len(fenced) == 1
    assert_names(fenced[0], "t1", ("w0",), (A,))
    assert "its own outcome" in fenced[0].message


def test_a_stale_worker_refused_is_accepted() -> None:
    h, state = stale_worker("fail", "fail")
    clean(h.events, state)


def test_a_late_worker_nobody_reclaimed_is_accepted() -> None:
    """The token fences, not the clock: past its lease, a worker may still report."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    h.beat(12, "w0", "t1", A).run(12, "w0", "t1", A, end=14)
    h.report(14, "w0", "t1", A)
    h.beat(15, "w0", "t1", A, "fail")  # a beat refused after the outcome is fine
    clean(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 14, SUCCESS))))


def test_a_stale_outcome_accepted_is_rejected() -> None:
    """The broken store accepted w0's complete after the reclaim, as w1's attempt."""
    h, _ = stale_worker(None, "ok")
    h.events = [e for e in h.events if not (e["proc"] == "w1" and e["op"] == "complete")]
    h.report(15, "w1", "t1", B, "complete", "fail")
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 12.5, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    assert len(fenced) == 2
    acknowledged, written = fenced
    assert_names(acknowledged, "t1", ("w0", "w1"), (A, B))
    assert "records that claim as attempt 1 LEASE_EXPIRED" in acknowledged.message
    # the claim whose attempt it is, and the stale holder whose complete wrote it
    assert_names(written, "t1", ("w0", "w1"), (A, B))
    assert "refused as stale" in written.message
    assert "may have written it: complete with the token of the claim of w0" in written.message


def test_an_outcome_written_while_its_holder_made_no_call_names_the_stale_writer() -> None:
    """w1 reclaims and dies at once (no outcome call); w0's late complete is accepted and
    lands as w1's attempt: the message names w1's claim and w0's call."""
    h, _ = stale_worker(None, "ok")
    h.events = [e for e in h.events if not (e["proc"] == "w1" and e["op"] in ("complete", "run"))]
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 12.5, SUCCESS)))
    written = [v for v in of(check(h.events, state), "fencing") if "another (stale)" in v.message]
    assert len(written) == 1
    assert_names(written[0], "t1", ("w0", "w1"), (A, B))
    assert "its holder made no outcome call" in written[0].message
    assert "complete with the token of the claim of w0" in written[0].message


def test_an_outcome_accepted_after_the_next_claim_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=11).report(11, "w0", "t1", A, "reschedule")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=12).report(12, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 11, RETRY), att(2, 10, 12, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    late = [v for v in fenced if "a stale outcome accepted" in v.message]
    assert len(late) == 1
    assert_names(late[0], "t1", ("w0", "w1"), (A, B))


def test_a_token_minted_twice_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    h.claim(10, "w1", "t1", A, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", A, end=11).report(11, "w1", "t1", A)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    assert len(fenced) == 1
    assert_names(fenced[0], "t1", ("w0", "w1"), (A,))
    assert "same token" in fenced[0].message


def test_an_outcome_at_no_claim_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS), att(2, 5, 6, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    assert len(fenced) == 1
    assert_names(fenced[0], "t1", ("w0",), (A,))
    assert "starts at no claim" in fenced[0].message


# ---- acknowledged outcomes are kept ----------------------------------------------------------


def test_an_acknowledged_outcome_missing_from_the_history_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, count=1)))
    lost = of(got, "outcome-recorded")
    assert len(lost) == 1
    assert_names(lost[0], "t1", ("w0",), (A,))
    assert of(got, "transition")  # SUCCEEDED without its SUCCESS attempt


@pytest.mark.parametrize("applied", [True, False])
def test_an_unknown_outcome_is_accepted_either_way(applied: bool) -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "complete",
                                                                   "info")
    if applied:
        state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))
    else:
        h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
        h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
        state = final(
            task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS))
        )
    clean(h.events, state)
