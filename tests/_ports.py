"""A loopback port that stays closed for the kit's own tests: nothing listens on it while
the test runs, whatever else the machine runs."""

from __future__ import annotations

import socket

#: The sockets holding the ports :func:`closed_port` gave, for the life of this process.
_HELD: list[socket.socket] = []


def closed_port() -> int:
    """A port of 127.0.0.1 this process keeps bound and never listens on: a connection to
    it is refused, no other process can bind it, and the kernel never picks it as the
    source port of a connection (which, to the same port, would connect to itself)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])
