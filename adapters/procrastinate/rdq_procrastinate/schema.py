"""procrastinate's own schema, applied inside one namespace (storage half).

A namespace is a PostgreSQL schema (the postgres backend creates it, with rdq's own
tables, which procrastinate never touches). :func:`apply_schema` runs procrastinate's
``SchemaManager.apply_schema()`` — the same call as ``procrastinate schema --apply`` —
through procrastinate's ``SyncPsycopgConnector`` on a connection whose ``search_path`` is
that schema alone, so every type, table, index, function and trigger of
``procrastinate/sql/schema.sql`` is created there.

**Why the search path is enough.** ``schema.sql`` (3.10.0) qualifies nothing but
``pg_catalog`` (``CREATE EXTENSION IF NOT EXISTS plpgsql WITH SCHEMA pg_catalog``, a
no-op where plpgsql exists). Its PL/pgSQL functions name their tables, types and other
functions unqualified, and declare no ``SET search_path`` of their own, so PL/pgSQL
resolves those names through the *calling* session's search path when a function first
runs in that session; the queries of ``procrastinate/sql/queries.sql`` are unqualified
too. A session whose search path is the namespace therefore reaches that namespace's
procrastinate and nothing else (no ``public`` on the path: a procrastinate schema in
``public`` is never seen). :func:`check_resolution` asserts it after applying, and
``tests/adapters/test_procrastinate.py`` checks the statement of it against the file.
"""

from __future__ import annotations

import psycopg
from procrastinate import schema as p_schema
from procrastinate.sync_psycopg_connector import SyncPsycopgConnector

from rdq_procrastinate.dsn import connection_kwargs, schema_name, split_dsn

__all__ = ["apply_schema", "check_resolution"]

_TABLE_SCHEMA = """
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = to_regclass('procrastinate_jobs')
"""
_RESOLUTION = """
SELECT n.nspname AS schema, count(*) AS functions
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE p.proname LIKE 'procrastinate%'
 GROUP BY n.nspname
"""


def apply_schema(dsn: str, namespace: str) -> None:
    """Apply procrastinate's schema in ``namespace`` (an existing, procrastinate-free
    schema) with procrastinate's own schema manager. Raises what the connector raises."""
    base, _ = split_dsn(dsn)
    kwargs = connection_kwargs(base, schema_name(namespace))
    kwargs["application_name"] = f"rdq:{namespace}:schema"
    connector = SyncPsycopgConnector(conninfo=base, kwargs=kwargs, min_size=1, max_size=1)
    connector.open()
    try:
        p_schema.SchemaManager(connector).apply_schema()
    finally:
        connector.close()
    check_resolution(base, namespace)


def check_resolution(dsn: str, namespace: str) -> None:
    """Raise ``RuntimeError`` unless procrastinate's functions exist in ``namespace`` and
    its ``procrastinate_jobs`` table resolves there through a session of the namespace."""
    base, _ = split_dsn(dsn)
    with psycopg.connect(base, autocommit=True, **connection_kwargs(base, namespace)) as conn:
        row = conn.execute(_TABLE_SCHEMA).fetchone()
        found = row[0] if row else None
        counts = dict(conn.execute(_RESOLUTION).fetchall())
    if found != namespace or not counts.get(namespace):
        raise RuntimeError(
            f"procrastinate's schema did not land in namespace {namespace!r}: "
            f"procrastinate_jobs resolves to {found!r}, functions by schema {counts}"
        )
