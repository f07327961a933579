"""Loopback ports for the kit's own tests that no other software on the machine takes
while the test runs: a closed one, and one reserved for a server the test starts.

Both are held bound, never listening, by this process for its life: the kernel then never
gives the port to another ``bind`` to port 0, nor picks it as the source port of a
connection (which, to the same port, would connect to itself).
"""

from __future__ import annotations

import socket

#: The sockets holding the ports given, for the life of this process.
_HELD: list[socket.socket] = []


def _held(reuse: bool) -> int:
    sock = socket.socket()
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on: a connection to it is refused, and no
    other socket can bind it."""
    return _held(reuse=False)


def reserved_port() -> int:
    """A port of 127.0.0.1 for a server the test starts, which binds it with
    ``SO_REUSEADDR`` (as redis-server and the tests' toy servers do) and can then listen
    on it; until then a connection to it is refused, and only a socket binding this very
    port with ``SO_REUSEADDR`` could take it."""
    return _held(reuse=True)
