"""rdq's SQLite backend: one database file per namespace, safe across threads and processes.

Standard library ``sqlite3`` only; WAL journal, ``BEGIN IMMEDIATE`` for every mutation.
Registered as the ``sqlite`` entry point of ``rdq.backends`` (:mod:`rdq_sqlite.plugin`).

**Two halves, one import rule.** The *storage half* — :mod:`~rdq_sqlite.storage`
(:class:`SqliteStorage`), ``connection`` and ``schema`` — imports only :mod:`rdq_core` and
the standard library, never :mod:`rdq_compliance`: it is usable without the kit. The
*plugin half* — :mod:`~rdq_sqlite.plugin` (the ``Backend`` and its ``Server``, a
directory) — may import :mod:`rdq_compliance.provision` and the storage half, never the
other way round. This package's ``__init__`` imports neither half: ``import
rdq_sqlite.storage`` loads no kit code. Import names from their modules.
"""
