"""The ``postgres`` backend plugin (entry point ``rdq.backends: postgres``).

:class:`PostgresBackend` climbs the provisioning ladder: rung 1 wraps a server given by
DSN (:class:`rdq_postgres.server.PostgresServer`, never stopped by the kit), rung 2
starts a private server from local binaries (:mod:`rdq_postgres.local`), rung 3 a
container through testcontainers (:mod:`rdq_postgres.container`). Rungs 2 and 3 read
their ``--rdq-option`` settings through the kit's shared parser
(:mod:`rdq_postgres.options`). Storage is :class:`rdq_postgres.storage.PostgresStorage`.

**Import rule.** This is the *plugin half* (with ``server``, ``local``, ``container``,
``options`` and ``stock``): it may import :mod:`rdq_compliance.provision`, and imports the
storage half. The *storage half* (``storage``, ``connection``, ``queries``, ``schema``,
``rows``, ``errors``) imports only :mod:`rdq_core`, psycopg/psycopg_pool and itself —
never :mod:`rdq_compliance` and never the plugin half — so it is usable without the kit.
"""

from __future__ import annotations

from rdq_compliance.provision.backend import Backend, ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions
from rdq_postgres import container, local, replica
from rdq_postgres.options import CONTAINER_OPTIONS, LOCAL_OPTIONS, replica_mode
from rdq_postgres.server import PostgresServer
from rdq_postgres.stock import STOCK_SIZE
from rdq_postgres.storage import PostgresStorage

__all__ = ["PostgresBackend", "PostgresServer", "backend"]


class PostgresBackend(Backend):
    """``--rdq-backend=postgres``: one schema per namespace on a PostgreSQL server."""

    name = "postgres"

    def options(self) -> tuple[RungOptions, ...]:
        """The local-binary and container rungs' options (a DSN takes none)."""
        return (LOCAL_OPTIONS, CONTAINER_OPTIONS)

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        return PostgresServer(dsn, prefetch=STOCK_SIZE)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        """Rung 2: a private server from local binaries (see :mod:`rdq_postgres.local`),
        or a primary and a streaming replica (``pg_replica``, :mod:`rdq_postgres.replica`)."""
        if replica_mode(LOCAL_OPTIONS.parse(request.options)) != "none":
            return replica.start_replicated_server(request)
        return local.start_local_server(request)

    def start_container(self, request: ProvisionRequest) -> Server:
        """Rung 3: a container through testcontainers (see :mod:`rdq_postgres.container`)."""
        return container.start_container(request)

    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return PostgresStorage(dsn, namespace)


backend = PostgresBackend()
