"""Conformance: what ``claim_due`` returns, how many, in which order, and from which queue.

``contract.md#claims-leases-and-tokens``; bug classes ``unclaimable-claimed`` and
``wrong-claim-batch``. Every test runs in a fresh namespace.
"""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta

import pytest

from rdq_compliance import rules
from rdq_compliance.invariants import between, close_to, short
from rdq_compliance.suite.helpers import (
    LONG_LEASE,
    SHORT_LEASE,
    claim_one,
    enqueue,
    expire,
    wait_until,
)
from rdq_core.model import Claim, ErrorInfo, Outcome, QueueStats, Status
from rdq_core.spi import Storage

pytestmark = pytest.mark.rdq_conformance

Q = "claims"
TOKEN_RE = re.compile(r"[0-9a-f]{32}")


def test_claim_returns_the_task_with_its_full_history(rdq_storage):
    """Rule transition: a claim makes the task IN_FLIGHT and returns it exactly as stored,
    with its whole attempt history, its attempt_count, payload, headers and the new lease."""
    s = rdq_storage
    tid = enqueue(s, Q, payload=b"\x00body\xff", headers={"trace": "abc"})
    for i in range(2):
        c = claim_one(s, Q)
        s.reschedule(tid, c.token, timedelta(0), ErrorInfo("app.Flaky", f"failure {i}"))
    claim = claim_one(s, Q)
    stored = s.get(tid)
    who = f"task {tid!r}, token {short(claim.token)}"
    assert claim.task_id == tid, rules.message(
        "transition", f"{who}: claim returned {claim.task_id!r}"
    )
    assert claim.task.status is Status.IN_FLIGHT, rules.message(
        "transition", f"{who}: claimed task has status {claim.task.status.value}, not IN_FLIGHT"
    )
    assert [a.attempt_no for a in claim.task.attempts] == [1, 2] and all(
        a.outcome is Outcome.RETRYABLE_FAILURE for a in claim.task.attempts
    ), rules.message(
        "transition",
        f"{who}: claim returned attempts {claim.task.attempts!r}; expected the two "
        "RETRYABLE_FAILURE attempts recorded before",
    )
    assert claim.task.attempt_count == 2, rules.message(
        "transition", f"{who}: claimed task has attempt_count {claim.task.attempt_count}, not 2"
    )
    assert claim.task.lease_expires_at == claim.lease_expires_at, rules.message(
        "transition",
        f"{who}: task.lease_expires_at {claim.task.lease_expires_at} differs from the "
        f"claim's {claim.lease_expires_at}",
    )
    assert claim.task == stored, rules.message(
        "transition", f"{who}: claim returned {claim.task!r} but get() shows {stored!r}"
    )


def test_claim_stamps_the_lease_from_the_storage_clock(rdq_storage, rdq_capabilities):
    """Rule storage-clock: claimed_at is the storage clock at the claim, and
    lease_expires_at = claimed_at + lease (the lease the backend's lease model gives for
    the one asked: ``Capabilities.lease_for``), on the claim, the returned task and in
    storage."""
    s = rdq_storage
    ids = {enqueue(s, Q) for _ in range(3)}
    asked = timedelta(seconds=37, microseconds=123_456)
    lease = rdq_capabilities.lease_for(asked)
    before = s.now()
    claims = s.claim_due(Q, 10, asked)
    after = s.now()
    assert {c.task_id for c in claims} == ids, rules.message(
        "storage-clock", f"claimed {[c.task_id for c in claims]}, expected the due tasks {ids}"
    )
    for c in claims:
        who = f"task {c.task_id!r}, token {short(c.token)}"
        assert between(c.claimed_at, before, after), rules.message(
            "storage-clock",
            f"{who}: claimed_at {c.claimed_at} is outside the storage clock readings "
            f"{before} .. {after} around the claim",
        )
        assert close_to(c.lease_expires_at, c.claimed_at + lease), rules.message(
            "storage-clock",
            f"{who}: lease_expires_at {c.lease_expires_at} is not claimed_at {c.claimed_at} "
            f"+ lease {lease}",
        )
        stored = s.get(c.task_id).lease_expires_at
        assert stored == c.lease_expires_at == c.task.lease_expires_at, rules.message(
            "storage-clock",
            f"{who}: lease_expires_at differs: claim {c.lease_expires_at}, returned task "
            f"{c.task.lease_expires_at}, stored {stored}",
        )


def test_claim_returns_exactly_limit_when_more_are_due(rdq_storage):
    """Rules claim-limit and claim-complete: with more tasks due than ``limit``, a claim
    returns exactly ``limit`` tasks, never more, never fewer, and never a task an earlier
    claim already holds."""
    s = rdq_storage
    ids = {enqueue(s, Q) for _ in range(50)}
    seen: set[str] = set()
    for limit in (1, 7, 32):
        claims = s.claim_due(Q, limit, LONG_LEASE)
        got = [c.task_id for c in claims]
        assert len(got) == limit, rules.message(
            "claim-limit" if len(got) > limit else "claim-complete",
            f"claim_due(limit={limit}) with {len(ids - seen)} tasks due returned "
            f"{len(got)} tasks: {got}"
            + ("" if len(got) > limit else f"; left behind: {sorted(ids - seen - set(got))}"),
        )
        again = sorted(seen.intersection(got))
        assert not again and len(set(got)) == len(got), rules.message(
            "claim-limit",
            f"claim_due(limit={limit}) returned tasks already held or twice: {again or got}",
        )
        seen.update(got)
    assert seen <= ids, rules.message("claim-limit", f"claimed unknown tasks {seen - ids}")


def test_claim_limit_above_available_returns_all_due(rdq_storage):
    """Rules claim-complete and claim-limit: when fewer tasks are due than ``limit``, a
    claim returns every due task, each once."""
    s = rdq_storage
    ids = {enqueue(s, Q) for _ in range(10)}
    claims = s.claim_due(Q, 25, LONG_LEASE)
    got = [c.task_id for c in claims]
    left = sorted(ids - set(got))
    assert sorted(got) == sorted(ids), rules.message(
        "claim-complete" if left else "claim-limit",
        f"claim_due(limit=25) with 10 tasks due {sorted(ids)} returned {got}"
        + (f"; left behind: {left}" if left else ""),
    )


def test_claims_come_out_oldest_due_first(rdq_storage):
    """Rule claim-order: due tasks are claimed in order of due time, oldest first,
    within one claim and across successive claims, whatever the enqueue order."""
    s = rdq_storage
    ages = list(range(1, 13))
    random.Random(20240601).shuffle(ages)
    due_ago = {}
    for age in ages:  # distinct due times a minute apart, enqueued in shuffled order
        due_ago[enqueue(s, Q, delay=timedelta(minutes=-age))] = age
    expected = sorted(due_ago, key=lambda tid: -due_ago[tid])
    got: list[str] = []
    for _ in range(4):
        got.extend(c.task_id for c in s.claim_due(Q, 3, LONG_LEASE))
    assert got == expected, rules.message(
        "claim-order",
        f"claimed {[(t, f'due {due_ago.get(t)} min ago') for t in got]}; expected oldest due "
        f"first: {[(t, f'due {due_ago[t]} min ago') for t in expected]}",
    )


#: Time between the claims whose leases then expire one after another.
SPACING = timedelta(milliseconds=300)
#: Fresh queues the interleaving is built in before the rule is judged on one.
ORDER_ATTEMPTS = 5
#: The order of due time the interleaving is built to have.
INTERLEAVED = ["pending", "lease"] * 3 + ["pending"]


def _interleaving(st: Storage, queue: str) -> tuple[set[str], dict[str, datetime]] | None:
    """In ``queue``: three claims made ``SPACING`` apart (left to expire) and four PENDING
    tasks due halfway before, between and after their expiries, each delay taken from the
    storage's clock just before its enqueue. ``(the held task ids, due time by task)``, or
    ``None`` when a pause of this process broke the construction (a lease ran out while
    the next claim was made, or a PENDING task fell due past its slot): nothing about the
    storage is judged on a construction the machine's pauses bent."""
    lease = st.capabilities().lease_for(3 * SPACING)  # no lease runs out while claiming
    held: list[Claim] = []
    for i in range(3):
        tid = enqueue(st, queue)
        claim = claim_one(st, queue, lease, expect=tid)
        if claim.task_id != tid:
            return None
        held.append(claim)
        if i < 2:
            wait_until(st, claim.claimed_at + SPACING)
    e = [c.lease_expires_at for c in held]
    targets = [e[0] - SPACING / 2, e[0] + (e[1] - e[0]) / 2, e[1] + (e[2] - e[1]) / 2]
    targets.append(e[2] + SPACING / 2)
    due: dict[str, datetime] = {c.task_id: c.lease_expires_at for c in held}
    for target in targets:
        tid = enqueue(st, queue, delay=target - st.now())
        got = st.get(tid).next_attempt_at
        assert got is not None, rules.message("claim-order", f"PENDING task {tid} has no due time")
        due[tid] = got
    order = sorted(due, key=lambda t: due[t])
    kinds = ["lease" if t in {c.task_id for c in held} else "pending" for t in order]
    return ({c.task_id for c in held}, due) if kinds == INTERLEAVED else None


def test_expired_leases_and_due_tasks_are_claimed_in_one_due_order(rdq_storage):
    """Rule claim-order: an expired lease is due at its expiry, a PENDING task at its
    next_attempt_at, and a claim takes both kinds in one order of due time. Three claims
    are made 300 ms apart and let expire; four PENDING tasks fall due between and around
    those expiries; one-task claims then take them alternately, oldest due first. (A claim
    that serves PENDING tasks before expired leases, or the other way round, fails.) The
    construction is made again in a fresh queue when a pause of the test's own process
    bent it (up to five times)."""
    st = rdq_storage
    built = None
    for attempt in range(ORDER_ATTEMPTS):
        queue = f"{Q}-order-{attempt}"
        built = _interleaving(st, queue)
        if built is not None:
            break
    assert built is not None, (
        f"could not build the interleaving of due times in {ORDER_ATTEMPTS} fresh queues: each "
        "time a pause of this process (a busy machine) let a lease run out while claiming or "
        "a PENDING task fall due past its slot; the rule was not judged"
    )
    held, due = built
    wait_until(st, max(due.values()))
    got = []
    for _ in range(len(due)):
        got.extend(c.task_id for c in st.claim_due(queue, 1, LONG_LEASE))
    order = sorted(due, key=lambda t: due[t])
    kinds = ["lease" if t in held else "pending" for t in order]
    ties = {t: [u for u in due if due[u] == due[t]] for t in due}
    fine = len(got) == len(order) and all(
        g == o or g in ties[o] for g, o in zip(got, order, strict=True)
    )
    assert fine, rules.message(
        "claim-order",
        f"claimed {[(t, 'lease' if t in held else 'pending') for t in got]}"
        f"; expected by due time {list(zip(order, kinds, strict=True))}",
    )


def test_claim_takes_only_tasks_of_its_own_queue(rdq_storage):
    """Rule queue-isolation: claiming from a queue never returns a task of another queue,
    even one whose name matches it as a pattern or a prefix (``_`` is a LIKE wildcard)."""
    s = rdq_storage
    queues = ["team_a", "teamxa", "team_a.sub", "team"]
    owned: dict[str, set[str]] = {q: set() for q in queues}
    for _ in range(4):
        for q in queues:
            owned[q].add(enqueue(s, q))
    for q in queues:
        claims = s.claim_due(q, 100, LONG_LEASE)
        got = {c.task_id for c in claims}
        strangers = sorted(got - owned[q])
        assert not strangers, rules.message(
            "queue-isolation",
            f"claim_due({q!r}) returned tasks of other queues: "
            + ", ".join(f"{t!r} of {s.get(t).queue!r}" for t in strangers),
        )
        assert got == owned[q], rules.message(
            "queue-isolation",
            f"claim_due({q!r}) returned {sorted(got)}, expected {sorted(owned[q])}",
        )
        wrong = [c.task_id for c in claims if c.task.queue != q]
        assert not wrong, rules.message(
            "queue-isolation",
            f"claim_due({q!r}) returned tasks labelled with another queue: {wrong}",
        )


def test_stats_count_only_their_own_queue(rdq_storage):
    """Rule queue-isolation: stats(queue) counts that queue's tasks only, by status."""
    s = rdq_storage
    a, b, c = "stats_a", "statsxa", "stats_a.sub"
    for _ in range(5):
        enqueue(s, a)
    for _ in range(3):
        enqueue(s, b)
    enqueue(s, b, delay=timedelta(hours=1))
    enqueue(s, c)
    enqueue(s, c)
    held = s.claim_due(a, 2, LONG_LEASE)
    s.complete(held[0].task_id, held[0].token)
    dying = s.claim_due(c, 2, LONG_LEASE)
    s.dead_letter(dying[0].task_id, dying[0].token, ErrorInfo("E", "boom"))
    expected = {
        a: QueueStats(pending=3, due=3, in_flight=1, succeeded=1, dead=0),
        b: QueueStats(pending=4, due=3, in_flight=0, succeeded=0, dead=0),
        c: QueueStats(pending=0, due=0, in_flight=1, succeeded=0, dead=1),
        "stats": QueueStats(),
    }
    for q, want in expected.items():
        got = s.stats(q)
        assert got == want, rules.message(
            "queue-isolation", f"stats({q!r}) is {got}, expected {want}"
        )


def test_future_task_is_not_claimed(rdq_storage):
    """Rule claim-due-only: a PENDING task due in the future (delay +1 h) is not claimed,
    while a due task of the same queue is; the future task is left untouched."""
    s = rdq_storage
    future = enqueue(s, Q, delay=timedelta(hours=1))
    due = enqueue(s, Q)
    before = s.get(future)
    got = [c.task_id for c in s.claim_due(Q, 10, LONG_LEASE)]
    assert got == [due], rules.message(
        "claim-due-only",
        f"claim returned {got}; expected only the due task {due!r}, not {future!r} "
        f"(due at {before.next_attempt_at})",
    )
    again = [c.task_id for c in s.claim_due(Q, 10, LONG_LEASE)]
    assert future not in again, rules.message(
        "claim-due-only",
        f"a second claim returned the future task {future!r} (due at {before.next_attempt_at})",
    )
    after = s.get(future)
    assert after == before, rules.message(
        "claim-due-only", f"task {future!r} changed although not due: {before!r} -> {after!r}"
    )


def test_succeeded_and_dead_tasks_are_never_claimed_again(rdq_storage):
    """Rule terminal-final: SUCCEEDED and DEAD tasks are never claimed again, even once
    the lease they were claimed with has long expired."""
    s = rdq_storage
    ids = [enqueue(s, Q) for _ in range(3)]
    claims = {c.task_id: c for c in s.claim_due(Q, 3, SHORT_LEASE)}
    assert set(claims) == set(ids), rules.message(
        "terminal-final", f"setup: claimed {sorted(claims)}, expected {sorted(ids)}"
    )
    done, dead_perm, dead_retry = ids
    s.complete(done, claims[done].token)
    s.dead_letter(dead_perm, claims[dead_perm].token, ErrorInfo("E", "bad"))
    s.dead_letter(
        dead_retry, claims[dead_retry].token, ErrorInfo("E", "tired"), Outcome.RETRYABLE_FAILURE
    )
    before = {tid: s.get(tid) for tid in ids}
    latest = max(c.lease_expires_at for c in claims.values())
    wait_until(s, latest + SHORT_LEASE)
    got = s.claim_due(Q, 10, SHORT_LEASE)
    assert not got, rules.message(
        "terminal-final",
        "claim returned terminal tasks "
        + ", ".join(
            f"{c.task_id!r} ({before[c.task_id].status.value}, new token {short(c.token)})"
            for c in got
            if c.task_id in before
        )
        + f" (all claims: {[c.task_id for c in got]})",
    )
    for tid in ids:
        after = s.get(tid)
        assert after == before[tid], rules.message(
            "terminal-final", f"terminal task {tid!r} changed: {before[tid]!r} -> {after!r}"
        )


def test_task_with_live_lease_is_not_claimed_by_another_claim(rdq_connect):
    """Rule lease-respected: while a claim's lease is live, another claim (from another
    handle) does not take the task, and the task is left as the first claim made it."""
    first, second = rdq_connect(), rdq_connect()
    tid = enqueue(first, Q)
    held = claim_one(first, Q, LONG_LEASE)
    before = first.get(tid)
    got = second.claim_due(Q, 10, LONG_LEASE)
    assert not got, rules.message(
        "lease-respected",
        f"task {tid!r} held by token {short(held.token)} until {held.lease_expires_at} was "
        f"claimed again: {[(c.task_id, short(c.token)) for c in got]}",
    )
    after = second.get(tid)
    assert after == before, rules.message(
        "lease-respected", f"task {tid!r} changed under a live lease: {before!r} -> {after!r}"
    )


def test_every_claim_mints_a_fresh_token(rdq_storage):
    """Rule fencing: every claim gets its own token (32 lowercase hex digits): distinct
    across the tasks of one claim, and a reclaim or a claim after reschedule gets a new one."""
    s = rdq_storage
    for _ in range(20):
        enqueue(s, Q)
    claims = s.claim_due(Q, 20, LONG_LEASE)
    tokens = [c.token for c in claims]
    bad = [t for t in tokens if not isinstance(t, str) or not TOKEN_RE.fullmatch(t)]
    assert not bad, rules.message("fencing", f"malformed claim tokens {bad!r}")
    assert len(set(tokens)) == len(tokens), rules.message(
        "fencing",
        f"one claim handed the same token to several tasks: "
        f"{[(c.task_id, short(c.token)) for c in claims if tokens.count(c.token) > 1]}",
    )
    for c in claims:
        s.complete(c.task_id, c.token)

    tid = enqueue(s, "fresh")
    first = claim_one(s, "fresh", SHORT_LEASE)
    expire(s, first)
    second = claim_one(s, "fresh", SHORT_LEASE)
    s.reschedule(tid, second.token, timedelta(0))
    third = claim_one(s, "fresh", LONG_LEASE)
    chain = [first.token, second.token, third.token]
    assert len(set(chain + tokens)) == len(chain) + len(tokens), rules.message(
        "fencing",
        f"task {tid!r}: tokens of its claim, reclaim and claim after reschedule are "
        f"{[short(t) for t in chain]}; each claim must mint a token never used before",
    )
