"""The PostgreSQL schema and plumbing: the migrations ledger (idempotent, safe with
concurrent creators), namespaces, CHECK constraints and the attempts key, connections
(application_name, fork safety), retries, and the plugin's registration."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql
from rdq_postgres import connection, schema
from rdq_postgres.errors import is_retryable
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.server import PostgresServer
from rdq_postgres.stock import NamespaceStock
from rdq_postgres.storage import PostgresStorage

from rdq_compliance import registry
from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_core.model import NewTask
from tests._waiting import HANG_S
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
                start.wait(HANG_S)
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


_CATALOG = """
SELECT 'column', c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' ' || a.attidentity::text || ' ' || coalesce(co.collname, '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
 WHERE n.nspname = %(ns)s AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind = 'r'
UNION ALL
SELECT 'index', replace(pg_get_indexdef(i.indexrelid), %(ns)s, 'NS')
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(ns)s
UNION ALL
SELECT 'constraint', c.relname || ' ' || k.conname || ' '
       || replace(pg_get_constraintdef(k.oid), %(ns)s, 'NS')
  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(ns)s
ORDER BY 1, 2
"""


def _catalog(raw: psycopg.Connection, ns: str) -> list[tuple[str, str]]:
    return [(kind, text) for kind, text in raw.execute(_CATALOG, {"ns": ns})]


def test_a_new_namespace_in_one_round_trip_is_the_migrated_one(raw):
    """create_new_namespace (the stock's and the server's: one multi-statement query) makes
    exactly what the migrations make one statement at a time, ledger included."""
    slow, fast = f"rdq_{uuid.uuid4().hex}", f"rdq_{uuid.uuid4().hex}"
    try:
        schema.create_namespace(raw, slow)
        schema.create_new_namespace(raw, fast)
        described = _catalog(raw, fast)
        assert len(described) > 30
        assert described == _catalog(raw, slow)
        assert _ledger(raw, fast) == _ledger(raw, slow) == [schema.LATEST_VERSION]
        assert schema.migrate(raw, fast) == []
    finally:
        schema.drop_namespace(raw, slow)
        schema.drop_namespace(raw, fast)


def test_a_new_namespace_is_all_or_nothing(raw):
    """A name that exists already is refused and left as it was; a failure inside the one
    query leaves nothing behind (it runs as one transaction)."""
    ns = f"rdq_{uuid.uuid4().hex}"
    schema.create_new_namespace(raw, ns)
    try:
        with pytest.raises(pg_errors.DuplicateSchema):
            schema.create_new_namespace(raw, ns)
        assert _ledger(raw, ns) == [schema.LATEST_VERSION]
    finally:
        schema.drop_namespace(raw, ns)
    # a table in the way makes a later statement fail: the schema made first is gone too
    taken = f"rdq_{uuid.uuid4().hex}"
    broken = list(schema.MIGRATIONS[0].statements)
    broken.insert(1, "CREATE TABLE {s}.tasks (x int)")
    original = schema.MIGRATIONS
    schema.MIGRATIONS = (schema.Migration(1, "broken", tuple(broken)),)
    try:
        with pytest.raises(pg_errors.DuplicateTable):
            schema.create_new_namespace(raw, taken)
    finally:
        schema.MIGRATIONS = original
    gone = raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (taken,)).fetchone()
    assert gone is None
    assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def _exists(raw: psycopg.Connection, ns: str) -> bool:
    row = raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (ns,)).fetchone()
    return row is not None


def _until(predicate, timeout: float = HANG_S) -> bool:
    """Until ``predicate()``; ``timeout`` is a hang guard (the wait ends when it holds)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_discarded_namespace_is_dropped_in_the_background(dsn, raw):
    """With a stock, discard_namespace returns at once and the stock's thread drops the
    namespace (and the server forgets it); without one it is dropped before returning."""
    server = PostgresServer(dsn, prefetch=2)
    try:
        ns = server.create_namespace()
        storage = PostgresStorage(dsn, ns)
        storage.enqueue(NewTask(id="t", queue="q", handler="h"))
        storage.close()
        server.discard_namespace(ns)
        assert _until(lambda: not _exists(raw, ns)), "the stock never dropped it"
        assert _until(lambda: ns not in server.admin._created)
    finally:
        server.close()
    plain = PostgresServer(dsn)
    try:
        ns = plain.create_namespace()
        plain.discard_namespace(ns)
        assert not _exists(raw, ns)
    finally:
        plain.close()


def test_close_drops_what_the_stock_holds_and_what_was_discarded(dsn, raw):
    """Namespaces made ahead and never handed out, and discarded ones (dropped by the
    thread or not yet), are all gone after close(); a discard after close drops at once."""
    server = PostgresServer(dsn, prefetch=3)
    stock = server._stock
    assert stock is not None
    assert _until(lambda: len(stock._ready) == 3)
    made = [ns for ns, _ in stock._ready]
    handed = [server.create_namespace() for _ in range(4)]
    for ns in handed:
        server.discard_namespace(ns)
    server.close()
    for ns in [*made, *handed]:
        assert not _exists(raw, ns), ns
    late = PostgresServer(dsn, prefetch=1)
    ns = late.create_namespace()
    late.close()
    late.discard_namespace(ns)  # closed stock: dropped now (idempotent)
    assert not _exists(raw, ns)


def test_the_stock_hands_back_the_drops_it_did_not_do(dsn, raw):
    """close() returns the discarded namespaces still queued (and the unused ones), for
    the caller to drop; it waits for the drop under way."""
    gate, busy = threading.Event(), threading.Event()
    dropped: list[str] = []

    def slow_drop(conn: psycopg.Connection, ns: str) -> None:
        busy.set()
        gate.wait(HANG_S)
        schema.drop_namespace(conn, ns)

    stock = NamespaceStock(dsn, 1, drop=slow_drop, on_dropped=dropped.append)
    first, second = f"rdq_{uuid.uuid4().hex}", f"rdq_{uuid.uuid4().hex}"
    for ns in (first, second):
        schema.create_new_namespace(raw, ns)
    left: list[str] = []
    try:
        assert _until(lambda: len(stock._ready) == 1)
        assert stock.discard(first) and busy.wait(HANG_S)
        assert stock.discard(second)
        threading.Timer(0.2, gate.set).start()
        left = stock.close()
        assert dropped == [first] and not _exists(raw, first)
        assert left[0] == second and len(left) == 2 and _exists(raw, second)
        assert not stock.discard(f"rdq_{uuid.uuid4().hex}")  # closed: the caller drops
        assert stock.take() is None
    finally:
        gate.set()
        for ns in [*left, first, second]:
            schema.drop_namespace(raw, ns)


def test_a_failed_background_drop_is_retried(dsn, raw):
    """A drop that fails on the thread (here: the first attempt raises) stays queued and
    runs again after the pause."""
    failures: list[str] = []

    def flaky_drop(conn: psycopg.Connection, ns: str) -> None:
        if not failures:
            failures.append(ns)
            raise psycopg.OperationalError("pretend the server went away")
        schema.drop_namespace(conn, ns)

    stock = NamespaceStock(dsn, 1, drop=flaky_drop)
    try:
        ns = f"rdq_{uuid.uuid4().hex}"
        schema.create_new_namespace(raw, ns)
        assert stock.discard(ns)
        assert _until(lambda: not _exists(raw, ns)), "never retried"  # after RETRY_PAUSE_S
        assert failures == [ns]
    finally:
        for left in stock.close():
            schema.drop_namespace(raw, left)


def test_ledger_versions_tells_a_missing_ledger_in_and_out_of_a_transaction(raw):
    """The one-query read (outside a transaction) and the catalog read (inside one) agree:
    None for a schema without a ledger, and for a missing schema; the versions once
    migrated; and the transaction is not aborted by the probe."""
    bare = f"rdq_{uuid.uuid4().hex}"
    raw.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(bare)))
    try:
        assert schema.ledger_versions(raw, bare) is None
        assert schema.ledger_versions(raw, "rdq_no_such_schema") is None
        with raw.transaction():
            assert schema.ledger_versions(raw, bare) is None
            assert raw.execute("SELECT 1").fetchone() == (1,)
        assert schema.migrate(raw, bare) == [schema.LATEST_VERSION]
        assert schema.ledger_versions(raw, bare) == [schema.LATEST_VERSION]
        with raw.transaction():
            assert schema.ledger_versions(raw, bare) == [schema.LATEST_VERSION]
    finally:
        schema.drop_namespace(raw, bare)


def _backend_pid(storage: PostgresStorage) -> int:
    with storage._source.connection() as conn:
        return conn.info.backend_pid


def test_a_storage_takes_the_connection_the_stock_made_ahead(dsn, raw):
    """The stock makes each namespace's first connection with it; the storage opening the
    namespace takes it (no new session), with the namespace's application_name; one that
    died meanwhile is replaced by a new one; one nobody took is closed with the drop."""
    server = PostgresServer(dsn, prefetch=2)
    try:
        assert _until(lambda: len(server._stock._ready) == 2)
        ns = server.create_namespace()
        offered = connection._OFFERED[(dsn, ns)][1]
        storage = PostgresStorage(dsn, ns)
        try:
            assert _backend_pid(storage) == offered.info.backend_pid
            assert (dsn, ns) not in connection._OFFERED
            name = raw.execute(
                "SELECT application_name FROM pg_stat_activity WHERE pid = %s",
                (offered.info.backend_pid,),
            ).fetchone()
            assert name == (f"rdq:{ns}",)
        finally:
            storage.close()
        server.discard_namespace(ns)
        # cut before it is taken: the storage connects anew and works
        assert _until(lambda: len(server._stock._ready) == 2)
        cut = server.create_namespace()
        dead = connection._OFFERED[(dsn, cut)][1]
        assert server.cut_connections(cut) == 1
        storage = PostgresStorage(dsn, cut)
        try:
            storage.enqueue(NewTask(id="t", queue="q", handler="h"))
            assert _backend_pid(storage) != dead.info.backend_pid and dead.closed
        finally:
            storage.close()
        # never taken: closed when the namespace is dropped
        assert _until(lambda: len(server._stock._ready) == 2)
        unused = server.create_namespace()
        idle = connection._OFFERED[(dsn, unused)][1]
        server.drop_namespace(unused)
        assert idle.closed and (dsn, unused) not in connection._OFFERED
        # a storage with its own application_name leaves the offer alone
        assert _until(lambda: len(server._stock._ready) == 2)
        named = server.create_namespace()
        storage = PostgresStorage(dsn, named, application_name="mine")
        try:
            storage.now()
            assert (dsn, named) in connection._OFFERED
        finally:
            storage.close()
    finally:
        server.close()
    assert not any(key[0] == dsn for key in connection._OFFERED), "close left an offer open"


def _child_takes_no_offer(dsn: str, ns: str, out) -> None:
    out.put(connection._take_offered(dsn, ns) is None)


def test_a_forked_child_never_takes_its_parents_offered_connection(dsn, raw):
    ns = f"rdq_{uuid.uuid4().hex}"
    schema.create_new_namespace(raw, ns)
    first = connection.connect_for(dsn, ns)
    connection.offer_connection(dsn, ns, first)
    try:
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_child_takes_no_offer, args=(dsn, ns, out))
        child.start()
        assert out.get(timeout=30) is True
        child.join(30)
        assert not first.closed and first.execute("SELECT 1").fetchone() == (1,)
    finally:
        connection.withdraw_connection(dsn, ns)
        schema.drop_namespace(raw, ns)
    assert first.closed
