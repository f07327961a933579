"""The reference side of the stateful machine (:mod:`rdq_compliance.stateful`).

:class:`ReferenceModel` is the in-memory reference store (:class:`rdq_core.memory.MemoryStore`)
with a clock the machine sets: before every call on the model, the machine sets the clock
to the storage time the backend used for the same call, so due-ness, expiry and every
timestamp the model writes agree with the backend's. The questions the machine asks of
the model (which tasks a claim at time ``t`` may take, which DEAD tasks a selector
selects, when a task was dead-lettered) and the one write the SPI lacks (claim exactly
the tasks a backend claimed when the contract leaves the choice open, after the machine has
checked that the choice was allowed) are the reference store's own public back door
(:meth:`~rdq_core.memory.MemoryStore.claimable`, ...); the model adds only
:meth:`ReferenceModel.due_count`, which follows from them.

:func:`task_differences` compares a backend's task with the model's, field by field;
timestamps must agree within a tolerance (they are written from the same storage time).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rdq_core.memory import MemoryStore
from rdq_core.model import UTC, Attempt, Status, Task

#: Where the model's clock starts, before the machine first sets it.
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


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

    def due_count(self, queue: str, when: datetime) -> int:
        """How many PENDING tasks of ``queue`` are due at ``when`` (``stats().due``)."""
        return sum(1 for d in self.claimable(queue, when) if not d.reclaim)


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
