"""Stats and purge_succeeded (``contract.md#methods``).

``stats(queue)`` counts the queue's tasks by status; ``due`` counts the PENDING ones
whose time has come by the storage clock. ``purge_succeeded(queue, older_than)``
deletes the queue's SUCCEEDED tasks that finished at least ``older_than`` ago.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq_compliance.rules import message
from rdq_compliance.suite import dlq_support as s
from rdq_compliance.suite import helpers
from rdq_core.model import ByIds, ErrorInfo, QueueStats

pytestmark = pytest.mark.rdq_conformance

Q = "q"
OTHER = "other-q"


def _populate(st, queue, prefix=""):
    """Two DEAD, two SUCCEEDED, two IN_FLIGHT, one redriven (due), one rescheduled into
    the future, three due and two future PENDING tasks. Returns ids by kind."""
    ids = {
        "dead": [f"{prefix}dead-1", f"{prefix}dead-2"],
        "succeeded": [f"{prefix}ok-1", f"{prefix}ok-2"],
        "in_flight": [f"{prefix}run-1", f"{prefix}run-2"],
        "redriven": [f"{prefix}redriven"],
        "rescheduled": [f"{prefix}retry-later"],
        "due": [f"{prefix}due-1", f"{prefix}due-2", f"{prefix}due-3"],
        "future": [f"{prefix}later-1", f"{prefix}later-2"],
    }
    for tid in ids["dead"] + ids["redriven"]:
        s.make_dead(st, queue, tid)
    for tid in ids["succeeded"]:
        s.make_succeeded(st, queue, tid)
    (later,) = ids["rescheduled"]
    s.enqueue_new(st, queue, later)
    st.reschedule(later, helpers.claim_one(st, queue).token, s.FAR_FUTURE, ErrorInfo("e", "m"))
    for tid in ids["in_flight"]:
        s.enqueue_new(st, queue, tid)
    s.claim_exactly(st, queue, ids["in_flight"])
    st.redrive(queue, ByIds(ids["redriven"]))
    for tid in ids["due"]:
        s.enqueue_new(st, queue, tid)
    for tid in ids["future"]:
        s.enqueue_new(st, queue, tid, delay=s.FAR_FUTURE)
    return ids


#: What :func:`_populate` leaves in a queue.
POPULATED = QueueStats(pending=7, due=4, in_flight=2, succeeded=2, dead=2)


def test_stats_count_tasks_by_status(rdq_storage):
    """Rule stats: stats count the queue's tasks by status — pending (due or not),
    due, in_flight, succeeded, dead — and the total is their sum."""
    st = rdq_storage
    s.assert_stats("stats", st, Q, QueueStats(), "of an empty queue")
    ids = _populate(st, Q)
    got = st.stats(Q)
    assert got == POPULATED and got.total == 13, message(
        "stats", f"stats({Q!r}) = {got} (total {got.total}), expected {POPULATED} (total 13) "
        f"for tasks {ids}"
    )


def test_stats_are_per_queue(rdq_storage):
    """Rule stats: each queue's stats count only its own tasks; a queue never used
    reports zeros."""
    st = rdq_storage
    _populate(st, Q)
    s.enqueue_new(st, OTHER, "o-due")
    s.enqueue_new(st, OTHER, "o-later", delay=s.FAR_FUTURE)
    s.make_dead(st, "third-q", "t-dead")
    s.assert_stats("stats", st, Q, POPULATED, "beside other queues")
    s.assert_stats("stats", st, OTHER, QueueStats(pending=2, due=1), "holding o-due, o-later")
    s.assert_stats("stats", st, "third-q", QueueStats(dead=1), "holding t-dead")
    s.assert_stats("stats", st, "never-used", QueueStats(), "of a queue never used")


def test_future_task_becomes_due_by_the_storage_clock(rdq_storage):
    """Rule storage-clock: a task enqueued with a delay is pending but not due until
    the storage clock reaches its next_attempt_at, then it counts as due."""
    st = rdq_storage
    tid = "soon"
    s.enqueue_new(st, Q, tid, delay=timedelta(milliseconds=300))
    due_at = st.get(tid).next_attempt_at
    early = st.stats(Q)
    checked_at = st.now()
    if checked_at < due_at:  # stats ran before the task was due: it must not count
        assert (early.pending, early.due) == (1, 0), message(
            "storage-clock", f"task {tid!r} due at {due_at}: stats before then were {early}"
        )
    helpers.wait_until(st, due_at)
    late = st.stats(Q)
    assert (late.pending, late.due) == (1, 1), message(
        "storage-clock", f"task {tid!r} due at {due_at}: stats after then were {late}"
    )


# ---- purge_succeeded ----------------------------------------------------------------------------


def test_purge_succeeded_with_zero_age_deletes_every_succeeded_task(rdq_storage):
    """Rule purge-succeeded: purge_succeeded(queue, 0) deletes every SUCCEEDED task of the
    queue and nothing else (PENDING, IN_FLIGHT, DEAD untouched), returning the count."""
    st = rdq_storage
    ids = _populate(st, Q)
    others = [i for kind, group in ids.items() if kind != "succeeded" for i in group]
    before = s.snapshot(st, others)
    count = st.purge_succeeded(Q, timedelta(0))
    assert count == 2, message(
        "purge-succeeded", f"purge_succeeded({Q!r}, 0) returned {count}, expected 2 "
        f"({ids['succeeded']})"
    )
    for tid in ids["succeeded"]:
        assert s.get_or_none(st, tid) is None, message(
            "purge-succeeded", f"SUCCEEDED task {tid!r} survived purge_succeeded(0)"
        )
    s.assert_snapshot_unchanged("purge-succeeded", before, st, "by purge_succeeded(0)")
    want = QueueStats(pending=7, due=4, in_flight=2, succeeded=0, dead=2)
    s.assert_stats("purge-succeeded", st, Q, want, "after purge_succeeded(0)")
    again = st.purge_succeeded(Q, timedelta(0))
    assert again == 0, message("purge-succeeded", f"a second purge_succeeded returned {again}")


def test_purge_succeeded_keeps_tasks_younger_than_older_than(rdq_storage):
    """Rule purge-succeeded: SUCCEEDED tasks that finished less than older_than ago are
    kept (a large older_than deletes nothing and returns 0)."""
    st = rdq_storage
    ids = _populate(st, Q)
    every = [i for group in ids.values() for i in group]
    before = s.snapshot(st, every)
    for older_than in (timedelta(days=365), timedelta(hours=1)):
        count = st.purge_succeeded(Q, older_than)
        assert count == 0, message(
            "purge-succeeded", f"purge_succeeded({Q!r}, {older_than}) returned {count} for "
            f"tasks {ids['succeeded']} that finished moments ago"
        )
        s.assert_snapshot_unchanged("purge-succeeded", before, st,
                                    f"by purge_succeeded({older_than})")


def test_purge_succeeded_measures_age_on_the_storage_clock(rdq_storage):
    """Rule purge-succeeded: with older_than = 300 ms, a task that finished 300 ms ago by
    the storage clock is deleted and one that finished just now is kept."""
    st = rdq_storage
    age = timedelta(milliseconds=300)
    old = s.make_succeeded(st, Q, "finished-earlier")
    old_finished = old.attempts[-1].finished_at
    helpers.wait_until(st, old_finished + age)
    young = s.make_succeeded(st, Q, "finished-now")
    young_finished = young.attempts[-1].finished_at
    count = st.purge_succeeded(Q, age)
    purged_by = st.now()

    assert s.get_or_none(st, old.id) is None, message(
        "purge-succeeded", f"task {old.id!r} finished at {old_finished}, at least {age} before "
        f"purge_succeeded({age}), and survived it"
    )
    if purged_by - young_finished >= age:
        pytest.skip(f"the machine was too slow to check that {young.id!r} is kept "
                    f"({purged_by - young_finished} passed)")
    assert s.get_or_none(st, young.id) is not None, message(
        "purge-succeeded", f"task {young.id!r} finished at {young_finished}, less than {age} "
        f"before purge_succeeded({age}) ended at {purged_by}, and was deleted"
    )
    assert count == 1, message(
        "purge-succeeded", f"purge_succeeded({age}) returned {count}, deleting only {old.id!r}"
    )


def test_purge_succeeded_only_touches_its_queue(rdq_storage):
    """Rule queue-isolation: purge_succeeded(queue, ...) deletes SUCCEEDED tasks of that
    queue only; another queue's SUCCEEDED tasks stay."""
    st = rdq_storage
    s.make_succeeded(st, Q, "q-ok")
    theirs = ["o-ok-1", "o-ok-2"]
    for tid in theirs:
        s.make_succeeded(st, OTHER, tid)
    before = s.snapshot(st, theirs)
    count = st.purge_succeeded(Q, timedelta(0))
    assert count == 1, message("queue-isolation", f"purge_succeeded({Q!r}) returned {count}, "
                               "expected 1 ('q-ok')")
    s.assert_snapshot_unchanged("queue-isolation", before, st, f"by purge_succeeded({Q!r}, 0)")
    s.assert_stats("queue-isolation", st, OTHER, QueueStats(succeeded=2), "after purging q")
