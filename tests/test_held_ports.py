"""The tests' held ports (:mod:`tests._ports`): a closed port stays closed, a reserved one
is the test's server's alone."""

from __future__ import annotations

import socket

import pytest

from tests._ports import closed_port, reserved_port


def _bind(port: int, reuse: bool) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def test_a_closed_port_refuses_connections_and_cannot_be_taken() -> None:
    port = closed_port()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    for reuse in (False, True):
        with pytest.raises(OSError, match="in use"):
            _bind(port, reuse)
    assert closed_port() != port


def test_a_reserved_port_is_taken_by_the_tests_server_alone() -> None:
    port = reserved_port()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(OSError, match="in use"):
        _bind(port, reuse=False)  # another software's plain bind
    with _bind(port, reuse=True) as server:  # the test's server (SO_REUSEADDR)
        server.listen()
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with pytest.raises(OSError, match="in use"):
            _bind(port, reuse=True)  # nobody else, once it listens
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
