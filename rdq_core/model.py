"""The data model of the contract: tasks, attempts, claims, stats, selectors, DLQ pages.

All timestamps are timezone-aware UTC ``datetime`` values with microsecond
precision, read from the storage's clock. Every value here is immutable.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import MappingProxyType


class Status(str, enum.Enum):
    """The four states of a task; nothing else exists."""

    PENDING = "PENDING"
    IN_FLIGHT = "IN_FLIGHT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"

    @property
    def terminal(self) -> bool:
        return self in (Status.SUCCEEDED, Status.DEAD)


class Outcome(str, enum.Enum):
    """How one attempt ended."""

    SUCCESS = "SUCCESS"
    RETRYABLE_FAILURE = "RETRYABLE_FAILURE"
    PERMANENT_FAILURE = "PERMANENT_FAILURE"
    LEASE_EXPIRED = "LEASE_EXPIRED"


#: Error type recorded on the synthetic attempt written when a lease expires.
LEASE_EXPIRED_ERROR = "rdq.LeaseExpired"
#: Error type recorded when a worker dead-letters a task that already spent its budget.
ATTEMPTS_EXHAUSTED_ERROR = "rdq.AttemptsExhausted"


@dataclass(frozen=True)
class ErrorInfo:
    """Why an attempt failed: an exception type name, its message, optional detail."""

    type: str
    message: str
    detail: str | None = None


@dataclass(frozen=True)
class Attempt:
    """One execution attempt; kept for the whole life of the task (invariant H)."""

    attempt_no: int
    started_at: datetime
    finished_at: datetime
    outcome: Outcome
    error: ErrorInfo | None = None


def _frozen_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(headers))


@dataclass(frozen=True)
class NewTask:
    """What a producer enqueues.

    ``delay`` is added to the storage's clock to give the first due time; it may be
    negative (a back-dated task, due already) but never makes the task claimable
    earlier than ``now + delay`` by the storage's clock.
    """

    id: str
    queue: str
    handler: str
    payload: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        if isinstance(self.headers, Mapping):
            object.__setattr__(self, "headers", _frozen_headers(self.headers))


@dataclass(frozen=True)
class Task:
    """A task as stored, with its whole attempt history, oldest first."""

    id: str
    queue: str
    handler: str
    payload: bytes
    headers: Mapping[str, str]
    status: Status
    attempt_count: int
    redrive_count: int
    next_attempt_at: datetime | None
    lease_expires_at: datetime | None
    created_at: datetime
    attempts: tuple[Attempt, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", _frozen_headers(self.headers))
        object.__setattr__(self, "attempts", tuple(self.attempts))

    @property
    def next_attempt_no(self) -> int:
        """The number the next attempt gets: ``max(attempt_no) + 1``, or 1 (invariant H)."""
        return next_attempt_no(self.attempts)

    @property
    def last_error(self) -> ErrorInfo | None:
        return self.attempts[-1].error if self.attempts else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Task):
            return NotImplemented
        return _task_key(self) == _task_key(other)

    def __hash__(self) -> int:
        return hash((self.id, self.queue, self.status, self.attempt_count))


def _task_key(t: Task) -> tuple[object, ...]:
    return (
        t.id,
        t.queue,
        t.handler,
        t.payload,
        dict(t.headers),
        t.status,
        t.attempt_count,
        t.redrive_count,
        t.next_attempt_at,
        t.lease_expires_at,
        t.created_at,
        t.attempts,
    )


def next_attempt_no(attempts: tuple[Attempt, ...] | list[Attempt]) -> int:
    """Invariant H: the next attempt number is derived from persisted history."""
    return max((a.attempt_no for a in attempts), default=0) + 1


@dataclass(frozen=True)
class Claim:
    """A claimed task and the token that fences every report about it.

    ``claimed_at`` and ``lease_expires_at`` are the storage's clock at the claim.
    ``reclaimed`` is true when the claim took an expired lease from another claim
    (a LEASE_EXPIRED attempt was recorded in the same atomic step).
    """

    task: Task
    token: str
    claimed_at: datetime
    lease_expires_at: datetime
    reclaimed: bool = False

    @property
    def task_id(self) -> str:
        return self.task.id


@dataclass(frozen=True)
class QueueStats:
    """Counts of a queue's tasks by status; ``due`` counts PENDING tasks already due."""

    pending: int = 0
    due: int = 0
    in_flight: int = 0
    succeeded: int = 0
    dead: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.in_flight + self.succeeded + self.dead


@dataclass(frozen=True)
class DlqFilter:
    """Selects DEAD tasks of a queue.

    Every given field must match. A filter with no field set selects **nothing**;
    to select every dead task of the queue say so with ``everything=True``.
    ``error_type`` matches the error type of the task's last attempt.
    """

    handler: str | None = None
    error_type: str | None = None
    everything: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.everything and self.handler is None and self.error_type is None

    def matches(self, task: Task) -> bool:
        if self.is_empty:
            return False
        if self.handler is not None and task.handler != self.handler:
            return False
        if self.error_type is not None:
            last = task.last_error
            if last is None or last.type != self.error_type:
                return False
        return True


@dataclass(frozen=True)
class ByIds:
    """Selects the DEAD tasks of a queue with these ids; an empty list selects nothing."""

    ids: tuple[str, ...]

    def __init__(self, ids: object) -> None:
        if isinstance(ids, (str, bytes)):
            raise TypeError("ByIds takes a list of ids, not a single string")
        object.__setattr__(self, "ids", tuple(ids))  # type: ignore[call-overload]


Selector = ByIds | DlqFilter


@dataclass(frozen=True)
class DlqPage:
    """One page of a queue's DLQ, oldest dead-letter first.

    ``next_cursor`` is ``None`` on the last page. Paging with a cursor never repeats
    nor skips a task that stayed DEAD, whatever is dead-lettered meanwhile.
    """

    tasks: tuple[Task, ...]
    next_cursor: str | None


#: The lease models a backend may declare (:attr:`Capabilities.lease_model`).
LEASE_MODELS: Mapping[str, str] = MappingProxyType(
    {
        "per_claim": "the lease asked for at claim and at each heartbeat",
        "reclaimer_threshold": (
            "a claim may be taken once its last heartbeat is older than the reclaiming "
            "worker's threshold, a deployment setting of the library; nothing is kept "
            "per claim"
        ),
        "fixed": "one lease for every claim, set by the library, whatever is asked",
    }
)


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares; the conformance tests ask these and skip with a reason.

    - ``multi_process``: several OS processes may share the storage (false for the
      in-process reference store);
    - ``max_payload_bytes``: the largest payload accepted, ``None`` for no limit
      below the kit's own :data:`rdq_core.validation.MAX_PAYLOAD_BYTES`;
    - ``notify``: the backend can wake idle workers when work becomes due;
    - ``durable``: **acknowledged writes survive a kill and restart of the server
      process** (SIGKILL, then a start on the same data): every call that returned —
      an enqueue, a claim, an outcome, a redrive — is still in effect afterwards. Only
      the server *process* is meant, not the machine: data still in the operating
      system's page cache counts as kept. An embedded store counts the
      process that holds it. The chaos nemesis kills and restarts a server only when its
      backend declares this (else the loss would be by design, not a bug), and the
      durability test holds a backend that declares it to it;
    - ``durability``: how ``durable`` was decided, for humans (e.g. the server settings
      read), shown where a fault or test is skipped for want of it;
    - ``clock``: a description of the storage clock (e.g. ``"postgres now()"``);
    - ``extra``: names of further features a backend supports, for its own tests
      (``Capabilities.has(name)``); the kit's own tests ask none of them;
    - ``lease_model``: how the storage decides how long a claim holds, one of
      :data:`LEASE_MODELS`. ``"per_claim"`` is the contract's: the lease asked for at claim
      and at each heartbeat. ``"reclaimer_threshold"``: a claim may be taken once its
      last heartbeat is older than the threshold the *reclaiming* worker uses, a
      deployment setting of the library (a heartbeat timeout, a stalled-job threshold)
      that the backend fixes for all its workers, as the library's docs ask.
      ``"fixed"``: the library gives every claim one lease of its own, whatever is
      asked. In both, ``fixed_lease`` is that lease: a claim's expiry is its last
      heartbeat (or the claim) plus ``fixed_lease``, by the storage's clock. The
      conformance tests that hold a backend to the per-claim lease name rule
      ``lease-per-claim``: on the other models they fail by design (a ledger entry,
      with the library's docs), apart from rule ``lease-respected``, which every model
      keeps (a claim live by the model declared is never taken);
    - ``fixed_lease``: the lease of the ``"reclaimer_threshold"`` and ``"fixed"``
      models (required there, ``None`` for ``"per_claim"``). The chaos runner runs a
      scenario whose lease is shorter with this one, the lease-relative faults scaled
      with it.
    """

    multi_process: bool = True
    max_payload_bytes: int | None = None
    notify: bool = False
    clock: str = "storage"
    extra: frozenset[str] = frozenset()
    # (added last, so that positional construction by existing backends keeps working)
    durable: bool = False
    durability: str = "not declared"
    lease_model: str = "per_claim"
    fixed_lease: timedelta | None = None

    def __post_init__(self) -> None:
        if self.lease_model not in LEASE_MODELS:
            raise ValueError(
                f"Capabilities.lease_model {self.lease_model!r} is not a lease model; "
                f"known: {', '.join(sorted(LEASE_MODELS))}"
            )
        fixed = self.lease_model != "per_claim"
        lease = self.fixed_lease
        if fixed and not (isinstance(lease, timedelta) and lease > timedelta(0)):
            raise ValueError(
                f"Capabilities: lease_model {self.lease_model!r} needs fixed_lease, a "
                f"positive timedelta (got {lease!r})"
            )
        if not fixed and lease is not None:
            raise ValueError(
                f"Capabilities: fixed_lease is not for lease_model 'per_claim' "
                f"(got fixed_lease {lease!r})"
            )

    def lease_for(self, asked: timedelta) -> timedelta:
        """The lease a claim or heartbeat that asked for ``asked`` gets, by the model."""
        if self.fixed_lease is not None:
            return self.fixed_lease
        return asked

    def has(self, name: str) -> bool:
        value = getattr(self, name, None)
        if isinstance(value, bool):
            return value
        return name in self.extra


UTC = timezone.utc


# ---- trusted constructors: values a storage decodes from what it wrote itself ----------------
#
# The dataclass constructors above copy and normalise what they are given (headers into a
# read-only copy, attempts into a tuple), one ``object.__setattr__`` per field of a frozen
# dataclass: the price of accepting anything a caller passes. A backend decoding a row it
# wrote itself already holds exactly the values a constructed instance would: the
# functions below build the same instance without that work. They are for the decode paths
# of storages only (rows, records and replies read back); everything a caller passes in
# (``NewTask``, the SPI's arguments) is validated by :mod:`rdq_core.validation` as before.
# The instances are the dataclasses' own — equal, hashed, compared, printed and frozen the
# same; ``tests/core/test_model_trusted.py`` holds them to it.

_new = object.__new__
_set = object.__setattr__
#: Shared by every trusted task without headers (read-only, so sharing is unobservable
#: but for ``is``).
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def trusted_task(
    id: str,
    queue: str,
    handler: str,
    payload: bytes,
    headers: dict[str, str],
    status: Status,
    attempt_count: int,
    redrive_count: int,
    next_attempt_at: datetime | None,
    lease_expires_at: datetime | None,
    created_at: datetime,
    attempts: tuple[Attempt, ...] = (),
) -> Task:
    """The :class:`Task` of these fields, built without ``__post_init__``'s copies.

    The caller vouches that every field already has the type a constructed task holds:
    ``payload`` bytes, ``status`` a :class:`Status`, times aware UTC datetimes,
    ``attempts`` a tuple of :class:`Attempt`, and ``headers`` a ``dict`` it hands over
    (wrapped read-only, not copied: the caller must not keep it).
    """
    task = _new(Task)
    _set(
        task,
        "__dict__",
        {
            "id": id,
            "queue": queue,
            "handler": handler,
            "payload": payload,
            "headers": MappingProxyType(headers) if headers else _NO_HEADERS,
            "status": status,
            "attempt_count": attempt_count,
            "redrive_count": redrive_count,
            "next_attempt_at": next_attempt_at,
            "lease_expires_at": lease_expires_at,
            "created_at": created_at,
            "attempts": attempts,
        },
    )
    return task


def trusted_attempt(
    attempt_no: int,
    started_at: datetime,
    finished_at: datetime,
    outcome: Outcome,
    error: ErrorInfo | None = None,
) -> Attempt:
    """The :class:`Attempt` of these fields (already of their types: see
    :func:`trusted_task`), without a frozen dataclass's per-field ``__setattr__``."""
    attempt = _new(Attempt)
    _set(
        attempt,
        "__dict__",
        {
            "attempt_no": attempt_no,
            "started_at": started_at,
            "finished_at": finished_at,
            "outcome": outcome,
            "error": error,
        },
    )
    return attempt


def trusted_error(type: str, message: str, detail: str | None = None) -> ErrorInfo:
    """The :class:`ErrorInfo` of these strings (see :func:`trusted_attempt`)."""
    error = _new(ErrorInfo)
    _set(error, "__dict__", {"type": type, "message": message, "detail": detail})
    return error


def trusted_claim(
    task: Task,
    token: str,
    claimed_at: datetime,
    lease_expires_at: datetime,
    reclaimed: bool = False,
) -> Claim:
    """The :class:`Claim` of these fields (already of their types: see
    :func:`trusted_task`; ``reclaimed`` a ``bool``)."""
    claim = _new(Claim)
    _set(
        claim,
        "__dict__",
        {
            "task": task,
            "token": token,
            "claimed_at": claimed_at,
            "lease_expires_at": lease_expires_at,
            "reclaimed": reclaimed,
        },
    )
    return claim


def utc_from_micros(us: int) -> datetime:
    """A UTC datetime from integer microseconds since the epoch (exact, no float)."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def micros_from_utc(dt: datetime) -> int:
    """Integer microseconds since the epoch of an aware datetime (exact)."""
    if dt.tzinfo is None:
        raise ValueError("naive datetime: rdq uses timezone-aware UTC datetimes")
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def micros_from_delta(td: timedelta) -> int:
    """Integer microseconds of a timedelta (exact)."""
    return (td.days * 86_400 + td.seconds) * 1_000_000 + td.microseconds
