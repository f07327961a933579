"""The collections and indexes of a namespace (one database), created idempotently
(storage half).

- ``tasks``: one document per task (:mod:`rdq_mongo.documents`), indexes
  ``claim (queue, due_us, seq)`` — the claim's candidates in due order are one range —
  ``dlq (queue, status, dead_us, _id)`` — a DLQ page is one range from the cursor — and
  ``done (queue, status, finished_us)`` for ``purge_succeeded``;
- ``counters``: one document ``{_id: "seq", n}``, the enqueue counter that orders tasks
  due at the same time (and, read in the same write, the server's clock at the enqueue).

``createIndexes`` with the same keys and options is a no-op, so :func:`ensure` may run in
every process that opens the namespace.
"""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, IndexModel

TASKS = "tasks"
COUNTERS = "counters"
SEQ_ID = "seq"
#: The field of the sequence document that keeps the kit's owner record.
OWNER = "owner"

TASK_INDEXES = (
    IndexModel([("queue", ASCENDING), ("due_us", ASCENDING), ("seq", ASCENDING)], name="claim"),
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("dead_us", ASCENDING), ("_id", ASCENDING)],
        name="dlq",
    ),
    IndexModel(
        [("queue", ASCENDING), ("status", ASCENDING), ("finished_us", ASCENDING)], name="done"
    ),
)


def ensure(db: Any, owner: str | None = None) -> None:
    """Create the namespace's indexes (and so its collections) if they are missing; a new
    sequence document keeps ``owner`` (the kit's owner record) beside its counter."""
    db[TASKS].create_indexes(list(TASK_INDEXES))
    fresh: dict[str, Any] = {"n": 0} if owner is None else {"n": 0, OWNER: owner}
    db[COUNTERS].find_one_and_update({"_id": SEQ_ID}, {"$setOnInsert": fresh}, upsert=True)


def owner_of(db: Any) -> str | None:
    """The owner record the namespace's sequence document keeps, if any."""
    doc = db[COUNTERS].find_one({"_id": SEQ_ID}, {OWNER: 1})
    value = doc.get(OWNER) if doc else None
    return value if isinstance(value, str) else None
