"""rdq_compliance.provision.local_server and the free-port start of ports: a local rung's
server process (ProcessSlot) and its faults (LocalFaults), on a toy server.

The rules: a slot starts once its probe answers and says ``PortInUse`` when its log says
the port was taken, which the free-port start retries on a fresh port; the faults kill,
restart, pause and resume every slot, forget the server's connections after a kill or a
restart, refuse to act on a closed server, and ``close`` is idempotent, drops the
namespaces only while the server runs, and deletes the data.
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from rdq_compliance.provision import ports
from rdq_compliance.provision.backend import ProvisionUnavailable, Server
from rdq_compliance.provision.local_server import LocalFaults, ProcessSlot, start_rung
from rdq_compliance.provision.ports import PortInUse, free_port, port_open, start_on_free_port
from rdq_compliance.provision.process import ManagedProcess, ProcessFailed
from tests._waiting import HANG_S

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX process management")

#: A toy server: binds 127.0.0.1:<port> (saying "Address already in use" and exiting if it
#: is taken), adds a line to its data file, says it is ready, and serves until stopped.
TOY = textwrap.dedent(
    """
    import pathlib, socket, sys, time
    port, data = int(sys.argv[1]), pathlib.Path(sys.argv[2])
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        print(f"bind: {exc.strerror}", flush=True)
        sys.exit(1)
    sock.listen()
    with open(data / "data.txt", "a") as fh:
        fh.write("started\\n")
    (data / "ready").write_text("")
    while True:
        time.sleep(1)
    """
)


@dataclass
class ToyNode(ProcessSlot):
    datadir: Path
    log_path: Path
    start_timeout: float = HANG_S  # a hang guard: the start ends when the toy is ready
    port: int = 0
    process: ManagedProcess | None = field(default=None, repr=False)
    stop_grace = 2.0

    @classmethod
    def under(cls, workdir: Path, port: int = 0) -> ToyNode:
        return cls(workdir / "data", workdir / "toy.log", port=port)

    def argv(self) -> list[str]:
        return [sys.executable, "-c", TOY, str(self.port), str(self.datadir)]

    def prepare(self) -> None:
        super().prepare()
        (self.datadir / "ready").unlink(missing_ok=True)

    def probe(self) -> bool:
        return (self.datadir / "ready").exists() and port_open(self.port)


class ToyBase(Server):
    """The Server below LocalFaults: its close drops namespaces (counted here)."""

    dsn = "toy://"
    origin = "the toy server"
    server_closes = 0

    def create_namespace(self) -> str:
        return "ns"

    def drop_namespace(self, namespace: str) -> None:
        pass

    def close(self) -> None:
        type(self).server_closes += 1


class ToyLocalServer(LocalFaults, ToyBase):
    def __init__(self, node: ToyNode) -> None:
        self.node = node
        self.forgotten = 0
        self.hold_processes()

    def process_slots(self) -> Sequence[ToyNode]:
        return [self.node]

    def forget_connections(self) -> None:
        self.forgotten += 1


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ToyLocalServer]:
    ToyLocalServer.server_closes = 0
    node = ToyNode.under(tmp_path)
    node.start_on_free_port()
    srv = ToyLocalServer(node)
    yield srv
    srv.close()


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (a zombie has exited)."""
    return [p for p in pids if psutil.pid_exists(p) and _status(p) != psutil.STATUS_ZOMBIE]


def _status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return psutil.STATUS_DEAD


# ---- the free-port start ----------------------------------------------------------------


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process listens on."""
    squatter = socket.create_server(("127.0.0.1", 0))
    yield squatter.getsockname()[1]
    squatter.close()


def test_a_taken_port_is_port_in_use_and_retried_on_a_fresh_one(
    taken: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = ToyNode.under(tmp_path, port=taken)
    with pytest.raises(PortInUse, match=f"port {taken} on 127.0.0.1 was taken before"):
        node.start()
    assert node.process is None
    draws = iter([taken])  # the first draw of the free-port start is the taken port
    monkeypatch.setattr(ports, "free_port", lambda real=ports.free_port: next(draws, 0) or real())
    node.start_on_free_port()
    try:
        assert node.port != taken and port_open(node.port)
        assert "Address already in use" in node.log_path.read_text()
    finally:
        node.discard()
    assert not node.datadir.exists() and not node.log_path.exists()


def test_the_free_port_start_gives_up_after_its_attempts_and_passes_other_errors() -> None:
    tried: list[int] = []

    def always_taken(port: int) -> None:
        tried.append(port)
        raise PortInUse(port, "toy")

    with pytest.raises(PortInUse):
        start_on_free_port(always_taken, attempts=3)
    assert len(tried) == 3

    def broken(port: int) -> None:
        tried.append(port)
        raise ProcessFailed("no such binary")

    tried.clear()
    with pytest.raises(ProcessFailed, match="no such binary"):
        start_on_free_port(broken)
    assert len(tried) == 1


def test_a_free_port_besides_others() -> None:
    first = free_port()
    assert free_port(besides={first}) != first


# ---- the faults -------------------------------------------------------------------------


def test_kill_restart_pause_resume_act_on_the_processes(server: ToyLocalServer) -> None:
    node = server.node
    pids = server.pids()
    assert pids and alive(pids) == pids
    server.kill()
    assert alive(pids) == [] and not port_open(node.port)
    assert server.forgotten == 1
    server.restart()  # same port, same data
    assert port_open(node.port) and server.pids() and server.forgotten == 2
    assert (node.datadir / "data.txt").read_text() == "started\nstarted\n"  # data kept
    server.pause()
    assert node.paused
    assert all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in server.pids())
    server.resume()
    assert not node.paused


def test_a_closed_server_refuses_faults_and_closes_once(server: ToyLocalServer) -> None:
    node, pids = server.node, server.pids()
    server.pause()
    server.close()  # a paused server: resumed, its namespaces dropped, stopped
    assert ToyLocalServer.server_closes == 1
    assert alive(pids) == [] and not node.datadir.exists()
    server.close()
    assert ToyLocalServer.server_closes == 1
    for fault in (server.kill, server.restart, server.pause, server.resume):
        with pytest.raises(ProvisionUnavailable, match="the toy server was closed"):
            fault()


def test_a_killed_server_is_closed_without_its_namespaces_and_tidied(
    server: ToyLocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tidied: list[bool] = []
    monkeypatch.setattr(server, "tidy_after_kill", lambda: tidied.append(server.node.running))
    server.kill()
    server.close()
    assert ToyLocalServer.server_closes == 0, "a killed server has no namespaces to drop"
    assert tidied == [False]
    assert not server.node.datadir.exists()


def test_a_failed_restart_names_the_server(
    server: ToyLocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse() -> None:
        raise ProcessFailed("the binary is gone")

    monkeypatch.setattr(server.node, "start", refuse)
    with pytest.raises(ProvisionUnavailable, match="could not restart the toy server: the binary"):
        server.restart()


def test_a_backend_fault_runs_in_the_faults_frame(server: ToyLocalServer) -> None:
    server.kill()
    with server.faulting("failover of {origin} failed"):
        server.node.start()
    assert server.forgotten == 2 and server._killed is False
    with pytest.raises(ProvisionUnavailable, match="failover of the toy server failed: boom"):
        with server.faulting("failover of {origin} failed"):
            raise ProcessFailed("boom")
    with pytest.raises(ValueError, match="not a start error"):  # raised as it is
        with server.faulting("failover of {origin} failed"):
            raise ValueError("not a start error")


# ---- the rung ---------------------------------------------------------------------------


def test_a_rung_that_fails_to_start_discards_what_it_started(tmp_path: Path) -> None:
    node = ToyNode.under(tmp_path)

    def start() -> None:
        node.start_on_free_port()
        raise ProcessFailed("the database could not be created")

    with pytest.raises(ProvisionUnavailable, match="toy did not start: the database could"):
        start_rung(node, start, ToyLocalServer, failure="toy did not start")
    assert node.process is None and not node.datadir.exists()


def test_a_rung_whose_server_fails_discards_and_raises_as_it_is(tmp_path: Path) -> None:
    node = ToyNode.under(tmp_path)

    class Unmade(ToyLocalServer):
        def __init__(self, node: ToyNode) -> None:
            raise ValueError("the server object could not be made")

    with pytest.raises(ValueError, match="could not be made"):
        start_rung(node, node.start_on_free_port, Unmade, failure="x")
    assert node.process is None and not node.datadir.exists()
