"""The in-memory reference store: the executable spec of SPEC §1-4.

Thread-safe (one lock around every operation, so each is atomic), in-process only.
Its clock is injectable so a model can be driven without sleeping. Every other
backend is compared with this one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rdq_core import cursor as cursors
from rdq_core.errors import IdConflict, InvalidArgument, NotFound, StaleClaim
from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    UTC,
    Attempt,
    ByIds,
    Capabilities,
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
from rdq_core.spi import Storage
from rdq_core.tokens import new_token

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Row:
    task: Task
    token: str | None = None
    claimed_at: datetime | None = None
    dead_at: datetime | None = None
    finished_at: datetime | None = None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def due_at(self) -> datetime | None:
        if self.task.status is Status.PENDING:
            return self.task.next_attempt_at
        if self.task.status is Status.IN_FLIGHT:
            return self.task.lease_expires_at
        return None


class MemoryStore(Storage):
    """The reference store. ``clock`` returns the storage time (aware UTC)."""

    def __init__(self, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._rows: dict[str, _Row] = {}
        self._seq = 0
        self._order: dict[str, int] = {}
        self._last_now: datetime | None = None

    # ---- helpers ----------------------------------------------------------------

    def _now(self) -> datetime:
        with self._lock:
            now = self._clock()
            if now.tzinfo is None:
                raise InvalidArgument("the store's clock returned a naive datetime")
            now = now.astimezone(UTC)
            # truncate to microseconds is implicit in datetime; keep the clock monotonic
            if self._last_now is not None and now < self._last_now:
                now = self._last_now
            self._last_now = now
            return now

    def _snapshot(self, row: _Row) -> Task:
        return replace(row.task, attempts=tuple(row.attempts))

    def _fenced(self, task_id: str, token: str) -> _Row:
        row = self._rows.get(task_id)
        if row is None or row.task.status is not Status.IN_FLIGHT or row.token != token:
            state = "no such task" if row is None else f"status {row.task.status.value}"
            raise StaleClaim(
                f"task {task_id!r}: token {token[:8]}… is not the current claim ({state})"
            )
        return row

    def _finish(
        self, row: _Row, now: datetime, outcome: Outcome, error: ErrorInfo | None
    ) -> None:
        assert row.claimed_at is not None
        row.attempts.append(
            Attempt(next_attempt_no(row.attempts), row.claimed_at, now, outcome, error)
        )
        row.token = None
        row.claimed_at = None

    # ---- producer -------------------------------------------------------------------

    def _enqueue(self, task: NewTask) -> bool:
        with self._lock:
            existing = self._rows.get(task.id)
            if existing is not None:
                if existing.task.queue != task.queue:
                    raise IdConflict(
                        f"task id {task.id!r} is already used in queue "
                        f"{existing.task.queue!r}; ids are unique across queues"
                    )
                return False
            now = self._now()
            self._rows[task.id] = _Row(
                Task(
                    id=task.id,
                    queue=task.queue,
                    handler=task.handler,
                    payload=task.payload,
                    headers=task.headers,
                    status=Status.PENDING,
                    attempt_count=0,
                    redrive_count=0,
                    next_attempt_at=now + task.delay,
                    lease_expires_at=None,
                    created_at=now,
                )
            )
            self._seq += 1
            self._order[task.id] = self._seq
            return True

    # ---- worker ---------------------------------------------------------------------

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with self._lock:
            now = self._now()
            due = [
                r
                for r in self._rows.values()
                if r.task.queue == queue and r.due_at is not None and r.due_at <= now
            ]
            due.sort(key=lambda r: (r.due_at, self._order[r.task.id]))
            claims = []
            for row in due[:limit]:
                reclaimed = row.task.status is Status.IN_FLIGHT
                count = row.task.attempt_count
                if reclaimed:
                    assert row.claimed_at is not None
                    row.attempts.append(
                        Attempt(
                            next_attempt_no(row.attempts),
                            row.claimed_at,
                            now,
                            Outcome.LEASE_EXPIRED,
                            ErrorInfo(LEASE_EXPIRED_ERROR, "lease expired before an outcome"),
                        )
                    )
                    count += 1
                token = new_token()
                row.token = token
                row.claimed_at = now
                row.task = replace(
                    row.task,
                    status=Status.IN_FLIGHT,
                    attempt_count=count,
                    next_attempt_at=None,
                    lease_expires_at=now + lease,
                )
                claims.append(Claim(self._snapshot(row), token, now, now + lease, reclaimed))
            return claims

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        with self._lock:
            row = self._fenced(task_id, token)
            expires = self._now() + lease
            row.task = replace(row.task, lease_expires_at=expires)
            return expires

    def _complete(self, task_id: str, token: str) -> None:
        with self._lock:
            row = self._fenced(task_id, token)
            now = self._now()
            self._finish(row, now, Outcome.SUCCESS, None)
            row.finished_at = now
            row.task = replace(
                row.task,
                status=Status.SUCCEEDED,
                attempt_count=row.task.attempt_count + 1,
                next_attempt_at=None,
                lease_expires_at=None,
            )

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        with self._lock:
            row = self._fenced(task_id, token)
            now = self._now()
            self._finish(row, now, Outcome.RETRYABLE_FAILURE, error)
            row.task = replace(
                row.task,
                status=Status.PENDING,
                attempt_count=row.task.attempt_count + 1,
                next_attempt_at=now + delay,
                lease_expires_at=None,
            )

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        with self._lock:
            row = self._fenced(task_id, token)
            now = self._now()
            self._finish(row, now, outcome, error)
            row.dead_at = now
            row.task = replace(
                row.task,
                status=Status.DEAD,
                attempt_count=row.task.attempt_count + 1,
                next_attempt_at=None,
                lease_expires_at=None,
            )

    # ---- reading ----------------------------------------------------------------------

    def _get(self, task_id: str) -> Task:
        with self._lock:
            row = self._rows.get(task_id)
            if row is None:
                raise NotFound(f"no task with id {task_id!r}")
            return self._snapshot(row)

    def _stats(self, queue: str) -> QueueStats:
        with self._lock:
            now = self._now()
            counts = {s: 0 for s in Status}
            due = 0
            for r in self._rows.values():
                if r.task.queue != queue:
                    continue
                counts[r.task.status] += 1
                if r.task.status is Status.PENDING and r.due_at is not None and r.due_at <= now:
                    due += 1
            return QueueStats(
                pending=counts[Status.PENDING],
                due=due,
                in_flight=counts[Status.IN_FLIGHT],
                succeeded=counts[Status.SUCCEEDED],
                dead=counts[Status.DEAD],
            )

    # ---- DLQ -----------------------------------------------------------------------------

    def _dead(self, queue: str) -> Iterable[_Row]:
        return (
            r for r in self._rows.values() if r.task.queue == queue and r.task.status is Status.DEAD
        )

    def _selected(self, queue: str, selector: Selector) -> list[_Row]:
        if isinstance(selector, ByIds):
            wanted = set(selector.ids)
            return [r for r in self._dead(queue) if r.task.id in wanted]
        assert isinstance(selector, DlqFilter)
        return [r for r in self._dead(queue) if selector.matches(self._snapshot(r))]

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        with self._lock:
            after = None if cursor is None else cursors.decode(queue, cursor)
            rows = [
                r
                for r in self._dead(queue)
                if filter is None or filter.matches(self._snapshot(r))
            ]

            def key(r: _Row) -> tuple[int, str]:
                assert r.dead_at is not None
                return (micros_from_utc(r.dead_at), r.task.id)

            rows.sort(key=key)
            if after is not None:
                rows = [r for r in rows if key(r) > (after.dead_at_us, after.task_id)]
            page = rows[:limit]
            next_cursor = None
            if len(rows) > limit:
                last = key(page[-1])
                next_cursor = cursors.encode(queue, cursors.DlqPosition(*last))
            return DlqPage(tuple(self._snapshot(r) for r in page), next_cursor)

    def _redrive(self, queue: str, selector: Selector) -> int:
        with self._lock:
            now = self._now()
            rows = self._selected(queue, selector)
            for r in rows:
                r.dead_at = None
                r.task = replace(
                    r.task,
                    status=Status.PENDING,
                    attempt_count=0,
                    redrive_count=r.task.redrive_count + 1,
                    next_attempt_at=now,
                    lease_expires_at=None,
                )
            return len(rows)

    def _purge(self, queue: str, selector: Selector) -> int:
        with self._lock:
            rows = self._selected(queue, selector)
            for r in rows:
                del self._rows[r.task.id]
                del self._order[r.task.id]
            return len(rows)

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        with self._lock:
            cutoff = self._now() - older_than
            gone = [
                r.task.id
                for r in self._rows.values()
                if r.task.queue == queue
                and r.task.status is Status.SUCCEEDED
                and r.finished_at is not None
                and r.finished_at <= cutoff
            ]
            for task_id in gone:
                del self._rows[task_id]
                del self._order[task_id]
            return len(gone)

    # ---- lifecycle -------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(multi_process=False, clock="the process's UTC clock (injectable)")

    def close(self) -> None:
        """Nothing to release; the data stays for other handles on the same namespace."""
