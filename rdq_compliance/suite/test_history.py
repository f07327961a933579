"""Conformance: attempt history and its numbering (invariant H,
``contract.md#attempts-and-their-numbering``; bug class ``numbering-from-counter``).

The next attempt number is ``max(attempt_no) + 1`` of what is persisted, never
``attempt_count + 1``: redrive resets ``attempt_count`` but keeps the history. Every
test checks invariant H on its task after every step.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq_compliance import rules
from rdq_compliance.invariants import assert_history, short
from rdq_compliance.suite.helpers import (
    LONG_LEASE,
    SHORT_LEASE,
    claim_one,
    enqueue,
    expire,
    numbers,
    outcomes,
)
from rdq_core.model import ByIds, Claim, ErrorInfo, Outcome, Status, Task
from rdq_core.spi import Storage

pytestmark = pytest.mark.rdq_conformance

Q = "history"
RULE = "history-numbering"
LE, RF, PF, OK = "LEASE_EXPIRED", "RETRYABLE_FAILURE", "PERMANENT_FAILURE", "SUCCESS"


def checked(s: Storage, tid: str, step: str, nos: list[int], outs: list[str]) -> Task:
    """The stored task after ``step``: invariant H, and exactly these numbers and outcomes."""
    task = s.get(tid)
    assert_history(task, step)
    seen = list(zip(numbers(task), outcomes(task), strict=True))
    assert numbers(task) == nos and outcomes(task) == outs, rules.message(
        RULE,
        f"task {tid!r} after {step}: attempts {seen}, expected {list(zip(nos, outs, strict=True))}",
    )
    return task


def reclaim(s: Storage, tid: str, lost: Claim, step: str, lease: timedelta = LONG_LEASE) -> Claim:
    """Wait for ``lost`` to expire and reclaim its task; any error means a wedged task."""
    expire(s, lost)
    who = f"task {tid!r} (lost token {short(lost.token)}, {step})"
    try:
        got = s.claim_due(Q, 10, lease)
    except Exception as exc:
        pytest.fail(
            rules.message(
                RULE,
                f"{who}: reclaiming the expired lease raised {type(exc).__name__}: {exc}; "
                f"the task is wedged (history {numbers(s.get(tid))})",
            )
        )
    if [c.task_id for c in got] != [tid] or not got[0].reclaimed:
        stuck = s.get(tid)
        pytest.fail(
            rules.message(
                RULE,
                f"{who}: expected the expired task to be reclaimed, claim returned "
                f"{[(c.task_id, c.reclaimed) for c in got]}; task is {stuck.status.value}, "
                f"lease until {stuck.lease_expires_at}, history {numbers(stuck)}",
            )
        )
    assert_history(got[0].task, f"{step}, as the claim returned it")
    return got[0]


def redrive(s: Storage, tid: str, step: str) -> None:
    n = s.redrive(Q, ByIds([tid]))
    task = s.get(tid)
    assert n == 1 and task.status is Status.PENDING and task.attempt_count == 0, rules.message(
        RULE,
        f"task {tid!r} ({step}): redrive returned {n}, task is {task.status.value} with "
        f"attempt_count {task.attempt_count}; expected 1, PENDING, 0",
    )


def test_lease_expiries_are_numbered_in_sequence(rdq_storage):
    """Rule history-numbering: each reclaim of an expired lease appends one LEASE_EXPIRED
    attempt numbered 1, 2, 3, ...; the final outcome takes the next number."""
    s = rdq_storage
    tid = enqueue(s, Q)
    claim = claim_one(s, Q, SHORT_LEASE)
    for n in range(1, 4):
        lease = SHORT_LEASE if n < 3 else LONG_LEASE
        claim = reclaim(s, tid, claim, f"expiry {n}", lease)
        checked(s, tid, f"expiry {n}", list(range(1, n + 1)), [LE] * n)
    s.complete(tid, claim.token)
    task = checked(s, tid, "complete", [1, 2, 3, 4], [LE, LE, LE, OK])
    assert task.attempt_count == 4, rules.message(
        RULE, f"task {tid!r}: attempt_count {task.attempt_count} after 4 attempts"
    )


def test_reschedule_and_expiry_share_one_numbering(rdq_storage):
    """Rule history-numbering: RETRYABLE_FAILURE, LEASE_EXPIRED and the final outcome draw
    from one sequence, whatever the mix."""
    s = rdq_storage
    tid = enqueue(s, Q)
    c = claim_one(s, Q)
    s.reschedule(tid, c.token, timedelta(0), ErrorInfo("E", "try 1"))
    checked(s, tid, "reschedule", [1], [RF])
    c = reclaim(s, tid, claim_one(s, Q, SHORT_LEASE), "first expiry")
    checked(s, tid, "first expiry", [1, 2], [RF, LE])
    s.reschedule(tid, c.token, timedelta(0), ErrorInfo("E", "try 3"))
    checked(s, tid, "second reschedule", [1, 2, 3], [RF, LE, RF])
    c = reclaim(s, tid, claim_one(s, Q, SHORT_LEASE), "second expiry")
    checked(s, tid, "second expiry", [1, 2, 3, 4], [RF, LE, RF, LE])
    s.dead_letter(tid, c.token, ErrorInfo("E", "give up"))
    task = checked(s, tid, "dead_letter", [1, 2, 3, 4, 5], [RF, LE, RF, LE, PF])
    assert task.attempt_count == 5, rules.message(
        RULE, f"task {tid!r}: attempt_count {task.attempt_count} after 5 attempts"
    )


def test_reclaim_after_redrive_numbers_from_history(rdq_storage):
    """Rule history-numbering (the original incident): a task that died with attempts
    [1, 2, 3] is redriven (attempt_count back to 0), claimed, and its lease expires; the
    reclaim must succeed and record LEASE_EXPIRED as attempt 4 (max + 1, not
    attempt_count + 1), and the task then completes as attempt 5 instead of being wedged."""
    s = rdq_storage
    tid = enqueue(s, Q)
    for n in (1, 2):
        c = claim_one(s, Q)
        s.reschedule(tid, c.token, timedelta(0), ErrorInfo("app.Flaky", f"try {n}"))
    c = claim_one(s, Q)
    s.dead_letter(tid, c.token, ErrorInfo("app.Fatal", "try 3"), Outcome.RETRYABLE_FAILURE)
    checked(s, tid, "dying", [1, 2, 3], [RF, RF, RF])
    redrive(s, tid, "redrive")
    checked(s, tid, "redrive", [1, 2, 3], [RF, RF, RF])

    lost = claim_one(s, Q, SHORT_LEASE)
    second = reclaim(s, tid, lost, "reclaim after redrive")
    task = checked(s, tid, "reclaim after redrive", [1, 2, 3, 4], [RF, RF, RF, LE])
    assert second.task.attempts == task.attempts and task.attempt_count == 1, rules.message(
        RULE,
        f"task {tid!r}, token {short(second.token)}: after the reclaim attempt_count is "
        f"{task.attempt_count} (expected 1) and the claim returned attempts "
        f"{numbers(second.task)}",
    )
    try:
        s.complete(tid, second.token)
    except Exception as exc:
        pytest.fail(
            rules.message(
                RULE,
                f"task {tid!r}, token {short(second.token)}: completing after the reclaim "
                f"raised {type(exc).__name__}: {exc}",
            )
        )
    task = checked(s, tid, "complete", [1, 2, 3, 4, 5], [RF, RF, RF, LE, OK])
    assert task.status is Status.SUCCEEDED and task.attempt_count == 2, rules.message(
        RULE,
        f"task {tid!r}: ended {task.status.value} with attempt_count {task.attempt_count}, "
        "expected SUCCEEDED with 2",
    )


def test_numbering_continues_across_two_redrives(rdq_storage):
    """Rule history-numbering: across two redrives, reclaims, reschedules and outcomes keep
    numbering from the persisted history (max + 1), and the history is never reset."""
    s = rdq_storage
    tid = enqueue(s, Q)
    c = claim_one(s, Q)
    s.reschedule(tid, c.token, timedelta(0), ErrorInfo("E", "try 1"))
    c = claim_one(s, Q)
    s.dead_letter(tid, c.token, ErrorInfo("E", "try 2"))
    checked(s, tid, "first death", [1, 2], [RF, PF])

    redrive(s, tid, "first redrive")
    c = reclaim(s, tid, claim_one(s, Q, SHORT_LEASE), "expiry after first redrive")
    checked(s, tid, "expiry after first redrive", [1, 2, 3], [RF, PF, LE])
    s.dead_letter(tid, c.token, ErrorInfo("E", "try 4"))
    checked(s, tid, "second death", [1, 2, 3, 4], [RF, PF, LE, PF])

    redrive(s, tid, "second redrive")
    c = reclaim(s, tid, claim_one(s, Q, SHORT_LEASE), "expiry after second redrive")
    checked(s, tid, "expiry after second redrive", [1, 2, 3, 4, 5], [RF, PF, LE, PF, LE])
    s.reschedule(tid, c.token, timedelta(0), ErrorInfo("E", "try 6"))
    c = claim_one(s, Q)
    s.complete(tid, c.token)
    task = checked(s, tid, "complete", [1, 2, 3, 4, 5, 6, 7], [RF, PF, LE, PF, LE, RF, OK])
    assert task.redrive_count == 2 and task.attempt_count == 3, rules.message(
        RULE,
        f"task {tid!r}: redrive_count {task.redrive_count}, attempt_count "
        f"{task.attempt_count}; expected 2 and 3 (attempts since the last redrive)",
    )
