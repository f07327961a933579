"""Free TCP ports on the loopback interface, whether something listens on one, and the one
way a local rung starts a server on a free port.

A local-binaries rung starts its server on :func:`free_port`; because another process may
take the port between that call and the server's bind, it starts through
:func:`start_on_free_port`, which tries again on a fresh port while the start raises
:class:`PortInUse` (the server's log said the port was taken). :func:`port_open` is the
cheapest readiness and leak check there is.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection

from rdq_compliance.provision.process import ProcessFailed

__all__ = ["PORT_ATTEMPTS", "PortInUse", "free_port", "port_open", "start_on_free_port"]

#: How many fresh ports :func:`start_on_free_port` tries.
PORT_ATTEMPTS = 5
#: How many ports :func:`free_port` draws to find one outside ``besides``.
_DRAWS = 20


class PortInUse(ProcessFailed):
    """Another process took the free port before the server could bind it."""

    def __init__(self, port: int, server: str = "the server", log_tail: str = "") -> None:
        super().__init__(
            f"port {port} on 127.0.0.1 was taken before {server} could bind it", log_tail
        )
        self.port = port


def free_port(host: str = "127.0.0.1", *, besides: Collection[int] = ()) -> int:
    """A TCP port nobody listens on at ``host`` right now (the OS picks it), and none of
    ``besides`` (a server that needs a second port: a Redis Cluster node's bus).

    There is a window between this call and the server binding the port: start servers
    through :func:`start_on_free_port`.
    """
    for _ in range(_DRAWS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in besides:
            return port
    raise OSError(f"no free port on {host} besides {sorted(besides)} in {_DRAWS} draws")


def start_on_free_port(start: Callable[[int], object], attempts: int = PORT_ATTEMPTS) -> int:
    """``start(port)`` on a fresh :func:`free_port`; again on another one while it raises
    :class:`PortInUse`, at most ``attempts`` times (the last ``PortInUse`` is raised).
    Returns the port it started on. Any other error is raised at once."""
    for attempt in range(attempts):
        port = free_port()
        try:
            start(port)
        except PortInUse:
            if attempt == attempts - 1:
                raise
            continue
        return port
    raise ValueError(f"attempts must be at least 1, got {attempts}")


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
