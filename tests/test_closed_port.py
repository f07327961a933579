"""The tests' closed port (:mod:`tests._ports`) stays closed while the test runs."""

from __future__ import annotations

import socket

import pytest

from tests._ports import closed_port


def test_a_closed_port_refuses_connections_and_cannot_be_taken() -> None:
    port = closed_port()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    for reuse in (False, True):  # a server that sets SO_REUSEADDR cannot take it either
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
            with pytest.raises(OSError, match="in use"):
                other.bind(("127.0.0.1", port))
    assert closed_port() != port
