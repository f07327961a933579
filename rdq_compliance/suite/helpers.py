"""Small helpers shared by the conformance tests.

Waiting is always measured on the storage's clock: a test that needs a lease to
expire polls ``storage.now()`` until it is past the expiry, so a slow machine makes
the test slower, never wrong.
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from datetime import datetime, timedelta

from rdq_compliance.rules import message
from rdq_core.errors import NotFound, StaleClaim
from rdq_core.model import Claim, NewTask, Task
from rdq_core.spi import Storage

#: A lease short enough to let expire in a test, long enough to hold across a few calls.
SHORT_LEASE = timedelta(milliseconds=400)
#: A lease no test outlives.
LONG_LEASE = timedelta(minutes=10)

_ids = itertools.count(1)


def task_id(prefix: str = "t") -> str:
    """A fresh id, unique within this process run."""
    return f"{prefix}-{os.getpid()}-{next(_ids)}"


def new_task(
    queue: str = "q",
    id: str | None = None,
    handler: str = "h",
    payload: bytes = b"",
    headers: dict[str, str] | None = None,
    delay: timedelta = timedelta(0),
) -> NewTask:
    return NewTask(
        id=id or task_id(),
        queue=queue,
        handler=handler,
        payload=payload,
        headers=headers or {},
        delay=delay,
    )


#: The tasks each storage handle enqueued through :func:`enqueue`: queue -> ids, so a
#: failure can say what became of them.
_ENQUEUED: weakref.WeakKeyDictionary[Storage, dict[str, list[str]]] = (
    weakref.WeakKeyDictionary()
)


def enqueue(storage: Storage, queue: str = "q", **kwargs: object) -> str:
    """Enqueue a fresh task and return its id."""
    task = new_task(queue, **kwargs)  # type: ignore[arg-type]
    assert storage.enqueue(task) is True, message(
        "enqueue-idempotent", f"enqueue of new task {task.id!r} did not return True"
    )
    try:
        _ENQUEUED.setdefault(storage, {}).setdefault(queue, []).append(task.id)
    except TypeError:  # a storage that cannot be weakly referenced: no bookkeeping
        pass
    return task.id


def _fates(storage: Storage, ids: list[str]) -> tuple[bool, str]:
    """What became of ``ids``: (whether one is gone, a description)."""
    gone, parts = False, []
    for tid in ids:
        try:
            task = storage.get(tid)
        except NotFound:
            gone = True
            parts.append(f"task {tid!r} is gone (get raises NotFound)")
            continue
        parts.append(
            f"task {tid!r} is {task.status.value} (next_attempt_at {task.next_attempt_at}, "
            f"lease until {task.lease_expires_at})"
        )
    return gone, "; ".join(parts)


def claim_one(
    storage: Storage, queue: str = "q", lease: timedelta = LONG_LEASE, expect: str | None = None
) -> Claim:
    """Claim exactly one task; fails the test if the claim returns anything else.

    ``expect``: the id of the task the test knows is due. If the claim comes back empty,
    the failure says what became of it, or else of every task this handle enqueued in
    ``queue`` (a task that is gone: rule ``no-loss``; else ``claim-complete``). When no
    task of the queue is known, ``stats`` decides: a queue that still counts a task failed
    to hand it out (``claim-complete``); an empty one lost it (``no-loss``)."""
    claims = storage.claim_due(queue, 1, lease)
    if not claims:
        ids = [expect] if expect is not None else _ENQUEUED.get(storage, {}).get(queue, [])
        gone, fates = _fates(storage, ids[-20:])
        stats = storage.stats(queue)
        lost = gone or (not ids and stats.total == 0)
        raise AssertionError(
            message(
                "no-loss" if lost else "claim-complete",
                f"a due task of {queue!r} could not be claimed: "
                f"{fates or 'no task known'}; stats({queue!r}) {stats}",
            )
        )
    assert len(claims) == 1, message(
        "claim-limit", f"claim_due({queue!r}, limit=1) returned {len(claims)} tasks"
    )
    return claims[0]


def wait_until(storage: Storage, when: datetime, timeout: float = 30.0) -> None:
    """Sleep until the storage's clock is strictly past ``when``; the clock counts as stuck
    once it has not got there ``timeout`` seconds after it should have (a lease of a
    minute, RQ's shortest, is waited out whole)."""
    ahead = (when - storage.now()).total_seconds()
    deadline = time.monotonic() + max(0.0, ahead) + timeout
    while True:
        now = storage.now()
        if now > when:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                message("storage-clock", f"storage clock stuck at {now}, waiting for {when}")
            )
        time.sleep(min(0.05, max(0.001, (when - now).total_seconds() + 0.001)))


def expire(storage: Storage, claim: Claim) -> None:
    """Wait until the claim's lease has expired by the storage's clock."""
    wait_until(storage, claim.lease_expires_at)


def is_stale(fn: object, *args: object) -> bool:
    """True if calling ``fn(*args)`` raises StaleClaim."""
    try:
        fn(*args)  # type: ignore[operator]
    except StaleClaim:
        return True
    return False


def numbers(task: Task) -> list[int]:
    """The task's attempt numbers, oldest first (as failure messages show them)."""
    return [a.attempt_no for a in task.attempts]


def outcomes(task: Task) -> list[str]:
    """The task's attempt outcomes, oldest first (as failure messages show them)."""
    return [a.outcome.value for a in task.attempts]
