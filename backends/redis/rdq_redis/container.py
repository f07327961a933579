"""The container rung: a Redis server in a Docker container, through testcontainers.

Tried only when the local binaries are missing and Docker is allowed. The options are
checked first (a cluster is refused here: this rung starts one server; a Redis Cluster
needs the local binaries), then whether Docker answers at all
(``docker_unavailable_reason`` of :mod:`rdq_compliance.provision.containers`, a ping with
a hard deadline of a few seconds), so a machine without a Docker engine gets a clean
reason at once instead of a long hang or a traceback.

The container (testcontainers' generic ``DockerContainer`` of the image, default
:data:`~rdq_redis.options.DEFAULT_IMAGE`) runs ``redis-server`` with the same
persistence flags as the local rung (``redis_persistence``, by default AOF with
``appendfsync always`` in the image's ``/data`` volume) and ``--protected-mode no``
(clients reach it through Docker's port mapping, not from its loopback; the port is
published on the host's 127.0.0.1 only). The host port is a free one chosen here and
fixed for the container's life, so a restarted container comes back at the same address;
the DSN always names 127.0.0.1 (never a Docker bridge address). Ready when ``PING``
answers through the mapping.

Faults: ``kill_server`` is ``docker kill`` (SIGKILL to ``redis-server``, PID 1 of the
container), ``restart_server`` starts the same container again (its ``/data`` is kept, so
the AOF is replayed), ``pause_server`` is ``docker pause`` (the cgroup freezer stops every
process of the container; ``resume`` unpauses), ``cut_connections`` works as on any
server. ``close()`` removes the container and its volume; if the test runner dies,
testcontainers' Ryuk sidecar does.

Options (declared in :mod:`rdq_redis.options`, parsed by the kit's shared parser):
``redis_image``, ``redis_persistence``, ``redis_start_timeout``.

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_redis.server.RedisServer`.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
)
from rdq_compliance.provision.containers import docker_unavailable_reason, wait_until_ready
from rdq_compliance.provision.ports import free_port
from rdq_redis.options import (
    CONTAINER_OPTIONS,
    DEFAULT_IMAGE,
    PERSISTENCE_FLAGS,
    REDIS_IMAGE,
    REDIS_START_TIMEOUT,
    cluster_size,
    persistence_mode,
)
from rdq_redis.server import RedisServer

__all__ = ["DEFAULT_IMAGE", "ContainerRedisServer", "server_command", "start_container"]

_CONTAINER_PORT = 6379


def server_command(persistence: str) -> list[str]:
    """What the container runs: ``redis-server`` with the persistence flags."""
    return [
        "redis-server",
        *("--port", str(_CONTAINER_PORT), "--protected-mode", "no"),
        *("--dir", "/data", "--appenddirname", "appendonlydir"),
        *PERSISTENCE_FLAGS[persistence],
    ]


def _wait_ready(dsn: str, timeout: float, what: str) -> None:
    """Poll until ``PING`` answers through the port mapping (``LOADING`` is "not yet")."""

    def ping() -> None:
        client = redis.Redis.from_url(
            dsn, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
        )
        try:
            client.ping()
        finally:
            client.close()

    wait_until_ready(ping, timeout, what, errors=(redis.RedisError, OSError))


class ContainerRedisServer(RedisServer):
    """A Redis server in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})

    def __init__(
        self, container: Any, dsn: str, image: str, port: int, persistence: str, timeout: float
    ) -> None:
        super().__init__(
            dsn, origin=f"container {image} on 127.0.0.1:{port} (persistence {persistence})"
        )
        self.container = container
        self._timeout = timeout
        self._fault_lock = threading.Lock()
        self._closed = False

    def kill(self) -> None:
        with self._fault_lock:
            self.container.get_wrapped_container().kill()
            self._forget_admin_client()

    def restart(self) -> None:
        with self._fault_lock:
            wrapped = self.container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status == "paused":
                wrapped.unpause()
                wrapped.reload()
            if wrapped.status == "running":
                wrapped.stop(timeout=10)
            wrapped.start()
            self._forget_admin_client()
            _wait_ready(self.dsn, self._timeout, self.origin)

    def pause(self) -> None:
        with self._fault_lock:
            self.container.get_wrapped_container().pause()

    def resume(self) -> None:
        with self._fault_lock:
            wrapped = self.container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status == "paused":
                wrapped.unpause()

    def close(self) -> None:
        with self._fault_lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                wrapped = self.container.get_wrapped_container()
                wrapped.reload()
                if wrapped.status == "paused":
                    wrapped.unpause()
            with contextlib.suppress(Exception):
                super().close()
            with contextlib.suppress(Exception):
                self.container.stop()  # removes the container and its volume


def start_container(request: ProvisionRequest) -> ContainerRedisServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    options = CONTAINER_OPTIONS.parse(request.options)  # a bad value fails before any work
    persistence = persistence_mode(options)
    if cluster_size(options) is not None:
        raise ProvisionUnavailable(
            "redis_cluster is set: the container rung starts one server; a Redis Cluster "
            "needs the local binaries (redis-server and redis-cli)"
        )
    image = options[REDIS_IMAGE]
    timeout = options[REDIS_START_TIMEOUT]
    reason = docker_unavailable_reason()
    if reason is not None:
        raise ProvisionUnavailable(reason)
    from testcontainers.core.container import DockerContainer

    port = free_port()
    container = DockerContainer(image).with_command(server_command(persistence))
    # Publish on 127.0.0.1 only, on a port fixed for the container's life (restarts keep it).
    container.ports[str(_CONTAINER_PORT)] = ("127.0.0.1", port)  # type: ignore[assignment]
    try:
        container.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            container.stop()
        raise ProvisionUnavailable(f"could not start container {image}: {exc}") from exc
    dsn = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_ready(dsn, timeout, f"container {image}")
        return ContainerRedisServer(container, dsn, image, port, persistence, timeout)
    except BaseException:
        with contextlib.suppress(Exception):
            container.stop()
        raise
