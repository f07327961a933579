"""A replicated Redis on the local-binaries rung: a primary, one replica, and the
``failover`` fault (plugin half).

``--rdq-option redis_replica=async`` starts two ``redis-server`` processes from the
local binaries (each a :class:`~rdq_redis.local.LocalRedisNode`: a
:class:`~rdq_compliance.provision.process.ManagedProcess` that dies with the kit, its
folder removed by the watchdog then) on free loopback ports: the primary, and a replica
started with ``--replicaof`` (both with the persistence of ``redis_persistence`` and a
diskless full sync without delay). The replica reaches the primary through a second
forwarder, the *replication link*, which the failover's ``replica_lag`` holds. The rung
is ready when the replica reports ``master_link_status:up``.

**One address for "the primary".** Redis has no multi-host URL, so clients connect to a
:class:`~rdq_compliance.provision.forwarder.Forwarder` on 127.0.0.1 (threads of the kit
process: it dies with the kit) that relays to the current primary — the virtual IP of a
real deployment. The server's DSN names the forwarder.

**Failover** (:meth:`ReplicatedRedisServer.failover`): the replication link holds what
the primary sends for ``replica_lag`` seconds if asked (the replica lags, as behind a
congested link), the primary is SIGKILLed and the link closed (what it held is gone with
the primary), the replica promoted (``REPLICAOF NO ONE``: it keeps what it had
received), a fresh replica of it started (a full sync), and the clients' forwarder
switched to it — which closes every connection to the old primary: the workers' storage
sees an error and reconnects to the new primary. The old primary's folder is deleted.

**``redis_replica=wait``** is the same pair with the storage's ``rdq_wait=1`` in the DSN:
every write script is followed by ``WAIT 1 <ms>`` and acknowledged only when the replica
has it (:mod:`rdq_redis.connection`); a write the replica did not confirm in time is
``BackendUnavailable`` (its outcome unknown), never an acknowledgement.

With ``async`` a failover loses what the primary acknowledged and had not yet sent:
the chaos checker names it (``FINDINGS.md``).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from rdq_compliance.provision.backend import FAILOVER, ProvisionRequest
from rdq_compliance.provision.forwarder import Forwarder
from rdq_compliance.provision.local_server import start_rung
from rdq_redis.connection import DEFAULT_WAIT_TIMEOUT_MS
from rdq_redis.local import (
    LocalRedis,
    LocalRedisNode,
    LocalRedisServer,
    find_redis,
)
from rdq_redis.options import (
    LOCAL_OPTIONS,
    PERSISTENCE_FLAGS,
    REDIS_BIN_DIR,
    REDIS_START_TIMEOUT,
    persistence_mode,
    replica_mode,
)

__all__ = ["ReplicatedRedis", "ReplicatedRedisServer", "start_replicated_server"]

#: Arguments of both nodes: a full sync streams at once (Redis waits 5 s by default).
SYNC_ARGS: tuple[str, ...] = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")


class ReplicatedRedis(LocalRedis):
    """A primary and one replica (``nodes[0]``, ``nodes[1]``) behind a forwarder."""

    def __init__(
        self,
        binaries: dict[str, Path],
        workdir: Path,
        persistence: str,
        start_timeout: float,
        mode: str,
    ) -> None:
        super().__init__(binaries, workdir, persistence, start_timeout)
        self.mode = mode
        self.forwarder: Forwarder | None = None
        #: the replication link: the replica's connection to the primary goes through it
        self.link: Forwarder | None = None
        self._next_index = 0

    @property
    def primary(self) -> LocalRedisNode:
        return self.nodes[0]

    @property
    def replica(self) -> LocalRedisNode:
        return self.nodes[1]

    @property
    def dsn(self) -> str:
        assert self.forwarder is not None
        dsn = f"redis://{self.forwarder.address}/0"
        if self.mode == "wait":
            dsn += f"?rdq_wait=1&rdq_wait_timeout={DEFAULT_WAIT_TIMEOUT_MS}"
        return dsn

    def _new_node(self, replica_of: int | None) -> LocalRedisNode:
        node = LocalRedisNode(
            self.binaries["redis-server"],
            self.workdir,
            self._next_index,
            self.persistence,
            self.start_timeout,
            replica_of=replica_of,
            extra_args=SYNC_ARGS,
        )
        self._next_index += 1
        node.remove()  # nothing of an earlier run may be reused
        node.start_on_free_port()
        return node

    def create(self) -> None:
        """Start the primary, then its replica; wait until the replica is in sync."""
        self.nodes = [self._new_node(None)]
        self._add_replica()
        self.forwarder = Forwarder(("127.0.0.1", self.primary.port), name="rdq-redis-primary")

    def _add_replica(self) -> None:
        """A fresh replica of the primary, through a fresh replication link; in sync."""
        self.link = Forwarder(("127.0.0.1", self.primary.port), name="rdq-redis-link")
        self.nodes.append(self._new_node(self.link.port))
        self.wait_in_sync(self.replica)

    def wait_ready(self) -> None:
        super().wait_ready()
        self.wait_in_sync(self.replica)

    def wait_in_sync(self, node: LocalRedisNode) -> None:
        """Until ``node`` reports its link to the primary up and no sync in progress."""
        assert node.process is not None

        def linked() -> bool:
            info = node.info("INFO", "replication")
            return (
                str(info.get("master_link_status")) == "up"
                and str(info.get("master_sync_in_progress", "0")) == "0"
            )

        node.process.wait_ready(
            linked, self.start_timeout, what=f"replica {node.address} (master_link_status:up)"
        )

    def failover(self, replica_lag: float) -> str:
        """Kill the primary, promote the replica, start a replica of it, move the address."""
        old, promoted, link = self.primary, self.replica, self.link
        assert link is not None
        if replica_lag > 0:
            link.hold()
            time.sleep(replica_lag)
        old.kill()
        link.close()  # what it held is lost with the primary
        client = promoted.client(timeout=5.0)
        try:
            client.execute_command("REPLICAOF", "NO", "ONE")
        finally:
            client.close()
        promoted.replica_of = None  # a restart must not make it a replica again
        self.nodes = [promoted]
        old.stop()
        old.remove()
        self._add_replica()
        assert self.forwarder is not None
        self.forwarder.switch(("127.0.0.1", promoted.port))
        return f"redis-server {promoted.address} (new replica {self.replica.address})"

    def close_forwarder(self) -> None:
        """Close the clients' forwarder and the replication link."""
        for forwarder in (self.forwarder, self.link):
            if forwarder is not None:
                forwarder.close()

    def discard(self) -> None:
        """Close the forwarders, stop both nodes and delete what they left."""
        self.close_forwarder()
        super().discard()


class ReplicatedRedisServer(LocalRedisServer):
    """The pair as a :class:`~rdq_compliance.provision.backend.Server`: every fault of the
    local rung (on both nodes: a killed pair restarts together) plus ``failover``."""

    faults = LocalRedisServer.faults | {FAILOVER}

    def __init__(self, local: ReplicatedRedis) -> None:
        super().__init__(local)
        self.replicated = local
        assert local.forwarder is not None
        how = "asynchronous replication"
        if local.mode == "wait":
            how = "replication confirmed by WAIT 1 after every write"
        binary = local.binaries["redis-server"]
        flags = shlex.join(PERSISTENCE_FLAGS[local.persistence])
        # The addresses of primary and replica change at a failover: named as started.
        self.origin = (
            f"local binary {binary}, a primary and a replica ({how}; persistence "
            f"{local.persistence}: {flags}), started as primary {local.primary.address} and "
            f"replica {local.replica.address}, clients through the forwarder "
            f"{local.forwarder.address}"
        )

    def failover(self, replica_lag: float = 0.0) -> str:
        with self.faulting("failover of {origin} failed"):
            return self.replicated.failover(replica_lag)

    def remove_data(self) -> None:
        try:
            super().remove_data()
        finally:
            self.replicated.close_forwarder()


def start_replicated_server(request: ProvisionRequest) -> ReplicatedRedisServer:
    """Rung 2 with ``redis_replica=async|wait`` (see the module docstring)."""
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    mode = replica_mode(options)
    binaries = find_redis(options[REDIS_BIN_DIR])
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    local = ReplicatedRedis(
        binaries, workdir, persistence_mode(options), options[REDIS_START_TIMEOUT], mode
    )
    return start_rung(
        local,
        local.create,
        ReplicatedRedisServer,
        failure=f"the local replicated Redis ({binaries['redis-server']}) did not start",
    )
