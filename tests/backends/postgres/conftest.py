"""Fixtures for the PostgreSQL backend's own tests.

The server is ``RDQ_POSTGRES_DSN`` (or ``RDQ_DSN``), else the local default
``postgresql://postgres@127.0.0.1:5432/test``. When it does not answer, every test here
is skipped with the reason (:func:`_pg_support.require_server` at module level).
``_pg_support`` is made importable here and in spawned children, whatever the
``--import-mode``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import psycopg  # noqa: E402
from rdq_postgres.server import PostgresServer  # noqa: E402
from rdq_postgres.storage import PostgresStorage  # noqa: E402

from tests.backends.postgres._pg_support import require_server  # noqa: E402


@pytest.fixture(scope="session")
def dsn() -> str:
    return require_server()


@pytest.fixture(scope="session")
def server(dsn: str) -> Iterator[PostgresServer]:
    srv = PostgresServer(dsn)
    yield srv
    srv.close()


@pytest.fixture
def namespace(server: PostgresServer) -> Iterator[str]:
    ns = server.create_namespace()
    yield ns
    server.drop_namespace(ns)


@pytest.fixture
def storage(dsn: str, namespace: str) -> Iterator[PostgresStorage]:
    st = PostgresStorage(dsn, namespace)
    yield st
    st.close()


@pytest.fixture
def raw(dsn: str) -> Iterator[psycopg.Connection]:
    """A plain autocommit connection for looking behind the storage's back."""
    with psycopg.connect(dsn, autocommit=True, application_name="rdq-test:raw") as conn:
        yield conn
