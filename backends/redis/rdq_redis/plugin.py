"""The ``redis`` backend plugin (entry point ``rdq.backends: redis``): the *plugin half*,
which may import :mod:`rdq_compliance.provision`; the storage half
(:mod:`rdq_redis.storage` and its modules) never imports the kit.

:class:`RedisBackend` climbs the provisioning ladder:

- **rung 1, a given DSN** (``--rdq-dsn redis://host:port/db`` or ``RDQ_REDIS_DSN``):
  :class:`rdq_redis.server.RedisServer`, a server or any node of a cluster (found out by
  asking it), never stopped by the kit; its one fault is ``cut_connections``;
- **rung 2, local binaries**: a private ``redis-server`` — or, with ``--rdq-option
  redis_cluster=N``, a Redis Cluster of N masters — in the kit's workdir on free loopback
  ports, AOF with ``appendfsync always`` by default (:mod:`rdq_redis.local`); with
  ``redis_replica=async|wait`` a primary and a replica behind a forwarder, with the
  ``failover`` fault (:mod:`rdq_redis.replica`);
- **rung 3, a container** through testcontainers when Docker answers
  (:mod:`rdq_redis.container`).

When none serves, the error names the three remedies. Rungs 2 and 3 read their
``--rdq-option`` settings through the kit's shared parser (:mod:`rdq_redis.options`).
Storage is :class:`rdq_redis.storage.RedisStorage`, one key prefix per namespace.

**Import rule.** This module, ``server``, ``local``, ``replica``, ``container`` and
``options`` are the
plugin half; the storage half (``storage``, ``connection``, ``scripts``, ``keys``,
``codec``, ``admin``, ``persistence``, ``errors``) imports only :mod:`rdq_core`, redis-py
and itself.
"""

from __future__ import annotations

from rdq_compliance.provision.backend import Backend, ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions
from rdq_redis import container, local, replica
from rdq_redis.options import CONTAINER_OPTIONS, LOCAL_OPTIONS, replica_mode
from rdq_redis.server import ADMIN_CLIENT_NAME, RedisServer
from rdq_redis.storage import RedisStorage

__all__ = ["ADMIN_CLIENT_NAME", "RedisBackend", "RedisServer", "backend"]


class RedisBackend(Backend):
    """``--rdq-backend=redis``: one key prefix per namespace on a Redis server or cluster."""

    name = "redis"

    def options(self) -> tuple[RungOptions, ...]:
        """The local-binary and container rungs' options (a DSN takes none)."""
        return (LOCAL_OPTIONS, CONTAINER_OPTIONS)

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        return RedisServer(dsn)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        """Rung 2: a private server or cluster from local binaries (:mod:`rdq_redis.local`),
        or a primary and its replica (``redis_replica``, :mod:`rdq_redis.replica`)."""
        if replica_mode(LOCAL_OPTIONS.parse(request.options)) != "none":
            return replica.start_replicated_server(request)
        return local.start_local_server(request)

    def start_container(self, request: ProvisionRequest) -> Server:
        """Rung 3: a container through testcontainers (:mod:`rdq_redis.container`)."""
        return container.start_container(request)

    def open(self, dsn: str, namespace: str) -> RedisStorage:
        return RedisStorage(dsn, namespace)


backend = RedisBackend()
