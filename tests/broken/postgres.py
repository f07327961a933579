"""Broken PostgreSQL backends, each caught only by one chaos fault or one suite test.

- ``client_clock`` (bug class ``worker-clock``, the clock-skew campaign): the claim,
  heartbeat and outcome statements take the time from the client — ``%(client_now)s``,
  the worker's ``datetime.now(UTC)`` bound as a parameter — instead of the server's
  ``now()``. Every lease is then stamped and judged on whichever worker's clock made the
  call. On one host that clock is the server's, so nothing but skewed client clocks tells
  the two apart (``tests/server_contract/test_clock_skew.py``).
- ``reclaim_overwrites_late_outcome`` (only the conformance race of late outcomes
  against reclaims, ``test_late_outcome.py``, exposes it): claims serialised by an
  advisory lock, the due rows read without ``FOR UPDATE`` and saved as read.
- ``pending_before_expired_leases`` (only the conformance test of claims with expired
  leases and due PENDING tasks interleaved in due time): PENDING rows claimed first.
- ``acks_timed_out_reports`` (only a server freeze exposes it) and
  ``hb_timeout_taken_as_extended`` (only a network partition): a call the server left
  unanswered taken as applied (:mod:`tests.broken._unanswered`).

Use as ``--rdq-backend=tests.broken.postgres:client_clock`` with the checkout root on
``PYTHONPATH`` (so the chaos worker processes import it too).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from rdq_postgres import queries, rows
from rdq_postgres.connection import cursor_of
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.storage import PostgresStorage, _claim, _claim_order

from rdq_core.errors import BackendUnavailable
from rdq_core.model import Claim, ErrorInfo, Outcome
from tests.broken._unanswered import ACK_TIMEOUT, FREEZE_VICTIMS_ENV, TimeoutTakenAsExtended, victim

T = TypeVar("T")

#: The file ``reclaim_overwrites_late_outcome`` appends its victims to.
VICTIMS_ENV = "RDQ_POSTGRES_VICTIMS"

#: What replaces the server's clock in the variant's statements.
CLIENT_NOW = "%(client_now)s::timestamptz"


def _client(template: str) -> str:
    assert "now()" in template, "nothing to break: the statement has no now()"
    return template.replace("now()", CLIENT_NOW)


class ClientClockQueries(queries.Queries):
    """The claim, fresh claim, heartbeat and outcome statements on the client's clock."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.claim = self._sql(_client(queries._CLAIM))
        self.claim_fresh = self._sql(
            _client(queries._CLAIM_FRESH),
            declined=psycopg.sql.SQL(", ".join(["NULL"] * queries.CLAIM_WIDTH)),
        )
        self.extend = self._sql(_client(queries._EXTEND))
        self.finish = {
            name: self._sql(_client(queries._FINISH), transition=psycopg.sql.SQL(_client(t)))
            for name, t in (
                ("complete", queries._COMPLETE),
                ("reschedule", queries._RESCHEDULE),
                ("dead_letter", queries._DEAD_LETTER),
            )
        }


def client_now() -> datetime:
    return datetime.now(UTC)


class ClientClock(PostgresStorage):
    """:class:`PostgresStorage` sending its own clock with every claim, heartbeat and
    outcome."""

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        self._q = ClientClockQueries(self._source.schema)

    def _claim_fresh(self, conn: psycopg.Connection, params: dict[str, Any]) -> Any:
        return super()._claim_fresh(conn, {**params, "client_now": client_now()})

    def _claim_full(self, conn: psycopg.Connection, params: dict[str, Any]) -> Any:
        return super()._claim_full(conn, {**params, "client_now": client_now()})

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        params = {"id": task_id, "token": token, "lease": lease, "client_now": client_now()}

        def run(conn: psycopg.Connection) -> datetime:
            row = cursor_of(conn).execute(self._sql(conn).extend, params).fetchone()
            if row is None:
                self._raise_stale(conn, task_id, token)
            return rows.utc(row[0])

        return self._run("extend_lease", run)

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        **extra: Any,
    ) -> None:
        super()._finish(action, task_id, token, outcome, error, client_now=client_now(), **extra)


class ClientClockBackend(PostgresBackend):
    """The ``postgres`` backend (same rungs) opening :class:`ClientClock`."""

    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return ClientClock(dsn, namespace)


# ---- only the race of late outcomes against reclaims exposes it --------------------------------

#: The due rows, read without a row lock.
_READ_DUE = """
SELECT seq, id, status, claimed_at, due_at
FROM {tasks}
WHERE queue = %(queue)s AND due_at <= now()
ORDER BY due_at, seq
LIMIT %(limit)s
"""
#: The reference claim with its ``picked`` rows replaced by what was read, and the row
#: saved whole (the terminal columns cleared with the rest).
_LOCKED_PICK = """    FOR UPDATE SKIP LOCKED
"""
_SAVE = queries._CLAIM.replace(
    """    SELECT seq, id, status, claimed_at, due_at
    FROM {tasks}
    WHERE queue = %(queue)s AND due_at <= now()
    ORDER BY due_at, seq
    LIMIT %(limit)s
"""
    + _LOCKED_PICK,
    """    SELECT * FROM unnest(%(seqs)s::bigint[], %(ids)s::text[], %(statuses)s::text[],
                         %(claimed)s::timestamptz[], %(dues)s::timestamptz[])
        AS p(seq, id, status, claimed_at, due_at)
""",
).replace(
    "SET status = 'IN_FLIGHT',", "SET status = 'IN_FLIGHT', dead_at = NULL, finished_at = NULL,"
)
assert "unnest" in _SAVE and "dead_at = NULL" in _SAVE, "the reference claim changed shape"


class ReclaimOverwritesLateOutcome(PostgresStorage):
    """Bug class ``unfenced-outcome`` — a reclaim that re-reads without a lock and writes unguarded:
    a late outcome committed in between is overwritten.

    Every claim takes ``pg_advisory_xact_lock`` (no outcome takes it), so no two claims
    ever meet and every race of claims passes. In the same transaction the due rows are
    read without ``FOR UPDATE``, then saved as read (``UPDATE ... FROM (the rows read)
    WHERE t.seq = p.seq``, no re-check of status or token). A late ``complete``,
    ``reschedule``, ``dead_letter`` or heartbeat of the expired holder that commits
    between the read and the save is acknowledged, and then overwritten: READ COMMITTED
    re-reads the row the save waits for and the ``WHERE`` still matches, so the task is
    IN_FLIGHT again with a LEASE_EXPIRED attempt after the accepted one. No delay is
    added. Just before the save a second read locks the rows (``FOR UPDATE``): a late call
    that commits before it is overwritten, one that comes after it waits for the claim and
    finds the new token. Each task whose row (status, claim time, due time or lease
    expiry) changed between the two reads, the ones overwritten, is appended to
    ``$RDQ_POSTGRES_VICTIMS``.

    Incident: a PostgreSQL storage written from outside the project, tried as a new user
    would, passed the whole kit while a 400-task, 8-thread script overwrote acknowledged
    results in 2 runs of 3.
    """

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        q = self._q
        self._lock_key = f"{q.schema}.claims"
        self._read_due = q._sql(_READ_DUE)
        self._reread = q._sql(
            "SELECT seq, status, claimed_at, due_at FROM {tasks} WHERE seq = ANY(%s) FOR UPDATE"
        )
        self._save = q._sql(_SAVE)

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        params = queries.claim_params(queue, limit, lease)
        return self._run("claim_due", lambda conn: self._claim_unguarded(conn, params))

    def _claim_unguarded(self, conn: psycopg.Connection, params: dict[str, Any]) -> list[Claim]:
        cur = cursor_of(conn)
        with conn.transaction():
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,))
            due = cur.execute(self._read_due, params).fetchall()
            if not due:
                return []
            seqs = [r[0] for r in due]
            now = cur.execute(self._reread, (seqs,)).fetchall()
            read = {r[0]: (r[2], r[3], r[4]) for r in due}
            for seq, status, claimed_at, due_at in now:
                if read[seq] != (status, claimed_at, due_at):
                    victim(VICTIMS_ENV, next(r[1] for r in due if r[0] == seq))
            saved = {
                **params,
                "seqs": seqs,
                "ids": [r[1] for r in due],
                "statuses": [r[2] for r in due],
                "claimed": [r[3] for r in due],
                "dues": [r[4] for r in due],
            }
            claimed = cur.execute(self._save, saved, binary=True).fetchall()
            history = rows.histories(conn, self._sql(conn).history, [r[0] for r in claimed])
        claimed.sort(key=_claim_order)
        return [_claim(r, history.get(r[0], ())) for r in claimed]


_KEYSET = psycopg.sql.SQL("(dead_at, id) > (%(after_at)s, %(after_id)s)")


def _ids_only(conditions: psycopg.sql.Composable) -> psycopg.sql.Composable:
    """``conditions`` with the DLQ cursor's ``(dead_at, id) >`` replaced by ``id >``."""
    if conditions == _KEYSET:
        return psycopg.sql.SQL("id > %(after_id)s")
    if isinstance(conditions, psycopg.sql.Composed):
        return psycopg.sql.Composed([_ids_only(part) for part in conditions])
    return conditions


class IdsOnlyCursorQueries(queries.Queries):
    def dlq_page(self, conditions: psycopg.sql.Composable) -> psycopg.sql.Composed:
        return super().dlq_page(_ids_only(conditions))


class DlqCursorComparesIdsOnly(PostgresStorage):
    """Bug class ``lost-task`` — DLQ paging: the keyset cursor confuses time and id.

    Incident: pages are ``ORDER BY dead_at, id`` but the next page asks ``WHERE id >
    $last_id``: right while ids sort in dead-letter order; an id that sorts before the
    last one listed although it died later is never listed. The tasks the reference page
    lists and this one does not are appended to the victims file."""

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        self._right_q, self._broken_q = self._q, IdsOnlyCursorQueries(self._source.schema)

    def _dlq_list(self, queue: str, filter: Any, cursor: str | None, limit: int) -> Any:
        right = super()._dlq_list(queue, filter, cursor, limit)
        self._q = self._broken_q  # differs from the reference only in dlq_page
        try:
            page = super()._dlq_list(queue, filter, cursor, limit)
        finally:
            self._q = self._right_q
        listed = {t.id for t in page.tasks}
        for t in right.tasks:
            if t.id not in listed:
                victim(VICTIMS_ENV, t.id)
        return page


class DlqCursorComparesIdsOnlyBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return DlqCursorComparesIdsOnly(dsn, namespace)


class BucketQueries(queries.Queries):
    """Every statement that selects a queue selects its hash bucket instead."""

    BY_NAME = "queue = %(queue)s"
    BY_BUCKET = "(hashtext(queue) & 4095) = (hashtext(%(queue)s) & 4095)"

    def _sql(self, template: str, **extra: psycopg.sql.Composable) -> psycopg.sql.Composed:
        return super()._sql(template.replace(self.BY_NAME, self.BY_BUCKET), **extra)


class QueuesBucketed(PostgresStorage):
    """Bug class ``wrong-claim-batch`` — queues kept apart by bucket, not by name: two
    queues of one bucket mix.

    Incident: a partitioned table keyed by ``hashtext(queue) & 4095``; every statement
    that selects a queue trusts the partition key without checking the name: two queues
    that share one of the 4,096 buckets take each other's tasks. The tasks a claim or a
    DLQ page returns from another queue are appended to the victims file."""

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        self._q = BucketQueries(self._source.schema)

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        claims = super()._claim_due(queue, limit, lease)
        for c in claims:
            if c.task.queue != queue:
                victim(VICTIMS_ENV, c.task.id)
        return claims

    def _dlq_list(self, queue: str, filter: Any, cursor: str | None, limit: int) -> Any:
        page = super()._dlq_list(queue, filter, cursor, limit)
        for t in page.tasks:
            if t.queue != queue:
                victim(VICTIMS_ENV, t.id)
        return page


class QueuesBucketedBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return QueuesBucketed(dsn, namespace)


class PendingFirstQueries(queries.Queries):
    """The claims' ``picked`` rows ordered PENDING first, then by due time."""

    FAIR = "ORDER BY due_at, seq\n    LIMIT %(limit)s\n    FOR UPDATE SKIP LOCKED"
    PENDING_FIRST = FAIR.replace("ORDER BY", "ORDER BY status = 'IN_FLIGHT',")

    def _sql(self, template: str, **extra: psycopg.sql.Composable) -> psycopg.sql.Composed:
        return super()._sql(template.replace(self.FAIR, self.PENDING_FIRST), **extra)


assert PendingFirstQueries.FAIR in queries._CLAIM, "the reference claim changed shape"


class PendingBeforeExpiredLeases(PostgresStorage):
    """Bug class ``wrong-claim-batch`` — a claim serves due PENDING tasks before expired leases.

    Incident: the claim orders its rows ``ORDER BY status = 'IN_FLIGHT', due_at`` (or
    is two queries, the due PENDING tasks first and the reclaim only when they come back
    short): each kind in due order, but an expired lease waits behind every due PENDING
    task, even those that fell due after it expired. Each PENDING task claimed while an
    expired lease the one due order would have served first (read just before the
    claim) was passed over is appended to the victims file."""

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        self._fair = self._q._sql(_READ_DUE)
        self._q = PendingFirstQueries(self._source.schema)

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        params = queries.claim_params(queue, limit, lease)

        def fair(conn: psycopg.Connection) -> dict[str, str]:
            return {r[1]: r[2] for r in cursor_of(conn).execute(self._fair, params).fetchall()}

        first = self._run("claim_due", fair)
        claims = super()._claim_due(queue, limit, lease)
        taken = {c.task.id for c in claims}
        if any(st == "IN_FLIGHT" and tid not in taken for tid, st in first.items()):
            for c in claims:  # a PENDING task served while an earlier expired lease waits
                if not c.reclaimed and c.task.id not in first:
                    victim(VICTIMS_ENV, c.task.id)
        return claims


class PendingBeforeExpiredLeasesBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return PendingBeforeExpiredLeases(dsn, namespace)


class ReclaimOverwritesLateOutcomeBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return ReclaimOverwritesLateOutcome(dsn, namespace)


# ---- only a fault exposes them: an unanswered call taken as applied ----------------------------


class AcksTimedOutReports(PostgresStorage):
    """An outcome report unanswered within ``ACK_TIMEOUT`` (a frozen server) is taken as
    applied: its connection torn down, no error raised (:mod:`tests.broken._unanswered`)."""

    _calling = threading.local()

    def _complete(self, task_id: str, token: str) -> None:
        self._calling.task = task_id
        super()._complete(task_id, token)

    def _run(self, action: str, fn: Callable[[psycopg.Connection], T]) -> T:
        if action != "complete":
            return super()._run(action, fn)
        task_id = self._calling.task
        abandoned = threading.Event()
        used: list[psycopg.Connection] = []
        done = threading.Event()
        failure: list[BaseException] = []

        def transactional(conn: psycopg.Connection) -> T:
            if abandoned.is_set():  # no retry on a fresh connection once given up
                raise BackendUnavailable("report abandoned")
            used.append(conn)
            with conn.transaction():  # BEGIN ... COMMIT, each its own round trip
                return fn(conn)

        def call() -> None:
            try:
                super(AcksTimedOutReports, self)._run(action, transactional)
            except BaseException as exc:
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name=f"complete-{task_id}", daemon=True).start()
        if done.wait(ACK_TIMEOUT):
            if failure:
                raise failure[0]
            return None  # type: ignore[return-value]
        abandoned.set()
        for conn in used:  # the bug: give up on the connection, and call it applied
            with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        victim(FREEZE_VICTIMS_ENV, task_id)
        return None  # type: ignore[return-value]


class HbTimeoutTakenAsExtended(TimeoutTakenAsExtended, PostgresStorage):
    """A heartbeat unanswered within ``HB_TIMEOUT`` (a partition) is taken as applied
    while the lease had more than half its length left (:mod:`tests.broken._unanswered`)."""


class AcksTimedOutReportsBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return AcksTimedOutReports(dsn, namespace)


class HbTimeoutTakenAsExtendedBackend(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return HbTimeoutTakenAsExtended(dsn, namespace)


client_clock = ClientClockBackend()
reclaim_overwrites_late_outcome = ReclaimOverwritesLateOutcomeBackend()
pending_before_expired_leases = PendingBeforeExpiredLeasesBackend()
dlq_cursor_compares_ids_only = DlqCursorComparesIdsOnlyBackend()
queues_bucketed = QueuesBucketedBackend()
acks_timed_out_reports = AcksTimedOutReportsBackend()
hb_timeout_taken_as_extended = HbTimeoutTakenAsExtendedBackend()
