"""rdq's PostgreSQL backend: one schema per namespace, claims with FOR UPDATE SKIP LOCKED.

psycopg 3 and psycopg_pool; every time from the server's ``now()``. Registered as the
``postgres`` entry point of ``rdq.backends``.
"""

from rdq_postgres.plugin import PostgresBackend, PostgresServer, backend
from rdq_postgres.storage import PostgresStorage

__all__ = ["PostgresBackend", "PostgresServer", "PostgresStorage", "backend"]
