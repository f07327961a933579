"""The container rung: a PostgreSQL server in a Docker container the kit started.

Tried only when the local binaries are missing and Docker is allowed. The container is
started by :func:`rdq_compliance.provision.kit_container.start_kit_container`: labelled
``rdq.kit``, removed with its data volume by a reaper process if the kit dies (SIGKILL
included), on the network mode of ``pg_network`` (``host``: the server listens on
127.0.0.1 on a port the kit chose; ``published``: on the container's 5432, published on
the host's 127.0.0.1 only; ``auto``: host where the engine has no bridge). The DSN always
names 127.0.0.1. The image is ``pg_image``: the official ``postgres`` image or
``rdq-local/postgres`` (``tools/build_local_images.sh``), which take the same
``POSTGRES_USER``/``POSTGRES_PASSWORD``/``POSTGRES_DB`` and ``postgres -c ...`` command.

Faults: ``kill_server`` is ``docker kill`` (SIGKILL to the postmaster, PID 1 of the
container, which takes every other process of the container with it), ``restart_server``
starts the same container again (its data volume is kept, so the server does crash
recovery and no committed task is lost), ``pause_server`` is ``docker pause`` (every
process of the container frozen), ``cut_connections`` works as on any server.

Options (declared in :mod:`rdq_postgres.options`, parsed by the kit's shared parser):
``pg_image`` (default :data:`DEFAULT_IMAGE`), ``pg_network`` (``auto``),
``pg_start_timeout`` (seconds, 60), ``pg_max_connections`` (200).

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_postgres.server.PostgresServer`.
"""

from __future__ import annotations

import secrets

import psycopg

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
)
from rdq_compliance.provision.container_server import ContainerFaults, start_container_server
from rdq_compliance.provision.containers import docker_unavailable_reason
from rdq_compliance.provision.kit_container import (
    ContainerSpec,
    KitContainer,
    check_network_mode,
)
from rdq_postgres.options import (
    CONTAINER_OPTIONS,
    DEFAULT_IMAGE,
    PG_IMAGE,
    PG_MAX_CONNECTIONS,
    PG_NETWORK,
    PG_START_TIMEOUT,
)
from rdq_postgres.server import PostgresServer

__all__ = [
    "DEFAULT_IMAGE",
    "ContainerPostgresServer",
    "docker_unavailable_reason",
    "start_container",
]

_USER = "postgres"
_DATABASE = "rdq"
_CONTAINER_PORT = 5432
_DATA = "/var/lib/postgresql/data"


def _wait_ready(container: KitContainer, dsn: str, timeout: float) -> None:
    """Poll until ``dsn`` accepts a connection from this host."""

    def connect() -> None:
        with psycopg.connect(dsn, connect_timeout=2):
            pass

    container.wait_ready(connect, timeout, errors=(psycopg.Error,))


class ContainerPostgresServer(ContainerFaults, PostgresServer):
    """A PostgreSQL server in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})

    def __init__(self, container: KitContainer, dsn: str, timeout: float) -> None:
        super().__init__(dsn, origin=container.describe())
        self.hold_container(container)
        self._timeout = timeout

    def wait_ready(self) -> None:
        _wait_ready(self.container, self.dsn, self._timeout)


def start_container(request: ProvisionRequest) -> ContainerPostgresServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    options = CONTAINER_OPTIONS.parse(request.options)  # a bad value fails before any work
    image, timeout = options[PG_IMAGE], options[PG_START_TIMEOUT]
    network = check_network_mode(options[PG_NETWORK], PG_NETWORK.name)
    max_connections = options[PG_MAX_CONNECTIONS]
    password = secrets.token_hex(12)

    def command(bind: str, port: int) -> list[str]:
        return [
            "postgres",
            *("-c", f"listen_addresses={bind}", "-c", f"port={port}"),
            *("-c", "fsync=off", "-c", f"max_connections={max_connections}"),
        ]

    spec = ContainerSpec(
        image=image,
        command=command,
        container_port=_CONTAINER_PORT,
        data_path=_DATA,
        network=network,
        environment={
            "POSTGRES_USER": _USER,
            "POSTGRES_PASSWORD": password,
            "POSTGRES_DB": _DATABASE,
        },
    )

    def serve(container: KitContainer) -> ContainerPostgresServer:
        dsn = f"postgresql://{_USER}:{password}@127.0.0.1:{container.host_port}/{_DATABASE}"
        _wait_ready(container, dsn, timeout)
        return ContainerPostgresServer(container, dsn, timeout)

    return start_container_server(spec, serve)
