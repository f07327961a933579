"""The container rung: MongoDB (``mongo:7``) in a Docker container, through
testcontainers, as a single-node replica set.

Tried only when no local server binary is found and Docker is allowed. Whether Docker
answers is asked first (``docker_unavailable_reason``, a ping with a hard deadline), so a
machine without a Docker engine gets a clean reason at once. The container runs
``mongod --replSet rdq --bind_ip_all --port 27017`` with its port published on the host's
127.0.0.1 on a free port fixed for the container's life (a restarted container comes
back at the same address); the member is configured as ``127.0.0.1:<that port>``, so
the URI ``mongodb://127.0.0.1:PORT/?directConnection=true`` works from the host. Ready
when ``hello`` says ``isWritablePrimary`` (:class:`rdq_mongo.local.Readiness`, which
sends ``replSetInitiate`` first).

Faults: ``kill_server`` is ``docker kill``, ``restart_server`` starts the same container
again (its data is kept), ``pause_server`` is ``docker pause``. ``close()`` removes the
container; if the test runner dies, testcontainers' Ryuk sidecar does.

Options: ``mongo_image``, ``mongo_start_timeout`` (:mod:`rdq_mongo.options`).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from rdq_compliance.provision.backend import (
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
)
from rdq_compliance.provision.containers import docker_unavailable_reason, wait_until_ready
from rdq_compliance.provision.ports import free_port
from rdq_mongo.local import REPLICA_SET, Readiness
from rdq_mongo.options import CONTAINER_OPTIONS, MONGO_IMAGE, MONGO_START_TIMEOUT, check_known
from rdq_mongo.server import MongoServer

__all__ = ["ContainerMongoServer", "start_container"]

_CONTAINER_PORT = 27017


def _wait_ready(uri: str, port: int, timeout: float, what: str) -> None:
    ready = Readiness(uri, f"127.0.0.1:{port}", initiate=True)

    def probe() -> None:
        if not ready():
            raise OSError("not a writable primary yet")

    import pymongo.errors as px

    wait_until_ready(probe, timeout, what, errors=(px.PyMongoError, OSError))


class ContainerMongoServer(MongoServer):
    """MongoDB in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER})

    def __init__(self, container: Any, uri: str, image: str, port: int, timeout: float) -> None:
        super().__init__(uri)
        self.origin = f"container {image} on 127.0.0.1:{port}: {self.flavour.label}"
        self.container, self._port, self._timeout = container, port, timeout
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
                wrapped.stop(timeout=20)
            wrapped.start()
            self._forget_admin_client()
            _wait_ready(self.dsn, self._port, self._timeout, self.origin)

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
                self.container.stop()


def start_container(request: ProvisionRequest) -> ContainerMongoServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    check_known(request.options)
    options = CONTAINER_OPTIONS.parse(request.options)
    image, timeout = options[MONGO_IMAGE], options[MONGO_START_TIMEOUT]
    reason = docker_unavailable_reason()
    if reason is not None:
        raise ProvisionUnavailable(reason)
    from testcontainers.core.container import DockerContainer

    port = free_port()
    command = ["mongod", "--replSet", REPLICA_SET, "--bind_ip_all", "--port", str(_CONTAINER_PORT)]
    container = DockerContainer(image).with_command(command)
    container.ports[str(_CONTAINER_PORT)] = ("127.0.0.1", port)  # type: ignore[assignment]
    try:
        container.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            container.stop()
        raise ProvisionUnavailable(f"could not start container {image}: {exc}") from exc
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    try:
        _wait_ready(uri, port, timeout, f"container {image}")
        return ContainerMongoServer(container, uri, image, port, timeout)
    except BaseException:
        with contextlib.suppress(Exception):
            container.stop()
        raise
