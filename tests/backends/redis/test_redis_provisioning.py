"""What only the redis backend's provisioning has: the persistence modes of its local
server and what the storage declares for each, the container's flags, the cluster's
refusal by the container rung, and the durability verdict node by node. The ladder, the
local server's faults and close, and the runner being SIGKILLed (a server and a 3-master
cluster) are the server contract's (``tests/server_contract/test_provisioning.py``), run
for every server backend; the cluster rung is in ``test_redis_cluster.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rdq_redis.container import server_command, start_container
from rdq_redis.local import LocalRedisServer, find_redis
from rdq_redis.persistence import NodePersistence, judge, read_node
from rdq_redis.plugin import backend
from rdq_redis.storage import RedisStorage

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable, Server

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX only")


def _local_or_skip(request: ProvisionRequest) -> Server:
    try:
        return backend.provision(request)
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local redis-server: {exc}")


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


def test_the_bin_dir_is_searched_instead_of_path(tmp_path: Path) -> None:
    """(That a cluster needs redis-cli from there too is the contract's missing-binary
    case for redis.)"""
    folder = tmp_path / "bin"
    folder.mkdir()
    server = folder / "redis-server"
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    assert find_redis((str(folder),))["redis-server"] == server


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


def test_the_local_server_runs_alone_with_the_persistence_asked(local: LocalRedisServer) -> None:
    assert not local.cluster
    (node,) = local.nodes
    client = node.client()
    try:
        config = client.config_get("appendonly", "appendfsync", "save", "protected-mode", "dir")
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always"
        assert config["save"] == "" and config["protected-mode"] == "yes"
        assert config["dir"] == str(node.datadir)
    finally:
        client.close()


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
