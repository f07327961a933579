"""rdq's SQLite backend: one database file per namespace, safe across threads and processes.

Standard library ``sqlite3`` only; WAL journal, ``BEGIN IMMEDIATE`` for every mutation.
Registered as the ``sqlite`` entry point of ``rdq.backends`` (:mod:`rdq_sqlite.plugin`).

**Two halves, one import rule.** The *storage half* — :mod:`~rdq_sqlite.storage`
(:class:`SqliteStorage`), ``connection`` and ``schema`` — imports only :mod:`rdq_core` and
the standard library, never :mod:`rdq_compliance`: it is usable without the kit. The
*plugin half* — :mod:`~rdq_sqlite.plugin` (the ``Backend`` and its ``Server``, a
directory) — may import :mod:`rdq_compliance.provision` and the storage half, never the
other way round. This package imports neither half eagerly: ``import rdq_sqlite.storage``
loads no kit code; the plugin names below are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rdq_sqlite.plugin import SqliteBackend, SqliteServer, backend
    from rdq_sqlite.storage import SqliteStorage

__all__ = ["SqliteBackend", "SqliteServer", "SqliteStorage", "backend"]

_HOMES = {
    "SqliteBackend": "rdq_sqlite.plugin",
    "SqliteServer": "rdq_sqlite.plugin",
    "backend": "rdq_sqlite.plugin",
    "SqliteStorage": "rdq_sqlite.storage",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rdq_sqlite' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
