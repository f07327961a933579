"""The container rung: a MariaDB server in a Docker container the kit started.

Tried only when the local binaries are missing (or hidden with ``--rdq-option
mysql_bin_dir=/nonexistent``) and Docker is allowed. The container is started by the
kit's ``rdq_compliance.provision.start_kit_container``: labelled ``rdq.kit``, removed with
its data volume by a reaper process if the kit dies (SIGKILL included), on the network
mode of ``mysql_network`` (``host``: the server listens on 127.0.0.1 on a port the kit
chose; ``published``: on the container's 3306, published on the host's 127.0.0.1 only).
The DSN always names 127.0.0.1. The image is ``mysql_image`` (default ``mariadb:10.11``,
the official image; or ``rdq-local/mariadb`` from ``tools/build_local_images.sh``), which
takes ``MARIADB_ROOT_PASSWORD`` and ``MARIADB_DATABASE`` and a ``mariadbd --option ...``
command.

Faults: ``kill_server`` (``docker kill``), ``restart_server`` (the same container started
again: its data volume is kept, InnoDB recovers), ``pause_server`` (``docker pause``),
``cut_connections`` as on any server.
"""

from __future__ import annotations

import secrets

import pymysql

from rdq_compliance.provision import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ContainerFaults,
    ContainerSpec,
    KitContainer,
    ProvisionRequest,
    check_network_mode,
    start_container_server,
)
from rdq_mysql.dsn import make_dsn
from rdq_mysql.options import (
    CONTAINER_OPTIONS,
    MYSQL_IMAGE,
    MYSQL_MAX_CONNECTIONS,
    MYSQL_NETWORK,
    MYSQL_START_TIMEOUT,
)
from rdq_mysql.server import MySqlServer

_DATABASE = "rdq"
_CONTAINER_PORT = 3306
_DATA = "/var/lib/mysql"


def _wait_ready(container: KitContainer, port: int, password: str, timeout: float) -> None:
    """Poll until the server accepts root's connection from this host."""

    def connect() -> None:
        pymysql.connect(
            host="127.0.0.1",
            port=port,
            user="root",
            password=password,
            database=_DATABASE,
            connect_timeout=2,
            read_timeout=2,
            write_timeout=2,
        ).close()

    container.wait_ready(connect, timeout, errors=(pymysql.err.MySQLError, OSError))


class ContainerMySqlServer(ContainerFaults, MySqlServer):
    """A MariaDB server in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})

    def __init__(self, container: KitContainer, password: str, timeout: float) -> None:
        dsn = make_dsn("127.0.0.1", container.host_port, "root", _DATABASE, password)
        super().__init__(dsn, origin=container.describe())
        self.hold_container(container)
        self._password = password
        self._timeout = timeout

    def wait_ready(self) -> None:
        _wait_ready(self.container, self.container.host_port, self._password, self._timeout)


def start_container(request: ProvisionRequest) -> ContainerMySqlServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    options = CONTAINER_OPTIONS.parse(request.options)  # a bad value fails before any work
    image, timeout = options[MYSQL_IMAGE], options[MYSQL_START_TIMEOUT]
    network = check_network_mode(options[MYSQL_NETWORK], MYSQL_NETWORK.name)
    max_connections = options[MYSQL_MAX_CONNECTIONS]
    password = secrets.token_hex(12)

    def command(bind: str, port: int) -> list[str]:
        return [
            "mariadbd",
            f"--bind-address={bind}",
            f"--port={port}",
            "--skip-name-resolve",
            "--skip-log-bin",
            f"--max-connections={max_connections}",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-allowed-packet=64M",
        ]

    spec = ContainerSpec(
        image=image,
        command=command,
        container_port=_CONTAINER_PORT,
        data_path=_DATA,
        network=network,
        environment={"MARIADB_ROOT_PASSWORD": password, "MARIADB_DATABASE": _DATABASE},
    )

    def serve(container: KitContainer) -> ContainerMySqlServer:
        _wait_ready(container, container.host_port, password, timeout)
        return ContainerMySqlServer(container, password, timeout)

    return start_container_server(spec, serve)
