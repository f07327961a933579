"""A server container the kit started: labelled, reaped when the kit dies, and faultable.

What every backend's container rung shares. :func:`start_kit_container` starts one
container of a server image through the docker SDK (testcontainers 4's
``DockerContainer`` has no way to set labels and pulls missing images unasked, so the
SDK it is built on is used directly; the Docker host is the one testcontainers would
use). Testcontainers' Ryuk reaper is not used (it is an image to pull, and none can be
pulled where no registry answers); instead, before the container exists, a reaper
process is started (``_container_reaper.py`` beside this module, stdlib only) that
removes every container and volume with this container's owner label when the kit
process dies, SIGKILL included (the kit's end of its pipe is a
:class:`~rdq_compliance.provision.reaper_pipe.ReaperPipe`).

**Labels.** Every container and volume the kit creates carries ``rdq.kit=1``
(:data:`KIT_LABEL`), ``rdq.owner=<random id>`` (:data:`OWNER_LABEL`, what its reaper
removes) and ``rdq.pid=<the kit process>`` (:data:`PID_LABEL`), so ``docker ps --filter
label=rdq.kit`` lists them all.

**Network modes** (:data:`NETWORK_MODES`, the ``*_network`` rung option; ``auto``, the
default, is ``host`` on an engine without a ``bridge`` network, else ``published``):

- ``host``: the container shares the host's network namespace and the server binds
  127.0.0.1 on a free port the kit chose, so servers and tests talk over loopback only
  (for engines run without a bridge: ``dockerd --bridge=none --iptables=false``);
- ``published``: Docker's default bridge, the server's port published on the host's
  127.0.0.1 only, on a free port fixed for the container's life.

Either way the address clients use is ``127.0.0.1:<host_port>``, and a restarted
container comes back on it. The server's data lives in a labelled named volume mounted at
the image's data folder, so a restart of the same container keeps it.

**Faults** (docker SDK): :meth:`KitContainer.kill` (``docker kill``: SIGKILL to PID 1),
:meth:`~KitContainer.restart` (stop if running, start the same container: data kept),
:meth:`~KitContainer.pause` / :meth:`~KitContainer.resume` (``docker pause``: the cgroup
freezer stops every process of the container).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdq_compliance.provision.backend import ProvisionUnavailable
from rdq_compliance.provision.containers import docker_unavailable_reason, wait_until_ready
from rdq_compliance.provision.ports import free_port
from rdq_compliance.provision.reaper_pipe import ReaperNotReady, ReaperPipe, start_reaper
from rdq_core.errors import InvalidArgument

__all__ = [
    "KIT_LABEL",
    "NETWORK_AUTO",
    "NETWORK_HOST",
    "NETWORK_MODES",
    "NETWORK_PUBLISHED",
    "OWNER_LABEL",
    "PID_LABEL",
    "ContainerSpec",
    "KitContainer",
    "check_network_mode",
    "docker_client",
    "docker_host",
    "image_labels",
    "start_kit_container",
]

KIT_LABEL = "rdq.kit"
#: How many times `KitContainer.pause` asks the engine to freeze a busy container.
FREEZE_TRIES = 4
OWNER_LABEL = "rdq.owner"
PID_LABEL = "rdq.pid"
NETWORK_HOST = "host"
NETWORK_PUBLISHED = "published"
NETWORK_AUTO = "auto"
NETWORK_MODES = (NETWORK_AUTO, NETWORK_HOST, NETWORK_PUBLISHED)
REAPER_SCRIPT = Path(__file__).with_name("_container_reaper.py")


def check_network_mode(value: str, option_name: str) -> str:
    """``value`` if it is a known network mode, else an ``InvalidArgument`` naming them."""
    if value not in NETWORK_MODES:
        raise InvalidArgument(
            f"--rdq-option {option_name}={value!r}: expected one of "
            f"{', '.join(NETWORK_MODES)} (host: the host's network, the server on "
            "127.0.0.1; published: a port published on 127.0.0.1; auto: host where the "
            "engine has no bridge network, else published)"
        )
    return value


def docker_host() -> str:
    """The Docker host testcontainers (and so the kit) uses."""
    with contextlib.suppress(ImportError):
        from testcontainers.core.docker_client import get_docker_host

        host = get_docker_host()
        if host:
            return str(host)
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def docker_client() -> Any:
    """A docker SDK client of :func:`docker_host`."""
    import docker

    environment = dict(os.environ)
    environment["DOCKER_HOST"] = docker_host()
    return docker.from_env(environment=environment, timeout=60)


@dataclass(frozen=True)
class ContainerSpec:
    """What to run: ``command(bind_address, port)`` is the server's command line for the
    address it must listen on inside the container; ``data_path`` gets the named volume."""

    image: str
    command: Callable[[str, int], Sequence[str]]
    container_port: int
    data_path: str
    network: str = NETWORK_AUTO
    environment: Mapping[str, str] = field(default_factory=dict)


class KitContainer:
    """One running server container (see the module docstring)."""

    def __init__(self, spec: ContainerSpec, client: Any, owner: str, reaper: ReaperPipe) -> None:
        self.spec = spec
        self.owner = owner
        self.client = client
        self._reaper = reaper
        self.network = spec.network
        if self.network == NETWORK_AUTO:
            bridged = client.networks.list(names=["bridge"])
            self.network = NETWORK_PUBLISHED if bridged else NETWORK_HOST
        self.host_port = free_port()
        self.volume = f"rdq-{owner}"
        labels = {KIT_LABEL: "1", OWNER_LABEL: owner, PID_LABEL: str(os.getpid())}
        client.volumes.create(name=self.volume, labels=labels)
        if self.network == NETWORK_HOST:
            bind, port = "127.0.0.1", self.host_port
            network: dict[str, Any] = {"network_mode": "host"}
        else:
            bind, port = "0.0.0.0", spec.container_port
            network = {"ports": {f"{spec.container_port}/tcp": ("127.0.0.1", self.host_port)}}
        self.container = client.containers.run(
            spec.image,
            list(spec.command(bind, port)),
            detach=True,
            name=f"rdq-{owner}",
            labels=labels,
            environment=dict(spec.environment),
            volumes={self.volume: {"bind": spec.data_path, "mode": "rw"}},
            **network,
        )
        image = client.images.get(spec.image)
        digests = image.attrs.get("RepoDigests") or []
        #: The image's content digest where a registry gave one, else its local ID.
        self.image_ref = digests[0].partition("@")[2] if digests else image.id
        self._lock = threading.Lock()

    def describe(self) -> str:
        """``image rdq-local/redis (sha256:...), host network`` for the report's server line."""
        how = (
            f"host network, 127.0.0.1:{self.host_port}"
            if self.network == NETWORK_HOST
            else f"published on 127.0.0.1:{self.host_port}"
        )
        return f"container {self.spec.image} ({self.image_ref}), {how}"

    def status(self) -> str:
        self.container.reload()
        return str(self.container.status)

    def logs(self, lines: int = 20) -> str:
        with contextlib.suppress(Exception):
            return bytes(self.container.logs(tail=lines)).decode("utf-8", "replace")
        return ""

    def wait_ready(
        self,
        probe: Callable[[], object],
        timeout: float,
        errors: tuple[type[BaseException], ...],
    ) -> None:
        """:func:`~rdq_compliance.provision.containers.wait_until_ready` on ``probe``; a
        container that exits meanwhile fails at once, and either failure quotes the
        last lines of its log."""

        def checked() -> object:
            try:
                return probe()
            except errors:
                if self.status() in ("exited", "dead"):
                    raise ProvisionUnavailable(
                        f"{self.describe()} exited before it was ready\n--- last lines of "
                        f"its log ---\n{self.logs()}"
                    ) from None
                raise

        try:
            wait_until_ready(checked, timeout, self.describe(), errors=errors)
        except ProvisionUnavailable as exc:
            if "--- last lines" in str(exc):
                raise
            raise ProvisionUnavailable(
                f"{exc}\n--- last lines of its log ---\n{self.logs()}"
            ) from exc

    def kill(self) -> None:
        """``docker kill``: SIGKILL to the container's PID 1 (it stays down)."""
        with self._lock:
            if self.status() == "paused":
                self.container.unpause()
            self.container.kill()

    def restart(self) -> None:
        """Start the same container again (stopped first if running): its data is kept."""
        with self._lock:
            status = self.status()
            if status == "paused":
                self.container.unpause()
                status = self.status()
            if status == "running":
                self.container.stop(timeout=10)
            self.container.start()

    def pause(self) -> None:
        """``docker pause``: every process of the container frozen. The cgroup-v1
        freezer can fail to freeze a busy container in time ("OCI runtime pause failed:
        unable to freeze", moby/moby#48205, open; runc thaws it again): asked again up
        to :data:`FREEZE_TRIES` times in all before the error is raised."""
        import docker.errors

        with self._lock:
            for attempt in range(1, FREEZE_TRIES + 1):
                try:
                    self.container.pause()
                    return
                except docker.errors.APIError as exc:
                    if "unable to freeze" not in str(exc) or attempt == FREEZE_TRIES:
                        raise
                    time.sleep(0.2 * attempt)

    def resume(self) -> None:
        """``docker unpause`` (a no-op when it is not paused)."""
        with self._lock:
            if self.status() == "paused":
                self.container.unpause()

    def remove(self) -> None:
        """Remove the container and its volume (idempotent)."""
        with self._lock:
            self._reaper.release()
            with contextlib.suppress(Exception):
                self.client.close()


def image_labels(image: str) -> dict[str, str]:
    """The labels of ``image`` as this engine has it (empty when it is not here, or
    Docker does not answer: the container rung then fails with the reason)."""
    if docker_unavailable_reason() is not None:
        return {}
    import docker.errors

    client = docker_client()
    try:
        return dict(client.images.get(image).attrs.get("Config", {}).get("Labels") or {})
    except docker.errors.DockerException:
        return {}
    finally:
        client.close()


def start_kit_container(spec: ContainerSpec) -> KitContainer:
    """Start ``spec``'s container, or raise ``ProvisionUnavailable`` saying why not.

    Docker is pinged first (a few seconds at most); an image missing locally is pulled
    once, and if that fails too the error says how to build the local images.
    """
    reason = docker_unavailable_reason()
    if reason is not None:
        raise ProvisionUnavailable(reason)
    import docker.errors

    client = docker_client()
    try:
        client.images.get(spec.image)
    except docker.errors.ImageNotFound:
        try:
            client.images.pull(spec.image)
        except docker.errors.DockerException as exc:
            client.close()
            raise ProvisionUnavailable(
                f"image {spec.image} is not here and could not be pulled ({exc}); where no "
                "registry is reachable, build the local images with "
                "tools/build_local_images.sh and pass the rdq-local/... image"
            ) from exc
    owner = secrets.token_hex(6)
    config = {"docker_host": docker_host(), "label": f"{OWNER_LABEL}={owner}"}
    try:
        reaper = start_reaper(REAPER_SCRIPT, config, what="container reaper")
    except ReaperNotReady as exc:
        client.close()
        raise ProvisionUnavailable(str(exc)) from None
    try:
        return KitContainer(spec, client, owner, reaper)
    except BaseException as exc:
        reaper.release()
        client.close()
        if isinstance(exc, docker.errors.DockerException):
            raise ProvisionUnavailable(f"could not start container {spec.image}: {exc}") from exc
        raise
