"""The connection source's spare (``rdq_postgres.connection``): a connection given back
idle is kept for the next call instead of a round through the pool, and nothing else
changes — a connection given back mid-transaction still goes to the pool (which rolls it
back), a spare the server cut is replaced, ``close()`` returns it, a forked child never
uses its parent's."""

from __future__ import annotations

import multiprocessing
import select
import time

import psycopg
import pytest
from rdq_postgres import connection
from rdq_postgres.storage import PostgresStorage

from tests._waiting import HANG_S
from tests.backends.postgres._pg_support import require_server

DSN = require_server()
BACKEND_PID = "SELECT pg_backend_pid()"


def _backend_pid(storage: PostgresStorage) -> int:
    return storage._run("pid", lambda conn: int(conn.execute(BACKEND_PID).fetchone()[0]))


def test_calls_reuse_the_spare_without_asking_the_pool(storage):
    storage.now()
    pool = storage._source.pool()
    before = pool.get_stats().get("requests_num", 0)
    started = time.monotonic()
    pids = {_backend_pid(storage) for _ in range(50)}
    elapsed = time.monotonic() - started
    asked = pool.get_stats().get("requests_num", 0) - before
    assert len(pids) == 1
    # without the spare, every call asks the pool; with it, about once per refresh period
    assert asked <= 2 + elapsed / connection.SPARE_REFRESH_S, asked
    assert len(storage._source._spare) == 1


def test_a_connection_given_back_in_a_transaction_goes_to_the_pool(storage):
    storage.now()
    source = storage._source
    conn, pooled = source.borrow()
    conn.execute("BEGIN")
    conn.execute("CREATE TEMP TABLE spare_probe (x int)")
    source.give_back(conn, pooled)
    assert source._spare == []
    again, pooled = source.borrow()
    try:
        assert again.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        # rolled back by the pool: the table made in the open transaction is gone
        found = again.execute("SELECT to_regclass('pg_temp.spare_probe')").fetchone()
        assert found is not None and found[0] is None
    finally:
        source.give_back(again, pooled)


def test_a_spare_the_server_cut_is_replaced(storage, raw):
    old = _backend_pid(storage)
    (spare,) = storage._source._spare
    assert raw.execute("SELECT pg_terminate_backend(%s)", (old,)).fetchone() == (True,)
    # the termination notice reaches the idle socket (the wait ends when it does)
    readable, _, _ = select.select([spare.fileno()], [], [], HANG_S)
    assert readable, "the server's termination notice never arrived"
    new = _backend_pid(storage)
    assert new != old


def test_close_returns_the_spare(dsn, namespace):
    storage = PostgresStorage(dsn, namespace)
    storage.now()
    (spare,) = storage._source._spare
    storage.close()
    assert storage._source._spare == []
    assert spare.closed


def _child_pid(storage: PostgresStorage, out: multiprocessing.Queue) -> None:
    out.put((storage._source._spare == [], _backend_pid(storage)))
    storage.close()


@pytest.mark.skipif(not hasattr(multiprocessing, "get_context"), reason="no multiprocessing")
def test_a_forked_child_never_uses_its_parents_spare(storage):
    parent = _backend_pid(storage)
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    child = ctx.Process(target=_child_pid, args=(storage, out))
    child.start()
    no_spare, pid = out.get(timeout=60)
    child.join(60)
    assert no_spare and pid != parent
    assert _backend_pid(storage) == parent  # the parent's session survived the child
