"""The redis backend's provisioning ladder: given DSN → local binaries → container, the
faults of a server the kit started, its persistence and what the storage declares.

Most tests share one local server (module scope); the tests of ``close()``, of the
persistence modes and of the runner being SIGKILLed start their own. The cluster rung is
in ``test_redis_cluster.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from rdq_redis import local as local_rung
from rdq_redis.container import server_command, start_container
from rdq_redis.local import LocalRedisServer, find_redis
from rdq_redis.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_redis.persistence import NodePersistence, judge, read_node
from rdq_redis.plugin import RedisBackend, backend
from rdq_redis.server import RedisServer
from rdq_redis.storage import RedisStorage

from rdq_compliance.provision import ports as provision_ports
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
    Server,
)
from rdq_compliance.provision.ports import port_open
from rdq_core.errors import BackendUnavailable, InvalidArgument, NotFound
from rdq_core.model import NewTask

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX only")


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pids)


def watchdogs() -> list[int]:
    return [
        c.pid
        for c in psutil.Process().children()
        if c.status() != psutil.STATUS_ZOMBIE and "_watchdog.py" in " ".join(c.cmdline())
    ]


def processes_using(path: Path) -> list[int]:
    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if str(path) in " ".join(proc.info["cmdline"] or []):
            out.append(proc.info["pid"])
    return out


def _local_or_skip(request: ProvisionRequest) -> Server:
    try:
        return backend.provision(request)
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local redis-server: {exc}")


def _retrying(fn: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rdq-test-redis-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def local(workdir: Path) -> Iterator[LocalRedisServer]:
    """One local server for the module, provisioned through the ladder with no DSN."""
    provisioned = _local_or_skip(ProvisionRequest(workdir=workdir, allow_docker=False))
    try:
        assert isinstance(provisioned, LocalRedisServer)
        yield provisioned
    finally:
        provisioned.close()


@pytest.fixture
def opened(local: LocalRedisServer) -> Iterator[tuple[str, list[RedisStorage]]]:
    """A fresh namespace on the local server and the storages a test opens on it."""
    namespace = local.create_namespace()
    storages: list[RedisStorage] = []
    yield namespace, storages
    for storage in storages:
        storage.close()
    if not local.pids():
        local.restart()
    local.drop_namespace(namespace)


def _open(local: LocalRedisServer, opened: tuple[str, list[RedisStorage]]) -> RedisStorage:
    storage = backend.open(local.dsn, opened[0])
    opened[1].append(storage)
    return storage


# ---- the ladder ------------------------------------------------------------------------


def test_without_a_dsn_the_ladder_starts_local_binaries(
    local: LocalRedisServer, workdir: Path
) -> None:
    (node,) = local.nodes
    assert local.origin.startswith("local binary ")
    assert f"on 127.0.0.1:{node.port} (persistence aof: --appendonly yes --appendfsync always " in (
        local.origin
    )
    assert local.dsn == f"redis://127.0.0.1:{node.port}/0"
    assert local.faults == {KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS}
    assert node.datadir == workdir / "redis-0" and node.datadir.is_dir()
    assert not local.cluster


def test_a_dsn_beats_the_local_rung(
    local: LocalRedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(request: ProvisionRequest) -> Server:
        raise AssertionError("the local rung ran although a DSN was given")

    ladder = RedisBackend()
    monkeypatch.setattr(ladder, "start_local_server", must_not_run)
    monkeypatch.setattr(ladder, "start_container", must_not_run)
    given = ladder.provision(ProvisionRequest(workdir=tmp_path, dsn=local.dsn))
    try:
        assert type(given) is RedisServer
        assert given.origin == f"given DSN {local.dsn} (server)"
        assert given.faults == {CUT_CONNECTIONS}
    finally:
        given.close()
    assert port_open(local.nodes[0].port), "closing a given server must leave it running"


def test_without_binaries_nor_docker_the_error_names_all_three_remedies(
    tmp_path: Path, no_docker: None
) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={"redis_bin_dir": ""}, allow_docker=True)
    began = time.monotonic()
    with pytest.raises(ProvisionUnavailable) as info:
        RedisBackend().provision(request)
    assert time.monotonic() - began < 3
    message = str(info.value)
    assert message.startswith("no redis server could be provisioned. Remedies: ")
    for remedy in ("--rdq-dsn", "RDQ_REDIS_DSN", "server binaries on PATH", "start Docker"):
        assert remedy in message, message
    assert "local binaries: Redis server binaries: redis-server not found" in message
    assert "container: Docker is not reachable" in message
    assert list(tmp_path.iterdir()) == [], "a failed rung must leave nothing behind"


def test_with_docker_disabled_the_container_rung_is_not_tried(tmp_path: Path) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={"redis_bin_dir": ""}, allow_docker=False)
    with pytest.raises(ProvisionUnavailable, match=r"container: not tried \(--rdq-no-docker\)"):
        RedisBackend().provision(request)


def test_a_missing_binary_is_named_with_the_folders_searched(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    server = folder / "redis-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    assert find_redis((str(folder),))["redis-server"] == server
    with pytest.raises(ProvisionUnavailable) as info:
        find_redis((str(folder),), cluster=True)  # a cluster needs redis-cli too
    assert f"redis-cli not found; searched: {folder}" in str(info.value)
    assert "redis_bin_dir" in str(info.value)


def test_the_binaries_are_found_off_path_in_the_usual_folders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = shutil.which("redis-server")
    if installed is None or str(Path(installed).parent) not in local_rung.REDIS_SEARCH_DIRS:
        pytest.skip("redis-server is not in one of the usual folders here")
    monkeypatch.setenv("PATH", "/nonexistent")
    found = find_redis(None, cluster=True)
    assert found["redis-server"].parent == found["redis-cli"].parent == Path(installed).parent


def test_the_container_rung_without_docker_fails_fast_and_clearly(
    tmp_path: Path, no_docker: None
) -> None:
    began = time.monotonic()
    with pytest.raises(ProvisionUnavailable, match=r"^Docker is not reachable: "):
        start_container(ProvisionRequest(workdir=tmp_path))
    assert time.monotonic() - began < 3


def test_the_container_rung_refuses_a_cluster_before_asking_docker(tmp_path: Path) -> None:
    with pytest.raises(ProvisionUnavailable, match="needs the local binaries"):
        start_container(ProvisionRequest(workdir=tmp_path, options={"redis_cluster": "3"}))


def test_the_container_runs_the_same_persistence_flags() -> None:
    command = server_command("aof")
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always"
    assert command[command.index("--save") + 1] == ""
    assert server_command("none")[server_command("none").index("--appendonly") + 1] == "no"


def test_the_rungs_options_keep_their_names_and_defaults() -> None:
    assert LOCAL_OPTIONS.parse({}).as_dict() == {
        "redis_bin_dir": None,
        "redis_persistence": "aof",
        "redis_cluster": None,
        "redis_replica": "none",
        "redis_start_timeout": 30.0,
    }
    assert CONTAINER_OPTIONS.parse({}).as_dict() == {
        "redis_image": "redis:7-alpine",
        "redis_network": "auto",
        "redis_persistence": "aof",
        "redis_cluster": None,
        "redis_start_timeout": 30.0,
    }


@pytest.mark.parametrize("rung", ["start_local_server", "start_container"])
@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("redis_start_timeout", "soon", "a positive number ("),
        ("redis_cluster", "2.5", "a positive whole number ("),
        ("redis_cluster", "2", "at least 3 masters ("),
        ("redis_persistence", "always", "one of aof, everysec, rdb, none ("),
    ],
)
def test_both_rungs_refuse_a_bad_option_before_starting_anything(
    tmp_path: Path, rung: str, key: str, value: str, expected: str
) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={key: value})
    began = time.monotonic()
    with pytest.raises(InvalidArgument) as info:
        getattr(backend, rung)(request)
    shown = value if key == "redis_cluster" and value == "2" else repr(value)
    assert str(info.value).startswith(f"--rdq-option {key}={shown}: expected {expected}")
    assert time.monotonic() - began < 1, "the options must be checked before any work"
    assert list(tmp_path.iterdir()) == []


def test_a_bad_option_is_an_error_of_the_ladder_not_a_missing_server(tmp_path: Path) -> None:
    request = ProvisionRequest(workdir=tmp_path, options={"redis_persistence": "sometimes"})
    with pytest.raises(InvalidArgument, match="redis_persistence='sometimes': expected one of"):
        RedisBackend().provision(request)


def test_a_port_taken_meanwhile_is_retried_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        real = provision_ports.free_port  # where the free-port start draws its ports
        monkeypatch.setattr(provision_ports, "free_port", lambda: next(ports, None) or real())
        own = backend.start_local_server(ProvisionRequest(workdir=tmp_path))
        try:
            (node,) = own.nodes
            assert node.port != taken
            assert "Address already in use" in node.log_path.read_text()
            assert port_open(node.port)
        finally:
            own.close()


# ---- the local server ------------------------------------------------------------------


def test_the_local_server_listens_on_loopback_only_with_the_persistence_asked(
    local: LocalRedisServer,
) -> None:
    pids = local.pids()
    assert pids
    listening = [
        c
        for c in psutil.net_connections(kind="inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    ]
    assert {(c.laddr.ip, c.laddr.port) for c in listening} == {("127.0.0.1", local.nodes[0].port)}
    client = local.nodes[0].client()
    try:
        config = client.config_get("appendonly", "appendfsync", "save", "protected-mode", "dir")
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always"
        assert config["save"] == "" and config["protected-mode"] == "yes"
        assert config["dir"] == str(local.nodes[0].datadir)
    finally:
        client.close()


def test_the_storage_declares_the_aof_always_server_durable(
    local: LocalRedisServer, opened: tuple[str, list[RedisStorage]]
) -> None:
    caps = _open(local, opened).capabilities()
    assert caps.durable is True
    assert caps.durability == (
        f"appendonly yes, appendfsync always on 127.0.0.1:{local.nodes[0].port}: a reply "
        "leaves only after its AOF record is written to the file"
    )


def test_kill_makes_the_storage_unavailable_and_restart_replays_the_aof(
    local: LocalRedisServer, opened: tuple[str, list[RedisStorage]]
) -> None:
    storage = _open(local, opened)
    assert storage.enqueue(NewTask("before-kill", "q", "h", payload=b"\x00kept"))
    claim = storage.claim_due("q", 1, timedelta(minutes=5))[0]
    pids = local.pids()
    local.kill()
    assert alive(pids) == [] and local.pids() == []
    assert not port_open(local.nodes[0].port)
    with pytest.raises(BackendUnavailable):
        storage.get("before-kill")
    with pytest.raises(BackendUnavailable):
        local.create_namespace()

    local.restart()  # same port, same data: the AOF is replayed
    assert local.pids() and port_open(local.nodes[0].port)
    task = _retrying(lambda: storage.get("before-kill"))  # the old storage reconnects
    assert (task.payload, task.status.value) == (b"\x00kept", "IN_FLIGHT")
    assert task.lease_expires_at == claim.lease_expires_at
    storage.complete(claim.task_id, claim.token)  # the claim survived too
    local.drop_namespace(local.create_namespace())  # admin calls work again


def test_restart_of_a_running_server_is_a_clean_stop_and_start(
    local: LocalRedisServer, opened: tuple[str, list[RedisStorage]]
) -> None:
    storage = _open(local, opened)
    storage.enqueue(NewTask("across-restart", "q", "h"))
    old = local.pids()
    local.restart()
    assert alive(old) == []
    assert _retrying(lambda: storage.get("across-restart")).id == "across-restart"
    assert "Redis is now ready to exit" in local.nodes[0].log_path.read_text()  # SIGTERM


def test_pause_stops_the_server_until_resume(
    local: LocalRedisServer, opened: tuple[str, list[RedisStorage]]
) -> None:
    storage = _open(local, opened)
    storage.enqueue(NewTask("across-pause", "q", "h"))
    pids = local.pids()
    local.pause()
    try:
        assert {psutil.Process(p).status() for p in pids} == {psutil.STATUS_STOPPED}
        assert port_open(local.nodes[0].port), "a paused server keeps its socket"
        probe = local.nodes[0].client(timeout=0.5)
        with pytest.raises(redis.TimeoutError):
            probe.ping()  # connected, but nobody answers
        probe.close()
    finally:
        local.resume()
    assert psutil.STATUS_STOPPED not in {psutil.Process(p).status() for p in pids}
    assert _retrying(lambda: storage.get("across-pause")).id == "across-pause"


def test_cut_connections_kills_the_namespace_connections(
    local: LocalRedisServer, opened: tuple[str, list[RedisStorage]]
) -> None:
    storage = _open(local, opened)
    with pytest.raises(NotFound):
        storage.get("nothing")  # connects
    assert local.cut_connections(opened[0]) >= 1
    with pytest.raises(NotFound):
        _retrying(lambda: storage.get("nothing"))


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("everysec", "appendonly yes, appendfsync everysec: a reply can leave before its AOF"),
        ("rdb", "appendonly no, RDB snapshots (save '3600 1 300 100 60 10000'): a kill loses"),
        ("none", "appendonly no, no RDB snapshots: a restart loses everything"),
    ],
)
def test_any_other_persistence_is_declared_not_durable(tmp_path: Path, mode: str, why: str) -> None:
    own = _local_or_skip(
        ProvisionRequest(workdir=tmp_path, options={"redis_persistence": mode}, allow_docker=False)
    )
    try:
        assert f"(persistence {mode}: " in own.origin
        namespace = own.create_namespace()
        storage = backend.open(own.dsn, namespace)
        try:
            caps = storage.capabilities()
            assert caps.durable is False
            assert caps.durability.startswith(f"127.0.0.1:{own.nodes[0].port}: {why}")
        finally:
            storage.close()
    finally:
        own.close()


def test_the_given_server_without_persistence_is_not_durable(dsn: str) -> None:
    """The shared server (127.0.0.1:6379 here) keeps nothing on disk."""
    client = redis.Redis.from_url(dsn)
    try:
        config = client.config_get("appendonly", "appendfsync")
    finally:
        client.close()
    storage = RedisStorage(dsn, "nsdurability")
    try:
        caps = storage.capabilities()
    finally:
        storage.close()
    expected = config["appendonly"] == "yes" and config["appendfsync"] == "always"
    assert caps.durable is expected, caps.durability


@pytest.mark.parametrize("state", ["running", "killed", "paused"])
def test_close_stops_everything_and_removes_the_data(state: str) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="rdq-test-redis-close-"))
    watchdogs_before = watchdogs()
    try:
        own = _local_or_skip(ProvisionRequest(workdir=workdir, allow_docker=False))
        assert isinstance(own, LocalRedisServer)
        (node,) = own.nodes
        assert node.process is not None and node.process.watchdog_pid is not None
        pids = [*own.pids(), node.process.watchdog_pid]
        own.create_namespace()
        getattr(own, {"running": "pids", "killed": "kill", "paused": "pause"}[state])()
        began = time.monotonic()
        own.close()
        assert time.monotonic() - began < 5
        assert wait_gone(pids, 5) == []
        assert own.pids() == []
        assert processes_using(node.datadir) == []
        assert not node.datadir.exists()
        assert list(workdir.iterdir()) == [], "close() must remove everything it created"
        assert watchdogs() == watchdogs_before
        own.close()  # idempotent
        with pytest.raises(ProvisionUnavailable, match="closed"):
            own.restart()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


RUNNER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from rdq_compliance.provision.backend import ProvisionRequest
    from rdq_redis.plugin import backend
    options = json.loads(sys.argv[2])
    server = backend.provision(
        ProvisionRequest(workdir=Path(sys.argv[1]), options=options, allow_docker=False)
    )
    print(json.dumps({
        "pids": server.pids(),
        "watchdogs": [n.process.watchdog_pid for n in server.nodes],
        "dirs": [str(n.datadir) for n in server.nodes],
        "ports": [n.port for n in server.nodes],
    }), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("options", [{}, {"redis_cluster": "3"}], ids=["server", "cluster"])
def test_a_sigkilled_test_runner_leaves_no_server_behind(
    tmp_path: Path, options: dict[str, str]
) -> None:
    try:
        find_redis(None, cluster=bool(options))
    except ProvisionUnavailable as exc:
        pytest.skip(str(exc))
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path), json.dumps(options)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = runner.stdout.readline() if runner.stdout else ""
        if not line:
            runner.wait(10)
            err = runner.stderr.read() if runner.stderr else ""
            pytest.fail(f"the runner could not provision a server:\n{err[-3000:]}")
        report = json.loads(line)
        pids, dirs, ports = report["pids"], [Path(d) for d in report["dirs"]], report["ports"]
        assert alive(pids) == pids and all(port_open(p) for p in ports)
        assert all(d.is_dir() for d in dirs)

        runner.send_signal(signal.SIGKILL)
        runner.wait(5)
        began = time.monotonic()
        assert wait_gone([*pids, *report["watchdogs"]], 10) == []
        assert time.monotonic() - began < 5, "the server outlived the runner too long"
        assert not any(port_open(p) for p in ports)
        assert not any(d.exists() for d in dirs), "the watchdog must remove the data"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for stream in (runner.stdout, runner.stderr):
            if stream:
                stream.close()


# ---- the durability verdict, node by node -----------------------------------------------


class _NoConfigNode:
    """A node whose CONFIG is refused (renamed away, or an ACL without it)."""

    def __init__(self, aof: int) -> None:
        self.aof = aof
        self.connection_pool = type("Pool", (), {"connection_kwargs": {"host": "h", "port": 1}})

    def config_get(self, *args: str) -> dict[str, str]:
        raise redis.ResponseError("unknown command 'CONFIG'")

    def info(self, section: str) -> dict[str, int]:
        return {"aof_enabled": self.aof} if section == "persistence" else {"connected_slaves": 0}


def test_without_config_the_verdict_falls_back_to_info_and_promises_nothing_unseen() -> None:
    on = read_node(_NoConfigNode(1))  # type: ignore[arg-type]
    assert (on.appendonly, on.appendfsync, on.source) == ("yes", None, "INFO")
    verdict = judge([on], cluster=False)
    assert not verdict.durable and "the fsync policy cannot be read" in verdict.reason
    off = judge([read_node(_NoConfigNode(0))], cluster=False)  # type: ignore[arg-type]
    assert not off.durable and off.reason == (
        "h:1: AOF off (INFO persistence): a kill loses acknowledged writes"
    )


def test_a_cluster_is_durable_only_if_every_master_is_and_none_has_replicas() -> None:
    good = NodePersistence("a:1", "yes", "always", "", "CONFIG", 0)
    assert judge([good, good, good], cluster=True).durable
    lax = NodePersistence("b:2", "yes", "everysec", "", "CONFIG", 0)
    verdict = judge([good, lax, good], cluster=True)
    assert not verdict.durable and verdict.reason.startswith("b:2: appendonly yes, appendfsync")
    replicated = NodePersistence("c:3", "yes", "always", "", "CONFIG", 1)
    verdict = judge([good, replicated], cluster=True)
    assert not verdict.durable and "with 1 replica(s)" in verdict.reason
    assert judge([replicated], cluster=False).durable  # no automatic failover there
