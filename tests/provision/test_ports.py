"""rdq_compliance.provision.ports: a free port on loopback, and whether one is open."""

from __future__ import annotations

import socket

from rdq_compliance.provision.ports import free_port, port_open


def test_free_port_can_be_bound_on_loopback() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert not port_open(port)


def test_port_open_sees_a_listener() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert port_open(sock.getsockname()[1])
