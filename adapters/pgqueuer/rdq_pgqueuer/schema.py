"""What a namespace holds for the adapter: pgqueuer's own schema and the id map.

A namespace is a PostgreSQL schema (made by the postgres backend's server, which also
puts rdq's own tables there: harmless, pgqueuer never looks at them). :func:`install`
runs in it, on a connection whose ``search_path`` is that schema:

- **pgqueuer's schema**, exactly the DDL ``pgq install`` sends
  (``Queries.install`` -> ``QueryBuilderEnvironment.build_install_query``, rendered from
  pgqueuer's ``DBSettings`` as the library reads them: no ``db_schema``, so every object
  is created in, and later found through, the connection's ``search_path``);
- **the adapter's id map** ``rdq_pgqueuer_task``: pgqueuer numbers its jobs itself (a
  ``bigserial``; a producer cannot choose the id) and deletes a job's row when it
  succeeds, so the adapter keeps, per pgqueuer job, the rdq task id, queue and handler
  it was enqueued for. Mapping ids is the adapter's business (it is never a guard: no
  call is refused because of it); everything else about a task is read from pgqueuer's
  tables (``pgqueuer``, ``pgqueuer_log``).

Storage half: imports psycopg, pgqueuer and the standard library only.
"""

from __future__ import annotations

import re

import psycopg
from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment
from pgqueuer.domain.settings import db_settings
from psycopg import sql

__all__ = ["MAP_DDL", "MAP_TABLE", "install", "install_sql", "schema_name", "search_path"]

#: The adapter's map of pgqueuer job id -> rdq task id, queue, handler.
MAP_TABLE = "rdq_pgqueuer_task"
MAP_DDL = f"""
CREATE TABLE {MAP_TABLE} (
    job_id bigint PRIMARY KEY,
    task_id text NOT NULL,
    queue text NOT NULL,
    handler text NOT NULL
);
CREATE INDEX {MAP_TABLE}_task_idx ON {MAP_TABLE} (task_id, job_id);
CREATE INDEX {MAP_TABLE}_queue_idx ON {MAP_TABLE} (queue, task_id, job_id);
"""

_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def schema_name(namespace: str) -> str:
    """``namespace`` if it is a plain lower-case PostgreSQL identifier, else ValueError."""
    if not isinstance(namespace, str) or not _SCHEMA.match(namespace):
        raise ValueError(f"namespace {namespace!r} is not a plain PostgreSQL schema name")
    return namespace


def search_path(namespace: str) -> str:
    """The libpq ``options`` that make ``namespace`` the session's ``search_path``."""
    return f"-c search_path={schema_name(namespace)}"


def install_sql() -> str:
    """pgqueuer's install DDL (what ``pgq install`` runs) followed by the id map's."""
    pgqueuer = QueryBuilderEnvironment(db_settings()).build_install_query(create_schema=True)
    return f"{pgqueuer}\n\n{MAP_DDL}"


def install(conn: psycopg.Connection, namespace: str) -> None:
    """Install both in ``namespace`` over ``conn`` (autocommit, any ``search_path``): one
    multi-statement query, which PostgreSQL runs as one implicit transaction."""
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema_name(namespace))))
    try:
        conn.execute(install_sql().encode())
    finally:
        conn.execute("RESET search_path")
