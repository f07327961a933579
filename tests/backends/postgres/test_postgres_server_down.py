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
import time
from collections.abc import Iterator

import pytest
from rdq_postgres.local import LocalPostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_core.errors import BackendUnavailable
from tests._processes import timed, until_works
from tests._waiting import HANG_S
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
        thread.join(HANG_S)
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
    storage = PostgresStorage(server.dsn, namespace, max_size=1, timeout=HANG_S)
    try:
        storage.now()
        holding, waited = threading.Event(), threading.Event()
        given_back: list[float] = []

        def hold() -> None:
            def run(conn: object) -> None:
                holding.set()
                pool = storage._source.pool()
                deadline = time.monotonic() + HANG_S
                while not pool.get_stats().get("requests_waiting", 0):  # the caller queues
                    assert time.monotonic() < deadline, "no call waited for the pool"
                    time.sleep(0.01)
                waited.set()
                # the spare refreshed just now: an idle connection given back would be kept
                # as the source's spare for SPARE_REFRESH_S; with a caller queued it must go
                # to the pool, or that caller waits out its whole pool timeout
                storage._source._spare_refreshed = time.monotonic()
                given_back.append(time.monotonic())

            storage._run("hold", run)

        thread = threading.Thread(target=hold)
        thread.start()
        assert holding.wait(HANG_S)
        error = timed(storage.now)[1]
        served = time.monotonic()
        thread.join(HANG_S)
        assert error is None, error
        # served by the busy pooled connection once it was given back, not by another one
        assert waited.is_set() and given_back and served > given_back[0]
        assert not storage._source.degraded
    finally:
        storage.close()
