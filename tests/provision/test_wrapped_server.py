"""``WrappedServer``: another plugin's server, forwarded whole, each namespace prepared
(and dropped again when preparing it fails)."""

from __future__ import annotations

import pytest

from rdq_compliance.provision.backend import Server
from rdq_compliance.provision.wrapped import WrappedServer


class Inner(Server):
    faults = frozenset({"kill_server"})
    origin = "local binary /bin/x"
    version = "X 1.0"
    race_time_factor = 2.0

    def __init__(self) -> None:
        self.dsn = "x://127.0.0.1:1/a"
        self.made: list[str] = []
        self.dropped: list[str] = []
        self.killed = 0
        self.extra = "only the inner server has this"

    def create_namespace(self) -> str:
        self.made.append(f"ns{len(self.made)}")
        return self.made[-1]

    def drop_namespace(self, namespace: str) -> None:
        self.dropped.append(namespace)

    def recorded_namespaces(self) -> dict[str, str | None]:
        return {ns: f"record of {ns}" for ns in self.made}

    def close(self) -> None:
        pass

    def kill(self) -> None:
        self.killed += 1


def test_everything_is_the_inner_servers_and_namespaces_are_prepared():
    inner = Inner()
    prepared: list[tuple[str, str]] = []
    server = WrappedServer(inner, lambda dsn, ns: prepared.append((dsn, ns)), version="lib 2.0")
    assert server.create_namespace() == "ns0" and prepared == [("x://127.0.0.1:1/a", "ns0")]
    inner.dsn = "x://127.0.0.1:2/a"  # a failover moved it
    assert server.dsn == "x://127.0.0.1:2/a"
    assert (server.origin, server.version) == ("local binary /bin/x", "X 1.0; lib 2.0")
    assert server.faults == {"kill_server"} and server.race_time_factor == 2.0
    server.kill()
    assert inner.killed == 1 and server.extra == inner.extra
    assert server.network_address() == ("127.0.0.1", 2)
    assert server.recorded_namespaces() == {"ns0": "record of ns0"}  # what the sweep reads
    server.discard_namespace("ns0")
    assert inner.dropped == ["ns0"]


def test_a_namespace_that_cannot_be_prepared_is_dropped_and_the_error_raised():
    inner = Inner()

    def fail(dsn: str, ns: str) -> None:
        raise RuntimeError(f"cannot install the library's schema in {ns}")

    server = WrappedServer(inner, fail)
    with pytest.raises(RuntimeError, match="schema in ns0"):
        server.create_namespace()
    assert inner.dropped == ["ns0"]
    assert server.version == "X 1.0"
