"""The container rung: MongoDB (``mongo:7``, as a single-node replica set) or SecantusDB
(``rdq-local/secantusdb``) in a Docker container the kit started.

Tried only when no local server binary is found and Docker is allowed. The container is
started by :func:`rdq_compliance.provision.kit_container.start_kit_container`: labelled
``rdq.kit``, removed with its data volume by a reaper process if the kit dies (SIGKILL
included), on the network mode of ``mongo_network`` (``host``: the server binds
127.0.0.1 on a port the kit chose; ``published``: the container's 27017 published on the
host's 127.0.0.1 only; ``auto``: host where the engine has no bridge). The URI is
``mongodb://127.0.0.1:PORT/?directConnection=true`` either way.

Which server the image holds is read from its ``rdq.server`` label
(``tools/build_local_images.sh`` sets ``rdq.server=secantusdb``): SecantusDB runs as
:func:`rdq_mongo.local.secantus_argv` does locally (its data in ``/data``); any other
image runs ``mongod --replSet rdq`` (data in ``/data/db``), configured with the member
``127.0.0.1:<port>``. Ready when ``hello`` says ``isWritablePrimary``
(:class:`rdq_mongo.local.Readiness`, which sends ``replSetInitiate`` to a mongod). The
report names the server honestly: SecantusDB is a MongoDB-wire-protocol server, not
MongoDB (:mod:`rdq_mongo.flavour`).

Faults: ``kill_server`` is ``docker kill``, ``restart_server`` starts the same container
again (its data is kept), ``pause_server`` is ``docker pause``. ``close()`` removes the
container and its volume.

Options: ``mongo_image``, ``mongo_network``, ``mongo_start_timeout``
(:mod:`rdq_mongo.options`).
"""

from __future__ import annotations

from pathlib import Path

import pymongo.errors as px

from rdq_compliance.provision.backend import (
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
)
from rdq_compliance.provision.container_server import ContainerFaults, start_container_server
from rdq_compliance.provision.kit_container import (
    ContainerSpec,
    KitContainer,
    check_network_mode,
    image_labels,
)
from rdq_mongo.local import REPLICA_SET, Readiness, secantus_argv
from rdq_mongo.options import (
    CONTAINER_OPTIONS,
    MONGO_IMAGE,
    MONGO_NETWORK,
    MONGO_START_TIMEOUT,
    check_known,
)
from rdq_mongo.server import MongoServer

__all__ = ["ContainerMongoServer", "container_command", "start_container"]

_CONTAINER_PORT = 27017
#: The ``rdq.server`` label of an image holding SecantusDB.
SECANTUS_LABEL = "secantusdb"


def container_command(secantus: bool, bind: str, port: int) -> list[str]:
    """The server's command line in the container, listening on ``bind:port``."""
    if secantus:
        argv = secantus_argv(Path("secantusd-py"), port, Path("/data"), sync_on_commit=False)
        argv[argv.index("--host") + 1] = bind
        return argv
    return ["mongod", "--replSet", REPLICA_SET, "--bind_ip", bind, "--port", str(port)]


def _wait_ready(container: KitContainer, uri: str, timeout: float, secantus: bool) -> None:
    ready = Readiness(uri, f"127.0.0.1:{container.host_port}", initiate=not secantus)

    def probe() -> None:
        if not ready():
            raise OSError("not a writable primary yet")

    container.wait_ready(probe, timeout, errors=(px.PyMongoError, OSError))


class ContainerMongoServer(ContainerFaults, MongoServer):
    """MongoDB or SecantusDB in a container the kit started (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER})

    def __init__(self, container: KitContainer, uri: str, timeout: float, secantus: bool) -> None:
        super().__init__(uri)
        self.origin = f"{container.describe()}: {self.flavour.label}"
        self.hold_container(container)
        self._timeout, self._secantus = timeout, secantus

    def wait_ready(self) -> None:
        _wait_ready(self.container, self.dsn, self._timeout, self._secantus)


def start_container(request: ProvisionRequest) -> ContainerMongoServer:
    """Rung 3 of the ladder: ``ProvisionUnavailable`` at once when Docker does not answer."""
    check_known(request.options)
    options = CONTAINER_OPTIONS.parse(request.options)
    image, timeout = options[MONGO_IMAGE], options[MONGO_START_TIMEOUT]
    network = check_network_mode(options[MONGO_NETWORK], MONGO_NETWORK.name)
    secantus = image_labels(image).get("rdq.server") == SECANTUS_LABEL
    spec = ContainerSpec(
        image=image,
        command=lambda bind, port: container_command(secantus, bind, port),
        container_port=_CONTAINER_PORT,
        data_path="/data" if secantus else "/data/db",
        network=network,
    )

    def serve(container: KitContainer) -> ContainerMongoServer:
        uri = f"mongodb://127.0.0.1:{container.host_port}/?directConnection=true"
        _wait_ready(container, uri, timeout, secantus)
        return ContainerMongoServer(container, uri, timeout, secantus)

    return start_container_server(spec, serve)
