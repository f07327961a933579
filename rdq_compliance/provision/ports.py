"""Free TCP ports on the loopback interface, and whether something listens on one.

A local-binaries rung starts its server on :func:`free_port` and, because another process
may take the port between this call and the server's bind, retries with a fresh port when
the bind fails. :func:`port_open` is the cheapest readiness and leak check there is.
"""

from __future__ import annotations

import socket

__all__ = ["free_port", "port_open"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at ``host`` right now (the OS picks it).

    There is a window between this call and the server binding the port; callers that
    start a server on it retry with a new port if the bind fails.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
