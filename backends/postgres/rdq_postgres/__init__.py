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
This package's ``__init__`` imports neither half: ``import rdq_postgres.storage`` loads no
kit code. Import names from their modules (``rdq_postgres.storage.PostgresStorage``,
``rdq_postgres.plugin.backend``).
"""
