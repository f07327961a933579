"""The fault verbs of a ``Server`` whose server runs in one :class:`KitContainer`.

Every container rung's server has the same ones, so a backend's container server is its
``Server`` with this mixin first among the bases::

    class ContainerMyServer(ContainerFaults, MyServer):
        faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER})

        def __init__(self, container: KitContainer, dsn: str) -> None:
            super().__init__(dsn, origin=container.describe())
            self.hold_container(container)

        def wait_ready(self) -> None:  # after a restart
            ...

After a kill or a restart the server's own connections are gone: the faults call the
``Server``'s ``forget_connections`` (the backend's ``Server`` gives it, usually as its
:class:`~rdq_compliance.provision.admin.AdminHandle`'s ``forget``).

- :meth:`kill`: ``docker kill`` (SIGKILL to the server, PID 1); it stays down;
- :meth:`restart`: the same container started again, its volume (the data) kept, on the
  same address; returns once :meth:`wait_ready` does;
- :meth:`pause` / :meth:`resume`: ``docker pause`` / ``unpause`` (the cgroup freezer);
- :meth:`close`: resume, the server's own ``close`` (drop the namespaces it made), then
  remove the container and its volume; idempotent.

One lock orders them, so a fault never overlaps another or the close.

:func:`start_container_server` is the container rung's start: the container, then the
``Server`` on it (which waits until the server answers), the container removed again if
that fails.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from rdq_compliance.provision.kit_container import ContainerSpec, KitContainer, start_kit_container

__all__ = ["ContainerFaults", "start_container_server"]

S = TypeVar("S")


class ContainerFaults:
    """Mixin: the container faults of a ``Server`` (see the module docstring)."""

    container: KitContainer

    def hold_container(self, container: KitContainer) -> None:
        """Call once from ``__init__``: the container these faults act on."""
        self.container = container
        self._fault_lock = threading.Lock()
        self._closed = False

    if TYPE_CHECKING:  # the Server's (never defined here: it would hide the Server's own)

        def forget_connections(self) -> None: ...

    def wait_ready(self) -> None:
        """Return once the restarted server answers (override)."""

    def kill(self) -> None:
        with self._fault_lock:
            self.container.kill()
            self.forget_connections()

    def restart(self) -> None:
        with self._fault_lock:
            self.container.restart()
            self.forget_connections()
            self.wait_ready()

    def pause(self) -> None:
        with self._fault_lock:
            self.container.pause()

    def resume(self) -> None:
        with self._fault_lock:
            self.container.resume()

    def close(self) -> None:
        with self._fault_lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):
                self.container.resume()
            with contextlib.suppress(Exception):
                super().close()  # type: ignore[misc]  # the Server's own close
            self.container.remove()  # the container and its volume


def start_container_server(spec: ContainerSpec, serve: Callable[[KitContainer], S]) -> S:
    """:func:`~rdq_compliance.provision.kit_container.start_kit_container` of ``spec``, then
    ``serve(container)`` (wait until the server answers, return its ``Server``); if that
    fails, the container and its volume are removed and the error raised as it is."""
    container = start_kit_container(spec)
    try:
        return serve(container)
    except BaseException:
        container.remove()
        raise
