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
:class:`rdq_redis.server.RedisServer`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
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
from rdq_compliance.provision.options import Paths
from rdq_compliance.provision.ports import free_port
from rdq_compliance.provision.process import (
    ManagedProcess,
    ProcessFailed,
    ProcessSlot,
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
    "LocalNode",
    "LocalRedis",
    "LocalRedisServer",
    "PortInUse",
    "find_redis",
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
#: How many times a start is tried on fresh ports when one was taken meanwhile.
PORT_ATTEMPTS = 5
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


class PortInUse(ProcessFailed):
    """Someone took a free port before the server bound it."""

    def __init__(self, port: int) -> None:
        super().__init__(f"port {port} on 127.0.0.1 was taken before redis-server could bind it")
        self.port = port


@dataclass
class LocalNode(ProcessSlot):
    """One ``redis-server`` process: its folder, ports and (while running) process."""

    binary: Path
    workdir: Path
    index: int
    persistence: str
    start_timeout: float
    port: int = 0
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

    def start(self) -> None:
        """Start the server and wait until it answers; ``PortInUse`` if a port was taken."""
        self.datadir.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        process = ManagedProcess(
            self.argv(),
            log_path=self.log_path,
            cwd=self.datadir,
            stop_signal=signal.SIGTERM,  # Redis's shutdown: flush the AOF (or save), exit
            grace=10.0,
            cleanup_paths=[self.datadir],
        )
        process.start()
        self.process = process
        try:
            process.wait_ready(
                self.probe, self.start_timeout, what=f"redis-server on {self.address}"
            )
        except ProcessFailed as exc:
            process.stop(grace=2.0)
            self.process = None
            if "Address already in use" in self._log_since(offset):
                raise PortInUse(self.port) from exc
            raise

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


@dataclass
class LocalRedis:
    """The servers this rung started: one, or the nodes of one cluster."""

    binaries: dict[str, Path]
    workdir: Path
    persistence: str
    start_timeout: float
    masters: int | None = None  # a cluster of this many masters, else one server
    nodes: list[LocalNode] = field(default_factory=list)

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
            LocalNode(
                self.binaries["redis-server"],
                self.workdir,
                i,
                self.persistence,
                self.start_timeout,
            )
            for i in range(count)
        ]
        for node in self.nodes:
            node.remove()  # nothing of an earlier run (a stale nodes.conf) may be reused
            for attempt in range(PORT_ATTEMPTS):
                node.port = free_port()
                if self.cluster:
                    node.bus_port = _other_free_port(node.port)
                try:
                    node.start()
                    break
                except PortInUse:
                    if attempt == PORT_ATTEMPTS - 1:
                        raise
        if self.cluster:
            self._create_cluster()
            self.wait_cluster_ok()

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

    def wait_cluster_ok(self) -> None:
        """Until every node reports ``cluster_state:ok``, every slot assigned and every
        node known (a restarted cluster needs its bus to reconnect first)."""
        expected = len(self.nodes)
        for node in self.nodes:
            assert node.process is not None

            def ok(node: LocalNode = node) -> bool:
                client = node.client()
                try:
                    info = client.cluster("INFO")
                finally:
                    client.close()
                if isinstance(info, (bytes, str)):
                    info = _parse_info(info)
                return (
                    str(info.get("cluster_state")) == "ok"
                    and int(info.get("cluster_slots_assigned", 0)) == _ALL_SLOTS
                    and int(info.get("cluster_known_nodes", 0)) == expected
                )

            node.process.wait_ready(
                ok, self.start_timeout, what=f"cluster node {node.address} (cluster_state:ok)"
            )

    def start(self) -> None:
        """Start every node again on its port and folder; wait until ready."""
        for node in self.nodes:
            if not node.running:
                node.start()
        if self.cluster:
            self.wait_cluster_ok()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def pause(self) -> None:
        for node in self.nodes:
            node.pause()

    def resume(self) -> None:
        for node in self.nodes:
            node.resume()

    @property
    def paused(self) -> bool:
        return any(node.paused for node in self.nodes)

    def pids(self) -> list[int]:
        return sorted(pid for node in self.nodes for pid in node.pids())

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()
        remove_tree(self.workdir / "redis-cluster-create.log")


def _other_free_port(taken: int) -> int:
    for _ in range(20):
        port = free_port()
        if port != taken:
            return port
    raise ProvisionUnavailable("no second free port on 127.0.0.1 for the cluster bus")


def _parse_info(text: bytes | str) -> dict[str, str]:
    raw = text.decode() if isinstance(text, bytes) else text
    out = {}
    for line in raw.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def create_local(request: ProvisionRequest) -> LocalRedis:
    """Find the binaries, start the server (or cluster), wait until it is ready."""
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    persistence = persistence_mode(options)
    masters = cluster_size(options)
    binaries = find_redis(options[REDIS_BIN_DIR], cluster=masters is not None)
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    local = LocalRedis(
        binaries, workdir, persistence, options[REDIS_START_TIMEOUT], masters=masters
    )
    try:
        local.create()
    except BaseException as exc:
        local.stop()
        local.remove()
        if isinstance(exc, (ProcessFailed, redis.RedisError, OSError)):
            what = f"cluster of {masters} masters" if masters else "server"
            raise ProvisionUnavailable(
                f"the local Redis {what} ({binaries['redis-server']}) did not start: {exc}"
            ) from exc
        raise
    return local


# ---- the server -------------------------------------------------------------------------


class LocalRedisServer(RedisServer):
    """A private Redis server (or cluster) the kit started from local binaries.

    Namespaces, ``cut_connections`` and the DSN work as on a given server; in addition the
    kit owns the processes (see the module docstring for the faults).
    """

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})

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
        self._state_lock = threading.Lock()
        self._killed = False
        self._closed = False

    @property
    def nodes(self) -> Sequence[LocalNode]:
        return self.local.nodes

    def kill(self) -> None:
        """SIGKILL the server (every node); it stays down until :meth:`restart`."""
        with self._state_lock:
            self._check_open()
            self.local.kill()
            self._killed = True
            self.forget_connections()

    def restart(self) -> None:
        """Start the server again on the same ports and data (a clean stop first if it
        runs); for a cluster, until ``cluster_state:ok`` on every node."""
        with self._state_lock:
            self._check_open()
            self.local.stop()  # a clean stop of what runs (paused or not); releases watchdogs
            self.forget_connections()
            try:
                self.local.start()
            except (ProcessFailed, redis.RedisError, OSError) as exc:
                raise ProvisionUnavailable(f"could not restart {self.origin}: {exc}") from exc
            self._killed = False

    def pause(self) -> None:
        """SIGSTOP every node: connections stay open, nothing answers until :meth:`resume`."""
        with self._state_lock:
            self._check_open()
            self.local.pause()

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped (a no-op on a server that is not paused)."""
        with self._state_lock:
            self._check_open()
            self.local.resume()

    def pids(self) -> list[int]:
        return self.local.pids()

    def close(self) -> None:
        """Stop the server (every node) and delete its data; idempotent, fine after a kill
        or a pause."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            if self.local.paused:
                self.local.resume()  # so that leftover namespaces can be dropped
            if not self._killed:
                with contextlib.suppress(Exception):
                    super().close()  # drop leftover namespaces, close the admin client
            self.forget_connections()
            self.local.stop()
            self.local.remove()

    def _check_open(self) -> None:
        if self._closed:
            raise ProvisionUnavailable(f"{self.origin} was closed")


def start_local_server(request: ProvisionRequest) -> LocalRedisServer:
    """Rung 2 of the ladder (see the module docstring)."""
    local = create_local(request)
    try:
        return LocalRedisServer(local)
    except BaseException:
        local.stop()
        local.remove()
        raise
