"""The container rung: a Redis server in a Docker container the kit started.

Tried only when the local binaries are missing and Docker is allowed. The options are
checked first (a cluster is refused here: this rung starts one server; a Redis Cluster
needs the local binaries). The container is started by
:func:`rdq_compliance.provision.kit_container.start_kit_container`: labelled ``rdq.kit``,
removed with its data volume by a reaper process if the kit dies (SIGKILL included), on
the network mode of ``redis_network`` (``host``: ``redis-server`` binds 127.0.0.1 on a
port the kit chose; ``published``: it binds the container's 6379, published on the
host's 127.0.0.1 only, with ``--protected-mode no`` since clients come through Docker's
port mapping; ``auto``: host where the engine has no bridge). The image is
``redis_image``: the official ``redis`` image or ``rdq-local/redis``
(``tools/build_local_images.sh``). It runs ``redis-server`` with the same persistence
flags as the local rung (``redis_persistence``, by default AOF with ``appendfsync
always``) in ``/data``, a labelled named volume. The DSN always names 127.0.0.1. Ready
when ``PING`` answers.

Faults: ``kill_server`` is ``docker kill`` (SIGKILL to ``redis-server``, PID 1 of the
container), ``restart_server`` starts the same container again (its ``/data`` is kept, so
the AOF is replayed), ``pause_server`` is ``docker pause`` (the cgroup freezer stops every
process of the container; ``resume`` unpauses), ``cut_connections`` works as on any
server. ``close()`` removes the container and its volume.

Options (declared in :mod:`rdq_redis.options`, parsed by the kit's shared parser):
``redis_image``, ``redis_network``, ``redis_persistence``, ``redis_start_timeout``.

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_redis.server.RedisServer`.
"""

from __future__ import annotations

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
from rdq_compliance.provision.container_server import ContainerFaults, start_container_server
from rdq_compliance.provision.kit_container import (
    ContainerSpec,
    KitContainer,
    check_network_mode,
)
from rdq_redis.options import (
    CONTAINER_OPTIONS,
    DEFAULT_IMAGE,
    PERSISTENCE_FLAGS,
    REDIS_IMAGE,
    REDIS_NETWORK,
    REDIS_START_TIMEOUT,
    cluster_size,
    persistence_mode,
)
from rdq_redis.server import RedisServer

__all__ = ["DEFAULT_IMAGE", "ContainerRedisServer", "server_command", "start_container"]

_CONTAINER_PORT = 6379


def server_command(
    persistence: str, bind: str = "0.0.0.0", port: int = _CONTAINER_PORT
) -> list[str]:
    """What the container runs: ``redis-server`` on ``bind:port`` with the persistence
    flags."""
    return [
        "redis-server",
        *("--bind", bind, "--port", str(port), "--protected-mode", "no"),
        *("--dir", "/data", "--appenddirname", "appendonlydir"),
        *PERSISTENCE_FLAGS[persistence],
    ]


def _wait_ready(container: KitContainer, dsn: str, timeout: float) -> None:
    """Poll until ``PING`` answers (``LOADING`` is "not yet")."""

    def ping() -> None:
        client = redis.Redis.from_url(
            dsn, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
        )
        try:
            client.ping()
        finally:
            client.close()

    container.wait_ready(ping, timeout, errors=(redis.RedisError, OSError))


class ContainerRedisServer(ContainerFaults, RedisServer):
    """A Redis server in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})

    def __init__(self, container: KitContainer, dsn: str, persistence: str, timeout: float) -> None:
        super().__init__(dsn, origin=f"{container.describe()} (persistence {persistence})")
        self.hold_container(container)
        self._timeout = timeout

    def wait_ready(self) -> None:
        _wait_ready(self.container, self.dsn, self._timeout)


def start_container(request: ProvisionRequest) -> ContainerRedisServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    options = CONTAINER_OPTIONS.parse(request.options)  # a bad value fails before any work
    persistence = persistence_mode(options)
    if cluster_size(options) is not None:
        raise ProvisionUnavailable(
            "redis_cluster is set: the container rung starts one server; a Redis Cluster "
            "needs the local binaries (redis-server and redis-cli)"
        )
    image, timeout = options[REDIS_IMAGE], options[REDIS_START_TIMEOUT]
    network = check_network_mode(options[REDIS_NETWORK], REDIS_NETWORK.name)
    spec = ContainerSpec(
        image=image,
        command=lambda bind, port: server_command(persistence, bind, port),
        container_port=_CONTAINER_PORT,
        data_path="/data",
        network=network,
    )

    def serve(container: KitContainer) -> ContainerRedisServer:
        dsn = f"redis://127.0.0.1:{container.host_port}/0"
        _wait_ready(container, dsn, timeout)
        return ContainerRedisServer(container, dsn, persistence, timeout)

    return start_container_server(spec, serve)
