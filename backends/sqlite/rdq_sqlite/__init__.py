"""rdq's SQLite backend: one database file per namespace, safe across threads and processes.

Standard library ``sqlite3`` only; WAL journal, ``BEGIN IMMEDIATE`` for every mutation.
Registered as the ``sqlite`` entry point of ``rdq.backends``.
"""

from rdq_sqlite.plugin import SqliteBackend, SqliteServer, backend
from rdq_sqlite.storage import SqliteStorage

__all__ = ["SqliteBackend", "SqliteServer", "SqliteStorage", "backend"]
