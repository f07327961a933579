"""A storage whose pool is already open fails fast while its server is down, and works
again once the server is back, without being reopened.

The server is a private one started from local binaries (the kit's rung 2), so the test
can SIGKILL it and restart it on the same port and data directory. Skipped where no
PostgreSQL binaries are installed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from rdq_postgres.connection import POOL_TIMEOUT_S
from rdq_postgres.local import LocalPostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask
from tests.backends.postgres._pg_support import ensure_running, local_server, sleep_on_server

#: A call on an open storage must give up within this while the server is down (the pool
#: timeout, 10 s, is what it used to wait).
FAIL_FAST_S = 3.0
LEASE = timedelta(minutes=5)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalPostgresServer]:
    """One private server for the module (the fixture pattern of test_provisioning.py)."""
    with local_server("rdq-test-pg-down-") as provisioned:
        yield provisioned


@pytest.fixture
def namespace(server: LocalPostgresServer) -> Iterator[str]:
    ns = server.create_namespace()
    yield ns
    ensure_running(server)  # a test that failed while the server was down
    server.drop_namespace(ns)


def _timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    began = time.monotonic()
    try:
        call()
    except BaseException as exc:
        return time.monotonic() - began, exc
    return time.monotonic() - began, None


def _until_works(call: Callable[[], object], within: float) -> object:
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


CALLS: dict[str, Callable[[PostgresStorage], object]] = {
    "get": lambda st: st.get("before"),
    "enqueue": lambda st: st.enqueue(NewTask("during", "q", "h")),
    "claim_due": lambda st: st.claim_due("q", 4, LEASE),
    "stats": lambda st: st.stats("q"),
    "now": lambda st: st.now(),
}


def test_an_open_storage_fails_fast_while_the_server_is_down_and_recovers(
    server: LocalPostgresServer, namespace: str
) -> None:
    storage = PostgresStorage(server.dsn, namespace, min_size=2, max_size=4)
    other = PostgresStorage(server.dsn, namespace)  # a second process's view, say
    try:
        assert storage.enqueue(NewTask("before", "q", "h", payload=b"kept"))
        assert other.get("before").payload == b"kept"  # both pools are open
        assert storage._source.pool().get_stats()["pool_size"] >= 1

        server.kill()
        for name, call in CALLS.items():  # every call, several times each: no stall
            for _ in range(3):
                elapsed, error = _timed(lambda call=call: call(storage))
                assert isinstance(error, BackendUnavailable), (name, error)
                assert elapsed < FAIL_FAST_S, f"{name} took {elapsed:.1f} s to fail"
        elapsed, error = _timed(lambda: other.get("before"))
        assert isinstance(error, BackendUnavailable) and elapsed < FAIL_FAST_S, (elapsed, error)
        # The error says what happened (refused), not merely that a pool timed out.
        assert "connect" in str(error).lower(), error

        server.restart()
        began = time.monotonic()
        assert _until_works(lambda: storage.get("before"), 5).payload == b"kept"  # type: ignore[attr-defined]
        assert time.monotonic() - began < FAIL_FAST_S, "the storage did not recover promptly"
        assert _until_works(lambda: other.get("before"), 5).payload == b"kept"  # type: ignore[attr-defined]
        assert storage.enqueue(NewTask("after", "q", "h"))
        assert {c.task_id for c in storage.claim_due("q", 10, LEASE)} == {"before", "after"}

        # ... and the pool itself comes back: calls are served by pooled connections again.
        deadline = time.monotonic() + POOL_TIMEOUT_S
        while storage._source.degraded:
            assert time.monotonic() < deadline, "the pool never got a live connection back"
            storage.stats("q")
            time.sleep(0.05)
    finally:
        storage.close()
        other.close()


def test_a_statement_cut_by_the_kill_is_backend_unavailable_and_the_next_call_fast(
    server: LocalPostgresServer, namespace: str
) -> None:
    storage = PostgresStorage(server.dsn, namespace)
    try:
        storage.now()
        thread, errors = sleep_on_server(storage)
        time.sleep(0.3)  # the statement is running on the server
        server.kill()
        thread.join(10)
        assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], BackendUnavailable), errors
        assert "may or may not have taken effect" in str(errors[0])
        elapsed, error = _timed(storage.now)
        assert isinstance(error, BackendUnavailable) and elapsed < FAIL_FAST_S, (elapsed, error)
        server.restart()
        _until_works(storage.now, 5)
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
        elapsed, error = _timed(storage.now)
        thread.join(10)
        assert error is None, error
        assert elapsed > 0.5, f"served after {elapsed:.2f} s: not by the busy pooled connection"
        assert not storage._source.degraded
    finally:
        storage.close()
