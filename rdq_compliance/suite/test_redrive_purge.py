"""Redrive and purge: which tasks a selector touches, and what it does to them
(``contract.md#conventions``, selectors; bug class ``bad-redrive``).

Every test builds the same mixed world: queue ``q`` with three DEAD tasks of
different handlers and last errors, one SUCCEEDED, one IN_FLIGHT, one PENDING due
and one PENDING in the future; queue ``other-q`` with a DEAD and a PENDING task.
"""

from __future__ import annotations

import pytest

from rdq_compliance.rules import message
from rdq_compliance.suite import dlq_support as s
from rdq_compliance.suite import helpers
from rdq_core.errors import NotFound
from rdq_core.model import ByIds, DlqFilter, ErrorInfo, NewTask, Outcome, Status

pytestmark = pytest.mark.rdq_conformance

Q = "q"
OTHER = "other-q"
DEAD = ["d1", "d2", "d3"]
LIVE = ["s1", "i1", "p1", "f1"]
OTHER_IDS = ["o-dead", "o-pending"]
ALL = DEAD + LIVE + OTHER_IDS
UNKNOWN = "never-enqueued"


@pytest.fixture
def world(rdq_storage):
    st = rdq_storage
    s.make_dead(st, Q, "d1", handler="mail", error=ErrorInfo("smtp.Timeout", "t"))
    s.make_dead(st, Q, "d2", handler="mail", retries=[ErrorInfo("smtp.Timeout", "t")],
                error=ErrorInfo("smtp.Refused", "r"))
    s.make_dead(st, Q, "d3", handler="resize", error=ErrorInfo("smtp.Timeout", "t"))
    s.make_succeeded(st, Q, "s1", handler="mail")
    s.put_in_state(st, Q, "i1", "IN_FLIGHT", handler="mail")
    s.enqueue_new(st, Q, "p1", handler="mail")
    s.enqueue_new(st, Q, "f1", handler="mail", delay=s.FAR_FUTURE)
    s.make_dead(st, OTHER, "o-dead", handler="mail", error=ErrorInfo("smtp.Timeout", "t"))
    s.enqueue_new(st, OTHER, "o-pending", handler="mail")
    return st


def _check_redriven(rule, before, after, tid):
    """The redrive transition of one task, field by field."""
    problems = []
    if after.status is not Status.PENDING:
        problems.append(f"status {after.status.value}, expected PENDING")
    if after.attempt_count != 0:
        problems.append(f"attempt_count {after.attempt_count}, expected 0")
    if after.redrive_count != before.redrive_count + 1:
        problems.append(f"redrive_count {after.redrive_count}, expected {before.redrive_count + 1}")
    if after.attempts != before.attempts:
        problems.append(f"history {after.attempts} differs from {before.attempts}")
    if after.lease_expires_at is not None:
        problems.append(f"lease_expires_at {after.lease_expires_at}, expected None")
    for name in ("id", "queue", "handler", "payload", "created_at"):
        if getattr(after, name) != getattr(before, name):
            problems.append(f"{name} changed")
    if dict(after.headers) != dict(before.headers):
        problems.append("headers changed")
    if problems:
        s.fail(rule, f"redriven task {tid!r}: " + "; ".join(problems))


def _check_only(rule, st, before, changed, expect_change, what):
    """Tasks in ``changed`` pass ``expect_change``; every other task is unchanged."""
    for tid, old in before.items():
        new = s.get_or_none(st, tid)
        if tid in changed:
            expect_change(old, new, tid)
        elif old is None:
            assert new is None, message(rule, f"task {tid!r} appeared {what}")
        else:
            assert new is not None, message(rule, f"task {tid!r} ({old.status.value}) was "
                                            f"deleted {what} although not selected")
            s.assert_same_task(rule, old, new, what)


# ---- redrive -----------------------------------------------------------------------------------


def test_redrive_by_ids_changes_only_the_selected_dead_tasks(world):
    """Rule redrive: redrive(ByIds) redrives exactly the listed ids that are DEAD in the
    queue; ids that are SUCCEEDED, IN_FLIGHT, PENDING, in another queue, unknown or
    repeated are ignored, and the count says how many were redriven."""
    st = world
    before = s.snapshot(st, [*ALL, UNKNOWN])
    ids = ["d1", "d2", "d1", *LIVE, "o-dead", UNKNOWN]
    count = st.redrive(Q, ByIds(ids))
    assert count == 2, message("redrive", f"redrive of {ids} returned {count}, expected 2 "
                               "(only d1 and d2 are DEAD in the queue)")
    _check_only("redrive", st, before, {"d1", "d2"},
                lambda old, new, tid: _check_redriven("redrive", old, new, tid), "by redrive")
    again = s.snapshot(st, ALL)
    count = st.redrive(Q, ByIds(ids))
    assert count == 0, message("redrive", f"second redrive of {ids} returned {count}, expected 0")
    s.assert_snapshot_unchanged("redrive", again, st, "by a second redrive of the same ids")


REDRIVE_FILTERS = {
    "handler": (DlqFilter(handler="mail"), {"d1", "d2"}),
    "last-error-type": (DlqFilter(error_type="smtp.Timeout"), {"d1", "d3"}),
    "handler-and-error-type": (DlqFilter(handler="resize", error_type="smtp.Timeout"), {"d3"}),
    "everything": (DlqFilter(everything=True), {"d1", "d2", "d3"}),
    "everything-and-handler": (DlqFilter(handler="resize", everything=True), {"d3"}),
    "no-match": (DlqFilter(handler="nobody"), set()),
}


@pytest.mark.parametrize("case", list(REDRIVE_FILTERS))
def test_redrive_by_filter_changes_only_the_matching_dead_tasks(world, case):
    """Rule redrive: redrive(DlqFilter) redrives exactly the queue's DEAD tasks matching
    every given field (error type of the last attempt), and returns that count."""
    st = world
    flt, want = REDRIVE_FILTERS[case]
    before = s.snapshot(st, ALL)
    count = st.redrive(Q, flt)
    assert count == len(want), message(
        "redrive", f"redrive({flt}) returned {count}, expected {len(want)} ({sorted(want)})"
    )
    _check_only("redrive", st, before, want,
                lambda old, new, tid: _check_redriven("redrive", old, new, tid),
                f"by redrive({flt})")


@pytest.mark.parametrize("history", ["one-failure", "retried", "redriven-before"])
def test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept(
    rdq_storage, history
):
    """Rule redrive: a redriven task is PENDING, due now by the storage clock (claimable
    at once), attempt_count 0, redrive_count + 1, its whole history kept exactly, and
    its next attempt is numbered after that history."""
    st = rdq_storage
    tid = f"redrive-{history}"
    retries = [ErrorInfo("net.Timeout", "1"), ErrorInfo("net.Timeout", "2")]
    s.make_dead(st, Q, tid, retries=retries if history == "retried" else [])
    if history == "redriven-before":
        st.redrive(Q, ByIds([tid]))
        st.dead_letter(tid, helpers.claim_one(st, Q, expect=tid).token, ErrorInfo("again", "2"))
    before = st.get(tid)
    assert before.attempt_count > 0, message(
        "transition", f"dead task {tid!r} has attempt_count 0 after failed attempts: {before}"
    )

    t0 = st.now()
    count = st.redrive(Q, ByIds([tid]))
    t1 = st.now()
    after = st.get(tid)
    assert count == 1, message("redrive", f"redrive of dead task {tid!r} returned {count}")
    _check_redriven("redrive", before, after, tid)
    assert after.next_attempt_at is not None and t0 <= after.next_attempt_at <= t1, message(
        "redrive",
        f"redriven task {tid!r}: next_attempt_at {after.next_attempt_at} is not 'now' "
        f"(storage clock was in [{t0}, {t1}])",
    )
    stats = st.stats(Q)
    assert (stats.pending, stats.due, stats.dead) == (1, 1, 0), message(
        "redrive", f"redriven task {tid!r}: stats {stats}, expected it pending and due"
    )
    claims = st.claim_due(Q, 10, helpers.LONG_LEASE)
    assert [c.task_id for c in claims] == [tid], message(
        "redrive", f"redriven task {tid!r} not claimable at once: claim_due gave "
        f"{[c.task_id for c in claims]}"
    )
    st.complete(tid, claims[0].token)
    done = st.get(tid)
    want_no = max(a.attempt_no for a in before.attempts) + 1
    assert done.attempts[:-1] == before.attempts and done.attempts[-1].attempt_no == want_no, (
        message("redrive", f"redriven task {tid!r}: after one more attempt the history is "
                f"{[(a.attempt_no, a.outcome.value) for a in done.attempts]}, expected the old "
                f"history plus attempt {want_no}")
    )


# ---- purge -------------------------------------------------------------------------------------


def _expect_purged(st):
    def check(old, new, tid):
        assert new is None, message(
            "purge", f"purged task {tid!r} still exists (status {new.status.value})"
        )
        s.expect_error("purge", NotFound, lambda: st.get(tid), f"get({tid!r}) after purge")

    return check


def test_purge_by_ids_deletes_only_the_selected_dead_tasks(world):
    """Rule purge: purge(ByIds) deletes exactly the listed ids that are DEAD in the queue
    (get -> NotFound, gone from the DLQ); SUCCEEDED, IN_FLIGHT, PENDING, other-queue,
    unknown and repeated ids are ignored; the count says how many were deleted."""
    st = world
    before = s.snapshot(st, [*ALL, UNKNOWN])
    ids = ["d1", "d3", "d3", *LIVE, "o-dead", UNKNOWN]
    count = st.purge(Q, ByIds(ids))
    assert count == 2, message("purge", f"purge of {ids} returned {count}, expected 2")
    _check_only("purge", st, before, {"d1", "d3"}, _expect_purged(st), "by purge")
    listed = s.listed_ids(s.page_through(st, Q))
    assert listed == ["d2"], message("purge", f"after purging d1, d3 the DLQ lists {listed}")
    stats = st.stats(Q)
    assert stats.dead == 1 and stats.total == 5, message(
        "purge", f"after purging d1, d3 stats are {stats}, expected 1 dead of 5"
    )
    assert st.purge(Q, ByIds(ids)) == 0, message("purge", f"second purge of {ids} was not 0")


@pytest.mark.parametrize("case", list(REDRIVE_FILTERS))
def test_purge_by_filter_deletes_only_the_matching_dead_tasks(world, case):
    """Rule purge: purge(DlqFilter) deletes exactly the queue's DEAD tasks matching every
    given field, and returns that count."""
    st = world
    flt, want = REDRIVE_FILTERS[case]
    before = s.snapshot(st, ALL)
    count = st.purge(Q, flt)
    assert count == len(want), message(
        "purge", f"purge({flt}) returned {count}, expected {len(want)} ({sorted(want)})"
    )
    _check_only("purge", st, before, want, _expect_purged(st), f"by purge({flt})")


def test_purged_id_can_be_enqueued_again_afresh(rdq_storage):
    """Rule purge: purge deletes the task with its history, so the same id can be
    enqueued again as a brand-new task (no old attempts, counts 0, new payload)."""
    st = rdq_storage
    tid = "reborn"
    s.make_dead(st, Q, tid, retries=[ErrorInfo("x", "1")], payload=b"old")
    assert st.purge(Q, ByIds([tid])) == 1, message("purge", f"purge of dead {tid!r} was not 1")
    t0 = st.now()
    added = st.enqueue(NewTask(tid, Q, "new-handler", b"new", {"life": "2"}))
    assert added is True, message("purge", f"re-enqueue of purged {tid!r} returned {added!r}")
    task = st.get(tid)
    fresh = (
        task.status is Status.PENDING and task.attempts == () and task.attempt_count == 0
        and task.redrive_count == 0 and task.payload == b"new" and task.handler == "new-handler"
        and dict(task.headers) == {"life": "2"} and task.created_at >= t0
    )
    assert fresh, message("purge", f"re-enqueued {tid!r} is not fresh: {task}")
    claim = helpers.claim_one(st, Q)
    st.complete(tid, claim.token)
    attempts = [(a.attempt_no, a.outcome) for a in st.get(tid).attempts]
    assert attempts == [(1, Outcome.SUCCESS)], message(
        "purge", f"re-enqueued {tid!r}: history after one run is {attempts}; the purged "
        "history must be gone"
    )


# ---- selectors ---------------------------------------------------------------------------------

EMPTY_SELECTORS = {
    "no-ids": ByIds([]),
    "empty-filter": DlqFilter(),
    "explicit-empty-filter": DlqFilter(handler=None, error_type=None, everything=False),
}


@pytest.mark.parametrize("selector", list(EMPTY_SELECTORS.values()), ids=list(EMPTY_SELECTORS))
@pytest.mark.parametrize("op", ["redrive", "purge"])
def test_empty_selector_selects_nothing(world, op, selector):
    """Rule empty-selector: an empty selector (no ids, or a filter with no field set)
    selects nothing: redrive/purge return 0 and no task changes."""
    st = world
    before = s.snapshot(st, ALL)
    count = getattr(st, op)(Q, selector)
    # the tasks first: a report names the task that changed, not only the count
    s.assert_snapshot_unchanged("empty-selector", before, st, f"by {op}({selector})")
    assert count == 0, message("empty-selector", f"{op}({selector}) returned {count}")


@pytest.mark.parametrize("op", ["redrive", "purge"])
def test_selectors_never_touch_another_queue(world, op):
    """Rule queue-isolation: redrive/purge only act on DEAD tasks of the queue given:
    another queue's dead task is ignored by id and by filter, both ways."""
    st = world
    act = getattr(st, op)
    ours = s.snapshot(st, DEAD)
    count = act(OTHER, ByIds(DEAD))
    assert count == 0, message(
        "queue-isolation", f"{op}({OTHER!r}, {DEAD}) returned {count}; they belong to {Q!r}"
    )
    s.assert_snapshot_unchanged("queue-isolation", ours, st, f"by {op}({OTHER!r}, {DEAD})")
    theirs = s.snapshot(st, OTHER_IDS)
    for sel in (ByIds(["o-dead"]), DlqFilter(handler="mail"), DlqFilter(everything=True)):
        act(Q, sel)
        s.assert_snapshot_unchanged("queue-isolation", theirs, st, f"by {op}({Q!r}, {sel})")
