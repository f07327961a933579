"""The "local binaries" rung: a private ``redis-server`` — or a Redis Cluster of several —
started from installed binaries.

:func:`start_local_server` finds ``redis-server`` (and, for a cluster, ``redis-cli`` from
the same folder) on ``PATH`` or in the usual install folders (:data:`REDIS_SEARCH_DIRS`),
and starts it as a :class:`~rdq_compliance.provision.process.ManagedProcess` (it dies with
the kit, even on SIGKILL) in the kit's workdir: ``<workdir>/redis-<i>/`` holds its data,
``<workdir>/redis-<i>.log`` its log. The server listens on 127.0.0.1 only
(``--bind 127.0.0.1``, protected mode on), on a free port — a fresh one is tried when
another process takes it first — and runs in the foreground (no daemonizing). It is
ready when it answers ``PING`` (polled, no sleeps; a server still loading its AOF
answers ``LOADING``, which is "not yet").

**Persistence** (option ``redis_persistence``, :data:`rdq_redis.options.PERSISTENCE_FLAGS`):
by default ``--appendonly yes --appendfsync always --save ''``: every write is in the AOF,
written and fsynced, before its reply leaves, so the storage declares the server
*durable* and the chaos campaign kills and restarts it (:mod:`rdq_redis.persistence`
says why only this setting is durable). ``everysec``, ``rdb`` and ``none`` start servers
that are not: for showing that the kit notices, or for speed.

**A cluster** (option ``redis_cluster=N``, N ≥ 3): N such servers with
``--cluster-enabled yes`` (``nodes.conf`` in each node's folder, the cluster bus on a
port of its own, ``--cluster-port``), joined by ``redis-cli --cluster create …
--cluster-replicas 0 --cluster-yes``; ready when every node reports
``cluster_state:ok`` with all 16384 slots assigned and all N nodes known. The DSN names
the first node; the storage finds the cluster by asking it (phase 1's detection) and
talks to it through redis-py's cluster client.

**Faults** (on a server this rung started): ``kill_server`` SIGKILLs the server's
processes (every node of a cluster) — they stay down until ``restart_server``, which
starts them again on the same ports and folders (the AOF is replayed; a cluster reloads
its ``nodes.conf`` and waits for ``cluster_state:ok`` again); a restart of a running
server is a clean stop (SIGTERM: Redis writes what it keeps) and a start.
``pause_server`` SIGSTOPs every node (they keep their sockets and answer nothing) until
``resume``. ``cut_connections`` works as on a given server (``CLIENT KILL``, every
master). ``close()`` stops everything and removes the data folders (also after a kill or
a pause); if the kit dies, the watchdogs do it.

Options (``--rdq-option KEY=VALUE``, declared in :mod:`rdq_redis.options`, all checked
before anything is started): ``redis_bin_dir``, ``redis_persistence``, ``redis_cluster``,
``redis_start_timeout``.

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_redis.server.RedisServer`: each ``redis-server`` is a :class:`LocalRedisNode`
(a ``ProcessSlot``: what it runs, how it is probed), :class:`LocalRedis` holds the rung's
nodes and makes a cluster of them, and the faults and close come from ``LocalFaults``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
)
from rdq_compliance.provision.binaries import BinaryNotFound, find_binaries
from rdq_compliance.provision.local_server import LocalFaults, ProcessSlot, start_rung
from rdq_compliance.provision.options import Paths
from rdq_compliance.provision.ports import free_port
from rdq_compliance.provision.process import (
    ManagedProcess,
    ProcessFailed,
    remove_tree,
    run_to_completion,
)
from rdq_redis.options import (
    LOCAL_OPTIONS,
    PERSISTENCE_FLAGS,
    REDIS_BIN_DIR,
    REDIS_START_TIMEOUT,
    cluster_size,
    persistence_mode,
)
from rdq_redis.server import ADMIN_CLIENT_NAME, RedisServer

__all__ = [
    "REDIS_SEARCH_DIRS",
    "LocalRedis",
    "LocalRedisNode",
    "LocalRedisServer",
    "find_redis",
    "parse_info",
    "start_local_server",
]

#: Where Redis is usually installed, searched after ``PATH``.
REDIS_SEARCH_DIRS: tuple[str, ...] = (
    "/usr/bin",  # Debian, Ubuntu, RHEL, Fedora packages
    "/usr/local/bin",  # built from source, Homebrew (Intel)
    "/opt/homebrew/bin",  # Homebrew (Apple silicon)
    "/opt/homebrew/opt/redis/bin",
    "/usr/local/opt/redis/bin",
    "/opt/local/bin",  # MacPorts
    "/snap/bin",
)
#: Seconds ``redis-cli --cluster create`` may take.
CLUSTER_CREATE_TIMEOUT = 60.0
#: ``cluster-node-timeout`` of a local cluster, in milliseconds.
CLUSTER_NODE_TIMEOUT_MS = 5000
_ALL_SLOTS = 16384


def find_redis(bin_dirs: Paths | None, *, cluster: bool = False) -> dict[str, Path]:
    """``{"redis-server": path[, "redis-cli": path]}`` from one folder, or
    ``ProvisionUnavailable`` naming what is missing and every folder searched."""
    names = ["redis-server", "redis-cli"] if cluster else ["redis-server"]
    if bin_dirs is not None:
        dirs, use_path = list(bin_dirs), False
        hint = "as given by --rdq-option redis_bin_dir"
    else:
        dirs, use_path = list(REDIS_SEARCH_DIRS), True
        hint = "PATH, then the usual install folders"
    try:
        return find_binaries(names, dirs, use_path=use_path)
    except BinaryNotFound as exc:
        raise ProvisionUnavailable(
            f"Redis server binaries: {exc} [{hint}]; install Redis 7 (e.g. apt install "
            "redis-server, brew install redis) or point --rdq-option redis_bin_dir=FOLDER "
            "at the folder holding redis-server" + (" and redis-cli" if cluster else "")
        ) from None


@dataclass
class LocalRedisNode(ProcessSlot):
    """One ``redis-server`` process: its folder, ports and (while running) process."""

    binary: Path
    workdir: Path
    index: int
    persistence: str
    start_timeout: float
    port: int = 0
    #: a node of a cluster: it gets a cluster bus port (:attr:`bus_port`) of its own
    cluster_node: bool = False
    #: the cluster bus port (a cluster node), else ``None``
    bus_port: int | None = None
    #: the port of the primary this node replicates (``--replicaof``), else ``None``
    replica_of: int | None = None
    #: further ``redis-server`` arguments (a replicated pair's sync settings)
    extra_args: tuple[str, ...] = ()
    process: ManagedProcess | None = field(default=None, repr=False)

    @property
    def datadir(self) -> Path:
        return self.workdir / f"redis-{self.index}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"redis-{self.index}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str | os.PathLike[str]]:
        argv: list[str | os.PathLike[str]] = [
            self.binary,
            *("--bind", "127.0.0.1", "--port", str(self.port)),
            *("--protected-mode", "yes", "--daemonize", "no"),
            *("--dir", self.datadir, "--dbfilename", "dump.rdb"),
            *("--appenddirname", "appendonlydir"),
            *PERSISTENCE_FLAGS[self.persistence],
        ]
        if self.bus_port is not None:
            argv += [
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--cluster-port", str(self.bus_port)),
                *("--cluster-node-timeout", str(CLUSTER_NODE_TIMEOUT_MS)),
            ]
        if self.replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        return [*argv, *self.extra_args]

    def take_ports(self, port: int) -> None:
        self.port = port
        if self.cluster_node:
            self.bus_port = free_port(besides={port})

    def client(self, timeout: float = 2.0) -> redis.Redis:
        """A plain client of this node (no retries: a probe's "not yet" must be quick)."""
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            client_name=ADMIN_CLIENT_NAME,
        )

    def probe(self) -> bool:
        """Readiness: the server answers ``PING`` (``LOADING`` while it replays its AOF)."""
        client = self.client()
        try:
            return bool(client.ping())
        finally:
            client.close()

    def info(self, *command: str) -> dict[str, str]:
        """The reply of an ``INFO``-like command (``CLUSTER INFO``, ``INFO replication``)
        as a mapping."""
        client = self.client()
        try:
            reply = client.execute_command(*command)
        finally:
            client.close()
        return parse_info(reply) if isinstance(reply, (bytes, str)) else dict(reply)


@dataclass
class LocalRedis:
    """The servers this rung started: one, or the nodes of one cluster."""

    binaries: dict[str, Path]
    workdir: Path
    persistence: str
    start_timeout: float
    masters: int | None = None  # a cluster of this many masters, else one server
    nodes: list[LocalRedisNode] = field(default_factory=list)

    @property
    def cluster(self) -> bool:
        return self.masters is not None

    @property
    def dsn(self) -> str:
        return f"redis://{self.nodes[0].address}/0"

    def create(self) -> None:
        """Start every node on fresh free ports (retrying a port taken meanwhile); join
        them into a cluster if asked; wait until it is ready."""
        count = self.masters or 1
        self.nodes = [
            LocalRedisNode(
                self.binaries["redis-server"],
                self.workdir,
                i,
                self.persistence,
                self.start_timeout,
                cluster_node=self.cluster,
            )
            for i in range(count)
        ]
        for node in self.nodes:
            node.remove()  # nothing of an earlier run (a stale nodes.conf) may be reused
            node.start_on_free_port()
        if self.cluster:
            self._create_cluster()
            self.wait_ready()

    def _create_cluster(self) -> None:
        argv: list[str | os.PathLike[str]] = [
            self.binaries["redis-cli"],
            "--cluster",
            "create",
            *(n.address for n in self.nodes),
            *("--cluster-replicas", "0", "--cluster-yes"),
        ]
        run_to_completion(
            argv,
            log_path=self.workdir / "redis-cluster-create.log",
            cwd=self.workdir,
            timeout=CLUSTER_CREATE_TIMEOUT,
        )

    def wait_ready(self) -> None:
        """After every node answers: a cluster until ``cluster_state:ok`` on every node."""
        if self.cluster:
            self.wait_cluster_ok()

    def wait_cluster_ok(self) -> None:
        """Until every node reports ``cluster_state:ok``, every slot assigned and every
        node known (a restarted cluster needs its bus to reconnect first)."""
        expected = len(self.nodes)
        for node in self.nodes:
            assert node.process is not None

            def ok(node: LocalRedisNode = node) -> bool:
                info = node.info("CLUSTER INFO")
                return (
                    str(info.get("cluster_state")) == "ok"
                    and int(info.get("cluster_slots_assigned", 0)) == _ALL_SLOTS
                    and int(info.get("cluster_known_nodes", 0)) == expected
                )

            node.process.wait_ready(
                ok, self.start_timeout, what=f"cluster node {node.address} (cluster_state:ok)"
            )

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()
        remove_tree(self.workdir / "redis-cluster-create.log")

    def discard(self) -> None:
        """Stop every node and delete what they left."""
        for node in self.nodes:
            node.stop()
        self.remove()


def parse_info(text: bytes | str) -> dict[str, str]:
    """``INFO`` text as a mapping (redis-py parses it itself, except through some calls)."""
    raw = text.decode() if isinstance(text, bytes) else text
    out = {}
    for line in raw.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


# ---- the server -------------------------------------------------------------------------


class LocalRedisServer(LocalFaults, RedisServer):
    """A private Redis server (or cluster) the kit started from local binaries.

    Namespaces, ``cut_connections`` and the DSN work as on a given server; in addition the
    kit owns the processes (see the module docstring for the faults).
    """

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})
    start_errors = (ProcessFailed, redis.RedisError, OSError)

    def __init__(self, local: LocalRedis) -> None:
        binary = local.binaries["redis-server"]
        real = Path(os.path.realpath(binary))
        shown = f"{binary} (-> {real})" if real != binary else str(binary)
        flags = shlex.join(PERSISTENCE_FLAGS[local.persistence])
        where = ", ".join(n.address for n in local.nodes)
        kind = f"on {where}"
        if local.cluster:
            kind = f"a cluster of {local.masters} masters on {where}"
        origin = f"local binary {shown}, {kind} (persistence {local.persistence}: {flags})"
        super().__init__(local.dsn, origin=origin)
        self.local = local
        self.hold_processes()

    @property
    def nodes(self) -> Sequence[LocalRedisNode]:
        return self.local.nodes

    def process_slots(self) -> Sequence[LocalRedisNode]:
        return self.local.nodes

    def wait_ready(self) -> None:
        self.local.wait_ready()  # a cluster: cluster_state:ok on every node

    def remove_data(self) -> None:
        self.local.remove()


def start_local_server(request: ProvisionRequest) -> LocalRedisServer:
    """Rung 2 of the ladder: find the binaries, start the server (or cluster), wait until
    it is ready (see the module docstring)."""
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    persistence = persistence_mode(options)
    masters = cluster_size(options)
    binaries = find_redis(options[REDIS_BIN_DIR], cluster=masters is not None)
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    local = LocalRedis(
        binaries, workdir, persistence, options[REDIS_START_TIMEOUT], masters=masters
    )
    what = f"cluster of {masters} masters" if masters else "server"
    return start_rung(
        local,
        local.create,
        LocalRedisServer,
        failure=f"the local Redis {what} ({binaries['redis-server']}) did not start",
    )
