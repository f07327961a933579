"""Support for the enqueue, bad-input, DLQ, redrive/purge and stats suites.

Everything here reports through :func:`rdq_compliance.rules.message`, so a failure
names the rule it checks and the task ids involved. Tasks are driven into a state
only through the SPI (enqueue, claim_due, complete, reschedule, dead_letter,
redrive), never through a back door, and each helper checks that the claim it makes
picked the task it meant to (a queue must hold no other due task at that moment).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from datetime import timedelta
from typing import NoReturn

from rdq_compliance import rules
from rdq_compliance.suite import helpers
from rdq_core.errors import NotFound
from rdq_core.model import (
    ByIds,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Status,
    Task,
)
from rdq_core.spi import Storage

#: Far enough in the future that no test reaches it.
FAR_FUTURE = timedelta(hours=1)

#: The error :func:`make_dead` records unless told otherwise.
DEFAULT_ERROR = ErrorInfo("boom.Error", "boom")

#: The states :func:`put_in_state` can produce. ``PENDING_FUTURE`` is PENDING but not
#: due; ``REDRIVEN`` is PENDING again after a life that ended DEAD (history, count 1).
STATES = ("PENDING", "PENDING_FUTURE", "IN_FLIGHT", "SUCCEEDED", "DEAD", "REDRIVEN")


def fail(rule: str, detail: str) -> NoReturn:
    raise AssertionError(rules.message(rule, detail))


def expect_error(
    rule: str, expected: type[BaseException], call: Callable[[], object], what: str
) -> BaseException:
    """Call ``call()`` and require it to raise ``expected``; return the exception."""
    try:
        result = call()
    except expected as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            rules.message(
                rule,
                f"{what}: expected {expected.__name__}, got {type(exc).__name__}: {exc}",
            )
        ) from exc
    fail(rule, f"{what}: expected {expected.__name__}, but the call returned {result!r}")


# ---- tasks ------------------------------------------------------------------------------


def task_diff(before: Task, after: Task) -> list[str]:
    """Human-readable differences, field by field (headers compared as dicts)."""
    out = []
    for f in fields(Task):
        a, b = getattr(before, f.name), getattr(after, f.name)
        if f.name == "headers":
            a, b = dict(a), dict(b)
        if f.name == "payload":
            if a != b:
                out.append(f"payload {len(a)} bytes -> {len(b)} bytes (content differs)")
            continue
        if a != b:
            out.append(f"{f.name} {a!r} -> {b!r}")
    return out


def assert_same_task(rule: str, before: Task, after: Task, what: str) -> None:
    diff = task_diff(before, after)
    if diff:
        fail(rule, f"task {before.id!r} changed {what}: " + "; ".join(diff))


def get_or_none(storage: Storage, task_id: str) -> Task | None:
    try:
        return storage.get(task_id)
    except NotFound:
        return None


def snapshot(storage: Storage, ids: Iterable[str]) -> dict[str, Task | None]:
    """Each task as stored (``None`` when there is none)."""
    return {i: get_or_none(storage, i) for i in ids}


def assert_snapshot_unchanged(
    rule: str, before: dict[str, Task | None], storage: Storage, what: str
) -> None:
    for tid, old in before.items():
        new = get_or_none(storage, tid)
        if old is None and new is not None:
            fail(rule, f"task {tid!r} appeared {what} (status {new.status.value})")
        if old is not None and new is None:
            fail(rule, f"task {tid!r} ({old.status.value}) vanished {what}")
        if old is not None and new is not None:
            assert_same_task(rule, old, new, what)


def assert_stats(rule: str, storage: Storage, queue: str, want: QueueStats, what: str) -> None:
    got = storage.stats(queue)
    if got != want:
        fail(rule, f"stats({queue!r}) {what}: expected {want}, got {got}")


def claim_exactly(
    storage: Storage, queue: str, ids: Sequence[str], lease: timedelta = helpers.LONG_LEASE
) -> dict[str, Claim]:
    """Claim ``len(ids)`` tasks and require them to be exactly ``ids``."""
    claims = storage.claim_due(queue, max(1, len(ids)), lease) if ids else []
    got = sorted(c.task_id for c in claims)
    if got != sorted(ids):
        missing = sorted(set(ids) - set(got))
        rule, why = "claim-complete", []
        for tid in missing:
            task = get_or_none(storage, tid)
            if task is None:
                rule = "no-loss"
                why.append(f"task {tid!r} is gone (get raises NotFound)")
            else:
                why.append(
                    f"task {tid!r} is {task.status.value}, next_attempt_at "
                    f"{task.next_attempt_at}, lease until {task.lease_expires_at}"
                )
        if not missing:
            rule = "claim-limit"
        fail(
            rule,
            f"claim_due({queue!r}, limit={max(1, len(ids))}) while preparing the test: "
            f"expected exactly the due tasks {sorted(ids)}, got {got}"
            + (f"; {'; '.join(why)}" if why else ""),
        )
    return {c.task_id: c for c in claims}


def enqueue_new(
    storage: Storage,
    queue: str,
    tid: str,
    handler: str = "h",
    payload: bytes = b"",
    headers: dict[str, str] | None = None,
    delay: timedelta = timedelta(0),
) -> str:
    task = NewTask(tid, queue, handler, payload, headers or {}, delay)
    if storage.enqueue(task) is not True:
        fail("enqueue-idempotent", f"enqueue of new task {tid!r} did not return True")
    return tid


def make_dead(
    storage: Storage,
    queue: str,
    tid: str,
    handler: str = "h",
    retries: Sequence[ErrorInfo | None] = (),
    error: ErrorInfo | None = DEFAULT_ERROR,
    outcome: Outcome = Outcome.PERMANENT_FAILURE,
    payload: bytes = b"",
    headers: dict[str, str] | None = None,
) -> Task:
    """Enqueue ``tid``, fail it once per ``retries`` entry, then dead-letter it.

    The queue must hold no other due task. Returns the task as stored.
    """
    enqueue_new(storage, queue, tid, handler=handler, payload=payload, headers=headers)
    for retry_error in retries:
        claim = claim_exactly(storage, queue, [tid])[tid]
        storage.reschedule(tid, claim.token, timedelta(0), retry_error)
    claim = claim_exactly(storage, queue, [tid])[tid]
    storage.dead_letter(tid, claim.token, error, outcome)
    return storage.get(tid)


def make_succeeded(storage: Storage, queue: str, tid: str, handler: str = "h") -> Task:
    """Enqueue, claim and complete ``tid`` (the queue must hold no other due task)."""
    enqueue_new(storage, queue, tid, handler=handler)
    claim = claim_exactly(storage, queue, [tid])[tid]
    storage.complete(tid, claim.token)
    return storage.get(tid)


def put_in_state(
    storage: Storage, queue: str, tid: str, state: str, **new: object
) -> Claim | None:
    """Create task ``tid`` in ``queue`` and bring it to ``state`` (one of :data:`STATES`).

    Returns the live claim for ``IN_FLIGHT``, else ``None``. States other than
    ``PENDING``/``PENDING_FUTURE`` claim, so the queue must hold no other due task.
    """
    if state == "PENDING":
        enqueue_new(storage, queue, tid, **new)  # type: ignore[arg-type]
    elif state == "PENDING_FUTURE":
        enqueue_new(storage, queue, tid, delay=FAR_FUTURE, **new)  # type: ignore[arg-type]
    elif state == "IN_FLIGHT":
        enqueue_new(storage, queue, tid, **new)  # type: ignore[arg-type]
        return claim_exactly(storage, queue, [tid])[tid]
    elif state == "SUCCEEDED":
        enqueue_new(storage, queue, tid, **new)  # type: ignore[arg-type]
        storage.complete(tid, claim_exactly(storage, queue, [tid])[tid].token)
    elif state == "DEAD":
        make_dead(storage, queue, tid, **new)  # type: ignore[arg-type]
    elif state == "REDRIVEN":
        make_dead(storage, queue, tid, **new)  # type: ignore[arg-type]
        if storage.redrive(queue, ByIds([tid])) != 1:
            fail("redrive", f"redrive of dead task {tid!r} by id did not return 1")
    else:
        raise ValueError(f"unknown state {state!r}")
    return None


# ---- DLQ paging -----------------------------------------------------------------------------


def page_through(
    storage: Storage,
    queue: str,
    filter: DlqFilter | None = None,
    limit: int = 100,
    between: Callable[[int, DlqPage], None] | None = None,
    max_pages: int = 10_000,
) -> list[DlqPage]:
    """Every page of ``queue``'s DLQ, following ``next_cursor`` to the end.

    ``between(n, page)`` runs after page ``n`` (0-based) when another page follows.
    """
    pages = []
    cursor: str | None = None
    while True:
        page = storage.dlq_list(queue, filter, cursor, limit)
        pages.append(page)
        if page.next_cursor is None:
            return pages
        if len(pages) >= max_pages:
            fail("dlq-paging", f"DLQ of {queue!r} still had a next_cursor after {max_pages} pages")
        if between is not None:
            between(len(pages) - 1, page)
        cursor = page.next_cursor


def listed_ids(pages: Iterable[DlqPage]) -> list[str]:
    return [t.id for p in pages for t in p.tasks]


def duplicates(ids: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    dups = []
    for i in ids:
        if i in seen:
            dups.append(i)
        seen.add(i)
    return dups


def status_of(storage: Storage, tid: str) -> Status | None:
    task = get_or_none(storage, tid)
    return None if task is None else task.status
