"""Multi-process backends with one deliberate bug, for the chaos harness's own tests.

Each is the SQLite backend (:class:`rdq_sqlite.storage.SqliteStorage`, safe across
processes) with the narrowest piece overridden the way a real queue once got it wrong.
Named to the harness as ``tests.broken.sqlite:<attribute>`` (``--rdq-backend=`` or
``rdq-chaos run --backend``); the worker processes import it by that name too, so they
need the checkout root on ``PYTHONPATH`` (:func:`tests._paths.pythonpath`). Given to
:func:`~rdq_compliance.chaos.runner.run_campaign` as the ``backend`` object, with the same
string as ``backend_name``.

======================================  ==========================  ================================
attribute                               bug class                   what breaks
======================================  ==========================  ================================
``check_then_act_claim``                ``double-claim``            two workers get one task
``reclaim_ignores_lease``               ``live-lease-stolen``       a live lease is stolen
``outcome_ignores_token``               ``unfenced-outcome``        a zombie's outcome overwrites
``lease_expired_numbered_from_count``   ``numbering-from-counter``  reclaim after redrive wedges
``reclaim_drops_task``                  ``lost-task``               a crashed worker's task vanishes
``dead_letter_deletes``                 ``lost-task``               a dead-lettered task vanishes
``extend_lease_ignores_token``          ``stale-heartbeat``         a zombie's heartbeat is accepted
``reschedule_completes``                ``wrong-transition``        a retry is recorded as a success
``dlq_cursor_compares_ids_only``        ``lost-task``               DLQ pages skip tasks whose ids
                                                                    sort against their dead time
``queues_bucketed``                     ``wrong-claim-batch``       two queues of one hash bucket
                                                                    mix
``pending_before_expired_leases``       ``wrong-claim-batch``       expired leases wait behind due
                                                                    PENDING tasks
``control``                             (none)                      nothing: the reference claim,
                                                                    split
======================================  ==========================  ================================

The bug classes are those of ``contract.md#8-bug-classes``; the incidents named in the
docstrings are bugs real queues had, by their upstream issue or pull request.
``test_chaos_finds_bugs.py`` shows the standard chaos suite fails the first six, naming
the rule; ``test_chaos_campaign.py`` uses ``dead_letter_deletes`` for the CLI's exit
status. ``control`` (the claim restated as the hooks ``check_then_act_claim`` and
``reclaim_ignores_lease`` override) passes the conformance suite.

Note that the SQLite schema's CHECK constraints (IN_FLIGHT needs a token and
``due_at = lease_expires_at``; a terminal task has no lease) refuse some cruder
versions of these bugs outright; each variant here is one the schema lets through.
"""

from __future__ import annotations

import fcntl
import sqlite3
import time
import zlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rdq_sqlite.plugin import SqliteBackend, database_path
from rdq_sqlite.storage import _LEASE_EXPIRED_MESSAGE, _TASK_COLUMNS, SqliteStorage, _json_list

from rdq_core.errors import StaleClaim
from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    ByIds,
    Claim,
    ErrorInfo,
    Outcome,
    Status,
    micros_from_delta,
    utc_from_micros,
)
from rdq_core.tokens import new_token
from tests.broken._unanswered import victim

#: The file the variants that record victims append them to.
VICTIMS_ENV = "RDQ_SQLITE_VICTIMS"

# ---- the claim, split into hooks (for double-claim and live-lease-stolen) -------------------


class SplitClaim(SqliteStorage):
    """The reference claim (``SqliteStorage._claim_due``) restated as two hooks: ``_due``
    (which rows, in the claim's transaction) and ``_stamp`` (make them the caller's).
    With no hook changed it *is* the reference claim (``control`` passes
    the conformance suite and the chaos suite), so a failure of a variant below is its
    one change."""

    def _due(
        self, conn: sqlite3.Connection, queue: str, now: int, limit: int
    ) -> list[tuple[int, str, str, int | None]]:
        """PENDING and due, or IN_FLIGHT with an expired lease (``due_at`` is
        ``next_attempt_at`` while PENDING, ``lease_expires_at`` while IN_FLIGHT)."""
        return conn.execute(
            "SELECT seq, id, status, claimed_at FROM tasks"
            " WHERE queue = ? AND due_at IS NOT NULL AND due_at <= ?"
            " AND status IN ('PENDING', 'IN_FLIGHT')"
            " ORDER BY due_at, seq LIMIT ?",
            (queue, now, limit),
        ).fetchall()

    def _stamp(
        self,
        conn: sqlite3.Connection,
        now: int,
        due: list[tuple[int, str, str, int | None]],
        lease_us: int,
    ) -> list[Claim]:
        """Claim the rows of ``due`` (as read): a LEASE_EXPIRED attempt for each one that
        was IN_FLIGHT, then IN_FLIGHT with a fresh token and lease."""
        if not due:
            return []
        expires = now + lease_us
        tokens: dict[str, tuple[str, bool]] = {}
        for seq, task_id, status, claimed_at in due:
            reclaimed = status == Status.IN_FLIGHT.value
            if reclaimed:
                self._append_attempt(
                    conn,
                    task_id,
                    int(claimed_at or 0),
                    now,
                    Outcome.LEASE_EXPIRED,
                    ErrorInfo(LEASE_EXPIRED_ERROR, _LEASE_EXPIRED_MESSAGE),
                )
            token = new_token()
            tokens[task_id] = (token, reclaimed)
            conn.execute(
                "UPDATE tasks SET status = 'IN_FLIGHT', token = ?, claimed_at = ?,"
                " lease_expires_at = ?, due_at = ?, next_attempt_at = NULL,"
                " attempt_count = attempt_count + ?,"
                " last_error_type = CASE WHEN ? THEN ? ELSE last_error_type END"
                " WHERE seq = ?",
                (
                    token,
                    now,
                    expires,
                    expires,
                    int(reclaimed),
                    int(reclaimed),
                    LEASE_EXPIRED_ERROR,
                    seq,
                ),
            )
        rows = conn.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE seq IN (SELECT value FROM json_each(?))",
            (_json_list(r[0] for r in due),),
        ).fetchall()
        by_id = {t.id: t for t in self._tasks(conn, rows)}
        at, end = utc_from_micros(now), utc_from_micros(expires)
        return [Claim(by_id[i], tokens[i][0], at, end, tokens[i][1]) for _s, i, _st, _c in due]

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        lease_us = micros_from_delta(lease)
        return self._write(
            "claim_due",
            lambda conn, now: self._stamp(conn, now, self._due(conn, queue, now, limit), lease_us),
        )


# ---- double-claim: claim without a row lock -----------------------------------------------


class CheckThenActClaim(SplitClaim):
    """Bug class ``double-claim`` — check-then-act claim: two workers get one task.

    The due rows are read in one (read-only) transaction and stamped IN_FLIGHT in a
    second one, ``UPDATE ... WHERE seq = ?`` with no re-check of status or due-ness:
    two workers that read between each other's read and write both walk away with the
    task, each with its own token, and both run it. No artificial delay is needed: the
    wait for the write lock between the two is window enough. ``gap`` (seconds, default
    0) adds a round trip between the statements, to widen it.

    Incident: the "claim returns more than LIMIT" family (Oban #4, #652;
    odd-jobs #115; postmangovsg PR #276), where the rows the claim read are not the
    rows it locked and wrote.
    """

    def __init__(self, path: str | Path, *, gap: float = 0.0, **kwargs: Any) -> None:
        self.gap = gap
        super().__init__(path, **kwargs)

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        due = self._read(  # SELECT ... (no FOR UPDATE: no write lock held)
            "claim_due", lambda conn: self._due(conn, queue, self._read_now(conn), limit)
        )
        if not due:
            return []
        time.sleep(self.gap)
        lease_us = micros_from_delta(lease)
        # UPDATE ... WHERE seq = ?: what was read is trusted, nothing is re-checked
        return self._write("claim_due", lambda conn, now: self._stamp(conn, now, due, lease_us))


class ReclaimOverwritesLateOutcome(SplitClaim):
    """Bug class ``unfenced-outcome`` — a reclaim that re-reads without a lock and writes unguarded:
    a late outcome committed in between is overwritten.

    Claims take a lock of their own (``flock`` on a file beside the database: an advisory
    lock no outcome takes), so no two claims ever meet and every race of claims passes.
    Under it the due rows are read in one (read-only) transaction and saved in a second
    as read, ``UPDATE ... WHERE seq = ?`` with no re-check of status or token (the
    columns of a terminal row the save does not know, ``dead_at``, are cleared with the
    rest). A late ``complete``, ``reschedule``, ``dead_letter`` or heartbeat of the
    expired holder that commits between the two is acknowledged, then the save makes the
    task IN_FLIGHT again with a LEASE_EXPIRED attempt after the accepted one. No delay
    is added: the wait for the write lock between the two transactions is the window.

    Each task whose row changed between the read and the save is appended to the file
    named by ``$RDQ_SQLITE_VICTIMS`` (when set). Incident: a PostgreSQL storage written
    from outside the project passed the whole kit while a 400-task script overwrote
    acknowledged results in 2 runs of 3.
    """

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with open(f"{self._path}.claims", "a+b") as claims:
            fcntl.flock(claims, fcntl.LOCK_EX)  # pg_advisory_xact_lock(...): claims only
            due = self._read(  # SELECT ... (no FOR UPDATE)
                "claim_due", lambda conn: self._due(conn, queue, self._read_now(conn), limit)
            )
            if not due:
                return []
            lease_us = micros_from_delta(lease)
            return self._write("claim_due", lambda conn, now: self._save(conn, now, due, lease_us))

    def _save(
        self,
        conn: sqlite3.Connection,
        now: int,
        due: list[tuple[int, str, str, int | None]],
        lease_us: int,
    ) -> list[Claim]:
        for seq, task_id, status, claimed_at in due:
            row = conn.execute(
                "SELECT status, claimed_at FROM tasks WHERE seq = ?", (seq,)
            ).fetchone()
            if tuple(row) != (status, claimed_at):
                victim(VICTIMS_ENV, task_id)
            if row[0] == Status.DEAD.value:  # the save writes the whole row: dead_at too
                conn.execute(
                    "UPDATE tasks SET status = 'IN_FLIGHT', dead_at = NULL, token = '-',"
                    " claimed_at = ?, lease_expires_at = ?, due_at = ? WHERE seq = ?",
                    (now, now, now, seq),
                )
        return self._stamp(conn, now, due, lease_us)


# ---- live-lease-stolen: reclaim ignoring lease_expires_at ---------------------------------


class ReclaimIgnoresLease(SplitClaim):
    """Bug class ``live-lease-stolen`` — reclaim ignoring ``lease_expires_at``: a live lease
    is stolen.

    The claim's due scan takes an IN_FLIGHT task once it was claimed more than
    ``grace`` seconds ago ("stalled"), judging it by its age instead of by its lease,
    which heartbeats keep extending: it reclaims tasks from workers that are alive and
    still running them. ``grace`` (default 0.5 s, half the standard scenario's
    lease) spares the short tasks, so the run is not pure chaos.

    Incident: "job re-picked while still running" (pgqueuer #430,
    PR #431; bullmq #3183) and "reclaim retries a job that is alive" (procrastinate
    #1297).
    """

    def __init__(self, path: str | Path, *, grace: float = 0.5, **kwargs: Any) -> None:
        self.grace_us = round(grace * 1_000_000)
        super().__init__(path, **kwargs)

    def _due(
        self, conn: sqlite3.Connection, queue: str, now: int, limit: int
    ) -> list[tuple[int, str, str, int | None]]:
        return conn.execute(
            "SELECT seq, id, status, claimed_at FROM tasks"
            " WHERE queue = ? AND due_at IS NOT NULL"
            " AND ((status = 'PENDING' AND due_at <= ?)"
            "   OR (status = 'IN_FLIGHT' AND claimed_at <= ?))"  # the lease is never read
            " ORDER BY due_at, seq LIMIT ?",
            (queue, now, now - self.grace_us, limit),
        ).fetchall()


# ---- unfenced-outcome: outcome without token check ----------------------------------------


class OutcomeIgnoresToken(SqliteStorage):
    """Bug class ``unfenced-outcome`` — complete/reschedule/dead_letter accepted with any token.

    The outcome's fence is ``WHERE id = ?`` with no ``AND token = ?`` (nor status): a
    worker paused or blocked past its lease wakes up, reports, and overwrites the
    result of the worker that reclaimed its task (the attempt is recorded from the
    row's current ``claimed_at``, or now if the task is no longer claimed).
    Heartbeats stay fenced (``stale-heartbeat`` is its own variant).

    Incident: "stale owner completes after losing its lease" (bull
    #308, #1243; bullmq #1497) and "completion racing reclaim, two terminal
    transitions" (solid_queue #589).
    """

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        assignments: Any,
    ) -> None:
        def run(conn: sqlite3.Connection, now: int) -> None:
            row = conn.execute("SELECT claimed_at FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                raise StaleClaim(f"task {task_id!r}: no such task")
            started = now if row[0] is None else int(row[0])
            sets, params = assignments(now)
            conn.execute(
                "UPDATE tasks SET attempt_count = attempt_count + 1, token = NULL,"
                " claimed_at = NULL, lease_expires_at = NULL, last_error_type = ?, "
                + sets
                + " WHERE id = ?",  # no token check
                (None if error is None else error.type, *params, task_id),
            )
            self._append_attempt(conn, task_id, started, now, outcome, error)

        self._write(action, run)


# ---- numbering-from-counter: LEASE_EXPIRED numbered from attempt_count --------------------


class LeaseExpiredNumberedFromCount(SqliteStorage):
    """Bug class ``numbering-from-counter`` — the original incident: LEASE_EXPIRED
    numbered ``attempt_count + 1``.

    Only the reclaim's LEASE_EXPIRED attempt is numbered from ``attempt_count`` (the
    outcome attempts keep ``max(attempt_no) + 1``), with ``UNIQUE(task_id,
    attempt_no)`` in force. Before any redrive the two agree. Redrive resets
    ``attempt_count`` to 0: the next reclaim of a redriven task numbers its
    LEASE_EXPIRED attempt 1, the constraint refuses it, the whole claim transaction
    rolls back, and since that task heads the due order every later claim hits it
    too: the task is wedged IN_FLIGHT and the queue behind it stops.

    Incident: rdq's own (the bug that started the project), and "unique violation on retry /
    reschedule" (river PR #619; pg-boss #492) and "attempt counting wrong after release / snooze"
    (pg-boss PR #759; river #961).
    """

    @staticmethod
    def _append_attempt(
        conn: sqlite3.Connection,
        task_id: str,
        started_us: int,
        finished_us: int,
        outcome: Outcome,
        error: ErrorInfo | None,
    ) -> None:
        if outcome is not Outcome.LEASE_EXPIRED:
            SqliteStorage._append_attempt(conn, task_id, started_us, finished_us, outcome, error)
            return
        conn.execute(  # called by the reclaim before it increments attempt_count
            "INSERT INTO attempts (task_id, attempt_no, started_at, finished_at, outcome,"
            " error_type, error_message, error_detail)"
            " SELECT id, attempt_count + 1, ?, ?, ?, ?, ?, ? FROM tasks WHERE id = ?",
            (
                started_us,
                finished_us,
                outcome.value,
                None if error is None else error.type,
                None if error is None else error.message,
                None if error is None else error.detail,
                task_id,
            ),
        )


# ---- lost-task ------------------------------------------------------------------------------


class ReclaimDropsTask(SqliteStorage):
    """Bug class ``lost-task`` — a task lost: dropped on a crash.

    Before each claim, a sweep "cleans up" the tasks whose worker died — IN_FLIGHT
    with an expired lease — by deleting them (and their history) instead of
    reclaiming them: every task a SIGKILLed or paused worker held is gone.

    Incident: "jobs lost or stuck forever after a crash"
    (procrastinate #307; pgqueuer #475; graphile-worker #204, #449; solid_queue #542).
    """

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        self._delete(
            "claim_due",
            "status = 'IN_FLIGHT' AND lease_expires_at <= ?",
            queue,
            [],
            cutoff_from_now=0,
        )
        return super()._claim_due(queue, limit, lease)


class DeadLetterDeletes(SqliteStorage):
    """Bug class ``lost-task`` — a task lost: deleted on failure, missing from the DLQ."""

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        super()._dead_letter(task_id, token, error, outcome)
        self._purge(self._get(task_id).queue, ByIds([task_id]))


# ---- stale-heartbeat: heartbeat without token check -----------------------------------------


class ExtendLeaseIgnoresToken(SqliteStorage):
    """Bug class ``stale-heartbeat`` — a heartbeat extends a lease the worker no longer holds.

    ``UPDATE tasks SET lease_expires_at = ?, due_at = ? WHERE id = ? AND status =
    'IN_FLIGHT'``, with no ``AND token = ?`` and the row count never looked at: the
    heartbeat thread of a worker paused past its lease wakes up and is told it still
    holds the task — extending the lease of the worker that reclaimed it, or, if that
    one already finished, acknowledging a heartbeat that changed nothing. Either way the
    zombie is not told to stop. Outcomes stay fenced.

    Incident: "stale owner completes after losing its lease" (bull #308:
    one lock token per queue, not per job, so any worker renews any job's lock; bull
    #1243; bullmq #1497) and "job re-picked while still running" (pgqueuer #430).
    """

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        def run(conn: sqlite3.Connection, now: int) -> datetime:
            expires = now + micros_from_delta(lease)
            conn.execute(
                "UPDATE tasks SET lease_expires_at = ?, due_at = ?"
                " WHERE id = ? AND status = 'IN_FLIGHT'",
                (expires, expires, task_id),
            )
            return utc_from_micros(expires)

        return self._write("extend_lease", run)


# ---- variants the standard chaos suite is not run on ------------------------------------------


class RescheduleCompletes(SqliteStorage):
    """A retryable failure recorded as a SUCCESS (the worker's report recorded as
    something else)."""

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        self._complete(task_id, token)


# ---- the backend objects ----------------------------------------------------------------------


class _RewritingConnection:
    """A connection whose statements have one fragment replaced (the rest delegated)."""

    def __init__(self, conn: sqlite3.Connection, old: str, new: str) -> None:
        self._conn, self._old, self._new = conn, old, new

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        return self._conn.execute(sql.replace(self._old, self._new), *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class DlqCursorComparesIdsOnly(SqliteStorage):
    """Bug class ``lost-task`` — DLQ paging: the keyset cursor confuses time and id.

    Incident: pages are ``ORDER BY dead_at, id`` but the next page asks ``WHERE id >
    $last_id`` (the cursor's dead time read and ignored): right while ids sort in
    dead-letter order; an id that sorts before the last one listed although it died
    later is never listed."""

    def _read(self, action: str, fn: Any) -> Any:
        if action != "dlq_list":
            return super()._read(action, fn)
        keyset, ids_only = "(dead_at, id) > (?, ?)", "(? IS NOT NULL AND id > ?)"

        def both(conn: sqlite3.Connection) -> Any:
            right = fn(conn)  # what the reference lists: the broken page's victims
            page = fn(_RewritingConnection(conn, keyset, ids_only))
            listed = {t.id for t in page.tasks}
            for t in right.tasks:
                if t.id not in listed:
                    victim(VICTIMS_ENV, t.id)
            return page

        return super()._read(action, both)


class QueuesBucketed(SqliteStorage):
    """Bug class ``wrong-claim-batch`` — queues kept apart by bucket, not by name: two
    queues of one bucket mix.

    Incident: a store that shards queues into hash buckets indexes them by bucket, and
    every statement that selects a queue trusts the bucket (``WHERE bucket(queue) =
    bucket($queue)``, 4,096 buckets) without checking the name: every test with a queue
    or two passes; two queues that share a bucket take each other's tasks. The tasks a
    claim or a DLQ page returns from another queue are appended to the victims file."""

    BUCKETS = 4096

    def _open(self) -> sqlite3.Connection:
        conn = super()._open()
        conn.create_function(
            "rdq_bucket", 1, lambda q: zlib.crc32(q.encode()) % self.BUCKETS, deterministic=True
        )
        return conn

    def _conn(self) -> Any:
        by_name, by_bucket = "queue = ?", "rdq_bucket(queue) = rdq_bucket(?)"
        return _RewritingConnection(super()._conn(), by_name, by_bucket)

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


class PendingBeforeExpiredLeases(SplitClaim):
    """Bug class ``wrong-claim-batch`` — a claim serves due PENDING tasks before expired leases.

    Incident: the claim is two queries, ``status = 'PENDING' AND next_attempt_at <= now``
    first and the reclaim of ``lease_expires_at <= now`` only when that came back short:
    each kind in due order, but an expired lease waits behind every due PENDING task,
    even those that fell due after it expired. Each task the claim takes that the one due
    order (``ORDER BY due_at, seq``) would not have taken yet is appended to the victims
    file."""

    def _due(
        self, conn: sqlite3.Connection, queue: str, now: int, limit: int
    ) -> list[tuple[int, str, str, int | None]]:
        pick = (
            "SELECT seq, id, status, claimed_at FROM tasks WHERE queue = ? AND status = ?"
            " AND due_at IS NOT NULL AND due_at <= ? ORDER BY due_at, seq LIMIT ?"
        )
        due = conn.execute(pick, (queue, Status.PENDING.value, now, limit)).fetchall()
        if len(due) < limit:
            due += conn.execute(
                pick, (queue, Status.IN_FLIGHT.value, now, limit - len(due))
            ).fetchall()
        fair = {r[1] for r in super()._due(conn, queue, now, limit)}
        for row in due:
            if row[1] not in fair:
                victim(VICTIMS_ENV, row[1])
        return due


class _Backend(SqliteBackend):
    """The SQLite backend (same server, same provisioning) opening a broken storage."""

    def __init__(self, cls: type[SqliteStorage], name: str, **options: Any) -> None:
        self.cls = cls
        self.name = name
        self.options = options

    def open(self, dsn: str, namespace: str) -> SqliteStorage:
        return self.cls(database_path(Path(dsn), namespace), **self.options)


check_then_act_claim = _Backend(CheckThenActClaim, "check-then-act-claim")
reclaim_overwrites_late_outcome = _Backend(
    ReclaimOverwritesLateOutcome, "reclaim-overwrites-late-outcome"
)
reclaim_ignores_lease = _Backend(ReclaimIgnoresLease, "reclaim-ignores-lease")
outcome_ignores_token = _Backend(OutcomeIgnoresToken, "outcome-ignores-token")
lease_expired_numbered_from_count = _Backend(
    LeaseExpiredNumberedFromCount, "lease-expired-numbered-from-count"
)
reclaim_drops_task = _Backend(ReclaimDropsTask, "reclaim-drops-task")
dead_letter_deletes = _Backend(DeadLetterDeletes, "dead-letter-deletes")
extend_lease_ignores_token = _Backend(ExtendLeaseIgnoresToken, "extend-lease-ignores-token")
reschedule_completes = _Backend(RescheduleCompletes, "reschedule-completes")
dlq_cursor_compares_ids_only = _Backend(DlqCursorComparesIdsOnly, "dlq-cursor-compares-ids-only")
queues_bucketed = _Backend(QueuesBucketed, "queues-bucketed")
pending_before_expired_leases = _Backend(
    PendingBeforeExpiredLeases, "pending-before-expired-leases"
)
control = _Backend(SplitClaim, "split-claim-reference")
