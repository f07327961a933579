"""Where the test server is, a clean module-level skip when it does not answer, and a
private local-binary server for tests that kill and restart it."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql

from tests._waiting import HANG_S

if TYPE_CHECKING:
    from rdq_postgres.local import LocalPostgresServer
    from rdq_postgres.storage import PostgresStorage

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def server_dsn() -> str:
    return os.environ.get("RDQ_POSTGRES_DSN") or os.environ.get("RDQ_DSN") or DEFAULT_DSN


def require_server() -> str:
    """The DSN of a server that answers, or skip (the whole module when called at import)."""
    dsn = server_dsn()
    try:
        with psycopg.connect(dsn, connect_timeout=int(HANG_S)) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = f"no PostgreSQL server answers at RDQ_POSTGRES_DSN / default {dsn!r}: {reason}"
        if os.environ.get("CI"):
            # CI machines start the server before the run: its absence is a failure there.
            pytest.fail(message + " (CI is set: a missing server fails the run)", pytrace=False)
        pytest.skip(message, allow_module_level=True)
    return dsn


def count_rows(conn: psycopg.Connection, schema: str, where: str = "TRUE") -> int:
    """How many rows of ``<schema>.tasks`` match ``where`` (a constant test predicate)."""
    query = sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(  # type: ignore[arg-type]
        sql.Identifier(schema, "tasks")
    )
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def local_server(prefix: str) -> Iterator[LocalPostgresServer]:
    """A private server from local binaries (the kit's rung 2) that a test may kill and
    restart, in a fresh work folder removed afterwards; skip where PostgreSQL's server
    binaries are not installed. For a module-scoped fixture, as in test_postgres_server_down.py."""
    from rdq_postgres.local import LocalPostgresServer
    from rdq_postgres.plugin import backend

    from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable

    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        try:
            server = backend.start_local_server(
                ProvisionRequest(workdir=workdir, allow_docker=False)
            )
        except ProvisionUnavailable as exc:
            pytest.skip(f"no local PostgreSQL: {exc}")
        assert isinstance(server, LocalPostgresServer)
        try:
            yield server
        finally:
            server.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def ensure_running(server: LocalPostgresServer) -> None:
    """Restart ``server`` if a test left it killed (so later tests of the module run)."""
    if not server.node.running:
        server.restart()


def sleep_on_server(
    storage: PostgresStorage, seconds: int = 30
) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``SELECT pg_sleep(seconds)`` through ``storage`` in a thread; the list
    collects what the call raised (a test then kills the server or cuts the session)."""
    errors: list[BaseException] = []

    def sleeper() -> None:
        try:
            storage._run("sleep", lambda conn: conn.execute(f"SELECT pg_sleep({int(seconds)})"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=sleeper)
    thread.start()
    return thread, errors


def wait_sleeping(dsn: str, application_name: str) -> list[int]:
    """Wait until :func:`sleep_on_server`'s statement runs on the server (a session named
    ``application_name`` active in ``pg_sleep``); the pids of such sessions. The wait ends
    when the statement starts; :data:`~tests._waiting.HANG_S` is only its hang guard."""
    deadline = time.monotonic() + HANG_S
    with psycopg.connect(dsn, autocommit=True, connect_timeout=int(HANG_S)) as conn:
        while True:
            busy = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                " AND state = 'active' AND query LIKE 'SELECT pg_sleep(%%'",
                (application_name,),
            ).fetchall()
            if busy:
                return [int(row[0]) for row in busy]
            assert time.monotonic() < deadline, f"{application_name} never ran pg_sleep"
            time.sleep(0.01)
