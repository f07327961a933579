"""The reference side of the stateful machine (:mod:`rdq_compliance.stateful`).

:class:`ReferenceModel` is the in-memory reference store (:class:`rdq_core.memory.MemoryStore`)
with a clock the machine sets: before every call on the model, the machine sets the clock
to the storage time the backend used for the same call, so due-ness, expiry and every
timestamp the model writes agree with the backend's. It adds read-only questions the
machine asks of the model (which tasks a claim at time ``t`` may take, which DEAD tasks a
selector selects, when a task was dead-lettered) and one write the reference store does
not offer: :meth:`ReferenceModel.claim_ids`, which claims exactly the tasks a backend
claimed when the SPEC leaves the choice open (tasks tied on due time), after the machine
has checked that the choice was allowed.

:func:`task_differences` compares a backend's task with the model's, field by field;
timestamps must agree within a tolerance (they are written from the same storage time).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from rdq_core.memory import MemoryStore, _Row
from rdq_core.model import UTC, Attempt, Claim, Selector, Status, Task

#: Where the model's clock starts, before the machine first sets it.
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Due:
    """A task a claim may take at some time, with its place in the claim order."""

    task: Task
    due_at: datetime
    seq: int

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def reclaim(self) -> bool:
        return self.task.status is Status.IN_FLIGHT


class ReferenceModel(MemoryStore):
    """The reference store on a clock the machine sets (:meth:`at`)."""

    def __init__(self) -> None:
        self._time = EPOCH
        super().__init__(clock=self._read_clock)

    def _read_clock(self) -> datetime:
        return self._time

    def at(self, when: datetime) -> ReferenceModel:
        """Set the model's clock (it never goes back: the store keeps it monotonic)."""
        self._time = when
        return self

    # ---- questions --------------------------------------------------------------------------

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._rows)

    def claimable(self, queue: str, when: datetime) -> list[Due]:
        """The tasks a claim on ``queue`` at ``when`` may take, in claim order."""
        with self._lock:
            due = [
                Due(self._snapshot(r), r.due_at, self._order[r.task.id])
                for r in self._rows.values()
                if r.task.queue == queue and r.due_at is not None and r.due_at <= when
            ]
        due.sort(key=lambda d: (d.due_at, d.seq))
        return due

    def due_count(self, queue: str, when: datetime) -> int:
        """How many PENDING tasks of ``queue`` are due at ``when`` (``stats().due``)."""
        with self._lock:
            return sum(
                1
                for r in self._rows.values()
                if r.task.queue == queue
                and r.task.status is Status.PENDING
                and r.due_at is not None
                and r.due_at <= when
            )

    def selected(self, queue: str, selector: Selector) -> list[str]:
        """The ids of the DEAD tasks ``selector`` selects in ``queue``."""
        with self._lock:
            return [r.task.id for r in self._selected(queue, selector)]

    def dead_at(self, task_id: str) -> datetime | None:
        with self._lock:
            row = self._rows.get(task_id)
            return None if row is None else row.dead_at

    # ---- the one write the reference store does not offer --------------------------------------

    def claim_ids(self, queue: str, ids: Iterable[str], lease: timedelta) -> list[Claim]:
        """Claim exactly ``ids`` (all due in ``queue`` at the clock), as one claim would.

        Used when a backend's claim chose among tasks tied on due time, or when several
        claims ran at once; the machine has checked the choice before calling this.
        """
        wanted = set(ids)
        with self._lock:
            hidden: dict[str, _Row] = {
                k: r for k, r in self._rows.items() if k not in wanted or r.task.queue != queue
            }
            for k in hidden:
                del self._rows[k]
            try:
                claims = self._claim_due(queue, max(1, len(wanted)), lease)
            finally:
                self._rows.update(hidden)
        got = {c.task_id for c in claims}
        if got != wanted:  # pragma: no cover - the machine checks due-ness first
            raise AssertionError(f"model could not claim {sorted(wanted)}: took {sorted(got)}")
        return claims


# ---- comparing tasks ---------------------------------------------------------------------------


def _time_diff(
    name: str, got: datetime | None, want: datetime | None, tolerance: timedelta
) -> str | None:
    if got is None and want is None:
        return None
    if got is None or want is None:
        return f"{name} backend={_t(got)} reference={_t(want)}"
    if abs(got - want) > tolerance:
        return f"{name} backend={_t(got)} reference={_t(want)} (off by {got - want})"
    return None


def _t(value: datetime | None) -> str:
    return "None" if value is None else value.isoformat(timespec="microseconds")


def numbering_differs(got: Task, want: Task) -> bool:
    """The same attempts (outcomes, in order) numbered differently: invariant H's business,
    not a missing or extra attempt."""
    if [a.outcome for a in got.attempts] != [a.outcome for a in want.attempts]:
        return False
    return [a.attempt_no for a in got.attempts] != [a.attempt_no for a in want.attempts]


def task_differences(got: Task, want: Task, tolerance: timedelta) -> list[str]:
    """How the backend's ``got`` differs from the reference's ``want`` (empty: equal)."""
    out: list[str] = []
    for name in ("id", "queue", "handler", "payload", "status", "attempt_count", "redrive_count"):
        g, w = getattr(got, name), getattr(want, name)
        if g != w:
            out.append(f"{name} backend={_show(g)} reference={_show(w)}")
    if dict(got.headers) != dict(want.headers):
        out.append(f"headers backend={dict(got.headers)!r} reference={dict(want.headers)!r}")
    for name in ("created_at", "next_attempt_at", "lease_expires_at"):
        problem = _time_diff(name, getattr(got, name), getattr(want, name), tolerance)
        if problem:
            out.append(problem)
    g_att, w_att = got.attempts, want.attempts
    if [_attempt_key(a) for a in g_att] != [_attempt_key(a) for a in w_att]:
        out.append(f"attempts backend={_attempts(g_att)} reference={_attempts(w_att)}")
    else:
        for g, w in zip(g_att, w_att, strict=True):
            for name in ("started_at", "finished_at"):
                problem = _time_diff(
                    f"attempt {g.attempt_no} {name}", getattr(g, name), getattr(w, name), tolerance
                )
                if problem:
                    out.append(problem)
    return out


def _attempt_key(a: Attempt) -> tuple[object, ...]:
    return (a.attempt_no, a.outcome, a.error)


def _attempts(attempts: tuple[Attempt, ...]) -> str:
    parts = []
    for a in attempts:
        err = "" if a.error is None else f" {a.error.type}"
        parts.append(f"#{a.attempt_no} {a.outcome.value}{err}")
    return "[" + ", ".join(parts) + "]"


def _show(value: object) -> str:
    if isinstance(value, Status):
        return value.value
    return repr(value)
