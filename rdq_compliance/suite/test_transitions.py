"""Conformance: the state changes of complete, reschedule and dead_letter
(``contract.md#statuses-and-their-changes``).

Each outcome appends one attempt that starts at the claim's ``claimed_at`` and ends at
the storage's now, increments ``attempt_count``, and clears the lease and token.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq_compliance import rules
from rdq_compliance.invariants import CLOCK_SLACK, assert_history, between, close_to, short
from rdq_compliance.suite.helpers import LONG_LEASE, claim_one, enqueue, outcomes, wait_until
from rdq_core.errors import InvalidArgument
from rdq_core.model import Attempt, Claim, ErrorInfo, Outcome, Status, Task

pytestmark = pytest.mark.rdq_conformance

Q = "transitions"
RULE = "transition"
#: Short enough to wait for, long enough that the claim right after usually comes first.
RETRY_DELAY = timedelta(milliseconds=300)

ERRORS = {
    "no-error": None,
    "no-detail": ErrorInfo("ValueError", "bad value"),
    "unicode": ErrorInfo(
        "app.errors.D\u00e9lai",
        "d\u00e9lai d\u00e9pass\u00e9: \u8d85\u65f6 \U0001f680 \"quoted\" 'single' \\ back",
        'Traceback (most recent call last):\n  File "w.py", line 1\n'
        "\t\u00fcn\u00efc\u00f6d\u00e9 \U0001f642\r\nend",
    ),
    "empty-strings": ErrorInfo("E", "", ""),
    "long": ErrorInfo("app.Big", "m" * 10_000, "d" * 20_000),
}


def _prepared(s, attempts_before: int = 1) -> tuple[str, Claim]:
    """A task with ``attempts_before`` RETRYABLE_FAILURE attempts, claimed again.

    Returns once the storage clock has moved a few milliseconds past the claim, so an
    attempt that starts "now" instead of at ``claimed_at`` shows.
    """
    tid = enqueue(s, Q, payload=b"\x00p\xff", headers={"h": "v"})
    for n in range(attempts_before):
        c = claim_one(s, Q, expect=tid)
        s.reschedule(tid, c.token, timedelta(0), ErrorInfo("E", f"try {n + 1}"))
    claim = claim_one(s, Q, expect=tid)
    wait_until(s, claim.claimed_at + 5 * CLOCK_SLACK)
    return tid, claim


def _check_appended(
    before: Task, after: Task, claim: Claim, outcome: Outcome, t0, t1, who: str
) -> Attempt:
    """The outcome appended exactly one attempt with the claim's start and an end now."""
    assert_history(after, who)
    assert (
        after.attempts[:-1] == before.attempts and len(after.attempts) == len(before.attempts) + 1
    ), rules.message(
        RULE,
        f"{who}: attempts went from {outcomes(before)} to {outcomes(after)}; expected one "
        f"{outcome.value} appended and the rest unchanged",
    )
    last = after.attempts[-1]
    assert last.outcome is outcome and last.attempt_no == before.next_attempt_no, rules.message(
        RULE,
        f"{who}: appended attempt #{last.attempt_no} {last.outcome.value}, expected "
        f"#{before.next_attempt_no} {outcome.value}",
    )
    assert close_to(last.started_at, claim.claimed_at), rules.message(
        RULE,
        f"{who}: attempt started_at {last.started_at}, expected the claim's claimed_at "
        f"{claim.claimed_at}",
    )
    assert last.finished_at >= last.started_at and between(last.finished_at, t0, t1), rules.message(
        RULE,
        f"{who}: attempt finished_at {last.finished_at}, expected the storage clock at the "
        f"call ({t0} .. {t1}) and not before started_at {last.started_at}",
    )
    assert after.attempt_count == before.attempt_count + 1, rules.message(
        RULE, f"{who}: attempt_count {before.attempt_count} -> {after.attempt_count}, expected +1"
    )
    kept = ("id", "queue", "handler", "payload", "redrive_count", "created_at")
    changed = [f for f in kept if getattr(after, f) != getattr(before, f)]
    changed += ["headers"] if dict(after.headers) != dict(before.headers) else []
    assert not changed, rules.message(RULE, f"{who}: fields that must not change did: {changed}")
    return last


def test_complete_makes_the_task_succeeded(rdq_storage):
    """Rule transition: complete appends a SUCCESS attempt (from claimed_at to now),
    increments attempt_count, sets SUCCEEDED and clears lease and next_attempt_at."""
    s = rdq_storage
    tid, claim = _prepared(s)
    before = s.get(tid)
    t0 = s.now()
    s.complete(tid, claim.token)
    t1 = s.now()
    after = s.get(tid)
    who = f"task {tid!r}, complete with token {short(claim.token)}"
    last = _check_appended(before, after, claim, Outcome.SUCCESS, t0, t1, who)
    assert last.error is None, rules.message(RULE, f"{who}: SUCCESS attempt has error {last.error}")
    assert (after.status, after.lease_expires_at, after.next_attempt_at) == (
        Status.SUCCEEDED,
        None,
        None,
    ), rules.message(
        RULE,
        f"{who}: task is {after.status.value}, lease_expires_at {after.lease_expires_at}, "
        f"next_attempt_at {after.next_attempt_at}; expected SUCCEEDED, None, None",
    )


def test_reschedule_returns_the_task_to_pending_due_after_the_delay(rdq_storage):
    """Rule transition: reschedule(delay) appends a RETRYABLE_FAILURE attempt, increments
    attempt_count, clears the lease, and makes the task PENDING due at storage now + delay."""
    s = rdq_storage
    tid, claim = _prepared(s)
    before = s.get(tid)
    delay = timedelta(minutes=5)
    t0 = s.now()
    s.reschedule(tid, claim.token, delay, ErrorInfo("app.Flaky", "again"))
    t1 = s.now()
    after = s.get(tid)
    who = f"task {tid!r}, reschedule({delay}) with token {short(claim.token)}"
    _check_appended(before, after, claim, Outcome.RETRYABLE_FAILURE, t0, t1, who)
    assert after.status is Status.PENDING and after.lease_expires_at is None, rules.message(
        RULE,
        f"{who}: task is {after.status.value} with lease_expires_at {after.lease_expires_at}, "
        "expected PENDING without a lease",
    )
    assert between(after.next_attempt_at, t0 + delay, t1 + delay), rules.message(
        RULE,
        f"{who}: next_attempt_at {after.next_attempt_at}, expected storage now + delay in "
        f"{t0 + delay} .. {t1 + delay}",
    )


def test_rescheduled_task_is_claimable_only_once_due(rdq_storage):
    """Rule claim-due-only: a task rescheduled with a short delay is not claimed before its
    next_attempt_at (by the storage clock) and is claimed once that time has passed."""
    s = rdq_storage
    tid, claim = _prepared(s, attempts_before=0)
    s.reschedule(tid, claim.token, RETRY_DELAY)
    due_at = s.get(tid).next_attempt_at
    assert due_at is not None, rules.message(
        "claim-due-only", f"task {tid!r}: rescheduled task has no next_attempt_at"
    )
    got = s.claim_due(Q, 10, LONG_LEASE)
    after = s.now()
    for c in got:
        # Early for sure if the storage clock was still before due_at after the call.
        early = after < due_at or c.claimed_at < due_at
        assert not early, rules.message(
            "claim-due-only",
            f"task {tid!r} rescheduled until {due_at} was claimed at {c.claimed_at} "
            f"(token {short(c.token)}; storage clock {after} after the claim)",
        )
    if not got:
        wait_until(s, due_at)
        got = s.claim_due(Q, 10, LONG_LEASE)
        assert [c.task_id for c in got] == [tid], rules.message(
            "claim-due-only",
            f"task {tid!r} due at {due_at}: once due, a claim returned {[c.task_id for c in got]}",
        )


@pytest.mark.parametrize("error", list(ERRORS))
def test_reschedule_keeps_the_error_exactly(rdq_storage, error):
    """Rule transition: the error given to reschedule (type, message, detail; unicode,
    empty and long text included) is recorded on the attempt exactly as given."""
    s = rdq_storage
    tid, claim = _prepared(s, attempts_before=0)
    info = ERRORS[error]
    s.reschedule(tid, claim.token, timedelta(0), info)
    stored = s.get(tid).attempts[-1].error
    assert stored == info, rules.message(
        RULE,
        f"task {tid!r}, reschedule with token {short(claim.token)}: error {info!r:.300} "
        f"came back as {stored!r:.300}",
    )
    again = claim_one(s, Q)
    returned = again.task.attempts[-1].error
    assert returned == info, rules.message(
        RULE, f"task {tid!r}: the next claim returned the error as {returned!r:.300}"
    )


@pytest.mark.parametrize("outcome", [Outcome.PERMANENT_FAILURE, Outcome.RETRYABLE_FAILURE])
def test_dead_letter_makes_the_task_dead_with_the_given_outcome(rdq_storage, outcome):
    """Rule transition: dead_letter appends an attempt with the outcome given and the error
    kept exactly, increments attempt_count, sets DEAD and clears lease and next_attempt_at."""
    s = rdq_storage
    tid, claim = _prepared(s)
    before = s.get(tid)
    info = ERRORS["unicode"]
    t0 = s.now()
    s.dead_letter(tid, claim.token, info, outcome)
    t1 = s.now()
    after = s.get(tid)
    who = f"task {tid!r}, dead_letter({outcome.value}) with token {short(claim.token)}"
    last = _check_appended(before, after, claim, outcome, t0, t1, who)
    assert last.error == info, rules.message(RULE, f"{who}: error came back as {last.error!r}")
    assert (after.status, after.lease_expires_at, after.next_attempt_at) == (
        Status.DEAD,
        None,
        None,
    ), rules.message(
        RULE,
        f"{who}: task is {after.status.value}, lease_expires_at {after.lease_expires_at}, "
        f"next_attempt_at {after.next_attempt_at}; expected DEAD, None, None",
    )


@pytest.mark.parametrize("outcome", [Outcome.SUCCESS, Outcome.LEASE_EXPIRED])
def test_dead_letter_rejects_a_non_failure_outcome(rdq_storage, outcome):
    """Rule bad-input: dead_letter with outcome SUCCESS or LEASE_EXPIRED raises
    InvalidArgument and changes nothing; the claim stays usable."""
    s = rdq_storage
    tid, claim = _prepared(s)
    before = s.get(tid)
    who = f"task {tid!r}, dead_letter({outcome.value}) with token {short(claim.token)}"
    try:
        s.dead_letter(tid, claim.token, ErrorInfo("E", "x"), outcome)
    except InvalidArgument:
        pass
    except Exception as exc:
        pytest.fail(
            rules.message(
                "bad-input", f"{who} raised {type(exc).__name__}: {exc}, not InvalidArgument"
            )
        )
    else:
        pytest.fail(rules.message("bad-input", f"{who} was accepted"))
    after = s.get(tid)
    assert after == before, rules.message(
        "bad-input", f"{who}: refused call changed the task: {before!r} -> {after!r}"
    )
    s.complete(tid, claim.token)
