"""Dropping what rq wrote for one namespace (storage half: redis-py and the standard
library only).

rq keeps every namespace's data under its own fixed ``rq:`` keys, whose names carry the
namespace (:mod:`rdq_rq.names`), plus members in two process-wide sets: ``rq:queues``
(every queue key that was ever enqueued to) and ``rq:workers`` (every live worker). The
namespace's keys are found with ``SCAN`` (never ``KEYS``) and deleted with ``UNLINK``;
its members of the two sets are removed with ``SREM``. rq has no call that deletes a
queue with everything around it (``Queue.delete`` removes the list and its jobs, not the
registries, results, executions, workers and locks), so this is the test harness's
clean-up, like the built-in backends' namespace drop: it runs when the kit is done with a
namespace, never while a storage uses it.
"""

from __future__ import annotations

from typing import Any

from rdq_rq.names import key_patterns, member_of

SCAN_COUNT = 1000
#: rq's process-wide sets that hold members naming queues and workers.
SHARED_SETS = ("rq:queues", "rq:workers")


def drop_rq_keys(client: Any, namespace: str) -> int:
    """Delete every rq key of ``namespace`` and its members of rq's shared sets; returns
    how many keys were deleted. Idempotent."""
    deleted = 0
    for pattern in key_patterns(namespace):
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=SCAN_COUNT):
            batch.append(key)
            if len(batch) >= SCAN_COUNT:
                deleted += _unlink(client, batch)
                batch = []
        if batch:
            deleted += _unlink(client, batch)
    for shared in SHARED_SETS:
        members = [
            m for m in client.smembers(shared) if member_of(namespace, m.decode("utf-8", "replace"))
        ]
        if members:
            client.srem(shared, *members)
    return deleted


def _unlink(client: Any, batch: list[bytes]) -> int:
    pipe = client.pipeline(transaction=False)
    for key in batch:
        pipe.unlink(key)
    return sum(int(n) for n in pipe.execute())
