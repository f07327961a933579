"""The in-memory reference store: the contract's model and SPI in executable form.

Thread-safe (one lock around every operation, so each is atomic), in-process only.
Its clock is injectable so a model can be driven without sleeping. Every other
backend is compared with this one.

Beside the SPI, :class:`MemoryStore` answers a few questions a model of the queue asks
of the reference (the "back door" of a reference model; each answer is a snapshot,
never a live view): :meth:`~MemoryStore.task_ids`, :meth:`~MemoryStore.claimable`,
:meth:`~MemoryStore.dead_at` and :meth:`~MemoryStore.selected_ids`; and it offers one
write the SPI does not, :meth:`~MemoryStore.claim_ids`: claim exactly these tasks, when
the contract leaves the choice among tied due tasks open.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from rdq_core import cursor as cursors
from rdq_core import validation
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


@dataclass(frozen=True)
class DueTask:
    """A task a claim may take (:meth:`MemoryStore.claimable`), with its place in the
    claim order: by ``due_at``, then by ``seq``."""

    #: The task as stored, with its whole history (a snapshot).
    task: Task
    #: When it became claimable: ``next_attempt_at`` if PENDING, ``lease_expires_at``
    #: (the expired lease) if IN_FLIGHT.
    due_at: datetime
    #: Its enqueue order in the store: 1 for the first task ever enqueued, and so on.
    seq: int

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def reclaim(self) -> bool:
        """A claim takes it over from an expired lease (it is IN_FLIGHT)."""
        return self.task.status is Status.IN_FLIGHT


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

    def _due_rows(self, queue: str, now: datetime) -> list[_Row]:
        """The rows a claim on ``queue`` at ``now`` may take, in claim order."""
        due = [
            r
            for r in self._rows.values()
            if r.task.queue == queue and r.due_at is not None and r.due_at <= now
        ]
        due.sort(key=lambda r: (r.due_at, self._order[r.task.id]))
        return due

    def _claim_row(self, row: _Row, now: datetime, lease: timedelta) -> Claim:
        """Claim one claimable row at ``now``: lease, fresh token, and for a reclaim the
        LEASE_EXPIRED attempt (numbered by invariant H)."""
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
        return Claim(self._snapshot(row), token, now, now + lease, reclaimed)

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with self._lock:
            now = self._now()
            return [self._claim_row(row, now, lease) for row in self._due_rows(queue, now)[:limit]]

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

    # ---- the reference's back door (not SPI) ------------------------------------------------

    def task_ids(self) -> list[str]:
        """The id of every stored task, in enqueue order (a purged id enqueued again
        comes last)."""
        with self._lock:
            return list(self._rows)

    def claimable(self, queue: str, at: datetime) -> list[DueTask]:
        """The tasks a claim on ``queue`` at storage time ``at`` may take, in claim order:
        PENDING tasks due by ``at`` and IN_FLIGHT ones whose lease expired by ``at``.

        ``at`` is taken as given (the clock is not read); the PENDING ones among them are
        what ``stats(queue).due`` counts at ``at``.
        """
        queue = validation.queue_name(queue)
        with self._lock:
            out = []
            for r in self._due_rows(queue, at):
                assert r.due_at is not None
                out.append(DueTask(self._snapshot(r), r.due_at, self._order[r.task.id]))
            return out

    def dead_at(self, task_id: str) -> datetime | None:
        """When the task was dead-lettered (the DLQ's order), or ``None`` if it is not
        DEAD or there is no such task."""
        with self._lock:
            row = self._rows.get(task_id)
            return None if row is None else row.dead_at

    def selected_ids(self, queue: str, selector: Selector) -> list[str]:
        """The ids of the DEAD tasks of ``queue`` that ``selector`` selects, in enqueue
        order: what ``redrive``/``purge`` with it would act on now (an empty selector
        selects nothing)."""
        queue, selector = validation.queue_name(queue), validation.selector(selector)
        with self._lock:
            return [r.task.id for r in self._selected(queue, selector)]

    def claim_ids(self, queue: str, ids: Iterable[str], lease: timedelta) -> list[Claim]:
        """Claim exactly the tasks ``ids`` of ``queue`` now, in one atomic step, as
        ``claim_due`` would if they were the only claimable tasks: the claims come in claim
        order, stamped alike (one ``claimed_at``, a fresh token each, a LEASE_EXPIRED
        attempt for each reclaim).

        Not part of the SPI: for a model that must follow a backend's choice where the
        contract leaves it open (tasks tied on due time). Every id must be claimable now
        (:meth:`claimable`); if one is not, or an id repeats, it raises
        ``InvalidArgument`` and changes nothing.
        """
        queue, lease = validation.queue_name(queue), validation.lease(lease)
        wanted = [validation.task_id(i) for i in ids]
        wanted_set = set(wanted)
        if len(wanted_set) != len(wanted):
            raise InvalidArgument(f"claim_ids: ids repeat: {wanted}")
        with self._lock:
            now = self._now()
            rows = [r for r in self._due_rows(queue, now) if r.task.id in wanted_set]
            if len(rows) != len(wanted):
                taken = {r.task.id for r in rows}
                not_claimable = [i for i in wanted if i not in taken]
                raise InvalidArgument(
                    f"claim_ids: {not_claimable} not claimable in {queue!r} at {now.isoformat()}"
                )
            return [self._claim_row(row, now, lease) for row in rows]

    # ---- lifecycle -------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(
            multi_process=False,
            durable=False,
            durability="in-process memory: nothing outlives the process",
            clock="the process's UTC clock (injectable)",
        )

    def close(self) -> None:
        """Nothing to release; the data stays for other handles on the same namespace."""
