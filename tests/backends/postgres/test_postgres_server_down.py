"""What only PostgreSQL's outage cases have: a statement cut by a kill of the server, and
a pool that is busy (not dead) still making its caller wait. (That an open storage fails
fast while the server is down and recovers is the server contract's,
``tests/server_contract/test_server_down.py``, run for every server backend.)

The server is a private one started from local binaries (the kit's rung 2), so the test
can SIGKILL it and restart it on the same port and data directory. Skipped where no
PostgreSQL binaries are installed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from rdq_postgres.local import LocalPostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_core.errors import BackendUnavailable
from tests._processes import timed, until_works
from tests.backends.postgres._pg_support import (
    ensure_running,
    local_server,
    sleep_on_server,
    wait_sleeping,
)

#: A call on an open storage must give up within this while the server is down (the pool
#: timeout, 10 s, is what it used to wait).
FAIL_FAST_S = 3.0


@pytest.fixture(scope="module")
def server() -> Iterator[LocalPostgresServer]:
    """One private server for the module, from the local binaries."""
    with local_server("rdq-test-pg-down-") as provisioned:
        yield provisioned


@pytest.fixture
def namespace(server: LocalPostgresServer) -> Iterator[str]:
    ns = server.create_namespace()
    yield ns
    ensure_running(server)  # a test that failed while the server was down
    server.drop_namespace(ns)


def test_a_statement_cut_by_the_kill_is_backend_unavailable_and_the_next_call_fast(
    server: LocalPostgresServer, namespace: str
) -> None:
    storage = PostgresStorage(server.dsn, namespace)
    try:
        storage.now()
        thread, errors = sleep_on_server(storage)
        wait_sleeping(server.dsn, storage.application_name)
        server.kill()
        thread.join(10)
        assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], BackendUnavailable), errors
        assert "may or may not have taken effect" in str(errors[0])
        elapsed, error = timed(storage.now)
        assert isinstance(error, BackendUnavailable) and elapsed < FAIL_FAST_S, (elapsed, error)
        server.restart()
        until_works(storage.now)
    finally:
        storage.close()


def test_a_healthy_but_busy_pool_still_waits_its_timeout(
    server: LocalPostgresServer, namespace: str
) -> None:
    """Failing fast is for dead connections only: a pool whose one connection is busy makes
    the next caller wait (up to the pool timeout) rather than open another connection."""
    storage = PostgresStorage(server.dsn, namespace, max_size=1, timeout=5.0)
    try:
        storage.now()
        holding = threading.Event()

        def hold() -> None:
            def run(conn: object) -> None:
                holding.set()
                conn.execute("SELECT pg_sleep(1.0)")  # type: ignore[attr-defined]

            storage._run("hold", run)

        thread = threading.Thread(target=hold)
        thread.start()
        assert holding.wait(5)
        elapsed, error = timed(storage.now)
        thread.join(10)
        assert error is None, error
        assert elapsed > 0.5, f"served after {elapsed:.2f} s: not by the busy pooled connection"
        assert not storage._source.degraded
    finally:
        storage.close()
