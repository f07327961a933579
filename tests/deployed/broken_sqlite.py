"""SQLite backends broken on purpose for the deployed harness's own tests: each makes rdq's
worker loop, deployed as the control (:class:`~rdq_compliance.deployed.control.CoreSystem`),
break one deployed rule (``docs/contract.md``, section 9, "The deployed rules").

Each is the SQLite backend with its claim restated as hooks
(:class:`tests.broken.sqlite.SplitClaim`) and one piece changed. They are not in
``tests/broken/sqlite.py``: the catalogue's layers (the store suite, the stateful machine,
the chaos suite) are not run on them. Workers import them as
``tests.deployed.broken_sqlite:<attribute>``, so they need the checkout root on
``PYTHONPATH`` (:func:`tests._paths.pythonpath`).

==================================  ========================  ================================
attribute                           bug class                 what breaks
==================================  ========================  ================================
``hands_out_succeeded_tasks``       ``unclaimable-claimed``   a SUCCEEDED task is handed out
                                                              again, its record kept
``reruns_succeeded_tasks``          ``unclaimable-claimed``   a SUCCEEDED task is claimed and
                                                              run again, each rerun recorded
``expired_leases_never_reclaimed``  ``lost-task``             a killed worker's task stays
                                                              IN_FLIGHT for ever
``reclaim_by_age_keeps_token``      ``live-lease-stolen``,    a live lease is taken, and its
                                    ``unfenced-outcome``      holder's outcome still counts
==================================  ========================  ================================
"""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import timedelta

from rdq_sqlite.storage import _TASK_COLUMNS, _json_list

from rdq_core.model import Claim, Status, micros_from_delta, utc_from_micros
from rdq_core.tokens import new_token
from tests.broken.sqlite import SplitClaim, _Backend

__all__ = [
    "ExpiredLeasesNeverReclaimed",
    "HandsOutSucceededTasks",
    "ReclaimByAgeKeepsToken",
    "RerunsSucceededTasks",
    "expired_leases_never_reclaimed",
    "hands_out_succeeded_tasks",
    "reclaim_by_age_keeps_token",
    "reruns_succeeded_tasks",
]

_Row = tuple[int, str, str, "int | None"]


class HandsOutSucceededTasks(SplitClaim):
    """Bug class ``unclaimable-claimed`` — a SUCCEEDED task claimed again.

    The claim's query has no status filter for finished rows: a SUCCEEDED row (its due
    time NULL) is selected after every due row. Its UPDATE keeps the status guard (a
    finished row is not written), but the claim returns every row it selected, not the
    rows it stamped: a SUCCEEDED task is handed out again by every poll that finds nothing
    due, under a token the row does not hold. The worker runs it; its heartbeat and its
    outcome are refused (the claim is stale), so the task stays SUCCEEDED with the first
    run's outcome, and the next poll hands it out once more.
    """

    def _due(self, conn: sqlite3.Connection, queue: str, now: int, limit: int) -> list[_Row]:
        return conn.execute(
            "SELECT seq, id, status, claimed_at FROM tasks WHERE queue = ?"
            " AND ((status IN ('PENDING', 'IN_FLIGHT') AND due_at <= ?)"
            "   OR status = 'SUCCEEDED')"  # no status filter: finished rows are taken too
            " ORDER BY due_at IS NULL, due_at, seq LIMIT ?",
            (queue, now, limit),
        ).fetchall()

    def _stamp(
        self, conn: sqlite3.Connection, now: int, due: list[_Row], lease_us: int
    ) -> list[Claim]:
        finished = [r for r in due if r[2] == Status.SUCCEEDED.value]
        stamped = super()._stamp(conn, now, [r for r in due if r not in finished], lease_us)
        claims = {c.task.id: c for c in stamped}
        if finished:
            rows = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE seq IN (SELECT value FROM json_each(?))",
                (_json_list(r[0] for r in finished),),
            ).fetchall()
            at, end = utc_from_micros(now), utc_from_micros(now + lease_us)
            for task in self._tasks(conn, rows):  # returned as read, never written
                claims[task.id] = Claim(task, new_token(), at, end)
        return [claims[task_id] for _seq, task_id, _status, _claimed in due]


class RerunsSucceededTasks(SplitClaim):
    """Bug class ``unclaimable-claimed`` — a SUCCEEDED task claimed again, and its reruns
    recorded.

    The claim's query has no status filter for finished rows (the query of
    :class:`HandsOutSucceededTasks`): a SUCCEEDED row is selected after every due row, and
    the reference stamp, whose UPDATE has no status guard, makes it IN_FLIGHT under a fresh
    token and lease like a due one. The worker runs it and its outcome is recorded: the
    task is SUCCEEDED again, one attempt more, and the next poll takes it once more, until
    rdq's worker, finding its attempts used up at a claim, dead-letters it unrun.
    """

    _due = HandsOutSucceededTasks._due


class ExpiredLeasesNeverReclaimed(SplitClaim):
    """Bug class ``lost-task`` — a task dropped on a crash: an expired lease is never
    reclaimed.

    The claim's query takes due PENDING tasks only: an IN_FLIGHT task whose worker was
    SIGKILLed is never offered again, and sits IN_FLIGHT, its lease long expired, with no
    worker running it.
    """

    def _due(self, conn: sqlite3.Connection, queue: str, now: int, limit: int) -> list[_Row]:
        return conn.execute(
            "SELECT seq, id, status, claimed_at FROM tasks"
            " WHERE queue = ? AND status = 'PENDING' AND due_at <= ?"
            " ORDER BY due_at, seq LIMIT ?",
            (queue, now, limit),
        ).fetchall()


class ReclaimByAgeKeepsToken(SplitClaim):
    """Bug classes ``live-lease-stolen`` and ``unfenced-outcome`` — a reclaim by age that
    renews the claim in place.

    The claim takes an IN_FLIGHT task claimed more than one lease ago (the lease asked
    for), judging it by ``claimed_at`` instead of ``lease_expires_at``, which its holder's
    heartbeats extend; and it renews the claim in place (a new lease and ``claimed_at``, a
    LEASE_EXPIRED attempt) but keeps the row's token. The holder, alive and running, is
    never told: its heartbeats and its outcome pass the token fence. Whichever of the two
    runs reports first makes the task's state; the other one's next heartbeat is refused.
    """

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        lease_us = micros_from_delta(lease)

        def run(conn: sqlite3.Connection, now: int) -> list[Claim]:
            due = conn.execute(
                "SELECT seq, id, status, claimed_at FROM tasks"
                " WHERE queue = ? AND due_at IS NOT NULL"
                " AND ((status = 'PENDING' AND due_at <= ?)"
                "   OR (status = 'IN_FLIGHT' AND claimed_at <= ?))"  # the lease is never read
                " ORDER BY due_at, seq LIMIT ?",
                (queue, now, now - lease_us, limit),
            ).fetchall()
            kept = {
                task_id: conn.execute("SELECT token FROM tasks WHERE seq = ?", (seq,)).fetchone()[0]
                for seq, task_id, status, _claimed in due
                if status == Status.IN_FLIGHT.value
            }
            claims = self._stamp(conn, now, due, lease_us)
            for task_id, token in kept.items():
                conn.execute("UPDATE tasks SET token = ? WHERE id = ?", (token, task_id))
            return [dataclasses.replace(c, token=kept.get(c.task.id, c.token)) for c in claims]

        return self._write("claim_due", run)


hands_out_succeeded_tasks = _Backend(HandsOutSucceededTasks, "hands-out-succeeded-tasks")
reruns_succeeded_tasks = _Backend(RerunsSucceededTasks, "reruns-succeeded-tasks")
expired_leases_never_reclaimed = _Backend(
    ExpiredLeasesNeverReclaimed, "expired-leases-never-reclaimed"
)
reclaim_by_age_keeps_token = _Backend(ReclaimByAgeKeepsToken, "reclaim-by-age-keeps-token")
