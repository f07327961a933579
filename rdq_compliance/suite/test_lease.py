"""Conformance: leases, heartbeats, reclaim after expiry, and fencing by claim token.

``contract.md#claims-leases-and-tokens``; bug classes ``live-lease-stolen``,
``unfenced-outcome`` and ``stale-heartbeat``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from rdq_compliance import rules
from rdq_compliance.invariants import assert_history, between, close_to, short
from rdq_compliance.suite.helpers import (
    LONG_LEASE,
    SHORT_LEASE,
    claim_one,
    enqueue,
    expire,
    outcomes,
    wait_until,
)
from rdq_core.errors import InvalidArgument, StaleClaim
from rdq_core.model import ErrorInfo, Outcome, Status
from rdq_core.spi import Storage
from rdq_core.tokens import new_token

pytestmark = pytest.mark.rdq_conformance

Q = "leases"
EXTENSION = timedelta(seconds=30)

#: Every call that needs the current claim token, as ``(storage, task_id, token) -> None``.
MUTATIONS: dict[str, Callable[[Storage, str, str], object]] = {
    "extend_lease": lambda s, tid, tok: s.extend_lease(tid, tok, LONG_LEASE),
    "complete": lambda s, tid, tok: s.complete(tid, tok),
    "reschedule": lambda s, tid, tok: s.reschedule(
        tid, tok, timedelta(0), ErrorInfo("stale.Worker", "late report")
    ),
    "dead_letter": lambda s, tid, tok: s.dead_letter(
        tid, tok, ErrorInfo("stale.Worker", "late report"), Outcome.PERMANENT_FAILURE
    ),
}

#: The outcome calls (a worker "reporting"), with the status each leaves behind.
REPORTS = {
    "complete": (Status.SUCCEEDED, Outcome.SUCCESS),
    "reschedule": (Status.PENDING, Outcome.RETRYABLE_FAILURE),
    "dead_letter": (Status.DEAD, Outcome.PERMANENT_FAILURE),
}


# ---- positive heartbeat ------------------------------------------------------------------


def test_extend_lease_sets_expiry_to_storage_now_plus_lease(rdq_storage, rdq_capabilities):
    """Rule lease-respected: extend_lease sets lease_expires_at = storage now + lease (the
    lease the backend's lease model gives for the one asked: ``Capabilities.lease_for``),
    returns it, stores it, and keeps the claim (token still current)."""
    s = rdq_storage
    tid = enqueue(s, Q)
    claim = claim_one(s, Q, SHORT_LEASE)
    held = rdq_capabilities.lease_for(EXTENSION)
    # a storage clock read to the millisecond, and a lease model that gives the heartbeat
    # the claim's own lease: the heartbeat must come a little after the claim to be later
    wait_until(s, claim.claimed_at + timedelta(milliseconds=5))
    before = s.now()
    new_expiry = s.extend_lease(tid, claim.token, EXTENSION)
    after = s.now()
    who = f"task {tid!r}, token {short(claim.token)}"
    assert between(new_expiry, before + held, after + held), rules.message(
        "lease-respected",
        f"{who}: extend_lease({EXTENSION}) returned {new_expiry}, expected storage now + "
        f"{held} in {before + held} .. {after + held}{_model(rdq_capabilities)}",
    )
    assert new_expiry > claim.lease_expires_at, rules.message(
        "lease-respected",
        f"{who}: extended expiry {new_expiry} is not later than the claim's "
        f"{claim.lease_expires_at}",
    )
    stored = s.get(tid)
    assert stored.status is Status.IN_FLIGHT and close_to(stored.lease_expires_at, new_expiry), (
        rules.message(
            "lease-respected",
            f"{who}: after extend_lease the task is {stored.status.value} with lease_expires_at "
            f"{stored.lease_expires_at}, expected IN_FLIGHT until {new_expiry}",
        )
    )
    s.complete(tid, claim.token)


def test_a_claim_holds_the_lease_it_asked_for(rdq_storage, rdq_capabilities):
    """Rule lease-per-claim: a claim holds the lease it asked for (claimed_at + lease)
    and a heartbeat the one it asks for (storage now + lease), each its own: the
    ``per_claim`` lease model (``contract.md#5-capabilities``). A backend declaring
    another lease model (``Capabilities.lease_model``) fails this by design: its ledger
    names rule ``lease-per-claim`` with the library's docs; a live lease taken is
    ``lease-respected``, checked apart."""
    s = rdq_storage
    tid = enqueue(s, Q)
    asked = timedelta(seconds=37, microseconds=123_456)
    claim = claim_one(s, Q, asked)
    who = f"task {tid!r}, token {short(claim.token)}"
    assert close_to(claim.lease_expires_at, claim.claimed_at + asked), rules.message(
        "lease-per-claim",
        f"{who}: claimed for {asked}, the claim holds until {claim.lease_expires_at}, not "
        f"claimed_at {claim.claimed_at} + {asked}{_model(rdq_capabilities)}",
    )
    before = s.now()
    expiry = s.extend_lease(tid, claim.token, EXTENSION)
    after = s.now()
    assert between(expiry, before + EXTENSION, after + EXTENSION), rules.message(
        "lease-per-claim",
        f"{who}: extend_lease({EXTENSION}) holds until {expiry}, not storage now + "
        f"{EXTENSION} ({before + EXTENSION} .. {after + EXTENSION}){_model(rdq_capabilities)}",
    )
    s.complete(tid, claim.token)


def _model(caps) -> str:
    """What a lease message adds when the backend declares a lease model of its own."""
    if caps.lease_model == "per_claim":
        return ""
    return (
        f" (the backend declares lease model {caps.lease_model!r}, every claim's lease "
        f"{caps.fixed_lease})"
    )


def test_extended_lease_is_not_reclaimed_at_the_original_expiry(rdq_connect):
    """Rule lease-respected: once extended, a lease is not reclaimed when the original
    expiry passes; the holder keeps the task and completes it with its token. (The
    heartbeat goes out halfway through the original lease, so the extension reaches past
    it on every lease model.)"""
    holder, other = rdq_connect(), rdq_connect()
    tid = enqueue(holder, Q)
    claim = claim_one(holder, Q, SHORT_LEASE)
    wait_until(holder, claim.claimed_at + (claim.lease_expires_at - claim.claimed_at) / 2)
    holder.extend_lease(tid, claim.token, LONG_LEASE)
    expire(holder, claim)  # the original lease is over by the storage clock
    before = holder.get(tid)
    got = other.claim_due(Q, 10, SHORT_LEASE)
    assert not got, rules.message(
        "lease-respected",
        f"task {tid!r}: lease of token {short(claim.token)} extended to "
        f"{before.lease_expires_at} was taken at the original expiry "
        f"{claim.lease_expires_at} by {[(c.task_id, short(c.token)) for c in got]}",
    )
    after = other.get(tid)
    assert after == before, rules.message(
        "lease-respected", f"task {tid!r} changed under an extended lease: {before!r} -> {after!r}"
    )
    holder.complete(tid, claim.token)
    done = holder.get(tid)
    assert done.status is Status.SUCCEEDED and outcomes(done) == ["SUCCESS"], rules.message(
        "lease-respected",
        f"task {tid!r}: holder of token {short(claim.token)} completed, task is "
        f"{done.status.value} with attempts {outcomes(done)}",
    )


# ---- reclaim -------------------------------------------------------------------------------


def test_live_lease_is_not_reclaimed_before_it_expires(rdq_connect):
    """Rule lease-respected: until the storage clock reaches lease_expires_at, claims from
    another handle never take the task (checked by polling claims up to the expiry)."""
    holder, other = rdq_connect(), rdq_connect()
    tid = enqueue(holder, Q)
    held = claim_one(holder, Q, SHORT_LEASE)
    while True:
        got = other.claim_due(Q, 10, SHORT_LEASE)
        after = other.now()
        for c in got:
            early = after < held.lease_expires_at or c.claimed_at < held.lease_expires_at
            assert not early, rules.message(
                "lease-respected",
                f"task {tid!r}: lease of token {short(held.token)} runs until "
                f"{held.lease_expires_at}, but another claim took it at {c.claimed_at} "
                f"(token {short(c.token)}; storage clock {after} after the claim)",
            )
        if got or after >= held.lease_expires_at:
            break
        time.sleep(0.02)


def test_expired_lease_is_reclaimed_with_a_lease_expired_attempt(rdq_connect):
    """Rule reclaim-expired: once the storage clock passes lease_expires_at, a claim takes
    the task with reclaimed=True and a new token, appends a LEASE_EXPIRED attempt numbered
    max(attempt_no)+1 that starts at the lost claim's claimed_at, and increments
    attempt_count, in one step."""
    first_worker, second_worker = rdq_connect(), rdq_connect()
    s = first_worker
    tid = enqueue(s, Q)
    warmup = claim_one(s, Q)
    s.reschedule(tid, warmup.token, timedelta(0), ErrorInfo("E", "first try failed"))
    first = claim_one(s, Q, SHORT_LEASE)
    assert not first.reclaimed, rules.message(
        "reclaim-expired", f"task {tid!r}: a claim of a PENDING task says reclaimed=True"
    )
    expire(s, first)
    got = second_worker.claim_due(Q, 10, LONG_LEASE)
    who = f"task {tid!r}, lost token {short(first.token)}"
    assert [c.task_id for c in got] == [tid], rules.message(
        "reclaim-expired",
        f"{who}: after its lease expired at {first.lease_expires_at} a claim returned "
        f"{[c.task_id for c in got]}",
    )
    second = got[0]
    task = second.task
    who += f", new token {short(second.token)}"
    assert second.reclaimed, rules.message("reclaim-expired", f"{who}: reclaimed is False")
    assert second.token != first.token, rules.message(
        "reclaim-expired", f"{who}: the reclaim reused the expired claim's token"
    )
    assert outcomes(task) == ["RETRYABLE_FAILURE", "LEASE_EXPIRED"], rules.message(
        "reclaim-expired", f"{who}: reclaimed task has attempts {outcomes(task)}"
    )
    assert [a.attempt_no for a in task.attempts] == [1, 2], rules.message(
        "reclaim-expired",
        f"{who}: attempt numbers {[a.attempt_no for a in task.attempts]}, expected [1, 2]",
    )
    lost = task.attempts[-1]
    assert close_to(lost.started_at, first.claimed_at) and between(
        lost.finished_at, first.claimed_at, second.claimed_at
    ), rules.message(
        "reclaim-expired",
        f"{who}: LEASE_EXPIRED attempt ran {lost.started_at} .. {lost.finished_at}; expected "
        f"to start at the lost claim {first.claimed_at} and end by the reclaim "
        f"{second.claimed_at}",
    )
    assert task.attempt_count == 2 and task.status is Status.IN_FLIGHT, rules.message(
        "reclaim-expired",
        f"{who}: reclaimed task is {task.status.value} with attempt_count "
        f"{task.attempt_count}, expected IN_FLIGHT with 2",
    )
    stored = s.get(tid)
    assert stored == task, rules.message(
        "reclaim-expired", f"{who}: claim returned {task!r} but get() shows {stored!r}"
    )
    assert_history(stored, "after reclaim")


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_expired_worker_can_still_report_until_reclaimed(rdq_storage, report):
    """Rule fencing: fencing is by token, not by clock; a worker whose lease expired but
    whose task nobody reclaimed can still report its outcome."""
    s = rdq_storage
    tid = enqueue(s, Q)
    claim = claim_one(s, Q, SHORT_LEASE)
    expire(s, claim)
    who = f"task {tid!r}, token {short(claim.token)} (lease expired {claim.lease_expires_at})"
    try:
        MUTATIONS[report](s, tid, claim.token)
    except StaleClaim as exc:
        pytest.fail(
            rules.message(
                "fencing", f"{who}: {report} raised StaleClaim although no claim took over: {exc}"
            )
        )
    status, outcome = REPORTS[report]
    task = s.get(tid)
    assert task.status is status and outcomes(task) == [outcome.value], rules.message(
        "fencing",
        f"{who}: after {report} the task is {task.status.value} with attempts "
        f"{outcomes(task)}, expected {status.value} with [{outcome.value}]",
    )


# ---- fencing ---------------------------------------------------------------------------------


@dataclass
class Situation:
    """A task and a token that must no longer be accepted; ``live`` is the current one."""

    task_id: str
    stale: str
    live: str | None
    story: str


def _reclaimed(s: Storage) -> Situation:
    tid = enqueue(s, Q)
    first = claim_one(s, Q, SHORT_LEASE)
    expire(s, first)
    second = claim_one(s, Q, LONG_LEASE)
    return Situation(tid, first.token, second.token, "its lease expired and it was reclaimed")


def _reclaimed_after_reschedule(s: Storage) -> Situation:
    tid = enqueue(s, Q)
    first = claim_one(s, Q)
    s.reschedule(tid, first.token, timedelta(0))
    second = claim_one(s, Q)
    return Situation(tid, first.token, second.token, "rescheduled, then claimed again")


def _never_issued(s: Storage) -> Situation:
    tid = enqueue(s, Q)
    live = claim_one(s, Q)
    token = new_token()
    while token == live.token:  # pragma: no cover - 2**-128
        token = new_token()
    return Situation(tid, token, live.token, "a well-formed token no claim ever issued")


def _other_tasks_token(s: Storage) -> Situation:
    mine, theirs = enqueue(s, Q), enqueue(s, Q)
    claims = {c.task_id: c for c in s.claim_due(Q, 2, LONG_LEASE)}
    assert set(claims) == {mine, theirs}, rules.message(
        "fencing", f"setup: claimed {sorted(claims)}, expected {sorted([mine, theirs])}"
    )
    return Situation(
        mine, claims[theirs].token, claims[mine].token, f"the live token of task {theirs!r}"
    )


def _completed(s: Storage) -> Situation:
    tid = enqueue(s, Q)
    claim = claim_one(s, Q)
    s.complete(tid, claim.token)
    return Situation(tid, claim.token, None, "completed (SUCCEEDED)")


def _rescheduled(s: Storage) -> Situation:
    tid = enqueue(s, Q)
    claim = claim_one(s, Q)
    s.reschedule(tid, claim.token, timedelta(hours=1), ErrorInfo("E", "later"))
    return Situation(tid, claim.token, None, "rescheduled (PENDING)")


def _dead_lettered(s: Storage) -> Situation:
    tid = enqueue(s, Q)
    claim = claim_one(s, Q)
    s.dead_letter(tid, claim.token, ErrorInfo("E", "dead"))
    return Situation(tid, claim.token, None, "dead-lettered (DEAD)")


SITUATIONS: dict[str, Callable[[Storage], Situation]] = {
    "reclaimed": _reclaimed,
    "reclaimed-after-reschedule": _reclaimed_after_reschedule,
    "never-issued": _never_issued,
    "other-tasks-token": _other_tasks_token,
    "completed": _completed,
    "rescheduled": _rescheduled,
    "dead-lettered": _dead_lettered,
}


@pytest.mark.parametrize("situation", list(SITUATIONS))
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_stale_token_is_refused_and_changes_nothing(rdq_storage, mutation, situation):
    """Rule fencing: complete, reschedule, dead_letter and extend_lease with a token that
    is not the task's current claim (reclaimed, never issued, another task's, or the task
    left IN_FLIGHT) raise StaleClaim and change nothing; the current holder is unaffected."""
    s = rdq_storage
    sit = SITUATIONS[situation](s)
    before = s.get(sit.task_id)
    who = f"task {sit.task_id!r}, token {short(sit.stale)} ({sit.story})"
    try:
        MUTATIONS[mutation](s, sit.task_id, sit.stale)
    except StaleClaim:
        pass
    except Exception as exc:
        pytest.fail(
            rules.message(
                "fencing", f"{who}: {mutation} raised {type(exc).__name__}: {exc}, not StaleClaim"
            )
        )
    else:
        pytest.fail(rules.message("fencing", f"{who}: {mutation} was accepted"))
    after = s.get(sit.task_id)
    assert after == before, rules.message(
        "fencing", f"{who}: refused {mutation} still changed the task: {before!r} -> {after!r}"
    )
    if sit.live is not None:
        try:
            s.complete(sit.task_id, sit.live)
        except StaleClaim as exc:
            pytest.fail(
                rules.message(
                    "fencing",
                    f"{who}: after the refused {mutation}, the current holder's token "
                    f"{short(sit.live)} no longer works: {exc}",
                )
            )


def test_at_most_one_outcome_per_token(rdq_storage):
    """Rule fencing: a token is good for one outcome; completing twice with it raises
    StaleClaim and leaves the first outcome as it was."""
    s = rdq_storage
    tid = enqueue(s, Q)
    claim = claim_one(s, Q)
    s.complete(tid, claim.token)
    before = s.get(tid)
    who = f"task {tid!r}, token {short(claim.token)}"
    try:
        s.complete(tid, claim.token)
    except StaleClaim:
        pass
    else:
        pytest.fail(rules.message("fencing", f"{who}: a second complete was accepted"))
    after = s.get(tid)
    assert after == before and outcomes(after) == ["SUCCESS"], rules.message(
        "fencing", f"{who}: second complete changed the task: {before!r} -> {after!r}"
    )


MALFORMED_TOKENS = [
    "",
    "abc",
    "0123456789ABCDEF0123456789ABCDEF",
    "g" * 32,
    "0" * 31,
    "0" * 33,
    " " + "0" * 31,
    None,
    12345,
]


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_malformed_token_is_invalid_argument(rdq_storage, mutation):
    """Rule bad-input: a malformed claim token (not 32 lowercase hex digits) raises
    InvalidArgument, changes nothing, and leaves the holder's claim intact."""
    s = rdq_storage
    tid = enqueue(s, Q)
    claim = claim_one(s, Q)
    before = s.get(tid)
    for token in MALFORMED_TOKENS:
        who = f"task {tid!r}, {mutation} with token {token!r}"
        try:
            MUTATIONS[mutation](s, tid, token)  # type: ignore[arg-type]
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
