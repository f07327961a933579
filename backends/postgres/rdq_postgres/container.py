"""The container rung: a PostgreSQL server in a Docker container, through testcontainers.

Tried only when the local binaries are missing and Docker is allowed. First it asks
whether Docker answers at all (``docker_unavailable_reason`` of
:mod:`rdq_compliance.provision.containers`, a ping with a hard deadline of a few seconds),
so a machine without a Docker engine gets a clean reason at once instead of a long hang
or a traceback. The container's port is published on 127.0.0.1 only, on a free port
chosen here and fixed for the container's life, so a restarted container comes back at
the same address; the DSN always names 127.0.0.1 (never a Docker bridge address).

Faults: ``kill_server`` is ``docker kill`` (SIGKILL to the postmaster, PID 1 of the
container, which takes every other process of the container with it), ``restart_server``
starts the same container again (its data volume is kept, so the server does crash
recovery and no committed task is lost), ``cut_connections`` works as on any server.
If the test runner dies, testcontainers' Ryuk sidecar removes the container.

Options (declared in :mod:`rdq_postgres.options`, parsed by the kit's shared parser):
``pg_image`` (default :data:`DEFAULT_IMAGE`), ``pg_start_timeout`` (seconds, 60),
``pg_max_connections`` (200).

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_postgres.server.PostgresServer`.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from typing import Any

import psycopg

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
)
from rdq_compliance.provision.containers import docker_unavailable_reason, wait_until_ready
from rdq_compliance.provision.ports import free_port
from rdq_postgres.options import (
    CONTAINER_OPTIONS,
    DEFAULT_IMAGE,
    PG_IMAGE,
    PG_MAX_CONNECTIONS,
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


def _wait_ready(dsn: str, timeout: float, what: str) -> None:
    """Poll until ``dsn`` accepts a connection from this host (through the port mapping)."""

    def connect() -> None:
        with psycopg.connect(dsn, connect_timeout=2):
            pass

    wait_until_ready(connect, timeout, what, errors=(psycopg.Error,))


class ContainerPostgresServer(PostgresServer):
    """A PostgreSQL server in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, CUT_CONNECTIONS})

    def __init__(self, container: Any, dsn: str, image: str, port: int, timeout: float) -> None:
        super().__init__(dsn)
        self.container = container
        self.origin = f"container {image} on 127.0.0.1:{port}"
        self._timeout = timeout
        self._fault_lock = threading.Lock()
        self._closed = False

    def kill(self) -> None:
        with self._fault_lock:
            self.container.get_wrapped_container().kill()

    def restart(self) -> None:
        with self._fault_lock:
            wrapped = self.container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status == "running":
                wrapped.stop(timeout=10)
            wrapped.start()
            _wait_ready(self.dsn, self._timeout, self.origin)

    def close(self) -> None:
        with self._fault_lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                super().close()
            with contextlib.suppress(Exception):
                self.container.stop()  # removes the container and its volume


def start_container(request: ProvisionRequest) -> ContainerPostgresServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    options = CONTAINER_OPTIONS.parse(request.options)  # a bad value fails before any work
    image = options[PG_IMAGE]
    timeout = options[PG_START_TIMEOUT]
    max_connections = options[PG_MAX_CONNECTIONS]
    reason = docker_unavailable_reason()
    if reason is not None:
        raise ProvisionUnavailable(reason)
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:  # testcontainers < 4.14
        from testcontainers.postgres import PostgresContainer

    port = free_port()
    password = secrets.token_hex(12)
    container = PostgresContainer(
        image, username=_USER, password=password, dbname=_DATABASE, driver=None
    ).with_command(f"postgres -c fsync=off -c max_connections={max_connections}")
    # Publish on 127.0.0.1 only, on a port fixed for the container's life (restarts keep it).
    container.ports[str(_CONTAINER_PORT)] = ("127.0.0.1", port)  # type: ignore[assignment]
    try:
        container.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            container.stop()
        raise ProvisionUnavailable(f"could not start container {image}: {exc}") from exc
    dsn = f"postgresql://{_USER}:{password}@127.0.0.1:{port}/{_DATABASE}"
    try:
        _wait_ready(dsn, timeout, f"container {image}")
    except BaseException:
        with contextlib.suppress(Exception):
            container.stop()
        raise
    return ContainerPostgresServer(container, dsn, image, port, timeout)
