"""The SQLite backend on real files: schema ledger, clock, durability, errors, plugin."""

from __future__ import annotations

import os
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from rdq_sqlite import schema
from rdq_sqlite.plugin import SqliteBackend, backend
from rdq_sqlite.storage import SqliteStorage

from rdq_compliance.provision.backend import ProvisionRequest
from rdq_core.errors import (
    BackendUnavailable,
    InvalidArgument,
    NotFound,
    StaleClaim,
    StaleCursor,
)
from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    ByIds,
    DlqFilter,
    ErrorInfo,
    NewTask,
    Outcome,
    Status,
    utc_from_micros,
)

T0 = 1_700_000_000_000_000  # µs since the epoch
SEC = 1_000_000


class FakeClock:
    def __init__(self, us: int = T0) -> None:
        self.us = us

    def __call__(self) -> int:
        return self.us


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    s = SqliteStorage(tmp_path / "db.sqlite3", create=True, clock=clock)
    yield s
    s.close()


def raw(path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# ---- schema ----


def test_migrations_are_recorded_once_and_idempotent(tmp_path, clock):
    path = tmp_path / "db.sqlite3"
    SqliteStorage(path, create=True, clock=clock).close()
    clock.us += SEC
    SqliteStorage(path, clock=clock).close()
    conn = raw(path)
    assert conn.execute("SELECT version, applied_at FROM rdq_migrations").fetchall() == [
        (schema.LATEST_VERSION, T0)
    ]
    assert schema.migrate(conn, T0 + 2 * SEC) == []
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"tasks", "attempts", "rdq_clock", "rdq_migrations"} <= tables


def test_migrate_on_empty_database_applies_everything(tmp_path):
    conn = raw(tmp_path / "x.sqlite3")
    assert schema.migrate(conn, T0) == [m.version for m in schema.MIGRATIONS]
    assert schema.migrate(conn, T0) == []
    assert schema.applied_versions(conn) == [m.version for m in schema.MIGRATIONS]


def test_database_from_a_newer_rdq_is_refused(tmp_path):
    path = tmp_path / "db.sqlite3"
    SqliteStorage(path, create=True).close()
    raw(path).execute("INSERT INTO rdq_migrations VALUES (999, 0)")
    with pytest.raises(InvalidArgument, match="newer"):
        SqliteStorage(path)


def test_claim_is_an_index_range_scan(store):
    plan = (
        store._conn()
        .execute(
            "EXPLAIN QUERY PLAN SELECT seq, id, status, claimed_at FROM tasks"
            " WHERE queue = ? AND due_at IS NOT NULL AND due_at <= ?"
            " AND status IN ('PENDING', 'IN_FLIGHT') ORDER BY due_at, seq LIMIT ?",
            ("q", 0, 1),
        )
        .fetchall()
    )
    text = " ".join(str(r[-1]) for r in plan)
    assert "tasks_due" in text and "TEMP B-TREE" not in text


# ---- durability and clock ----


def test_data_survives_reopening(tmp_path, clock):
    path = tmp_path / "db.sqlite3"
    with SqliteStorage(path, create=True, clock=clock) as s:
        s.enqueue(NewTask("a", "q", "h", b"\x00\xffpayload", {"k": "v", "ü": "✓"}))
        (claim,) = s.claim_due("q", 1, timedelta(seconds=30))
        s.dead_letter("a", claim.token, ErrorInfo("Boom", "bad", "trace"))
        before = s.get("a")
    with SqliteStorage(path, clock=clock) as s:
        assert s.get("a") == before
        assert before.payload == b"\x00\xffpayload"
        assert dict(before.headers) == {"k": "v", "ü": "✓"}
        assert before.attempts[0].error == ErrorInfo("Boom", "bad", "trace")


def test_clock_is_monotonic_when_the_host_clock_steps_back(store, clock):
    store.enqueue(NewTask("a", "q", "h"))
    clock.us -= 10 * SEC
    store.enqueue(NewTask("b", "q", "h"))
    assert store.get("b").created_at == store.get("a").created_at == utc_from_micros(T0)
    assert store.now() == utc_from_micros(T0)
    clock.us = T0 + 5
    assert store.now() == utc_from_micros(T0 + 5)


def test_clock_floor_is_shared_across_handles(tmp_path):
    path = tmp_path / "db.sqlite3"
    ahead = SqliteStorage(path, create=True, clock=FakeClock(T0 + 60 * SEC))
    behind = SqliteStorage(path, clock=FakeClock(T0))
    ahead.enqueue(NewTask("a", "q", "h"))
    behind.enqueue(NewTask("b", "q", "h"))
    assert behind.get("b").created_at == utc_from_micros(T0 + 60 * SEC)
    assert behind.now() == utc_from_micros(T0 + 60 * SEC)
    ahead.close()
    behind.close()


def test_real_clock_is_utc_microseconds(tmp_path):
    with SqliteStorage(tmp_path / "db.sqlite3", create=True) as s:
        s.enqueue(NewTask("a", "q", "h"))
        created = s.get("a").created_at
        assert created.tzinfo is not None and created <= s.now()
        assert s.capabilities().multi_process is True
        assert s.capabilities().max_payload_bytes is None


# ---- the contract's rules that matter most here ----


def test_reclaim_after_redrive_numbers_from_history(store, clock):
    """The original incident: LEASE_EXPIRED numbered from attempt_count after redrive."""
    store.enqueue(NewTask("a", "q", "h"))
    (c1,) = store.claim_due("q", 1, timedelta(seconds=10))
    store.dead_letter("a", c1.token, ErrorInfo("E", "m"))
    assert store.redrive("q", ByIds(["a"])) == 1
    redriven = store.get("a")
    assert (redriven.status, redriven.attempt_count, redriven.redrive_count) == (
        Status.PENDING,
        0,
        1,
    )
    (c2,) = store.claim_due("q", 1, timedelta(seconds=10))
    clock.us += 10 * SEC  # lease ends exactly now: reclaimable
    (c3,) = store.claim_due("q", 1, timedelta(seconds=10))
    assert c3.reclaimed and not c2.reclaimed
    assert [(a.attempt_no, a.outcome) for a in c3.task.attempts] == [
        (1, Outcome.PERMANENT_FAILURE),
        (2, Outcome.LEASE_EXPIRED),
    ]
    assert c3.task.attempts[1].error.type == LEASE_EXPIRED_ERROR
    assert c3.task.attempts[1].started_at == c2.claimed_at
    assert c3.task.attempt_count == 1
    store.complete("a", c3.token)
    assert [a.attempt_no for a in store.get("a").attempts] == [1, 2, 3]


def test_stale_token_changes_nothing(store, clock):
    store.enqueue(NewTask("a", "q", "h"))
    (c1,) = store.claim_due("q", 1, timedelta(seconds=1))
    clock.us += 2 * SEC
    # lease expired but nobody reclaimed: the token still works
    store.extend_lease("a", c1.token, timedelta(seconds=1))
    clock.us += 2 * SEC
    (c2,) = store.claim_due("q", 1, timedelta(seconds=30))
    before = store.get("a")
    for call in (
        lambda: store.complete("a", c1.token),
        lambda: store.reschedule("a", c1.token, timedelta(0)),
        lambda: store.dead_letter("a", c1.token),
        lambda: store.extend_lease("a", c1.token, timedelta(seconds=5)),
        lambda: store.complete("nope", c1.token),
    ):
        with pytest.raises(StaleClaim, match="is not the current claim"):
            call()
    assert store.get("a") == before
    store.complete("a", c2.token)
    with pytest.raises(StaleClaim, match="status SUCCEEDED"):
        store.complete("a", c2.token)


def test_claim_respects_due_time_order_limit_and_queues(store, clock):
    store.enqueue(NewTask("late", "q", "h", delay=timedelta(seconds=5)))
    store.enqueue(NewTask("b", "q", "h"))
    store.enqueue(NewTask("a", "q", "h"))
    store.enqueue(NewTask("early", "q", "h", delay=timedelta(seconds=-5)))
    store.enqueue(NewTask("other", "q2", "h"))
    got = store.claim_due("q", 10, timedelta(seconds=60))
    assert [c.task_id for c in got] == ["early", "b", "a"]
    clock.us += 5 * SEC
    assert [c.task_id for c in store.claim_due("q", 10, timedelta(seconds=60))] == ["late"]
    assert store.claim_due("q", 10, timedelta(seconds=60)) == []
    assert [c.task_id for c in store.claim_due("q2", 1, timedelta(seconds=60))] == ["other"]


def test_dlq_paging_filters_and_cursors(store):
    for i in range(7):
        store.enqueue(NewTask(f"t{i}", "q", "h1" if i % 2 else "h2"))
    for c in store.claim_due("q", 10, timedelta(seconds=60)):
        store.dead_letter(c.task_id, c.token, ErrorInfo("E1" if c.task_id < "t4" else "E2", "x"))
    ids = []
    page = store.dlq_list("q", limit=3)
    while True:
        ids += [t.id for t in page.tasks]
        if page.next_cursor is None:
            break
        page = store.dlq_list("q", cursor=page.next_cursor, limit=3)
    assert ids == [f"t{i}" for i in range(7)]  # same dead_at: ordered by id
    assert [t.id for t in store.dlq_list("q", DlqFilter(handler="h1")).tasks] == ["t1", "t3", "t5"]
    assert [t.id for t in store.dlq_list("q", DlqFilter(error_type="E2", handler="h2")).tasks] == [
        "t4",
        "t6",
    ]
    assert store.dlq_list("q", DlqFilter()).tasks == ()
    assert len(store.dlq_list("q", DlqFilter(everything=True)).tasks) == 7
    cursor = store.dlq_list("q", limit=1).next_cursor
    with pytest.raises(StaleCursor, match="queue"):
        store.dlq_list("other", cursor=cursor)
    with pytest.raises(StaleCursor):
        store.dlq_list("q", cursor="garbage!")
    assert store.redrive("q", DlqFilter()) == 0
    assert store.purge("q", DlqFilter(error_type="E1")) == 4
    assert store.purge("q", ByIds(["t4", "t4", "missing"])) == 1
    assert store._conn().execute("SELECT COUNT(*) FROM attempts").fetchone() == (2,)
    with pytest.raises(NotFound):
        store.get("t0")


def test_purge_succeeded_deletes_old_successes_with_history(store, clock):
    store.enqueue(NewTask("a", "q", "h"))
    (c,) = store.claim_due("q", 1, timedelta(seconds=60))
    store.complete("a", c.token)
    clock.us += 10 * SEC
    assert store.purge_succeeded("q", timedelta(seconds=11)) == 0
    assert store.purge_succeeded("q", timedelta(seconds=10)) == 1
    assert store._conn().execute("SELECT COUNT(*) FROM attempts").fetchone() == (0,)


# ---- errors: never a raw sqlite3 exception ----


def test_locked_database_is_backend_unavailable(tmp_path):
    path = tmp_path / "db.sqlite3"
    store = SqliteStorage(path, create=True, busy_timeout=0.2)
    holder = raw(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendUnavailable, match="locked") as info:
            store.enqueue(NewTask("a", "q", "h"))
        assert str(path) in str(info.value)
        assert store.stats("q").pending == 0  # readers are not blocked (WAL)
    finally:
        holder.execute("ROLLBACK")
    assert store.enqueue(NewTask("a", "q", "h")) is True  # the connection is still usable
    store.close()


def test_missing_file_and_directory_are_invalid_arguments(tmp_path):
    with pytest.raises(InvalidArgument, match="no SQLite database"):
        SqliteStorage(tmp_path / "missing.sqlite3")
    with pytest.raises(InvalidArgument, match="directory"):
        SqliteStorage(tmp_path)


def test_not_a_database_is_backend_unavailable(tmp_path):
    path = tmp_path / "junk.sqlite3"
    path.write_bytes(b"this is not an sqlite file, " * 100)
    with pytest.raises(BackendUnavailable, match="not an SQLite database"):
        SqliteStorage(path)


def test_unopenable_path_is_backend_unavailable(tmp_path):
    with pytest.raises(BackendUnavailable, match="cannot open"):
        SqliteStorage(tmp_path / "no" / "such" / "dir" / "db.sqlite3", create=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_directory_is_backend_unavailable(tmp_path):
    path = tmp_path / "ro" / "db.sqlite3"
    path.parent.mkdir()
    SqliteStorage(path, create=True).close()
    for p in path.parent.iterdir():
        p.chmod(0o444)
    path.parent.chmod(0o555)
    try:
        with pytest.raises(BackendUnavailable):
            SqliteStorage(path).enqueue(NewTask("a", "q", "h"))
    finally:
        path.parent.chmod(0o755)


def test_closed_storage_refuses_politely(store):
    store.close()
    store.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        store.get("a")


# ---- plugin ----


def test_provision_in_workdir_cleans_up_what_it_created(tmp_path):
    server = backend.provision(ProvisionRequest(workdir=tmp_path / "work"))
    assert server.origin.startswith("embedded (directory")
    assert server.faults == frozenset()
    ns = server.create_namespace()
    with backend.open(server.dsn, ns) as s:
        s.enqueue(NewTask("a", "q", "h"))
    assert (tmp_path / "work" / f"{ns}.sqlite3").is_file()
    server.close()
    server.close()
    assert list((tmp_path / "work").iterdir()) == []


def test_provision_with_dsn_creates_the_directory_and_keeps_data(tmp_path):
    dsn = tmp_path / "given" / "dir"
    server = SqliteBackend().provision(ProvisionRequest(workdir=tmp_path, dsn=str(dsn)))
    assert server.dsn == str(dsn)
    a, b = server.create_namespace(), server.create_namespace()
    assert a != b
    with backend.open(str(dsn), a) as s:
        s.enqueue(NewTask("x", "q", "h"))
    with backend.open(str(dsn), b) as s:
        assert s.stats("q").pending == 0  # namespaces are isolated
    server.drop_namespace(b)
    server.drop_namespace(b)
    assert not any(p.name.startswith(b) for p in dsn.iterdir())
    server.close()
    with backend.open(str(dsn), a) as s:
        assert s.stats("q").pending == 1


def test_plugin_rejects_bad_dsn_and_namespace(tmp_path):
    file_dsn = tmp_path / "a-file"
    file_dsn.write_text("x")
    with pytest.raises(InvalidArgument, match="not a directory"):
        backend.provision(ProvisionRequest(workdir=tmp_path, dsn=str(file_dsn)))
    with pytest.raises(InvalidArgument, match="does not exist"):
        backend.open(str(tmp_path / "nowhere"), "ns")
    # another backend's DSN (a URL) is refused, not turned into a directory named after it
    url = "postgresql://postgres@127.0.0.1:5432/test"
    with pytest.raises(InvalidArgument, match="is a URL"):
        backend.provision(ProvisionRequest(workdir=tmp_path, dsn=url))
    assert not Path("postgresql:").exists()
    with pytest.raises(InvalidArgument, match="does not exist"):
        backend.open(str(tmp_path), "ns")
    for bad in ("../escape", ".hidden", "", "a/b"):
        with pytest.raises(InvalidArgument, match="namespace"):
            backend.open(str(tmp_path), bad)


def test_close_closes_every_connection_it_opened_in_this_process(tmp_path):
    """close() closes this process's connections, one per thread (the mutation score
    found ``p == pid`` made ``p != pid`` there, which closes none, survived the kit)."""
    import threading

    storage = SqliteStorage(tmp_path / "c.sqlite3", create=True)
    conns = [storage._conn()]
    t = threading.Thread(target=lambda: conns.append(storage._conn()))
    t.start()
    t.join()
    storage.close()
    for conn in conns:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
