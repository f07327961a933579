"""Where the test server is, and a clean module-level skip when it does not answer."""

from __future__ import annotations

import os

import psycopg
import pytest
from psycopg import sql

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def server_dsn() -> str:
    return os.environ.get("RDQ_POSTGRES_DSN") or os.environ.get("RDQ_DSN") or DEFAULT_DSN


def require_server() -> str:
    """The DSN of a server that answers, or skip (the whole module when called at import)."""
    dsn = server_dsn()
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
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
