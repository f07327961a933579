"""On a real 3-master Redis Cluster: every script runs with queues (and id shards) on
every master and never meets ``CROSSSLOT``; the cluster does refuse a script whose keys
span slots (so it would catch one); a namespace is dropped on every master by SCAN, with
no ``KEYS``/``FLUSH*``; cuts reach every master; ``NOSCRIPT`` after a flush everywhere is
transparent. The cluster is ``RDQ_REDIS_CLUSTER_DSN`` or one the backend's local rung
(``redis_cluster=3``) starts here; the faults of that rung (kill, restart, pause of every
node) are tested on a rung of their own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import psutil
import pytest
import redis
from rdq_redis import keys
from rdq_redis.connection import primaries
from rdq_redis.errors import map_error
from rdq_redis.local import LocalRedisServer
from rdq_redis.plugin import RedisServer
from rdq_redis.scripts import ScriptSource
from rdq_redis.storage import RedisStorage
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
)
from rdq_compliance.provision.ports import port_open
from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask
from tests._fixtures import namespace_of
from tests._processes import until_works
from tests.backends.redis._redis_support import CLUSTER_ENV, lifecycle, local_cluster, with_query


@pytest.fixture(scope="module")
def cluster_dsn(request: pytest.FixtureRequest) -> str:
    """``RDQ_REDIS_CLUSTER_DSN``, else the local rung's cluster (see :func:`rung`)."""
    return os.environ.get(CLUSTER_ENV) or request.getfixturevalue("rung").dsn


@pytest.fixture(scope="module")
def cluster_server(cluster_dsn: str) -> Iterator[RedisServer]:
    srv = RedisServer(cluster_dsn)
    assert srv.cluster and "cluster of 3 masters" in srv.origin
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def client(cluster_dsn: str) -> Iterator[RedisCluster]:
    c = RedisCluster.from_url(cluster_dsn)
    yield c
    c.close()


@pytest.fixture
def cluster_ns(cluster_server: RedisServer) -> Iterator[str]:
    yield from namespace_of(cluster_server)


def _node_of(client: RedisCluster, key: str) -> str:
    return client.get_node_from_key(key).name


def _queues_on_every_master(client: RedisCluster, namespace: str, per_node: int = 2) -> list[str]:
    layout = keys.Layout(namespace)
    masters = {n.name for n in client.get_primaries()}
    chosen: dict[str, list[str]] = {m: [] for m in masters}
    for i in range(10_000):
        queue = f"q{i}"
        node = _node_of(client, layout.of_queue(queue).task)
        if len(chosen[node]) < per_node:
            chosen[node].append(queue)
        if all(len(v) == per_node for v in chosen.values()):
            return [q for v in chosen.values() for q in v]
    raise AssertionError("could not find queues on every master")


def _commandstats(node: redis.Redis) -> dict[str, int]:
    stats = node.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items()}


def test_the_storage_uses_a_cluster_client_found_by_asking_the_node(cluster_dsn, cluster_ns):
    storage = RedisStorage(cluster_dsn, cluster_ns)
    try:
        client, _ = storage._source.get()
        assert isinstance(client, RedisCluster)
        assert len(primaries(client)) == 3
    finally:
        storage.close()


def test_every_script_on_every_master_without_crossslot(cluster_dsn, cluster_ns, client):
    """Queues whose buckets land on each of the three masters, ids whose index shards
    land on others: the whole lifecycle (every script, every selector and filter) runs
    with the undeclared-key guard; a CROSSSLOT would raise."""
    storage = RedisStorage(with_query(cluster_dsn, "rdq_check_keys=1"), cluster_ns)
    try:
        queues = _queues_on_every_master(client, cluster_ns)
        for queue in queues:
            lifecycle(storage, queue)
        layout = keys.Layout(cluster_ns)
        owners = {_node_of(client, layout.of_queue(q).task) for q in queues}
        assert len(owners) == 3
        shard_owners = {
            _node_of(client, layout.shard(f"{q}-{i}").ids) for q in queues for i in range(6)
        }
        assert len(shard_owners) == 3
        # an id in one queue on one master, its index shard on another, stays exclusive
        storage.enqueue(NewTask("x-1", queues[0], "h"))
        claims = storage.claim_due(queues[0], 1, timedelta(minutes=1))
        storage.complete(claims[0].task_id, claims[0].token)
    finally:
        storage.close()


def test_the_cluster_refuses_a_script_whose_keys_span_slots(client, cluster_ns):
    """Negative control: a new-style (shebang) script touching two buckets fails on the
    cluster, declared or not, so a script of ours that did would fail the test above."""
    layout = keys.Layout(cluster_ns)
    a = layout.bucket("000").task
    b = next(
        layout.bucket(f"{i:03x}").task
        for i in range(1, 4096)
        if _node_of(client, layout.bucket(f"{i:03x}").task) == _node_of(client, a)
    )
    rogue = ScriptSource("rogue", f"redis.call('GET', KEYS[1]); return redis.call('GET', '{b}')")
    script = client.register_script(rogue.source())
    with pytest.raises(redis.RedisError, match=r"same slot|CROSSSLOT") as refused:
        script(keys=[a], args=[])
    # ... and the storage reports that refusal as the rule it breaks (bug class undeclared-keys)
    mapped = map_error(refused.value, "rogue", "the cluster")
    assert isinstance(mapped, BackendUnavailable) and mapped.rule == "cluster-keys", mapped
    other_node = ResponseError(
        "Script attempted to access a non local key in a cluster node script: 0, on @user_script:1."
    )
    assert map_error(other_node, "rogue", "the cluster").rule == "cluster-keys"
    assert map_error(ResponseError("ERR something else"), "rogue", "the cluster").rule is None


def test_drop_namespace_leaves_no_key_on_any_master_and_never_uses_keys_or_flush(
    cluster_dsn, cluster_server, client
):
    ns = cluster_server.create_namespace()
    storage = RedisStorage(cluster_dsn, ns)
    try:
        for queue in _queues_on_every_master(client, ns, per_node=1):
            lifecycle(storage, queue)
            for i in range(300):
                storage.enqueue(NewTask(f"{queue}-bulk-{i}", queue, "h"))
    finally:
        storage.close()
    nodes = primaries(client)
    pattern = keys.scan_pattern(ns)
    assert all(list(n.scan_iter(match=pattern, count=1000)) for n in nodes)
    before = [_commandstats(n) for n in nodes]
    cluster_server.drop_namespace(ns)
    after = [_commandstats(n) for n in nodes]
    for n, b, a in zip(nodes, before, after, strict=True):
        assert list(n.scan_iter(match=pattern, count=1000)) == []
        for forbidden in ("cmdstat_keys", "cmdstat_flushall", "cmdstat_flushdb"):
            assert a.get(forbidden, 0) == b.get(forbidden, 0), forbidden
        assert a.get("cmdstat_scan", 0) > b.get("cmdstat_scan", 0)


def test_cut_connections_reaches_every_master(cluster_dsn, cluster_server, cluster_ns, client):
    storage = RedisStorage(cluster_dsn, cluster_ns)
    try:
        for queue in _queues_on_every_master(client, cluster_ns, per_node=1):
            storage.enqueue(NewTask(f"{queue}-t", queue, "h"))
            storage.stats(queue)
        name = keys.client_name(cluster_ns)
        per_node = [
            len([c for c in n.client_list() if c.get("name") == name]) for n in primaries(client)
        ]
        assert all(per_node), per_node
        assert cluster_server.cut_connections(cluster_ns) >= 3
        for queue in _queues_on_every_master(client, cluster_ns, per_node=1):
            assert storage.stats(queue).pending == 1  # reconnected transparently
    finally:
        storage.close()


def test_noscript_after_a_flush_on_every_master_is_transparent(cluster_dsn, cluster_ns, client):
    storage = RedisStorage(cluster_dsn, cluster_ns)
    try:
        queues = _queues_on_every_master(client, cluster_ns, per_node=2)
        for queue in queues[0::2]:  # one queue per master
            lifecycle(storage, queue)
        for node in primaries(client):
            node.script_flush()
        for queue in queues[1::2]:  # another queue per master
            lifecycle(storage, queue)
    finally:
        storage.close()


# ---- the local rung's cluster and its faults ------------------------------------------------


@pytest.fixture(scope="module")
def rung() -> Iterator[LocalRedisServer]:
    with local_cluster(3) as server:
        yield server


def test_the_rung_starts_a_cluster_of_three_masters_on_loopback(rung: LocalRedisServer) -> None:
    assert rung.cluster and len(rung.nodes) == 3
    assert rung.origin.startswith("local binary ") and "a cluster of 3 masters on 127.0.0.1:" in (
        rung.origin
    )
    assert rung.faults == {KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS}
    for node in rung.nodes:
        client = node.client()
        try:
            info = client.cluster("INFO")
            assert info["cluster_state"] == "ok" and int(info["cluster_size"]) == 3
            config = client.config_get("appendonly", "appendfsync", "cluster-port")
            assert (config["appendonly"], config["appendfsync"]) == ("yes", "always")
            assert int(config["cluster-port"]) == node.bus_port
        finally:
            client.close()
        assert (node.datadir / "nodes.conf").is_file()
    namespace = rung.create_namespace()
    storage = RedisStorage(rung.dsn, namespace)
    try:
        caps = storage.capabilities()
        assert caps.durable and "on all 3 masters" in caps.durability
    finally:
        storage.close()
        rung.drop_namespace(namespace)


def test_kill_and_restart_apply_to_every_node_and_keep_every_queue(
    rung: LocalRedisServer,
) -> None:
    namespace = rung.create_namespace()
    storage = RedisStorage(rung.dsn, namespace)
    client = RedisCluster.from_url(rung.dsn)
    try:
        queues = _queues_on_every_master(client, namespace, per_node=1)
        client.close()
        for queue in queues:
            storage.enqueue(NewTask(f"{queue}-kept", queue, "h"))
        pids = rung.pids()
        assert len(pids) == 3
        rung.kill()
        assert rung.pids() == [] and not any(port_open(n.port) for n in rung.nodes)
        with pytest.raises(BackendUnavailable):
            storage.get(f"{queues[0]}-kept")
        rung.restart()  # every node again on its port and data; cluster_state:ok again
        assert len(rung.pids()) == 3
        for queue in queues:
            task = until_works(lambda q=queue: storage.get(f"{q}-kept"))
            assert task.queue == queue
    finally:
        storage.close()
        rung.drop_namespace(namespace)


def test_pause_stops_every_node_until_resume(rung: LocalRedisServer) -> None:
    pids = rung.pids()
    rung.pause()
    try:
        assert {psutil.Process(p).status() for p in pids} == {psutil.STATUS_STOPPED}
    finally:
        rung.resume()
    assert psutil.STATUS_STOPPED not in {psutil.Process(p).status() for p in pids}
    namespace = rung.create_namespace()  # it answers again
    rung.drop_namespace(namespace)
