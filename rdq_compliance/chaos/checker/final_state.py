"""The backend's final state after a chaos run, and how it is read from storage.

This is the checker's only I/O: :func:`read_final_state` reads every enqueued task back
with ``get()`` and pages through the whole DLQ; every rule is a pure function of the
history and of the :class:`FinalState` it returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rdq_core.errors import BackendUnavailable, NotFound
from rdq_core.model import Task
from rdq_core.spi import Storage

__all__ = ["FinalState", "read_final_state"]

#: How often each storage call of the reading is tried when the storage is unavailable
#: (the server may just have been restarted by the nemesis), backing off up to 1 s.
ATTEMPTS = 20

_T = TypeVar("_T")


@dataclass(frozen=True)
class FinalState:
    """The backend's state read back after the run's drain.

    - ``tasks``: every task that still exists, by id (``get()`` after the drain);
    - ``dlq``: the whole DLQ listing of the queue, every page, in order;
    - ``enqueued``: the ids the harness enqueued (also read from enqueue events);
    - ``drained``: the drain finished (no PENDING/IN_FLIGHT task left) before its deadline;
    - ``fixed_lease_us``: the lease (µs) the backend's lease model gives every claim and
      heartbeat (``Capabilities.fixed_lease``), ``None`` for the per-claim model: how the
      checker reads a heartbeat's storage time from the expiry it returned, and a claim's
      lease where the claim's own expiry does not start at the claim (a lease counted
      from the worker's last heartbeat).

    ``tasks`` may also be given as a sequence of tasks, ``enqueued`` as any iterable.
    """

    tasks: dict[str, Task]
    dlq: list[Task]
    enqueued: frozenset[str] = frozenset()
    drained: bool = True
    fixed_lease_us: int | None = None

    def __post_init__(self) -> None:
        # Accept any collection: tasks as a mapping by id or a sequence of tasks.
        tasks = self.tasks
        if not isinstance(tasks, dict):
            tasks = (
                dict(tasks.items())
                if isinstance(tasks, Mapping)
                else {t.id: t for t in tasks}
            )
            object.__setattr__(self, "tasks", tasks)
        if not isinstance(self.dlq, list):
            object.__setattr__(self, "dlq", list(self.dlq))
        if not isinstance(self.enqueued, frozenset):
            object.__setattr__(self, "enqueued", frozenset(self.enqueued))

    @property
    def missing(self) -> list[str]:
        """The enqueued ids ``get()`` no longer finds, sorted."""
        return sorted(i for i in self.enqueued if i not in self.tasks)


def _retrying(call: Callable[[], _T]) -> _T:
    for i in range(ATTEMPTS):
        try:
            return call()
        except BackendUnavailable:
            if i == ATTEMPTS - 1:
                raise
            time.sleep(min(0.05 * 2**i, 1.0))
    raise AssertionError("unreachable")  # pragma: no cover


def _whole_dlq(storage: Storage, queue: str, page: int) -> list[Task]:
    dlq: list[Task] = []
    cursor: str | None = None
    while True:
        got = storage.dlq_list(queue, None, cursor, page)
        dlq.extend(got.tasks)
        cursor = got.next_cursor
        if cursor is None:
            return dlq


def read_final_state(
    storage: Storage,
    queue: str,
    ids: Iterable[str],
    *,
    drained: bool,
    page: int = 500,
    fixed_lease_us: int | None = None,
) -> FinalState:
    """Read the final state of ``ids`` (``get()`` each, in sorted order) and the whole
    DLQ of ``queue`` (``page`` tasks a page). A call that finds the storage unavailable
    (``BackendUnavailable``) is tried again, :data:`ATTEMPTS` times in all; the DLQ is
    then listed again from its first page."""
    enqueued = frozenset(ids)
    tasks: dict[str, Task] = {}
    for task_id in sorted(enqueued):
        try:
            tasks[task_id] = _retrying(lambda i=task_id: storage.get(i))
        except NotFound:
            pass
    dlq = _retrying(lambda: _whole_dlq(storage, queue, page))
    return FinalState(
        tasks=tasks, dlq=dlq, enqueued=enqueued, drained=drained, fixed_lease_us=fixed_lease_us
    )
