"""The dead-letter queue: what dlq_list shows, how it pages, and how it filters
(``contract.md#methods``, ``dlq_list``; bug class ``lost-task``).

Dead-letter order is ``(dead-letter time, id)``; most tests give ids that sort in the
order the tasks are dead-lettered, so the expected order is exact even on a storage
clock too coarse to tell two dead-letters apart. One gives ids that sort the other way,
and dead-letters back to back for ties on a coarse clock, so that a cursor that confuses
time and id is caught.
"""

from __future__ import annotations

import queue as queues
import threading

import pytest

from rdq_compliance.rules import message
from rdq_compliance.suite import dlq_support as s
from rdq_compliance.suite import helpers
from rdq_core.errors import StaleCursor
from rdq_core.model import (
    ATTEMPTS_EXHAUSTED_ERROR,
    LEASE_EXPIRED_ERROR,
    ByIds,
    DlqFilter,
    ErrorInfo,
    Outcome,
    Status,
)

pytestmark = pytest.mark.rdq_conformance

Q = "q"
OTHER = "other-q"
ERR = ErrorInfo("boom.Error", "boom")


def _dead_letter_all(storage, ids, tokens, error=ERR):
    for tid in ids:
        storage.dead_letter(tid, tokens[tid], error, Outcome.PERMANENT_FAILURE)


def _claimed(storage, queue, ids):
    """Enqueue ``ids`` and claim them all; returns their tokens (nothing else may be due)."""
    for tid in ids:
        s.enqueue_new(storage, queue, tid)
    return {tid: c.token for tid, c in s.claim_exactly(storage, queue, ids).items()}


# ---- what the DLQ shows ----------------------------------------------------------------------


def test_dlq_lists_every_dead_task_with_its_whole_history(rdq_storage):
    """Rule no-loss: every DEAD task of the queue is listed, as the whole task with its
    whole attempt history (retries, lease expiries and earlier lives included)."""
    st = rdq_storage
    expected: dict[str, list[tuple[int, Outcome, str | None]]] = {}

    # retried twice, then a permanent failure with detail
    t1, t2 = ErrorInfo("net.Timeout", "t1"), ErrorInfo("net.Timeout", "t2", "socket read")
    final = ErrorInfo("app.BadInput", "bad input", "Traceback ...\n  line 1\x01")
    s.make_dead(st, Q, "h1-retried", retries=[t1, t2], error=final)
    expected["h1-retried"] = [
        (1, Outcome.RETRYABLE_FAILURE, "net.Timeout"),
        (2, Outcome.RETRYABLE_FAILURE, "net.Timeout"),
        (3, Outcome.PERMANENT_FAILURE, "app.BadInput"),
    ]

    # a lease expired, was reclaimed, then the budget ran out
    s.enqueue_new(st, Q, "h2-expired")
    first = helpers.claim_one(st, Q, helpers.SHORT_LEASE)
    helpers.expire(st, first)
    second = helpers.claim_one(st, Q)
    st.dead_letter(
        "h2-expired", second.token, ErrorInfo(ATTEMPTS_EXHAUSTED_ERROR, "3 of 3"),
        Outcome.RETRYABLE_FAILURE,
    )
    expected["h2-expired"] = [
        (1, Outcome.LEASE_EXPIRED, LEASE_EXPIRED_ERROR),
        (2, Outcome.RETRYABLE_FAILURE, ATTEMPTS_EXHAUSTED_ERROR),
    ]

    # dead, redriven, dead again: both lives in the history
    s.make_dead(st, Q, "h3-redriven", error=ErrorInfo("first.Life", "1"))
    st.redrive(Q, ByIds(["h3-redriven"]))
    claim = helpers.claim_one(st, Q)
    st.dead_letter("h3-redriven", claim.token, ErrorInfo("second.Life", "2"))
    expected["h3-redriven"] = [
        (1, Outcome.PERMANENT_FAILURE, "first.Life"),
        (2, Outcome.PERMANENT_FAILURE, "second.Life"),
    ]

    # dead-lettered without an error
    s.make_dead(st, Q, "h4-no-error", error=None)
    expected["h4-no-error"] = [(1, Outcome.PERMANENT_FAILURE, None)]

    listed = {t.id: t for p in s.page_through(st, Q, limit=100) for t in p.tasks}
    missing = sorted(set(expected) - set(listed))
    assert not missing, message("no-loss", f"dead tasks {missing} are missing from the DLQ")
    for tid, want in expected.items():
        task = listed[tid]
        s.assert_same_task("no-loss", st.get(tid), task, "between get() and the DLQ listing")
        got = [(a.attempt_no, a.outcome, a.error.type if a.error else None) for a in task.attempts]
        assert got == want, message(
            "no-loss", f"task {tid!r}: DLQ shows history {got}, expected {want}"
        )
        count = 1 if tid == "h3-redriven" else len(want)  # redrive reset the count
        assert task.status is Status.DEAD and task.attempt_count == count, message(
            "no-loss",
            f"task {tid!r}: DLQ shows status {task.status.value}, attempt_count "
            f"{task.attempt_count}, expected DEAD with attempt_count {count}",
        )
    retried = listed["h1-retried"]
    assert retried.attempts[1].error == t2 and retried.attempts[2].error == final, message(
        "no-loss",
        f"task 'h1-retried': errors in the DLQ {[a.error for a in retried.attempts]} "
        f"lost their message or detail",
    )


def test_dlq_lists_no_task_that_is_not_dead(rdq_storage):
    """Rule dlq-paging: the DLQ lists DEAD tasks only: no PENDING (due, future,
    rescheduled or redriven), IN_FLIGHT or SUCCEEDED task, with or without a filter."""
    st = rdq_storage
    s.make_dead(st, Q, "dead")
    s.put_in_state(st, Q, "succeeded", "SUCCEEDED")
    s.put_in_state(st, Q, "in-flight", "IN_FLIGHT")
    s.enqueue_new(st, Q, "rescheduled")
    st.reschedule("rescheduled", helpers.claim_one(st, Q).token, s.FAR_FUTURE, ERR)
    s.put_in_state(st, Q, "redriven", "REDRIVEN")
    s.enqueue_new(st, Q, "pending")
    s.enqueue_new(st, Q, "future", delay=s.FAR_FUTURE)

    for flt in (None, DlqFilter(everything=True), DlqFilter(handler="h"),
                DlqFilter(error_type=ERR.type)):
        ids = s.listed_ids(s.page_through(st, Q, flt, limit=2))
        assert ids == ["dead"], message(
            "dlq-paging", f"DLQ of {Q!r} with filter {flt} lists {ids}, expected only ['dead'] "
            f"(statuses: { {i: s.status_of(st, i) for i in ids} })"
        )


def test_dlq_lists_no_task_of_another_queue(rdq_storage):
    """Rule queue-isolation: a queue's DLQ lists only that queue's dead tasks; a queue
    with no dead task has an empty DLQ."""
    st = rdq_storage
    for tid in ("q-1", "q-2"):
        s.make_dead(st, Q, tid)
    for tid in ("o-1", "o-2", "o-3"):
        s.make_dead(st, OTHER, tid)
    for queue, want in ((Q, ["q-1", "q-2"]), (OTHER, ["o-1", "o-2", "o-3"]), ("unused-q", [])):
        for flt in (None, DlqFilter(everything=True)):
            pages = s.page_through(st, queue, flt, limit=2)
            ids = s.listed_ids(pages)
            assert ids == want, message(
                "queue-isolation", f"DLQ of {queue!r} (filter {flt}) lists {ids}, expected {want}"
            )


# ---- paging ----------------------------------------------------------------------------------


def _check_page_shapes(pages, limit, queue):
    for n, page in enumerate(pages):
        ids = [t.id for t in page.tasks]
        assert len(ids) <= limit, message(
            "dlq-paging", f"page {n} of {queue!r} has {len(ids)} tasks {ids} for limit {limit}"
        )
        assert n == 0 or ids, message(
            "dlq-paging",
            f"page {n} of {queue!r} is empty: the page before it "
            f"({[t.id for t in pages[n - 1].tasks]}) was the last and must have had "
            "next_cursor None",
        )


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 8, 100], ids=lambda n: f"page-size-{n}")
def test_dlq_pages_return_every_dead_task_once_in_dead_letter_order(rdq_storage, limit):
    """Rule dlq-paging: following next_cursor returns every dead task exactly once, in
    dead-letter order (a task dead-lettered again after a redrive moves to the end),
    never more than `limit` per page, and next_cursor is None on the last page."""
    st = rdq_storage
    s.make_dead(st, Q, "d07-redriven")  # dead first, redriven, dead again last
    order = [f"d{i:02d}" for i in range(7)]
    for tid in order:
        s.make_dead(st, Q, tid)
    st.redrive(Q, ByIds(["d07-redriven"]))
    st.dead_letter("d07-redriven", helpers.claim_one(st, Q).token, ERR)
    order.append("d07-redriven")

    pages = s.page_through(st, Q, limit=limit)
    _check_page_shapes(pages, limit, Q)
    ids = s.listed_ids(pages)
    dups = s.duplicates(ids)
    assert not dups, message("dlq-paging", f"tasks {dups} listed more than once (limit {limit})")
    assert ids == order, message(
        "dlq-paging",
        f"paging {Q!r} with limit {limit} gave {ids}, expected {order} (dead-letter order)",
    )


def _dead_time(task) -> object:
    """When ``task`` was dead-lettered: its last attempt's end (the dead-letter's time)."""
    assert task.attempts, message(
        "transition",
        f"task {task.id!r} is {task.status.value} with no attempts: dead_letter records the "
        "failed attempt (and with it the time the DLQ is ordered by)",
    )
    return task.attempts[-1].finished_at


@pytest.mark.parametrize("limit", [1, 2, 5], ids=lambda n: f"page-size-{n}")
def test_dlq_pages_in_dead_letter_order_when_ids_sort_the_other_way(rdq_storage, limit):
    """Rule dlq-paging: the DLQ's order is (dead-letter time, id), not id. Ten tasks are
    dead-lettered one by one in descending id order, then six more claimed together and
    dead-lettered back to back (on a coarse clock, in one tick: ties on dead time, then
    broken by id). Paging returns every dead task once, in that order, whatever the
    page size; a keyset cursor that compares ids alone, or time alone, skips or
    repeats."""
    st = rdq_storage
    one_by_one = [f"r{9 - i}-one" for i in range(10)]  # r9-one dead first, r0-one last
    for tid in one_by_one:
        s.make_dead(st, Q, tid)
    together = [f"q{5 - i}-tie" for i in range(6)]
    for tid in together:
        s.enqueue_new(st, Q, tid)
    claims = s.claim_exactly(st, Q, together)
    for tid in together:  # in descending id order, as fast as the storage takes them
        st.dead_letter(tid, claims[tid].token, ERR)
    tasks = {tid: st.get(tid) for tid in one_by_one + together}
    expected = sorted(tasks, key=lambda tid: (_dead_time(tasks[tid]), tid))
    pages = s.page_through(st, Q, limit=limit)
    _check_page_shapes(pages, limit, Q)
    ids = s.listed_ids(pages)
    missing = sorted(set(expected) - set(ids))
    assert not missing and not s.duplicates(ids), message(
        "dlq-paging",
        f"paging {Q!r} with limit {limit} skipped {missing} and repeated "
        f"{s.duplicates(ids)}: listed {ids}",
    )
    assert ids == expected, message(
        "dlq-paging",
        f"paging {Q!r} with limit {limit} gave {ids}, expected {expected} "
        "(dead-letter time, then id)",
    )


def test_dlq_paging_is_stable_while_tasks_are_dead_lettered_between_pages(rdq_storage):
    """Rule dlq-paging: while paging, dead-lettering more tasks (same thread, between page
    calls) never repeats a task nor skips one that was dead at the start."""
    st = rdq_storage
    initial = [f"b{i:02d}" for i in range(12)]
    for tid in initial:
        s.make_dead(st, Q, tid)
    extra = [f"a{i:02d}" for i in range(12)]  # ids sort before the initial ones
    tokens = _claimed(st, Q, extra)
    pending = list(extra)

    def between(n, page):
        batch, pending[:] = pending[:2], pending[2:]
        _dead_letter_all(st, batch, tokens)

    pages = s.page_through(st, Q, limit=3, between=between)
    _check_stable(pages, initial, set(extra), "dead-letters in the same thread")
    everything = set(s.listed_ids(s.page_through(st, Q, limit=100)))
    dead_extra = set(extra) - set(pending)
    assert everything == set(initial) | dead_extra, message(
        "no-loss", f"after paging, DLQ misses {sorted(set(initial) | dead_extra - everything)}"
    )


def test_dlq_paging_is_stable_while_another_handle_dead_letters_from_another_thread(
    rdq_storage, rdq_connect
):
    """Rule dlq-paging: while paging, another thread with its own storage handle
    dead-letters more tasks between the page calls; no task is repeated and none that
    was dead at the start is skipped."""
    st = rdq_storage
    initial = [f"b{i:02d}" for i in range(12)]
    for tid in initial:
        s.make_dead(st, Q, tid)
    extra = [f"a{i:02d}" for i in range(12)]
    tokens = _claimed(st, Q, extra)
    requests: queues.Queue = queues.Queue()
    replies: queues.Queue = queues.Queue()

    def worker():
        try:
            own = rdq_connect()
            while (batch := requests.get()) is not None:
                _dead_letter_all(own, batch, tokens)
                replies.put(None)
        except BaseException as exc:  # report to the main thread
            replies.put(exc)

    thread = threading.Thread(target=worker, name="rdq-dlq-dead-letterer", daemon=True)
    thread.start()
    pending = list(extra)

    def between(n, page):
        batch, pending[:] = pending[:2], pending[2:]
        requests.put(batch)
        reply = replies.get(timeout=60)
        if reply is not None:
            raise reply

    try:
        pages = s.page_through(st, Q, limit=3, between=between)
    finally:
        requests.put(None)
        thread.join(timeout=60)
    _check_stable(pages, initial, set(extra), "dead-letters from another thread and handle")


def _check_stable(pages, initial, others, what):
    ids = s.listed_ids(pages)
    dups = s.duplicates(ids)
    assert not dups, message("dlq-paging", f"tasks {dups} listed twice during {what}")
    unknown = [i for i in ids if i not in initial and i not in others]
    assert not unknown, message("dlq-paging", f"tasks {unknown} listed that were never dead")
    missing = [i for i in initial if i not in ids]
    assert not missing, message(
        "dlq-paging", f"tasks {missing} were dead throughout but skipped during {what}"
    )
    seen_initial = [i for i in ids if i in initial]
    assert seen_initial == initial, message(
        "dlq-paging", f"tasks dead at the start came in order {seen_initial}, not {initial}"
    )
    not_dead = [t.id for p in pages for t in p.tasks if t.status is not Status.DEAD]
    assert not not_dead, message("dlq-paging", f"tasks {not_dead} listed with a non-DEAD status")


@pytest.mark.parametrize("limit", [1, 3], ids=lambda n: f"page-size-{n}")
def test_dlq_paging_is_stable_while_tasks_are_redriven_or_purged(rdq_storage, limit):
    """Rule dlq-paging: while paging, redriving and purging tasks (already listed ones
    and ones not reached yet) never makes a page repeat a task nor skip a task that
    stayed dead; a task that left the DLQ before its page was read is not listed."""
    st = rdq_storage
    initial = [f"c{i:02d}" for i in range(16)]
    for tid in initial:
        s.make_dead(st, Q, tid)
    listed: list[str] = []
    touched: set[str] = set()
    gone_unreached: set[str] = set()

    def between(n, page):
        # alternately redrive and purge: the oldest listed task still dead (behind the
        # cursor), the next task to be listed (just after it) and the last one
        listed.extend(t.id for t in page.tasks)
        behind = [i for i in listed if i not in touched]
        ahead = [i for i in initial if i not in listed and i not in touched]
        victims = behind[:1] + ahead[:1] + ahead[-1:] if len(ahead) > 2 else behind[:1]
        act = st.redrive if n % 2 == 0 else st.purge
        for tid in victims:
            if act(Q, ByIds([tid])) != 1:
                s.fail("dlq-paging", f"{act.__name__} of dead task {tid!r} did not return 1")
            touched.add(tid)
            if tid not in listed:
                gone_unreached.add(tid)

    pages = s.page_through(st, Q, limit=limit, between=between)
    ids = s.listed_ids(pages)
    dups = s.duplicates(ids)
    assert not dups, message("dlq-paging", f"tasks {dups} listed twice while redriving/purging")
    stayed = [i for i in initial if i not in touched]
    missing = [i for i in stayed if i not in ids]
    assert not missing, message(
        "dlq-paging", f"tasks {missing} stayed dead but were skipped while others were "
        f"redriven/purged (touched {sorted(touched)})"
    )
    ghosts = sorted(gone_unreached & set(ids))
    assert not ghosts, message(
        "dlq-paging", f"tasks {ghosts} were listed although redriven/purged before their page"
    )
    assert [i for i in ids if i in stayed] == stayed, message(
        "dlq-paging", f"tasks that stayed dead came out of dead-letter order: {ids}"
    )
    assert touched, message(
        "dlq-paging", f"the listing ended before anything could change mid-listing (listed {ids})"
    )


# ---- cursors ---------------------------------------------------------------------------------


def _bad_cursors(q_cursor: str, other_cursor: str) -> dict[str, object]:
    return {
        "garbage": "not-a-cursor",
        "garbage-base64": "eyJub3QiOiAiYSBjdXJzb3IifQ",
        "truncated-half": q_cursor[: len(q_cursor) // 2],
        "truncated-last-char": q_cursor[:-1],
        "from-another-queue": other_cursor,
        "empty-string": "",
        "int": 12345,
        "bytes": q_cursor.encode(),
    }


CURSOR_CASES = [
    "garbage", "garbage-base64", "truncated-half", "truncated-last-char",
    "from-another-queue", "empty-string", "int", "bytes",
]


@pytest.mark.parametrize("case", CURSOR_CASES)
def test_bad_cursor_raises_stale_cursor(rdq_storage, case):
    """Rule dlq-paging: a malformed or truncated cursor, or one issued for another queue,
    raises StaleCursor (not a wrong page, not another error) and changes nothing."""
    st = rdq_storage
    for i in range(4):
        s.make_dead(st, Q, f"q-{i}")
    for i in range(4):
        s.make_dead(st, OTHER, f"o-{i}")
    q_cursor = st.dlq_list(Q, None, None, 2).next_cursor
    other_cursor = st.dlq_list(OTHER, None, None, 2).next_cursor
    assert q_cursor and other_cursor, message("dlq-paging", "a first page of 2 of 4 had no cursor")
    bad = _bad_cursors(q_cursor, other_cursor)[case]
    before = s.listed_ids(s.page_through(st, Q, limit=100))

    s.expect_error("dlq-paging", StaleCursor, lambda: st.dlq_list(Q, None, bad, 2),
                   f"dlq_list({Q!r}) with {case} cursor {bad!r}")

    after = s.listed_ids(s.page_through(st, Q, limit=100))
    assert before == after, message("dlq-paging", f"DLQ changed from {before} to {after}")
    good = st.dlq_list(Q, None, q_cursor, 2)
    assert [t.id for t in good.tasks] == ["q-2", "q-3"], message(
        "dlq-paging", f"the good cursor no longer works after a bad one: {good}"
    )


# ---- filters ---------------------------------------------------------------------------------


def _filter_world(st):
    s.make_dead(st, Q, "f1", handler="send-mail", error=ErrorInfo("smtp.Timeout", "t"))
    s.make_dead(st, Q, "f2", handler="send-mail", retries=[ErrorInfo("smtp.Timeout", "t")],
                error=ErrorInfo("smtp.Refused", "r"))
    s.make_dead(st, Q, "f3", handler="resize", error=ErrorInfo("smtp.Timeout", "t"))
    s.make_dead(st, Q, "f4", handler="resize", retries=[ErrorInfo("smtp.Timeout", "t")],
                error=None)
    s.make_dead(st, Q, "f5", handler="resize", error=ErrorInfo("io.Error", "e"))
    s.make_dead(st, OTHER, "f-other", handler="send-mail", error=ErrorInfo("smtp.Timeout", "t"))
    s.enqueue_new(st, Q, "f-rescheduled", handler="send-mail")
    st.reschedule("f-rescheduled", helpers.claim_one(st, Q).token, s.FAR_FUTURE,
                  ErrorInfo("smtp.Timeout", "t"))
    s.enqueue_new(st, Q, "f-pending", handler="send-mail")


FILTERS = {
    "handler": (DlqFilter(handler="send-mail"), ["f1", "f2"]),
    "last-error-type": (DlqFilter(error_type="smtp.Timeout"), ["f1", "f3"]),
    "handler-and-error-type": (DlqFilter(handler="resize", error_type="smtp.Timeout"), ["f3"]),
    "everything": (DlqFilter(everything=True), ["f1", "f2", "f3", "f4", "f5"]),
    "everything-and-handler": (DlqFilter(handler="resize", everything=True), ["f3", "f4", "f5"]),
    "no-match-handler": (DlqFilter(handler="nobody"), []),
    "no-match-error-type": (DlqFilter(error_type="smtp"), []),
    "error-type-case-sensitive": (DlqFilter(error_type="SMTP.TIMEOUT"), []),
}


@pytest.mark.parametrize("case", list(FILTERS))
def test_dlq_filter_selects_exactly_the_matching_dead_tasks(rdq_storage, case):
    """Rule dlq-paging: a DLQ filter lists exactly the queue's dead tasks matching every
    given field (handler; error type of the LAST attempt, exactly), in dead-letter
    order, across pages."""
    st = rdq_storage
    _filter_world(st)
    flt, want = FILTERS[case]
    for limit in (1, 100):
        ids = s.listed_ids(s.page_through(st, Q, flt, limit=limit))
        assert ids == want, message(
            "dlq-paging", f"filter {flt} (limit {limit}) listed {ids}, expected {want}"
        )


def test_empty_dlq_filter_lists_nothing(rdq_storage):
    """Rule empty-selector: an empty DlqFilter() lists nothing (it never silently means
    "everything"), on a queue full of dead tasks."""
    st = rdq_storage
    _filter_world(st)
    for flt in (DlqFilter(), DlqFilter(handler=None, error_type=None, everything=False)):
        page = st.dlq_list(Q, flt, None, 100)
        ids = [t.id for t in page.tasks]
        assert not ids and page.next_cursor is None, message(
            "empty-selector", f"dlq_list({Q!r}, {flt}) listed {ids} (cursor {page.next_cursor!r})"
        )


def test_dlq_listing_does_not_change_tasks(rdq_storage):
    """Rule dlq-paging: listing the DLQ is read-only: every dead task is unchanged and
    still DEAD afterwards, and listing twice gives the same pages."""
    st = rdq_storage
    _filter_world(st)
    ids = ["f1", "f2", "f3", "f4", "f5"]
    before = s.snapshot(st, ids)
    first = s.page_through(st, Q, limit=2)
    second = s.page_through(st, Q, limit=2)
    s.assert_snapshot_unchanged("dlq-paging", before, st, "by listing the DLQ")
    assert [[t.id for t in p.tasks] for p in first] == [[t.id for t in p.tasks] for p in second], (
        message("dlq-paging", f"two listings of {Q!r} differ: {first} vs {second}")
    )
