"""The storage SPI (``contract.md#3-the-spi``), as an abstract base class.

A backend subclasses :class:`Storage` and implements the ``_``-prefixed hooks.
The public methods validate every argument first (so bad input never reaches a
driver) and then call the hook; a hook receives only valid, normalised values.

Conventions every hook keeps:

- time is the storage's clock (``_now``), never the caller's;
- ``claim_due`` is one atomic step: it picks due PENDING tasks and IN_FLIGHT tasks
  whose lease expired, ordered by due time (a PENDING task's ``next_attempt_at``, an
  expired claim's ``lease_expires_at``), at most ``limit`` of them, stamps the lease
  and a fresh token, and for a reclaim appends a LEASE_EXPIRED attempt numbered
  ``max(attempt_no) + 1`` and increments ``attempt_count``;
- ``complete``/``reschedule``/``dead_letter``/``extend_lease`` require status
  IN_FLIGHT and the current token, else raise ``StaleClaim`` and change nothing
  (an unknown task id is also ``StaleClaim``: no claim of it is current);
- a cursor that is not a non-empty string from ``DlqPage.next_cursor`` is
  ``StaleCursor``, like a malformed or foreign one;
- the token, not the clock, fences: a worker whose lease expired may still report
  or extend while nobody has reclaimed the task;
- the attempt such a call appends starts at the claim's ``claimed_at`` and ends now;
  the LEASE_EXPIRED attempt a reclaim appends ends at the reclaim;
- selectors only ever touch DEAD tasks of the given queue; an empty one selects
  nothing; ids that are not DEAD in that queue are ignored (the count says how many
  were acted on);
- driver errors never escape: a lost connection is ``BackendUnavailable``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime, timedelta
from types import TracebackType

from rdq_core import validation as v
from rdq_core.model import (
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
    Task,
)


class Storage(ABC):
    """One connection (or pool) to a backend's storage, in one namespace.

    Instances are safe to share between threads of one process. Open one per
    process; a process inherits none from its parent.
    """

    # ---- producer -------------------------------------------------------------

    def enqueue(self, task: NewTask) -> bool:
        """Store a new PENDING task, due at ``now + task.delay``.

        Returns ``True`` if stored, ``False`` if a task with that id already exists in
        the queue (which is then left exactly as it was, whatever its state).
        Raises ``IdConflict`` if the id is used in another queue.
        """
        limit = self.capabilities().max_payload_bytes
        return self._enqueue(v.new_task(task, payload_limit=limit))

    # ---- worker ----------------------------------------------------------------

    def claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        """Atomically claim up to ``limit`` due tasks of ``queue`` for ``lease``."""
        return self._claim_due(v.queue_name(queue), v.limit(limit), v.lease(lease))

    def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        """Heartbeat: set ``lease_expires_at = now + lease``; returns the new expiry."""
        return self._extend_lease(v.task_id(task_id), v.token(token), v.lease(lease))

    def complete(self, task_id: str, token: str) -> None:
        """Record a SUCCESS attempt and make the task SUCCEEDED."""
        self._complete(v.task_id(task_id), v.token(token))

    def reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None = None
    ) -> None:
        """Record a RETRYABLE_FAILURE attempt; PENDING again, due at ``now + delay``."""
        self._reschedule(
            v.task_id(task_id),
            v.token(token),
            v.delay("delay", delay, allow_negative=False),
            v.error_info(error),
        )

    def dead_letter(
        self,
        task_id: str,
        token: str,
        error: ErrorInfo | None = None,
        outcome: Outcome = Outcome.PERMANENT_FAILURE,
    ) -> None:
        """Record the failed attempt (``outcome``) and make the task DEAD."""
        self._dead_letter(
            v.task_id(task_id), v.token(token), v.error_info(error), v.failure_outcome(outcome)
        )

    # ---- reading ---------------------------------------------------------------

    def get(self, task_id: str) -> Task:
        """The task with its whole history; ``NotFound`` if there is none."""
        return self._get(v.task_id(task_id))

    def stats(self, queue: str) -> QueueStats:
        """The queue's tasks counted by status (PENDING, of them due now, IN_FLIGHT,
        SUCCEEDED, DEAD), by the storage clock."""
        return self._stats(v.queue_name(queue))

    def now(self) -> datetime:
        """The storage's clock (what due-ness and leases are measured against)."""
        return self._now()

    # ---- DLQ and housekeeping ---------------------------------------------------

    def dlq_list(
        self,
        queue: str,
        filter: DlqFilter | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> DlqPage:
        """A page of DEAD tasks, oldest dead-letter first; ``filter=None`` lists all.

        A malformed cursor, or one from another queue, raises ``StaleCursor``.
        """
        return self._dlq_list(
            v.queue_name(queue),
            None if filter is None else v.dlq_filter(filter),
            None if cursor is None else _cursor_str(cursor),
            v.page_size(limit),
        )

    def redrive(self, queue: str, selector: Selector | list[str] | tuple[str, ...]) -> int:
        """Selected DEAD tasks become PENDING and due now, ``attempt_count = 0``,
        ``redrive_count + 1``, history kept. Returns how many were redriven."""
        sel = v.selector(selector)
        if _selects_nothing(sel):
            v.queue_name(queue)
            return 0
        return self._redrive(v.queue_name(queue), sel)

    def purge(self, queue: str, selector: Selector | list[str] | tuple[str, ...]) -> int:
        """Delete selected DEAD tasks with their history. Returns how many."""
        sel = v.selector(selector)
        if _selects_nothing(sel):
            v.queue_name(queue)
            return 0
        return self._purge(v.queue_name(queue), sel)

    def purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        """Delete SUCCEEDED tasks that finished at least ``older_than`` ago."""
        return self._purge_succeeded(v.queue_name(queue), v.older_than(older_than))

    # ---- lifecycle ---------------------------------------------------------------

    @abstractmethod
    def capabilities(self) -> Capabilities:
        """What this backend supports (asked by the conformance tests)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; idempotent."""

    def __enter__(self) -> Storage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- hooks a backend implements -----------------------------------------------

    @abstractmethod
    def _enqueue(self, task: NewTask) -> bool: ...

    @abstractmethod
    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]: ...

    @abstractmethod
    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime: ...

    @abstractmethod
    def _complete(self, task_id: str, token: str) -> None: ...

    @abstractmethod
    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None: ...

    @abstractmethod
    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None: ...

    @abstractmethod
    def _get(self, task_id: str) -> Task: ...

    @abstractmethod
    def _stats(self, queue: str) -> QueueStats: ...

    @abstractmethod
    def _now(self) -> datetime: ...

    @abstractmethod
    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage: ...

    @abstractmethod
    def _redrive(self, queue: str, selector: Selector) -> int: ...

    @abstractmethod
    def _purge(self, queue: str, selector: Selector) -> int: ...

    @abstractmethod
    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int: ...


def _selects_nothing(sel: Selector) -> bool:
    if isinstance(sel, ByIds):
        return not sel.ids
    return sel.is_empty


def _cursor_str(cursor: object) -> str:
    from rdq_core.errors import StaleCursor

    if not isinstance(cursor, str) or not cursor:
        raise StaleCursor(
            f"cursor must be a non-empty str from DlqPage.next_cursor, got {cursor!r}"
        )
    return cursor
