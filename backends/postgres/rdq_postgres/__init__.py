"""rdq's PostgreSQL backend: one schema per namespace, claims with FOR UPDATE SKIP LOCKED.

psycopg 3 and psycopg_pool; every time from the server's ``now()``. Registered as the
``postgres`` entry point of ``rdq.backends`` (:mod:`rdq_postgres.plugin`).

**Two halves, one import rule.** The *storage half* — :mod:`~rdq_postgres.storage`
(:class:`PostgresStorage`) and what it needs: ``connection``, ``queries``, ``schema``,
``rows``, ``errors`` — imports only :mod:`rdq_core`, psycopg/psycopg_pool and its own
storage modules, never :mod:`rdq_compliance`: it is usable without the kit. The *plugin
half* — ``plugin`` (the ``Backend``), ``server`` (:class:`PostgresServer`), its rungs
``local`` and ``container``, their ``options``, and the namespace ``stock`` — may import
:mod:`rdq_compliance.provision` and the storage half, never the other way round.
This package imports neither half eagerly: ``import rdq_postgres.storage`` loads no kit
code; the plugin names below are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rdq_postgres.plugin import PostgresBackend, backend
    from rdq_postgres.server import PostgresServer
    from rdq_postgres.storage import PostgresStorage

__all__ = ["PostgresBackend", "PostgresServer", "PostgresStorage", "backend"]

_HOMES = {
    "PostgresBackend": "rdq_postgres.plugin",
    "backend": "rdq_postgres.plugin",
    "PostgresServer": "rdq_postgres.server",
    "PostgresStorage": "rdq_postgres.storage",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rdq_postgres' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
