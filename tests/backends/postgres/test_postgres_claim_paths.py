"""The claim's two paths on PostgreSQL give the same claims.

``claim_due`` first tries the *fresh claim* (one autocommit statement, no history read),
which takes the picked tasks only if every one of them is fresh — PENDING, never attempted,
never redriven — and otherwise declines without changing anything; the *full claim* (claim
and history read in one transaction) then runs. These tests pin down which path serves
which claim, that a declined fresh claim leaves no trace, and that the histories returned
are exactly the stored ones.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from rdq_postgres.queries import CLAIM_WIDTH, Queries, claim_params
from rdq_postgres.storage import PostgresStorage

from rdq_core.model import ByIds, Claim, ErrorInfo, NewTask, Outcome, Status
from tests._waiting import HANG_S
from tests.backends.postgres._pg_support import require_server

require_server()
LEASE = timedelta(minutes=5)
CLAIMER = "rdq-test:claimer"


@pytest.fixture
def paths(storage: PostgresStorage, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The path each claim_due of ``storage`` took: "fresh", "declined", "full"."""
    taken: list[str] = []
    fresh, full = storage._claim_fresh, storage._claim_full

    def spy_fresh(conn, params):
        got = fresh(conn, params)
        taken.append("declined" if got is None else "fresh")
        return got

    def spy_full(conn, params):
        taken.append("full")
        return full(conn, params)

    monkeypatch.setattr(storage, "_claim_fresh", spy_fresh)
    monkeypatch.setattr(storage, "_claim_full", spy_full)
    yield taken


def _stored(storage: PostgresStorage, claim: Claim) -> None:
    """The claimed task is what the storage holds (status, counts, history, lease)."""
    task = storage.get(claim.task_id)
    assert task.status is Status.IN_FLIGHT
    assert claim.task.attempts == task.attempts
    assert claim.task.attempt_count == task.attempt_count
    assert claim.task.redrive_count == task.redrive_count
    assert claim.lease_expires_at == task.lease_expires_at


def test_fresh_tasks_take_the_fresh_path(storage, paths):
    for i in range(5):
        storage.enqueue(NewTask(f"t{i}", "q", "h", payload=bytes([i]), headers={"k": str(i)}))
    claims = storage.claim_due("q", 3, LEASE) + storage.claim_due("q", 3, LEASE)
    assert paths == ["fresh", "fresh"]
    assert [c.task_id for c in claims] == [f"t{i}" for i in range(5)]
    for i, claim in enumerate(claims):
        assert claim.task.payload == bytes([i]) and dict(claim.task.headers) == {"k": str(i)}
        assert claim.task.attempts == () and not claim.reclaimed
        assert claim.task.status is Status.IN_FLIGHT and claim.task.next_attempt_at is None
        _stored(storage, claim)
    assert storage.claim_due("q", 3, LEASE) == []
    assert paths[-1] == "fresh"  # an empty poll: nothing picked, nothing declined


def test_a_task_with_history_declines_the_fresh_path_and_the_full_one_reads_it(storage, paths):
    for i in range(3):
        storage.enqueue(NewTask(f"t{i}", "q", "h"))
    first = storage.claim_due("q", 1, LEASE)[0]
    storage.reschedule(first.task_id, first.token, timedelta(0), ErrorInfo("E", "again", "d"))
    # t1, t2 (due since enqueue) then t0 (due again since its reschedule), one batch
    claims = storage.claim_due("q", 3, LEASE)
    assert paths == ["fresh", "declined", "full"]
    assert [c.task_id for c in claims] == ["t1", "t2", "t0"]
    again = claims[2]
    assert [(a.attempt_no, a.outcome) for a in again.task.attempts] == [
        (1, Outcome.RETRYABLE_FAILURE)
    ]
    assert again.task.attempts[0].error == ErrorInfo("E", "again", "d")
    assert again.task.attempts[0].started_at == first.claimed_at
    assert claims[0].task.attempts == () and claims[1].task.attempts == ()
    for claim in claims:
        _stored(storage, claim)


def test_after_a_decline_the_full_path_serves_until_it_takes_only_fresh_tasks(storage, paths):
    storage.enqueue(NewTask("old", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    storage.reschedule(claim.task_id, claim.token, timedelta(0))
    storage.enqueue(NewTask("new", "q", "h"))
    assert [c.task_id for c in storage.claim_due("q", 1, LEASE)] == ["old"]  # declined, full
    assert [c.task_id for c in storage.claim_due("q", 1, LEASE)] == ["new"]  # full: fresh
    storage.enqueue(NewTask("newer", "q", "h"))
    assert [c.task_id for c in storage.claim_due("q", 1, LEASE)] == ["newer"]  # fresh again
    assert paths == ["fresh", "declined", "full", "full", "fresh"]


def test_a_redriven_task_is_not_fresh(storage, paths):
    storage.enqueue(NewTask("t", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    storage.dead_letter(claim.task_id, claim.token, ErrorInfo("Boom", "no"))
    assert storage.redrive("q", ByIds(("t",))) == 1
    again = storage.claim_due("q", 1, LEASE)[0]
    assert paths == ["fresh", "declined", "full"]
    assert (again.task.attempt_count, again.task.redrive_count) == (0, 1)
    assert [(a.attempt_no, a.outcome) for a in again.task.attempts] == [
        (1, Outcome.PERMANENT_FAILURE)
    ]
    _stored(storage, again)


def test_a_reclaim_is_not_fresh(storage, paths):
    storage.enqueue(NewTask("t", "q", "h"))
    lost = storage.claim_due("q", 1, timedelta(milliseconds=1))[0]
    while storage.now() <= lost.lease_expires_at:
        time.sleep(0.002)
    again = storage.claim_due("q", 1, LEASE)[0]
    assert paths == ["fresh", "declined", "full"]
    assert again.reclaimed and again.task.attempt_count == 1
    assert [(a.attempt_no, a.outcome, a.started_at) for a in again.task.attempts] == [
        (1, Outcome.LEASE_EXPIRED, lost.claimed_at)
    ]
    _stored(storage, again)


def test_a_declined_fresh_claim_changes_nothing(storage, raw):
    for i in range(3):
        storage.enqueue(NewTask(f"t{i}", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    storage.reschedule(claim.task_id, claim.token, timedelta(0), ErrorInfo("E", "m"))
    tasks = sql.Identifier(storage.schema, "tasks")
    everything = sql.SQL("SELECT * FROM {} ORDER BY seq").format(tasks)
    attempts = sql.SQL("SELECT * FROM {} ORDER BY task_id, attempt_no").format(
        sql.Identifier(storage.schema, "attempts")
    )
    before = (raw.execute(everything).fetchall(), raw.execute(attempts).fetchall())
    statement = Queries(storage.schema).claim_fresh
    rows = raw.execute(statement, claim_params("q", 3, LEASE)).fetchall()
    assert rows == [(None,) * CLAIM_WIDTH], "declined: one row of NULLs"
    assert (raw.execute(everything).fetchall(), raw.execute(attempts).fetchall()) == before
    # and with only fresh tasks in reach it claims them, returning a claim's columns
    rows = raw.execute(statement, claim_params("q", 2, LEASE)).fetchall()
    assert [r[0] for r in rows] == ["t1", "t2"] and all(len(r) == CLAIM_WIDTH for r in rows)


def test_the_fresh_claim_judges_the_newest_version_of_what_it_locks(storage, dsn, raw):
    """A row changed (here: redriven) by a transaction that commits after the fresh claim's
    snapshot but before the claim locks it is judged on its committed version: declined.
    (SKIP LOCKED would skip the locked row; to reach the re-read deterministically, the
    statement is run with plain FOR UPDATE, which waits for the lock instead.)"""
    storage.enqueue(NewTask("t", "q", "h"))
    tasks = sql.Identifier(storage.schema, "tasks")
    with psycopg.connect(dsn, autocommit=True) as holder:
        waiting = (
            Queries(storage.schema)
            .claim_fresh.as_string(holder)
            .replace("FOR UPDATE SKIP LOCKED", "FOR UPDATE")
        )
        holder.execute("BEGIN")
        holder.execute(sql.SQL("SELECT 1 FROM {} WHERE id = 't' FOR UPDATE").format(tasks))
        result: list[list[tuple]] = []
        errors: list[BaseException] = []

        def claim_it() -> None:
            try:
                with psycopg.connect(dsn, autocommit=True, application_name=CLAIMER) as claimer:
                    claimer.execute(f"SET lock_timeout = '{HANG_S:g}s'")  # a hang guard
                    rows = claimer.execute(waiting, claim_params("q", 1, LEASE)).fetchall()
                    result.append(rows)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=claim_it)
        thread.start()
        deadline = time.monotonic() + HANG_S
        while not raw.execute(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND application_name = %s",
            (CLAIMER,),
        ).fetchone():
            assert time.monotonic() < deadline, "the claim never waited for the lock"
            time.sleep(0.01)
        holder.execute(sql.SQL("UPDATE {} SET redrive_count = 1 WHERE id = 't'").format(tasks))
        holder.execute("COMMIT")
        thread.join(HANG_S)
    assert not errors, errors
    assert result == [[(None,) * CLAIM_WIDTH]], "the redriven row must make it decline"
    task = storage.get("t")
    assert (task.status, task.redrive_count, task.attempts) == (Status.PENDING, 1, ())
