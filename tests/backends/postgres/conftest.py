"""Fixtures for the PostgreSQL backend's own tests.

The server is ``RDQ_POSTGRES_DSN`` (or ``RDQ_DSN``), else the local default
``postgresql://postgres@127.0.0.1:5432/test``. When it does not answer, every test here
is skipped with the reason (:func:`tests.backends.postgres._pg_support.require_server`
at module level).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import PostgresStorage

from tests._fixtures import closed_after, namespace_of
from tests.backends.postgres._pg_support import require_server


@pytest.fixture(scope="session")
def dsn() -> str:
    return require_server()


@pytest.fixture(scope="session")
def server(dsn: str) -> Iterator[PostgresServer]:
    yield from closed_after(PostgresServer(dsn))


@pytest.fixture
def namespace(server: PostgresServer) -> Iterator[str]:
    yield from namespace_of(server)


@pytest.fixture
def storage(dsn: str, namespace: str) -> Iterator[PostgresStorage]:
    yield from closed_after(PostgresStorage(dsn, namespace))


@pytest.fixture
def raw(dsn: str) -> Iterator[psycopg.Connection]:
    """A plain autocommit connection for looking behind the storage's back."""
    with psycopg.connect(dsn, autocommit=True, application_name="rdq-test:raw") as conn:
        yield conn
