"""The ``mongo`` backend plugin (entry point ``rdq.backends: mongo``): the *plugin half*,
which may import :mod:`rdq_compliance.provision`; the storage half
(:mod:`rdq_mongo.storage` and its modules) never imports the kit.

:class:`MongoBackend` climbs the provisioning ladder:

- **rung 1, a given URI** (``--rdq-dsn mongodb://host:port/?options`` or
  ``RDQ_MONGO_DSN``): :class:`rdq_mongo.server.MongoServer`, never stopped by the kit, no
  faults (neither MongoDB nor SecantusDB can cut other clients' connections);
- **rung 2, local binaries**: ``mongod`` from PATH started as a single-node replica set,
  else ``secantusd-py`` (SecantusDB, the MongoDB-wire-protocol server this project can
  install), in the kit's workdir on a free loopback port (:mod:`rdq_mongo.local`);
- **rung 3, a container** (``mongo:7`` as a single-node replica set) through
  testcontainers when Docker answers (:mod:`rdq_mongo.container`).

When none serves, the error names the three remedies. Storage is
:class:`rdq_mongo.storage.MongoStorage`, one database per namespace.
"""

from __future__ import annotations

from rdq_compliance.provision.backend import Backend, ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions
from rdq_mongo import container, local
from rdq_mongo.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_mongo.server import MongoServer
from rdq_mongo.storage import MongoStorage

__all__ = ["MongoBackend", "backend"]


class MongoBackend(Backend):
    """``--rdq-backend=mongo``: one database per namespace on a MongoDB deployment."""

    name = "mongo"

    def options(self) -> tuple[RungOptions, ...]:
        """The local-server and container rungs' options (a DSN takes none)."""
        return (LOCAL_OPTIONS, CONTAINER_OPTIONS)

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        return MongoServer(dsn)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        """Rung 2: ``mongod`` (replica set) or SecantusDB from local binaries."""
        return local.start_local_server(request)

    def start_container(self, request: ProvisionRequest) -> Server:
        """Rung 3: ``mongo:7`` through testcontainers (:mod:`rdq_mongo.container`)."""
        return container.start_container(request)

    def open(self, dsn: str, namespace: str) -> MongoStorage:
        return MongoStorage(dsn, namespace)


backend = MongoBackend()
