"""The PostgreSQL schema and plumbing: the migrations ledger (idempotent, safe with
concurrent creators), namespaces, CHECK constraints and the attempts key, connections
(application_name, fork safety), retries, and the plugin's registration."""

from __future__ import annotations

import multiprocessing
import os
import threading
import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql
from rdq_postgres import schema
from rdq_postgres.errors import is_retryable
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_compliance import registry
from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_core.model import NewTask
from tests.backends.postgres._pg_support import require_server

DSN = require_server()
LEASE = timedelta(minutes=5)


def _ledger(raw: psycopg.Connection, ns: str) -> list[int]:
    query = sql.SQL("SELECT version FROM {} ORDER BY version").format(
        sql.Identifier(ns, "rdq_migrations")
    )
    return [r[0] for r in raw.execute(query)]


def test_migrations_are_recorded_once_and_reapplying_is_a_no_op(raw, namespace):
    assert _ledger(raw, namespace) == [m.version for m in schema.MIGRATIONS]
    assert schema.migrate(raw, namespace) == []
    assert schema.create_namespace(raw, namespace) == []
    PostgresStorage(DSN, namespace).close()
    assert _ledger(raw, namespace) == [schema.LATEST_VERSION]
    tables = {
        r[0]
        for r in raw.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (namespace,))
    }
    assert tables == {"tasks", "attempts", "rdq_migrations"}


def test_concurrent_creators_of_one_namespace_are_serialised(raw):
    """Eight sessions create the same namespace at once: the advisory lock lets exactly one
    apply the migrations; the others find the ledger filled in."""
    ns = f"rdq_{uuid.uuid4().hex}"
    start = threading.Barrier(8)
    applied: list[list[int]] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            with psycopg.connect(DSN, autocommit=True) as conn:
                start.wait(10)
                applied.append(schema.create_namespace(conn, ns))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert sorted(applied, key=len) == [[]] * 7 + [[schema.LATEST_VERSION]]
        assert _ledger(raw, ns) == [schema.LATEST_VERSION]
    finally:
        schema.drop_namespace(raw, ns)


def test_drop_namespace_is_idempotent(server, raw):
    ns = server.create_namespace()
    server.drop_namespace(ns)
    server.drop_namespace(ns)
    assert raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (ns,)).fetchone() is None


def test_drop_namespace_cuts_a_session_that_holds_a_lock(dsn, raw):
    server = PostgresServer(dsn, drop_lock_timeout="200ms")
    ns = server.create_namespace()
    stuck = psycopg.connect(dsn, application_name=f"rdq:{ns}")  # a transaction stays open
    try:
        stuck.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(ns, "tasks")))
        server.drop_namespace(ns)  # waits for the lock 200 ms, cuts the session, drops
        gone = raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (ns,)).fetchone()
        assert gone is None
        with pytest.raises(psycopg.OperationalError):
            stuck.execute("SELECT 1")
    finally:
        stuck.close()
        server.close()


def test_open_of_a_missing_namespace_is_invalid_argument():
    st = PostgresStorage(DSN, "rdq_never_created_here")
    with pytest.raises(InvalidArgument, match="does not exist"):
        st.now()
    st.close()


@pytest.mark.parametrize(
    "bad", ["", "Public", "a-b", "1abc", 'x"; DROP SCHEMA public;--', "x" * 64]
)
def test_bad_namespace_names_are_invalid_argument(bad):
    with pytest.raises(InvalidArgument):
        PostgresStorage(DSN, bad)
    with pytest.raises(InvalidArgument):
        schema.schema_name(bad)


def test_newer_schema_version_is_refused(raw, namespace):
    raw.execute(
        sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(
            sql.Identifier(namespace, "rdq_migrations")
        ),
        (schema.LATEST_VERSION + 1,),
    )
    with pytest.raises(InvalidArgument, match="newer"):
        PostgresStorage(DSN, namespace).now()


@pytest.mark.parametrize(
    "change",
    [
        "status = 'PENDING', due_at = NULL",
        "status = 'IN_FLIGHT'",
        "status = 'DEAD'",
        "status = 'SUCCEEDED', due_at = NULL, next_attempt_at = NULL",
        "status = 'RUNNING'",
        "attempt_count = -1",
        "due_at = due_at + interval '1 s'",
    ],
)
def test_check_constraints_hold_each_status_to_its_shape(storage, raw, change):
    storage.enqueue(NewTask("t", "q", "h"))
    tasks = sql.Identifier(storage.schema, "tasks")
    with pytest.raises(pg_errors.CheckViolation):
        raw.execute(sql.SQL("UPDATE {} SET " + change).format(tasks))  # type: ignore[arg-type]


def test_attempt_numbers_are_unique_per_task_and_deleted_with_it(storage, raw):
    storage.enqueue(NewTask("t", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    storage.dead_letter("t", claim.token)
    attempts = sql.Identifier(storage.schema, "attempts")
    duplicate = sql.SQL(
        "INSERT INTO {} (task_id, attempt_no, started_at, finished_at, outcome)"
        " VALUES ('t', 1, now(), now(), 'SUCCESS')"
    ).format(attempts)
    with pytest.raises(pg_errors.UniqueViolation) as info:
        raw.execute(duplicate)
    assert info.value.diag.constraint_name == schema.ATTEMPT_NO_CONSTRAINT
    assert is_retryable(info.value)
    assert storage.purge("q", ["t"]) == 1
    count = raw.execute(sql.SQL("SELECT count(*) FROM {}").format(attempts)).fetchone()
    assert count == (0,)


def test_a_duplicate_attempt_number_is_retried_with_a_fresh_statement(storage, raw):
    """The claim's snapshot may predate an attempt committed on a row it then locks; the
    unique key refuses the duplicate number and the statement is simply run again."""
    storage.enqueue(NewTask("t", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    storage.reschedule("t", claim.token, timedelta(0))
    calls = []
    insert = sql.SQL(
        "INSERT INTO {} (task_id, attempt_no, started_at, finished_at, outcome)"
        " VALUES ('t', 1, now(), now(), 'SUCCESS')"
    ).format(sql.Identifier(storage.schema, "attempts"))

    def flaky(conn: psycopg.Connection) -> str:
        calls.append(1)
        if len(calls) == 1:
            conn.execute(insert)  # duplicate (t, 1): UniqueViolation on the attempts key
        return "done"

    assert storage._run("probe", flaky) == "done" and len(calls) == 2


def test_other_integrity_errors_are_not_retried(storage):
    calls = []

    def bad(conn: psycopg.Connection) -> None:
        calls.append(1)
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (task_id, attempt_no, started_at, finished_at, outcome)"
                " VALUES ('nobody', 1, now(), now(), 'SUCCESS')"
            ).format(sql.Identifier(storage.schema, "attempts"))
        )

    with pytest.raises(BackendUnavailable, match="constraint"):
        storage._run("probe", bad)
    assert len(calls) == 1


def test_application_name_names_the_namespace(storage, raw, namespace):
    storage.now()
    assert storage.application_name == f"rdq:{namespace}"
    names = raw.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (f"rdq:{namespace}",)
    ).fetchone()
    assert names == (1,)
    custom = PostgresStorage(DSN, namespace, application_name="my-worker")
    try:
        custom.now()
        assert custom.application_name == "my-worker"
    finally:
        custom.close()


def _child_uses_inherited_storage(storage: PostgresStorage, results) -> None:
    try:
        storage.enqueue(NewTask("from-child", "q", "h"))
        results.put(("ok", storage._source.pool().get_stats().get("connections_num")))
    except BaseException as exc:  # report, never hang the parent
        results.put(("error", repr(exc)))
    finally:
        storage.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_opens_its_own_pool_and_leaves_the_parents_alone(storage, raw):
    storage.enqueue(NewTask("from-parent", "q", "h"))
    parent_pids = {
        r[0]
        for r in raw.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (storage.application_name,),
        )
    }
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_child_uses_inherited_storage, args=(storage, results))
    child.start()
    outcome = results.get(timeout=30)
    child.join(30)
    assert outcome[0] == "ok", outcome
    # The parent's connection survived the child's use and close of the storage.
    still = {
        r[0]
        for r in raw.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (storage.application_name,),
        )
    }
    assert parent_pids <= still
    assert storage.get("from-child").id == "from-child"
    assert storage.stats("q").pending == 2


def test_the_backend_is_registered_as_postgres():
    loaded = registry.load_backend("postgres")
    assert isinstance(loaded, PostgresBackend) and loaded.name == "postgres"
    st = loaded.open(DSN, "rdq_not_opened_yet")  # lazy: nothing connects yet
    assert isinstance(st, PostgresStorage)
    assert st.capabilities().multi_process and st.capabilities().max_payload_bytes is None
    assert "now()" in st.capabilities().clock
    st.close()
