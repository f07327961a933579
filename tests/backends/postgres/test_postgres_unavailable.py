"""Connection loss on PostgreSQL is ``BackendUnavailable`` (or a transparent reconnect),
never a raw psycopg error: terminated sessions, sessions cut mid-statement, an exhausted
pool; a given server is left running; DSN passwords are masked. (A closed port, a closed
storage and ``cut_connections`` are the server contract's,
``tests/server_contract/``, run for every server backend.)"""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from rdq_postgres.errors import mask_dsn
from rdq_postgres.plugin import backend
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_compliance.provision.backend import ProvisionRequest
from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask
from tests._waiting import HANG_S
from tests.backends.postgres._pg_support import require_server, sleep_on_server, wait_sleeping

DSN = require_server()
LEASE = timedelta(minutes=5)


def _sessions(raw: psycopg.Connection, application_name: str) -> list[int]:
    rows = raw.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def _terminate(raw: psycopg.Connection, pids: list[int]) -> None:
    for pid in pids:
        raw.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


CALLS = {
    "enqueue": lambda st, i: st.enqueue(NewTask(f"t{i}", "q", "h")),
    "claim_due": lambda st, i: st.claim_due("q", 1, LEASE),
    "get": lambda st, i: st.get("t0"),
    "stats": lambda st, i: st.stats("q"),
    "dlq_list": lambda st, i: st.dlq_list("q"),
    "now": lambda st, i: st.now(),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_next_call_after_pg_terminate_backend_succeeds_or_is_backend_unavailable(
    storage, raw, call
):
    storage.enqueue(NewTask("t0", "q", "h"))
    outcomes = []
    for i in range(1, 6):
        pids = _sessions(raw, storage.application_name)
        assert pids, "the storage has no session to cut"
        _terminate(raw, pids)
        try:
            CALLS[call](storage, i)
            outcomes.append("ok")
        except BackendUnavailable as exc:
            assert "may or may not have taken effect" in str(exc)
            outcomes.append("unavailable")
        # anything else (a raw psycopg error above all) fails the test by propagating
    assert "ok" in outcomes, f"the pool never reconnected: {outcomes}"
    assert CALLS[call](storage, 99) is not None or call == "enqueue"
    assert storage.get("t0").id == "t0"


def test_session_cut_mid_statement_is_backend_unavailable(storage, raw):
    storage.now()
    thread, errors = sleep_on_server(storage)
    busy = wait_sleeping(DSN, storage.application_name)
    _terminate(raw, busy)
    thread.join(HANG_S)
    assert len(errors) == 1 and isinstance(errors[0], BackendUnavailable), errors
    assert "may or may not have taken effect" in str(errors[0])
    assert storage.stats("q").total == 0  # and the storage carries on


def test_provision_with_a_live_dsn_gives_a_server_that_is_left_running(tmp_path, raw):
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    assert isinstance(server, PostgresServer) and server.origin.startswith("given DSN")
    assert server.faults == {"cut_connections"}
    namespace = server.create_namespace()
    assert namespace.startswith("rdq_") and len(namespace) == 36
    server.close()  # drops what it created, leaves the server up
    gone = raw.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (namespace,)).fetchone()
    assert gone is None and raw.execute("SELECT 1").fetchone() == (1,)


def test_exhausted_pool_is_backend_unavailable(namespace):
    storage = PostgresStorage(DSN, namespace, max_size=1, timeout=0.3)
    storage.now()
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        def run(conn: psycopg.Connection) -> None:  # the one connection, lent until released
            holding.set()
            release.wait(HANG_S)

        storage._run("hold", run)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(HANG_S)
        with pytest.raises(BackendUnavailable, match="no connection"):
            storage.stats("q")
    finally:
        release.set()
        thread.join(HANG_S)
        storage.close()


@pytest.mark.parametrize(
    ("dsn", "masked"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        (
            "postgresql://u@h/db?password=pw&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("host=h user=u password=pw dbname=db", "host=h user=u password=*** dbname=db"),
        ("host=h password='p w' dbname=db", "host=h password=*** dbname=db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_mask_dsn(dsn, masked):
    assert mask_dsn(dsn) == masked
