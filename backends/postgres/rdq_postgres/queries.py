"""The SQL of every storage operation, composed once per namespace.

Table names are qualified with the namespace's schema through ``psycopg.sql.Identifier``;
values are always bound parameters. Every time is the server's ``now()`` (the start of
the statement's transaction), so one statement sees one instant.

The claim (:attr:`Queries.claim`) is ONE statement:

1. ``picked`` — a ``MATERIALIZED`` CTE: the due rows of the queue (``due_at <= now()``:
   PENDING and due, or IN_FLIGHT with an expired lease), oldest due first, at most
   ``limit``, ``FOR UPDATE SKIP LOCKED``. A CTE runs once, whatever plan the outer
   statement gets, so the LIMIT bounds the whole claim (the ``WHERE id IN (SELECT … LIMIT
   n FOR UPDATE SKIP LOCKED)`` shape does not: a rescanned subquery skips rows the same
   statement already updated and hands out more — see the plan test);
2. ``expired`` — inserts the LEASE_EXPIRED attempt of each picked row that was IN_FLIGHT,
   numbered ``COALESCE(MAX(attempt_no), 0) + 1`` from the attempts table (invariant H;
   never from ``attempt_count``, which redrive resets);
3. the UPDATE stamps IN_FLIGHT, a fresh token (32 lowercase hex digits from
   ``gen_random_uuid()``), ``claimed_at = now()``, ``lease_expires_at = due_at = now() +
   lease``, and counts the lost attempt of a reclaim, returning the claimed rows.

The storage runs it in a transaction with the read of the claimed tasks' histories.

**The fresh claim** (:attr:`Queries.claim_fresh`) is the fast path for the common case,
run on its own (autocommit, one round trip, no history read). It picks exactly as the
claim does (same CTE, same LIMIT, same order, same locks), then stamps the picked rows
only if every one of them is PENDING with ``attempt_count = 0`` and ``redrive_count =
0``: such a task has no history (every attempt ever appended incremented
``attempt_count`` in the same statement, and only a redrive resets it — counting itself
in ``redrive_count``), and the values are those of the newest, locked row version
(``FOR UPDATE`` re-reads a row changed since the statement's snapshot), so "no history"
is exact. Otherwise it changes nothing and returns one row whose columns are all NULL
(*declined*); the storage then runs the full claim. So a claim is the same whichever
statement made it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql

from rdq_core.model import LEASE_EXPIRED_ERROR

#: The message of the LEASE_EXPIRED attempt (as the reference store writes it).
LEASE_EXPIRED_MESSAGE = "lease expired before an outcome"

TASK_COLUMNS = (
    "id, queue, handler, payload, headers, status, attempt_count, redrive_count, "
    "next_attempt_at, lease_expires_at, created_at"
)
ATTEMPT_COLUMNS = (
    "task_id, attempt_no, started_at, finished_at, outcome, error_type, error_message, error_detail"
)

# A task's whole history as parallel arrays, ordered by attempt_no (NULLs when none):
# one statement reads a task and its history on one snapshot.
_HISTORY_ARRAYS = """
CROSS JOIN LATERAL (
    SELECT array_agg(a.attempt_no ORDER BY a.attempt_no),
           array_agg(a.started_at ORDER BY a.attempt_no),
           array_agg(a.finished_at ORDER BY a.attempt_no),
           array_agg(a.outcome ORDER BY a.attempt_no),
           array_agg(a.error_type ORDER BY a.attempt_no),
           array_agg(a.error_message ORDER BY a.attempt_no),
           array_agg(a.error_detail ORDER BY a.attempt_no)
    FROM {attempts} a WHERE a.task_id = t.id
) h
"""

_CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT seq, id, status, claimed_at, due_at
    FROM {tasks}
    WHERE queue = %(queue)s AND due_at <= now()
    ORDER BY due_at, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), expired AS (
    INSERT INTO {attempts} ({attempt_columns})
    SELECT p.id,
           COALESCE((SELECT MAX(a.attempt_no) FROM {attempts} a WHERE a.task_id = p.id), 0) + 1,
           p.claimed_at, now(), 'LEASE_EXPIRED', %(lease_error)s, %(lease_message)s, NULL
    FROM picked p
    WHERE p.status = 'IN_FLIGHT'
    RETURNING task_id
)
UPDATE {tasks} t
SET status = 'IN_FLIGHT',
    attempt_count = t.attempt_count + CASE WHEN p.status = 'IN_FLIGHT' THEN 1 ELSE 0 END,
    token = replace(gen_random_uuid()::text, '-', ''),
    claimed_at = now(),
    lease_expires_at = now() + %(lease)s,
    due_at = now() + %(lease)s,
    next_attempt_at = NULL,
    last_error_type = CASE WHEN p.status = 'IN_FLIGHT' THEN %(lease_error)s
                           ELSE t.last_error_type END
FROM picked p
WHERE t.seq = p.seq
RETURNING {task_columns_t}, t.token, t.claimed_at, p.status = 'IN_FLIGHT', p.due_at, p.seq
"""

# The fast path (see the module docstring): no reclaim, no attempt, no history to read.
_CLAIM_FRESH = """
WITH picked AS MATERIALIZED (
    SELECT seq, status, attempt_count, redrive_count, due_at
    FROM {tasks}
    WHERE queue = %(queue)s AND due_at <= now()
    ORDER BY due_at, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), fresh AS MATERIALIZED (
    SELECT bool_and(status = 'PENDING' AND attempt_count = 0 AND redrive_count = 0) AS ok
    FROM picked
), claimed AS (
    UPDATE {tasks} t
    SET status = 'IN_FLIGHT',
        token = replace(gen_random_uuid()::text, '-', ''),
        claimed_at = now(),
        lease_expires_at = now() + %(lease)s,
        due_at = now() + %(lease)s,
        next_attempt_at = NULL
    FROM picked p, fresh f
    WHERE t.seq = p.seq AND f.ok
    RETURNING {task_columns_t}, t.token, t.claimed_at, false AS reclaimed, p.due_at, p.seq
)
SELECT * FROM claimed
UNION ALL
SELECT {declined} FROM fresh WHERE NOT ok
"""
#: How many columns the claims return (the task's, token, claimed_at, reclaimed, the due
#: time before the claim, seq).
CLAIM_WIDTH = len(TASK_COLUMNS.split(", ")) + 5

# A fenced outcome: lock the row only if this token is current (FOR UPDATE re-checks the
# newest version of a row changed meanwhile), append the attempt (claimed_at -> now,
# numbered from history) and apply the transition to exactly the locked row, so the
# insert and the update act on the same rows: all of them or none; zero rows = stale.
_FINISH = """
WITH cur AS MATERIALIZED (
    SELECT seq, id, claimed_at FROM {tasks}
    WHERE id = %(id)s AND status = 'IN_FLIGHT' AND token = %(token)s
    FOR UPDATE
), hist AS (
    INSERT INTO {attempts} ({attempt_columns})
    SELECT c.id,
           COALESCE((SELECT MAX(a.attempt_no) FROM {attempts} a WHERE a.task_id = c.id), 0) + 1,
           c.claimed_at, now(), %(outcome)s, %(error_type)s, %(error_message)s, %(error_detail)s
    FROM cur c
    RETURNING task_id
)
UPDATE {tasks} t
SET attempt_count = t.attempt_count + 1, token = NULL, claimed_at = NULL,
    lease_expires_at = NULL, last_error_type = %(error_type)s, {transition}
FROM cur c
WHERE t.seq = c.seq
RETURNING t.id
"""

_COMPLETE = "status = 'SUCCEEDED', next_attempt_at = NULL, due_at = NULL, finished_at = now()"
_RESCHEDULE = "status = 'PENDING', next_attempt_at = now() + %(delay)s, due_at = now() + %(delay)s"
_DEAD_LETTER = "status = 'DEAD', next_attempt_at = NULL, due_at = NULL, dead_at = now()"

_EXTEND = """
UPDATE {tasks} SET lease_expires_at = now() + %(lease)s, due_at = now() + %(lease)s
WHERE id = %(id)s AND status = 'IN_FLIGHT' AND token = %(token)s
RETURNING lease_expires_at
"""

_ENQUEUE = """
INSERT INTO {tasks} (id, queue, handler, payload, headers, status, attempt_count,
                     redrive_count, next_attempt_at, due_at, created_at)
VALUES (%(id)s, %(queue)s, %(handler)s, %(payload)s, %(headers)s, 'PENDING', 0, 0,
        now() + %(delay)s, now() + %(delay)s, now())
ON CONFLICT (id) DO NOTHING
RETURNING seq
"""

_STATS = """
SELECT count(*) FILTER (WHERE status = 'PENDING'),
       count(*) FILTER (WHERE status = 'PENDING' AND due_at <= now()),
       count(*) FILTER (WHERE status = 'IN_FLIGHT'),
       count(*) FILTER (WHERE status = 'SUCCEEDED'),
       count(*) FILTER (WHERE status = 'DEAD')
FROM {tasks} WHERE queue = %(queue)s
"""

_REDRIVE = """
UPDATE {tasks}
SET status = 'PENDING', attempt_count = 0, redrive_count = redrive_count + 1,
    next_attempt_at = now(), due_at = now(), lease_expires_at = NULL, token = NULL,
    claimed_at = NULL, dead_at = NULL
WHERE queue = %(queue)s AND status = 'DEAD' AND ({selected})
"""

_PURGE = "DELETE FROM {tasks} WHERE queue = %(queue)s AND status = 'DEAD' AND ({selected})"

_PURGE_SUCCEEDED = """
DELETE FROM {tasks}
WHERE queue = %(queue)s AND status = 'SUCCEEDED' AND finished_at <= now() - %(older_than)s
"""


def claim_params(queue: str, limit: int, lease: object) -> dict[str, object]:
    return {
        "queue": queue,
        "limit": limit,
        "lease": lease,
        "lease_error": LEASE_EXPIRED_ERROR,
        "lease_message": LEASE_EXPIRED_MESSAGE,
    }


@dataclass(frozen=True)
class Compiled:
    """The fixed statements of :class:`Queries` as bytes: what psycopg sends, so a call
    neither composes SQL again nor looks it up (and psycopg prepares each of them on its
    fifth run on a connection)."""

    claim: bytes
    claim_fresh: bytes
    history: bytes
    finish: Mapping[str, bytes]
    extend: bytes
    enqueue: bytes
    queue_of: bytes
    status_of: bytes
    task: bytes
    stats: bytes
    purge_succeeded: bytes


class Queries:
    """Every statement of one namespace, composed once."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._compiled: Compiled | None = None
        self._compile_lock = threading.Lock()
        self.claim = self._sql(_CLAIM)
        self.claim_fresh = self._sql(
            _CLAIM_FRESH, declined=sql.SQL(", ".join(["NULL"] * CLAIM_WIDTH))
        )
        self.extend = self._sql(_EXTEND)
        self.enqueue = self._sql(_ENQUEUE)
        self.stats = self._sql(_STATS)
        self.purge_succeeded = self._sql(_PURGE_SUCCEEDED)
        self.queue_of = self._sql("SELECT queue FROM {tasks} WHERE id = %s")
        self.status_of = self._sql("SELECT status FROM {tasks} WHERE id = %s")
        self.task = self._sql(
            "SELECT {task_columns_t}, h.* FROM {tasks} t" + _HISTORY_ARRAYS + "WHERE t.id = %s"
        )
        #: the histories of the tasks with ids ``%s`` (a list), oldest attempt first
        self.history = self._sql(
            f"SELECT {ATTEMPT_COLUMNS} FROM {{attempts}}"
            " WHERE task_id = ANY(%s) ORDER BY task_id, attempt_no"
        )
        self.finish = {
            name: self._sql(_FINISH, transition=sql.SQL(transition))
            for name, transition in (
                ("complete", _COMPLETE),
                ("reschedule", _RESCHEDULE),
                ("dead_letter", _DEAD_LETTER),
            )
        }

    def compiled(self, conn: psycopg.Connection) -> Compiled:
        """The fixed statements as bytes, rendered once on the first connection that asks
        (psycopg 3.1 needs a connection to quote identifiers; every connection of a storage
        has the same server and client encoding, UTF-8)."""
        done = self._compiled
        if done is not None:
            return done
        with self._compile_lock:
            if self._compiled is None:

                def b(statement: sql.Composed) -> bytes:
                    return statement.as_bytes(conn)

                self._compiled = Compiled(
                    claim=b(self.claim),
                    claim_fresh=b(self.claim_fresh),
                    history=b(self.history),
                    finish={name: b(statement) for name, statement in self.finish.items()},
                    extend=b(self.extend),
                    enqueue=b(self.enqueue),
                    queue_of=b(self.queue_of),
                    status_of=b(self.status_of),
                    task=b(self.task),
                    stats=b(self.stats),
                    purge_succeeded=b(self.purge_succeeded),
                )
            return self._compiled

    def _sql(self, template: str, **extra: sql.Composable) -> sql.Composed:
        """``template`` with the namespace's tables and the column lists filled in."""
        return sql.SQL(template).format(
            tasks=sql.Identifier(self.schema, "tasks"),
            attempts=sql.Identifier(self.schema, "attempts"),
            task_columns_t=sql.SQL(", ".join(f"t.{c}" for c in TASK_COLUMNS.split(", "))),
            attempt_columns=sql.SQL(ATTEMPT_COLUMNS),
            **extra,
        )

    def redrive(self, selected: sql.Composable) -> sql.Composed:
        return self._sql(_REDRIVE, selected=selected)

    def purge(self, selected: sql.Composable) -> sql.Composed:
        return self._sql(_PURGE, selected=selected)

    def dlq_page(self, conditions: sql.Composable) -> sql.Composed:
        """A DLQ page: task columns, history arrays, ``dead_at`` (``conditions`` on ``t``)."""
        return self._sql(
            "SELECT {task_columns_t}, h.*, t.dead_at FROM ("
            " SELECT * FROM {tasks} t"
            " WHERE queue = %(queue)s AND status = 'DEAD' AND ({conditions})"
            " ORDER BY dead_at, id LIMIT %(limit)s) t"
            + _HISTORY_ARRAYS
            + "ORDER BY t.dead_at, t.id",
            conditions=conditions,
        )
