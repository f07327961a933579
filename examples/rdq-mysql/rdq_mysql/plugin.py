"""The ``mysql`` backend plugin (entry point ``rdq.backends: mysql``).

:class:`MySqlBackend` climbs the kit's provisioning ladder: rung 1 wraps a server given
by DSN (:class:`rdq_mysql.server.MySqlServer`, never stopped by the kit), rung 2 starts a
private ``mariadbd``/``mysqld`` from local binaries (:mod:`rdq_mysql.local`), rung 3 a
container (:mod:`rdq_mysql.container`). Storage is :class:`rdq_mysql.storage.MySqlStorage`.

Plugin half: imports :mod:`rdq_compliance.provision` (public names only) and the storage
half; the storage half never imports it.
"""

from __future__ import annotations

from rdq_compliance.provision import Backend, ProvisionRequest, RungOptions, Server
from rdq_mysql.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_mysql.server import MySqlServer
from rdq_mysql.storage import MySqlStorage

__all__ = ["MySqlBackend", "backend"]


class MySqlBackend(Backend):
    """``--rdq-backend=mysql``: one database per namespace on a MariaDB/MySQL server."""

    name = "mysql"

    def options(self) -> tuple[RungOptions, ...]:
        """The local-binary and container rungs' options (a DSN takes none)."""
        return (LOCAL_OPTIONS, CONTAINER_OPTIONS)

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        return MySqlServer(dsn)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        """Rung 2: a private server from local binaries (see :mod:`rdq_mysql.local`)."""
        from rdq_mysql import local

        return local.start_local_server(request)

    def start_container(self, request: ProvisionRequest) -> Server:
        """Rung 3: a container (see :mod:`rdq_mysql.container`)."""
        from rdq_mysql import container

        return container.start_container(request)

    def open(self, dsn: str, namespace: str) -> MySqlStorage:
        return MySqlStorage(dsn, namespace)


backend = MySqlBackend()
