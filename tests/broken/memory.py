"""Broken reference stores: the kit's proof that its suite and its machine fail them.

Each class below is the reference :class:`~rdq_core.memory.MemoryStore` with one hook
overridden the way a real backend once got it wrong (one bug class of
``contract.md#8-bug-classes`` each). Each is exposed as a backend object, so the
conformance suite runs against it unchanged::

    pytest --pyargs rdq_compliance.suite --rdq-backend=tests.broken.memory:check_then_act_claim

Every broken store records, in its class attribute ``victims``, the id of each task
on which its broken code path actually did something the reference would not (the
double-claimed task, the stolen lease, the wedged task, ...). The kit's own tests
(``tests/test_kit_catches_bug_classes.py``) check that the suite's failure report
names the violated rule *and* one of those tasks.

The claim-side variants share :class:`_ClaimHooks`, the reference claim split into
small hooks (which rows are claimable, their order, how many are taken, how the
LEASE_EXPIRED attempt is numbered, whether a token is minted). With no hook changed
it is the reference claim; ``control`` runs the whole suite on it to show the split
itself is faithful, so a failure of a variant is its one change.
"""

from __future__ import annotations

import functools
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import ClassVar

from rdq_memory.plugin import MemoryBackend

from rdq_compliance.queue_names import spread_names
from rdq_core import cursor as cursors
from rdq_core import validation
from rdq_core.errors import InvalidArgument, StaleClaim
from rdq_core.memory import MemoryStore, _Row
from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    Attempt,
    ByIds,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Status,
    Task,
    micros_from_utc,
    next_attempt_no,
)
from rdq_core.tokens import new_token


class UniqueViolation(Exception):
    """What a SQL driver raises for a duplicate key (e.g. psycopg.errors.UniqueViolation).

    A broken backend lets it escape, as the one in the original incident did.
    """


# ---- shared machinery ------------------------------------------------------------------


class _Broken(MemoryStore):
    """A MemoryStore that remembers the tasks its bug actually hit."""

    victims: ClassVar[list[str]] = []

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.victims = []

    def _victim(self, task_id: str) -> None:
        if task_id not in self.victims:
            self.victims.append(task_id)


class _ClaimHooks(_Broken):
    """The reference claim of :class:`MemoryStore`, split into overridable hooks.

    It also keeps the attempt history under ``UNIQUE(task_id, attempt_no)``, as the
    SQL backends do: appending a duplicate number raises :class:`UniqueViolation`
    and the whole claim is rolled back (a transaction abort).
    """

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        return row.task.queue == queue and row.due_at is not None and row.due_at <= now

    def _claim_order(self, row: _Row) -> tuple[object, ...]:
        due = row.due_at if row.due_at is not None else row.task.created_at
        return (due, self._order[row.task.id])

    def _take(self, rows: list[_Row], limit: int) -> list[_Row]:
        return rows[:limit]

    def _lease_expired_no(self, row: _Row) -> int:
        return next_attempt_no(row.attempts)

    def _mint_token(self, row: _Row) -> str:
        return new_token()

    def _record_lease_expiry(self, row: _Row, now: datetime) -> bool:
        """Append the LEASE_EXPIRED attempt of a reclaim; True if one was recorded."""
        assert row.claimed_at is not None
        number = self._lease_expired_no(row)
        if number != next_attempt_no(row.attempts):
            self._victim(row.task.id)
        self._append_attempt(
            row,
            Attempt(
                number,
                row.claimed_at,
                now,
                Outcome.LEASE_EXPIRED,
                ErrorInfo(LEASE_EXPIRED_ERROR, "lease expired before an outcome"),
            ),
        )
        return True

    def _append_attempt(self, row: _Row, attempt: Attempt) -> None:
        if any(a.attempt_no == attempt.attempt_no for a in row.attempts):
            raise UniqueViolation(
                'duplicate key value violates unique constraint "attempts_pkey"\n'
                f"DETAIL:  Key (task_id, attempt_no)=({row.task.id}, {attempt.attempt_no}) "
                "already exists."
            )
        row.attempts.append(attempt)

    def _select_due(self, queue: str, limit: int, now: datetime) -> list[_Row]:
        due = [r for r in self._rows.values() if self._claimable(r, queue, now)]
        due.sort(key=self._claim_order)
        return self._take(due, limit)

    def _stamp(self, row: _Row, now: datetime, lease: timedelta) -> Claim:
        reclaimed = row.task.status is Status.IN_FLIGHT
        count = row.task.attempt_count
        if reclaimed and self._record_lease_expiry(row, now):
            count += 1
        token = self._mint_token(row)
        row.token = token
        row.claimed_at = now
        row.task = replace(
            row.task,
            status=Status.IN_FLIGHT,
            attempt_count=count,
            next_attempt_at=None,
            lease_expires_at=now + lease,
        )
        return Claim(self._snapshot(row), token, now, now + lease, reclaimed)

    def _stamp_all(self, rows: list[_Row], now: datetime, lease: timedelta) -> list[Claim]:
        saved = [(r, r.task, r.token, r.claimed_at, list(r.attempts)) for r in rows]
        try:
            return [self._stamp(r, now, lease) for r in rows]
        except Exception:
            for r, task, token, claimed_at, attempts in saved:  # roll the transaction back
                r.task, r.token, r.claimed_at, r.attempts = task, token, claimed_at, attempts
            raise

    def _claim_clock(self) -> datetime:
        """The time a claim measures due-ness and stamps leases with."""
        return self._now()

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with self._lock:
            now = self._claim_clock()
            return self._stamp_all(self._select_due(queue, limit, now), now, lease)


def _reference_claimable(store: _ClaimHooks, row: _Row, queue: str, now: datetime) -> bool:
    return _ClaimHooks._claimable(store, row, queue, now)


# ---- the control ---------------------------------------------------------------------------


class ReferenceWithClaimHooks(_ClaimHooks):
    """Not broken: the hook-split claim every claim-side variant builds on.

    It must pass the whole suite; if it does not, the split (not the bug) is wrong.
    """


# ---- double-claim: claim without a row lock -----------------------------------------------


class CheckThenActClaim(_ClaimHooks):
    """Bug class ``double-claim`` — check-then-act claim: two workers get one task.

    Incident: a claim written as ``SELECT ... WHERE status='PENDING'`` followed by a
    separate ``UPDATE ... SET status='IN_FLIGHT' WHERE id=$1`` without ``FOR UPDATE``
    (or a Redis GET-then-SET outside a script). Two workers both see the task due
    between the read and the write and both walk away with it.
    """

    WINDOW_SECONDS: ClassVar[float] = 0.003

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with self._lock:  # SELECT ... (no FOR UPDATE)
            now = self._now()
            picked = self._select_due(queue, limit, now)
        time.sleep(self.WINDOW_SECONDS)  # the window between the read and the write
        with self._lock:  # UPDATE ... WHERE id = ANY($1)  -- no re-check of status
            for row in picked:
                if not _reference_claimable(self, row, queue, self._now()):
                    self._victim(row.task.id)
            return self._stamp_all(picked, now, lease)


class ReclaimOverwritesLateOutcome(_ClaimHooks):
    """Bug class ``unfenced-outcome`` — a reclaim that re-reads without a lock and writes unguarded:
    a late outcome committed in between is overwritten.

    Claims take a lock of their own (an advisory lock no outcome takes), so no two claims
    ever meet and every race of claims passes; under it the due rows are read, and then
    written ``UPDATE ... WHERE id = $1`` as read, with no re-check of status or token. A
    late ``complete`` (or ``reschedule``, ``dead_letter``, heartbeat) of the expired
    holder that commits between the read and the write is acknowledged, then the write
    makes the task IN_FLIGHT again with a LEASE_EXPIRED attempt after the accepted one.

    Incident: a PostgreSQL storage written from outside the project (claims by advisory
    lock, then a re-read without ``FOR UPDATE``) passed the whole kit while a 400-task
    script overwrote acknowledged results in 2 runs of 3.
    """

    WINDOW_SECONDS: ClassVar[float] = 0.003

    def __init__(self) -> None:
        super().__init__()
        self._claims = threading.Lock()  # pg_advisory_xact_lock(...): claims only

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with self._claims:
            with self._lock:  # SELECT ... (no FOR UPDATE)
                now = self._now()
                picked = self._select_due(queue, limit, now)
                read = {r.task.id: (r.task, r.claimed_at, r.token) for r in picked}
            time.sleep(self.WINDOW_SECONDS)  # the window between the read and the write
            with self._lock:  # UPDATE ... WHERE id = $1: what was read is trusted
                for row in picked:
                    task, claimed_at, token = read[row.task.id]
                    if row.token != token or row.task.status is not task.status:
                        self._victim(row.task.id)
                        row.task = replace(row.task, status=task.status)
                        row.claimed_at = claimed_at
                return self._stamp_all(picked, now, lease)


# ---- live-lease-stolen: reclaim ignoring lease_expires_at ---------------------------------


class ReclaimIgnoresLease(_ClaimHooks):
    """Bug class ``live-lease-stolen`` — reclaim ignoring ``lease_expires_at``: a live lease
    is stolen.

    Incident: the reclaim query selected ``status = 'IN_FLIGHT'`` and forgot
    ``AND lease_expires_at <= now()``, so every claim also took tasks that other,
    healthy workers were still running.
    """

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        if row.task.queue == queue and row.task.status is Status.IN_FLIGHT:
            if not _reference_claimable(self, row, queue, now):
                self._victim(row.task.id)
            return True
        return super()._claimable(row, queue, now)


# ---- unfenced-outcome: outcome without token check ----------------------------------------


class OutcomeIgnoresToken(_Broken):
    """Bug class ``unfenced-outcome`` — complete/reschedule/dead_letter accepted with any token.

    Incident: ``UPDATE tasks SET status='SUCCEEDED' WHERE id=$1`` with no
    ``AND claim_token=$2``: a worker paused past its lease (GC, VM migration) wakes up
    and overwrites the result of the worker that reclaimed its task. (Heartbeats stay
    fenced here; ``stale-heartbeat`` is its own variant.)
    """

    def _fenced(self, task_id: str, token: str) -> _Row:
        row = self._rows.get(task_id)
        if row is None:
            return super()._fenced(task_id, token)  # only "no such row" is noticed
        try:
            super()._fenced(task_id, token)
        except StaleClaim:
            self._victim(task_id)
            if row.claimed_at is None:  # e.g. a SUCCEEDED task: the attempt starts "now"
                row.claimed_at = self._now()
        return row

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        with self._lock:
            row = MemoryStore._fenced(self, task_id, token)
            expires = self._now() + lease
            row.task = replace(row.task, lease_expires_at=expires)
            return expires


class TokenNotRotatedOnReclaim(_ClaimHooks):
    """Bug class ``unfenced-outcome`` — reclaim keeps the expired claim's token.

    Incident: the token was derived from the task (id + attempt count) or simply not
    reset by the reclaim, so the paused worker's token stays valid after another
    worker took the task over: fencing by token is silently off.
    """

    def _mint_token(self, row: _Row) -> str:
        if row.task.status is Status.IN_FLIGHT and row.token is not None:
            self._victim(row.task.id)
            return row.token
        return super()._mint_token(row)


class OutcomeFencedByClock(_Broken):
    """Bug class ``unfenced-outcome`` — fencing by clock, not token: outcomes rejected once
    the lease has expired.

    Incident: a backend fenced by the clock (``AND lease_expires_at > now()``) instead
    of by the token, so a slow worker's result is thrown away even though nobody
    reclaimed its task: the work is done twice for nothing, and with a short lease a
    long task can never complete.
    """

    def _fenced(self, task_id: str, token: str) -> _Row:
        row = super()._fenced(task_id, token)
        lease_end = row.task.lease_expires_at
        if lease_end is not None and lease_end <= self._now():
            self._victim(task_id)
            raise StaleClaim(f"task {task_id!r}: lease expired at {lease_end.isoformat()}")
        return row


# ---- numbering-from-counter: LEASE_EXPIRED numbered from attempt_count --------------------


class LeaseExpiredNumberedFromCount(_ClaimHooks):
    """Bug class ``numbering-from-counter`` — the original incident: LEASE_EXPIRED
    numbered ``attempt_count + 1``.

    Redrive resets ``attempt_count``; the next reclaim of the redriven task numbers
    its LEASE_EXPIRED attempt with a number its first life already used, the
    ``UNIQUE(task_id, attempt_no)`` constraint refuses it, the reclaim transaction
    aborts, and the task is wedged IN_FLIGHT forever.
    """

    def _lease_expired_no(self, row: _Row) -> int:
        return row.task.attempt_count + 1


class ReclaimWithoutLeaseExpiredAttempt(_ClaimHooks):
    """Bug class ``numbering-from-counter`` — a reclaim that records no LEASE_EXPIRED attempt.

    Incident: the reclaim path reused the plain claim (``UPDATE ... SET token=...``),
    so the lap lost to the dead worker is invisible in the history and does not count
    against the retry budget: a poison task that kills its worker retries forever.
    """

    def _record_lease_expiry(self, row: _Row, now: datetime) -> bool:
        self._victim(row.task.id)
        return False


# ---- bad-redrive -----------------------------------------------------------------------------


class _RedriveBug(_Broken):
    def _redrive_fixup(self, row: _Row, before: Task, now: datetime) -> None:
        raise NotImplementedError

    def _redrive(self, queue: str, selector: Selector) -> int:
        with self._lock:
            rows = [(r, r.task) for r in self._selected(queue, selector)]
            count = super()._redrive(queue, selector)
            now = self._now()
            for row, before in rows:
                self._redrive_fixup(row, before, now)
            return count


class RedriveResetsHistory(_RedriveBug):
    """Bug class ``bad-redrive`` — redrive wipes the attempt history.

    Incident: redrive implemented as delete + re-insert of the task (or
    ``DELETE FROM attempts WHERE task_id=$1`` to "start clean"): the evidence of why
    the task died is gone, and attempt numbers restart at 1.
    """

    def _redrive_fixup(self, row: _Row, before: Task, now: datetime) -> None:
        if row.attempts:
            self._victim(row.task.id)
        row.attempts.clear()


class RedriveKeepsAttemptCount(_RedriveBug):
    """Bug class ``bad-redrive`` — redrive keeps ``attempt_count``.

    Incident: redrive only flipped the status back to PENDING; the task came back
    with its retry budget already spent and was dead-lettered again on its first
    failure.
    """

    def _redrive_fixup(self, row: _Row, before: Task, now: datetime) -> None:
        if before.attempt_count != 0:
            self._victim(row.task.id)
        row.task = replace(row.task, attempt_count=before.attempt_count)


class RedriveLeavesNotDue(_RedriveBug):
    """Bug class ``bad-redrive`` — redrive leaves the task not due.

    Incident: redrive re-applied the retry policy's backoff (or kept a stale
    ``next_attempt_at``) instead of making the task due now: an operator redrives
    the DLQ during an incident and nothing happens for an hour.
    """

    def _redrive_fixup(self, row: _Row, before: Task, now: datetime) -> None:
        self._victim(row.task.id)
        row.task = replace(row.task, next_attempt_at=now + timedelta(hours=1))


class RedriveAnyStatus(_Broken):
    """Bug class ``bad-redrive`` — redrive by ids acts on tasks that are not DEAD.

    Incident: ``UPDATE tasks SET status='PENDING' ... WHERE id = ANY($1)`` without
    ``AND status='DEAD'``: redriving a list of ids pasted from a dashboard reset a
    task that was running (stealing its live claim) or had already succeeded.
    """

    def _redrive(self, queue: str, selector: Selector) -> int:
        if not isinstance(selector, ByIds):
            return super()._redrive(queue, selector)
        with self._lock:
            now = self._now()
            wanted = set(selector.ids)
            rows = [r for r in self._rows.values() if r.task.queue == queue and r.task.id in wanted]
            for r in rows:
                if r.task.status is not Status.DEAD:
                    self._victim(r.task.id)
                r.dead_at = None
                r.token = None
                r.claimed_at = None
                r.task = replace(
                    r.task,
                    status=Status.PENDING,
                    attempt_count=0,
                    redrive_count=r.task.redrive_count + 1,
                    next_attempt_at=now,
                    lease_expires_at=None,
                )
            return len(rows)


# ---- unclaimable-claimed: claims of tasks that are not due / are terminal ------------------


class ClaimsBeforeDue(_ClaimHooks):
    """Bug class ``unclaimable-claimed`` — PENDING tasks claimed before ``next_attempt_at``.

    Incident: the claim filtered on ``status='PENDING'`` only (the due-time predicate
    was lost in a refactor), so delayed tasks ran at once and retry backoff was
    ignored: a failing task hot-looped.
    """

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        if row.task.queue == queue and row.task.status is Status.PENDING:
            if not _reference_claimable(self, row, queue, now):
                self._victim(row.task.id)
            return True
        return super()._claimable(row, queue, now)


class ClaimsTerminalTasks(_ClaimHooks):
    """Bug class ``unclaimable-claimed`` — SUCCEEDED and DEAD tasks claimed again.

    Incident: the claim query selected ``status <> 'IN_FLIGHT'`` (or a Redis due-set
    entry was not removed on completion), so finished work ran again.
    """

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        if row.task.queue == queue and row.task.status.terminal:
            self._victim(row.task.id)
            return True
        return super()._claimable(row, queue, now)


class RescheduleIgnoresDelay(_Broken):
    """Bug class ``unclaimable-claimed`` — reschedule makes the task due at once, whatever
    the delay.

    Incident: ``next_attempt_at = now()`` hard-coded in the reschedule statement; the
    retry backoff is ignored and a failing task hammers its dependency.
    """

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        if delay > timedelta(0):
            self._victim(task_id)
        super()._reschedule(task_id, token, timedelta(0), error)


class ClientClock(_ClaimHooks):
    """Bug class ``worker-clock`` — the claim uses the worker's (the client's) clock, 500 ms fast.

    Incident: ``lease_expires_at`` and the due-time predicate computed in the client
    (``datetime.now()`` passed as a query parameter) instead of with ``now()`` in the
    storage: a worker with a skewed clock claims tasks before they are due and stamps
    leases that end at the wrong time for every other worker.
    """

    SKEW: ClassVar[timedelta] = timedelta(milliseconds=500)

    def _claim_clock(self) -> datetime:
        return self._now() + self.SKEW

    def _stamp(self, row: _Row, now: datetime, lease: timedelta) -> Claim:
        self._victim(row.task.id)  # every stamp of this claim is off by SKEW
        return super()._stamp(row, now, lease)


# ---- lost-task -------------------------------------------------------------------------------


class CompleteRecordsNoAttempt(_Broken):
    """Bug class ``wrong-transition`` — SUCCEEDED without its SUCCESS attempt.

    Incident: complete written as a bare ``UPDATE tasks SET status='SUCCEEDED'`` while
    failures went through the path that also inserts the attempt row: the history of
    every successful task lacks its last attempt, and its ``attempt_count`` is one short.
    """

    def _complete(self, task_id: str, token: str) -> None:
        with self._lock:
            row = self._fenced(task_id, token)
            self._victim(task_id)
            row.token = None
            row.claimed_at = None
            row.finished_at = self._now()
            row.task = replace(
                row.task, status=Status.SUCCEEDED, next_attempt_at=None, lease_expires_at=None
            )


class RescheduleDeletesTask(_Broken):
    """Bug class ``lost-task`` — a task lost: deleted on failure.

    Incident: the failure path acknowledged the message before re-publishing it
    (``DEL`` then a second write that never happened), so a retryable failure made
    the task vanish instead of coming back PENDING.
    """

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        with self._lock:
            super()._reschedule(task_id, token, delay, error)
            self._victim(task_id)
            del self._rows[task_id]
            del self._order[task_id]


class ExpiredLeasesNeverReclaimed(_ClaimHooks):
    """Bug class ``lost-task`` — a task lost: dropped on a crash.

    Incident: the claim popped the task from the due set (Redis ``ZPOPMIN``) without
    tracking it anywhere else, so when its worker was SIGKILLed nothing ever offered
    it again: it sits IN_FLIGHT with an expired lease forever.
    """

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        if row.task.status is Status.IN_FLIGHT:
            if _reference_claimable(self, row, queue, now):
                self._victim(row.task.id)
            return False
        return super()._claimable(row, queue, now)


class DlqMissesRetryableDeaths(_Broken):
    """Bug class ``lost-task`` — a task lost: dead-lettered but missing from the DLQ.

    Incident: the DLQ view was ``WHERE last_outcome = 'PERMANENT_FAILURE'``, written
    when only permanent errors dead-lettered; tasks that spent their retry budget
    (outcome RETRYABLE_FAILURE) or died of lease expiries are DEAD but invisible.
    """

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        with self._lock:
            for r in self._dead(queue):
                if r.attempts and r.attempts[-1].outcome is not Outcome.PERMANENT_FAILURE:
                    self._victim(r.task.id)
            page = super()._dlq_list(queue, filter, cursor, limit)
            shown = tuple(
                t
                for t in page.tasks
                if t.attempts and t.attempts[-1].outcome is Outcome.PERMANENT_FAILURE
            )
            return DlqPage(shown, page.next_cursor)


class DlqDropsFirstTask(_Broken):
    """Bug class ``lost-task`` — a task lost from the DLQ listing: the oldest dead task never shows.

    Incident: keyset paging that starts "after" a zero cursor built from the first
    row it read (``WHERE (dead_at, id) > ($first)``), so the oldest dead-letter is
    skipped on the first page and an operator never sees (nor redrives) it.
    """

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        with self._lock:
            page = super()._dlq_list(queue, filter, cursor, limit)
            if cursor is None and page.tasks:
                self._victim(page.tasks[0].id)
                return DlqPage(page.tasks[1:], page.next_cursor)
            return page


class DlqCursorComparesIdsOnly(_Broken):
    """Bug class ``lost-task`` — DLQ paging: the keyset cursor confuses time and id.

    Incident: pages are ordered ``ORDER BY dead_at, id`` but the next page asks
    ``WHERE id > $last_id``: while ids happen to sort in dead-letter order (sequential
    ids, or test data named in order) every page is right; once an id sorts before the
    last one listed although it died later, it is never listed (and one that died
    earlier but sorts later is listed again).
    """

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        if cursor is None:
            return super()._dlq_list(queue, filter, cursor, limit)
        with self._lock:
            after = cursors.decode(queue, cursor)
            rows = [
                r for r in self._dead(queue) if filter is None or filter.matches(self._snapshot(r))
            ]

            def key(r: _Row) -> tuple[int, str]:
                assert r.dead_at is not None
                return (micros_from_utc(r.dead_at), r.task.id)

            rows.sort(key=key)
            for r in rows:  # what the reference would list, and this one does not
                if (key(r) > (after.dead_at_us, after.task_id)) != (r.task.id > after.task_id):
                    self._victim(r.task.id)
            rows = [r for r in rows if r.task.id > after.task_id]  # WHERE id > $last_id
            page = rows[:limit]
            next_cursor = None
            if len(rows) > limit:
                next_cursor = cursors.encode(queue, cursors.DlqPosition(*key(page[-1])))
            return DlqPage(tuple(self._snapshot(r) for r in page), next_cursor)


class DlqPageBoundarySkip(_Broken):
    """Bug class ``lost-task`` — DLQ paging: every page after the first skips one task.

    Incident: the cursor encoded the first row of the *next* page, and the query
    then asked for rows strictly after it (``WHERE (dead_at, id) > $cursor``): one
    dead task per page boundary is never listed, so paging "the whole DLQ" misses
    tasks (and a redrive-by-listing never redrives them).
    """

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        with self._lock:
            page = super()._dlq_list(queue, filter, cursor, limit + 1)
            if cursor is None:
                return super()._dlq_list(queue, filter, cursor, limit)
            if page.tasks:
                self._victim(page.tasks[0].id)
            shown = page.tasks[1:]
            more = len(shown) > limit or page.next_cursor is not None
            shown = shown[:limit]
            next_cursor = None
            if more and shown:
                last = self._rows[shown[-1].id]
                assert last.dead_at is not None
                next_cursor = cursors.encode(
                    queue, cursors.DlqPosition(micros_from_utc(last.dead_at), last.task.id)
                )
            return DlqPage(shown, next_cursor)


class PurgeAnyStatus(_Broken):
    """Bug class ``lost-task`` — purge by ids deletes tasks that are not DEAD.

    Incident: ``DELETE FROM tasks WHERE id = ANY($1)`` without ``AND status='DEAD'``:
    an operator purging a stale id list deleted live, pending work.
    """

    def _purge(self, queue: str, selector: Selector) -> int:
        if not isinstance(selector, ByIds):
            return super()._purge(queue, selector)
        with self._lock:
            wanted = set(selector.ids)
            gone = [
                r.task.id
                for r in self._rows.values()
                if r.task.queue == queue and r.task.id in wanted
            ]
            for task_id in gone:
                if self._rows[task_id].task.status is not Status.DEAD:
                    self._victim(task_id)
                del self._rows[task_id]
                del self._order[task_id]
            return len(gone)


class PurgeSucceededIgnoresAge(_Broken):
    """Bug class ``bad-spi-call`` — housekeeping: ``purge_succeeded`` deletes every
    SUCCEEDED task.

    Incident: the retention job's ``AND finished_at <= now() - $1`` compared with the
    wrong column (``created_at``) or was dropped, so results still being read vanished.
    """

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        with self._lock:
            cutoff = self._now() - older_than
            for r in self._rows.values():
                if (
                    r.task.queue == queue
                    and r.task.status is Status.SUCCEEDED
                    and r.finished_at is not None
                    and r.finished_at > cutoff
                ):
                    self._victim(r.task.id)
            return super()._purge_succeeded(queue, timedelta(0))


# ---- stale-heartbeat: heartbeat without token check -------------------------------------


class ExtendLeaseIgnoresToken(_Broken):
    """Bug class ``stale-heartbeat`` — a heartbeat extends a lease the worker no longer holds.

    Incident: ``UPDATE tasks SET lease_expires_at = now() + $2 WHERE id = $1`` with
    no token check: the paused worker's heartbeat thread keeps extending the lease
    of the task another worker reclaimed (or that already finished).
    """

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        with self._lock:
            row = self._rows.get(task_id)
            if row is None:
                return super()._extend_lease(task_id, token, lease)
            try:
                MemoryStore._fenced(self, task_id, token)
            except StaleClaim:
                self._victim(task_id)
            expires = self._now() + lease
            row.task = replace(row.task, lease_expires_at=expires)
            return expires


class HeartbeatKeepsTheClaimsLease(_Broken):
    """Bug class ``wrong-transition`` — a heartbeat renews the lease the claim was made with, not
    the one it asks for (rule ``lease-per-claim``), on a backend that declares the per-claim model.

    Incident: ``UPDATE tasks SET lease_expires_at = now() + lease_length WHERE ...``, the
    claim's stored lease length reused, the heartbeat's argument dropped: a worker that
    asks for a longer lease before a long step keeps the short one and is reclaimed
    mid-step.
    """

    def _claim_row(self, row: _Row, now: datetime, lease: timedelta) -> Claim:
        claim = super()._claim_row(row, now, lease)
        self._lengths = getattr(self, "_lengths", {})
        self._lengths[claim.token] = lease  # the "lease_length" column
        return claim

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        with self._lock:
            kept = getattr(self, "_lengths", {}).get(token)
            if kept is not None and kept != lease:
                self._victim(task_id)
            return super()._extend_lease(task_id, token, lease if kept is None else kept)


# ---- wrong-claim-batch: limit, isolation, order ---------------------------------------------


class LimitIgnored(_ClaimHooks):
    """Bug class ``wrong-claim-batch`` — limit ignored: one more task than asked.

    Incident: an off-by-one in a Lua loop (``for i = 0, limit``) or ``LIMIT $1 + 1``
    used to detect "more available": the extra task is leased to a worker that has
    no slot for it and sits until its lease expires.
    """

    def _take(self, rows: list[_Row], limit: int) -> list[_Row]:
        taken = rows[: limit + 1]
        for row in taken[limit:]:
            self._victim(row.task.id)
        return taken


class QueuesNotIsolated(_ClaimHooks):
    """Bug class ``wrong-claim-batch`` — queues not isolated: a claim takes another queue's tasks.

    Incident: the claim's ``WHERE queue = $1`` lost in a refactor (or one Redis due
    set shared by every queue): the email worker ran the billing handler's tasks.
    """

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        if row.task.queue != queue and row.due_at is not None and row.due_at <= now:
            self._victim(row.task.id)
            return True
        return super()._claimable(row, queue, now)


class QueuesBucketed(_ClaimHooks):
    """Bug class ``wrong-claim-batch`` — queues kept apart by bucket, not by name: two
    queues of one bucket mix.

    Incident: a store that shards queues into hash buckets (Redis hash-tag slots, a
    partitioned table) indexes due tasks and dead letters per bucket, and its claim, DLQ
    and selectors trust the bucket (``WHERE bucket = crc32($queue) % 4096``) without
    checking the queue: every test with a queue or two passes (they land in different
    buckets); two queues that share a bucket take each other's tasks.
    """

    BUCKETS: ClassVar[int] = 4096

    def _bucket(self, queue: str) -> int:
        return zlib.crc32(queue.encode()) % self.BUCKETS

    def _claimable(self, row: _Row, queue: str, now: datetime) -> bool:
        if row.task.queue != queue and self._bucket(row.task.queue) == self._bucket(queue):
            if row.due_at is not None and row.due_at <= now:
                self._victim(row.task.id)
                return True
        return super()._claimable(row, queue, now)

    def _dead(self, queue: str) -> Iterable[_Row]:
        rows = [
            r
            for r in self._rows.values()
            if r.task.status is Status.DEAD and self._bucket(r.task.queue) == self._bucket(queue)
        ]
        for r in rows:
            if r.task.queue != queue:
                self._victim(r.task.id)
        return rows


class PendingBeforeExpiredLeases(_ClaimHooks):
    """Bug class ``wrong-claim-batch`` — a claim serves due PENDING tasks before expired leases.

    Incident: the claim is two queries, ``status = 'PENDING' AND next_attempt_at <= now``
    first and the reclaim of ``lease_expires_at <= now`` only when that came back short:
    each kind in due order, but an expired lease waits behind every due PENDING task, even
    those that fell due after it expired.
    """

    def _claim_order(self, row: _Row) -> tuple[object, ...]:
        return (row.task.status is Status.IN_FLIGHT, *super()._claim_order(row))

    def _take(self, rows: list[_Row], limit: int) -> list[_Row]:
        taken = rows[:limit]
        fair = sorted(rows, key=super()._claim_order)[:limit]
        for r in taken:
            if r not in fair:
                self._victim(r.task.id)
        return taken


class NewestFirst(_ClaimHooks):
    """Bug class ``wrong-claim-batch`` — ordering by due time ignored: newest task first.

    Incident: ``ORDER BY created_at DESC`` (or a LIFO list) in the claim: under load
    the oldest due tasks starve.
    """

    def _claim_order(self, row: _Row) -> tuple[object, ...]:
        return (-self._order[row.task.id],)

    def _take(self, rows: list[_Row], limit: int) -> list[_Row]:
        fair = sorted(rows, key=super()._claim_order)
        for got, want in zip(rows, fair, strict=True):
            if got is not want:
                self._victim(want.task.id)
        return super()._take(rows, limit)


# ---- enqueue-not-idempotent ---------------------------------------------------------------------


class EnqueueResetsExisting(_Broken):
    """Bug class ``enqueue-not-idempotent`` — re-enqueue resets an existing task.

    Incident: an upsert (``INSERT ... ON CONFLICT (id) DO UPDATE SET status='PENDING',
    payload=EXCLUDED.payload, ...``): a producer retrying its publish reset a task
    that was running (stealing its claim) or had succeeded (running it again).
    It still answers False ("already there"). A task still pending keeps its due time
    (the reset rewrites it only for a task that had left PENDING), so whether a reset
    shows never depends on how fast the re-enqueue followed the first: a pending task
    re-enqueued with the same content is left as it was, every time.
    """

    def _enqueue(self, task: NewTask) -> bool:
        with self._lock:
            row = self._rows.get(task.id)
            if row is None or row.task.queue != task.queue:
                return super()._enqueue(task)
            self._victim(task.id)
            now = self._now()
            row.token = None
            row.claimed_at = None
            row.dead_at = None
            row.finished_at = None
            row.task = replace(
                row.task,
                handler=task.handler,
                payload=task.payload,
                headers=task.headers,
                status=Status.PENDING,
                attempt_count=0,
                next_attempt_at=(
                    row.task.next_attempt_at
                    if row.task.status is Status.PENDING
                    else now + task.delay
                ),
                lease_expires_at=None,
            )
            return False


class EnqueueIdInTwoQueues(_Broken):
    """Bug class ``enqueue-not-idempotent`` — one id accepted in two queues.

    Incident: the unique key was ``(queue, id)`` instead of ``id``; here the second
    enqueue silently moves the task to the other queue (last writer wins), so the
    first queue's task disappears and ``get`` answers with the wrong queue.
    """

    def _enqueue(self, task: NewTask) -> bool:
        with self._lock:
            row = self._rows.get(task.id)
            if row is not None and row.task.queue != task.queue:
                self._victim(task.id)
                del self._rows[task.id]
                del self._order[task.id]
            return super()._enqueue(task)


class PayloadTruncatedAtNul(_Broken):
    """Bug class ``payload-altered`` — payload bytes cut at the first NUL (rule
    ``round-trip``).

    Incident: a payload stored through a C-string API (or a ``text`` column) loses
    everything from the first ``\\x00``: binary payloads (protobuf, msgpack) corrupt.
    """

    def _enqueue(self, task: NewTask) -> bool:
        if b"\x00" in task.payload:
            self._victim(task.id)
            task = replace(task, payload=task.payload.split(b"\x00", 1)[0])
        return super()._enqueue(task)


class EnqueueSkipsValidation(_Broken):
    """Bug class ``bad-spi-call`` — bad input: enqueue writes whatever it is given.

    Incident: a backend overrode ``enqueue`` with a "fast path" that skipped the shared
    validation: a queue named ``"Emails "`` was created, no worker ever polled it,
    and the tasks sat there.
    """

    def enqueue(self, task: NewTask) -> bool:
        try:
            validation.new_task(task, payload_limit=None)
        except InvalidArgument:
            self._victim(str(getattr(task, "id", "")))
        return self._enqueue(task)


class StatsAcrossQueues(_Broken):
    """Bug class ``bad-spi-call`` — stats count every queue's tasks, not just the one asked.

    Incident: ``SELECT status, count(*) FROM tasks GROUP BY status`` without the queue
    predicate: autoscalers scaled every queue's workers on the sum.
    """

    def _stats(self, queue: str) -> QueueStats:
        with self._lock:
            queues = {r.task.queue for r in self._rows.values()}
            for r in self._rows.values():
                if r.task.queue != queue:
                    self._victim(r.task.id)
            totals = [MemoryStore._stats(self, q) for q in sorted(queues | {queue})]
            return QueueStats(
                pending=sum(s.pending for s in totals),
                due=sum(s.due for s in totals),
                in_flight=sum(s.in_flight for s in totals),
                succeeded=sum(s.succeeded for s in totals),
                dead=sum(s.dead for s in totals),
            )


class ClaimStopsShort(_ClaimHooks):
    """Bug class ``wrong-transition`` — a batch claim returns one task whatever the limit.

    Incident: a Lua claim script that ``break``s out of its pop loop after the first
    entry, or a "claim up to n" that stops at the first row another worker has locked:
    workers poll for 32 and get 1, the backlog grows while they sit idle.
    """

    def _take(self, rows: list[_Row], limit: int) -> list[_Row]:
        for row in rows[1:limit]:
            self._victim(row.task.id)
        return rows[:1]


class DlqBrowseIsAReceive(_Broken):
    """Bug class ``bad-spi-call`` — listing the DLQ changes the tasks it lists.

    Incident: a DLQ browsed with the queue's own receive call (SQS ``ReceiveMessage``
    on the dead-letter queue): every look bumped the receive count, so an operator's
    browsing used up the retries the messages would get once redriven. Here each
    listed task's ``attempt_count`` goes up by one.
    """

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        with self._lock:
            page = super()._dlq_list(queue, filter, cursor, limit)
            for task in page.tasks:
                row = self._rows[task.id]
                row.task = replace(row.task, attempt_count=row.task.attempt_count + 1)
                self._victim(task.id)
            return page


class EmptyFilterMeansEverything(_Broken):
    """Bug class ``bad-spi-call`` — an empty selector selects every dead task.

    Incident: ``WHERE ($1::text IS NULL OR handler = $1) AND ($2::text IS NULL OR
    error_type = $2)``: a filter with no field set matches every row, and an operator's
    purge with a blank form emptied the whole DLQ; ``id = ANY('{}')`` was special-cased
    to "no id restriction" the same way. (The SPI's public methods answer an empty
    selector themselves; this backend overrides them, as a backend may.)
    """

    def _everything_if_empty(self, queue: str, selector: Selector) -> Selector:
        empty = selector.is_empty if isinstance(selector, DlqFilter) else not selector.ids
        if not empty:
            return selector
        with self._lock:
            for row in self._dead(queue):
                self._victim(row.task.id)
        return DlqFilter(everything=True)

    def redrive(self, queue: str, selector: Selector | list[str] | tuple[str, ...]) -> int:
        sel = validation.selector(selector)
        return self._redrive(validation.queue_name(queue), self._everything_if_empty(queue, sel))

    def purge(self, queue: str, selector: Selector | list[str] | tuple[str, ...]) -> int:
        sel = validation.selector(selector)
        return self._purge(validation.queue_name(queue), self._everything_if_empty(queue, sel))

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        if filter is not None:
            filter = self._everything_if_empty(queue, filter)  # type: ignore[assignment]
        return super()._dlq_list(queue, filter, cursor, limit)


# ---- beyond the suite: a read that fails --------------------------------------------------------


class GetFailsAfterRedrive(_Broken):
    """The machine's catch-all rule (``model-equivalence``): a read that fails.

    Incident: a migration added a column the row decoder of ``get`` did not know, and
    only tasks that had been through a redrive carried a value in it: ``get`` of such a
    task raised a driver error from deep inside the decoder. No conformance rule is about
    a crashing read: only the stateful machine catches it.
    """

    def _get(self, task_id: str) -> Task:
        task = super()._get(task_id)
        if task.redrive_count:
            self._victim(task_id)
            raise RuntimeError(f"row decoder: unknown value in column 'redriven_by' of {task_id}")
        return task


# ---- the backend objects ---------------------------------------------------------------------


def _backend(cls: Callable[[], MemoryStore], name: str) -> MemoryBackend:
    return MemoryBackend(store_factory=cls, name=f"broken-{name}")


control = MemoryBackend(ReferenceWithClaimHooks, "reference-with-claim-hooks")

check_then_act_claim = _backend(CheckThenActClaim, "check-then-act-claim")
reclaim_overwrites_late_outcome = _backend(
    ReclaimOverwritesLateOutcome, "reclaim-overwrites-late-outcome"
)
reclaim_ignores_lease = _backend(ReclaimIgnoresLease, "reclaim-ignores-lease")
outcome_ignores_token = _backend(OutcomeIgnoresToken, "outcome-ignores-token")
token_not_rotated_on_reclaim = _backend(TokenNotRotatedOnReclaim, "token-not-rotated")
outcome_fenced_by_clock = _backend(OutcomeFencedByClock, "outcome-fenced-by-clock")
lease_expired_numbered_from_count = _backend(
    LeaseExpiredNumberedFromCount, "lease-expired-numbered-from-count"
)
reclaim_without_lease_expired_attempt = _backend(
    ReclaimWithoutLeaseExpiredAttempt, "reclaim-without-lease-expired-attempt"
)
redrive_resets_history = _backend(RedriveResetsHistory, "redrive-resets-history")
redrive_keeps_attempt_count = _backend(RedriveKeepsAttemptCount, "redrive-keeps-attempt-count")
redrive_leaves_not_due = _backend(RedriveLeavesNotDue, "redrive-leaves-not-due")
redrive_any_status = _backend(RedriveAnyStatus, "redrive-any-status")
claims_before_due = _backend(ClaimsBeforeDue, "claims-before-due")
claims_terminal_tasks = _backend(ClaimsTerminalTasks, "claims-terminal-tasks")
reschedule_ignores_delay = _backend(RescheduleIgnoresDelay, "reschedule-ignores-delay")
client_clock = _backend(ClientClock, "client-clock")
complete_records_no_attempt = _backend(CompleteRecordsNoAttempt, "complete-records-no-attempt")
reschedule_deletes_task = _backend(RescheduleDeletesTask, "reschedule-deletes-task")
expired_leases_never_reclaimed = _backend(
    ExpiredLeasesNeverReclaimed, "expired-leases-never-reclaimed"
)
dlq_misses_retryable_deaths = _backend(DlqMissesRetryableDeaths, "dlq-misses-retryable-deaths")
dlq_drops_first_task = _backend(DlqDropsFirstTask, "dlq-drops-first-task")
dlq_page_boundary_skip = _backend(DlqPageBoundarySkip, "dlq-page-boundary-skip")
dlq_cursor_compares_ids_only = _backend(DlqCursorComparesIdsOnly, "dlq-cursor-compares-ids-only")
purge_any_status = _backend(PurgeAnyStatus, "purge-any-status")
purge_succeeded_ignores_age = _backend(PurgeSucceededIgnoresAge, "purge-succeeded-ignores-age")
extend_lease_ignores_token = _backend(ExtendLeaseIgnoresToken, "extend-lease-ignores-token")
heartbeat_keeps_the_claims_lease = _backend(
    HeartbeatKeepsTheClaimsLease, "heartbeat-keeps-the-claims-lease"
)
limit_ignored = _backend(LimitIgnored, "limit-ignored")
queues_not_isolated = _backend(QueuesNotIsolated, "queues-not-isolated")
class _NamesItsBuckets(MemoryBackend):
    """The bucketing store's backend, which names its neighbour queues (the hook a
    bucketing store's author fills): queue names that share one of its buckets."""

    def neighbour_queues(self, count: int) -> list[str]:
        return list(_one_bucket(count))


@functools.cache
def _one_bucket(count: int) -> tuple[str, ...]:
    """``count`` spread names that share the first one's bucket (drawn once per count:
    finding them walks some 100,000 names)."""
    want = QueuesBucketed.BUCKETS
    names = spread_names(count * want * 4)
    bucket = zlib.crc32(names[0].encode()) % want
    return tuple(n for n in names if zlib.crc32(n.encode()) % want == bucket)[:count]


queues_bucketed = _NamesItsBuckets(QueuesBucketed, "broken-queues-bucketed")
newest_first = _backend(NewestFirst, "newest-first")
pending_before_expired_leases = _backend(
    PendingBeforeExpiredLeases, "pending-before-expired-leases"
)
enqueue_resets_existing = _backend(EnqueueResetsExisting, "enqueue-resets-existing")
enqueue_id_in_two_queues = _backend(EnqueueIdInTwoQueues, "enqueue-id-in-two-queues")
payload_truncated_at_nul = _backend(PayloadTruncatedAtNul, "payload-truncated-at-nul")
enqueue_skips_validation = _backend(EnqueueSkipsValidation, "enqueue-skips-validation")
stats_across_queues = _backend(StatsAcrossQueues, "stats-across-queues")
claim_stops_short = _backend(ClaimStopsShort, "claim-stops-short")
dlq_browse_is_a_receive = _backend(DlqBrowseIsAReceive, "dlq-browse-is-a-receive")
empty_filter_means_everything = _backend(
    EmptyFilterMeansEverything, "empty-filter-means-everything"
)
get_fails_after_redrive = MemoryBackend(GetFailsAfterRedrive, "get-fails-after-redrive")
