"""A replicated PostgreSQL on the local-binaries rung: a primary, one streaming replica,
and the ``failover`` fault (plugin half).

``--rdq-option pg_replica=async`` starts the primary exactly as :mod:`rdq_postgres.local`
does (``initdb``, the server user when we are root, 127.0.0.1 and a free port) and then a
replica: ``pg_basebackup -R -X stream`` of the primary into a data directory of its own
(``-R`` writes ``standby.signal`` and ``primary_conninfo``), started on another free
port. Both are :class:`~rdq_compliance.provision.process.ManagedProcess`\\ es (they die
with the kit; the watchdog removes their folders). The rung is ready when the primary's
``pg_stat_replication`` shows the replica ``streaming`` (``sync`` for
``pg_replica=sync``).

``pg_replica=sync`` adds ``synchronous_commit=remote_apply`` on every node and, once
its replica streams, ``ALTER SYSTEM SET synchronous_standby_names = '*'`` on the primary
(before, a commit would wait for a replica that is not there yet): a commit returns only
once the replica has applied it. A promoted replica gets the same once its own new
replica streams, before clients are switched to it.

**One address for "the primary".** Clients connect to a
:class:`~rdq_compliance.provision.forwarder.Forwarder` on 127.0.0.1 that relays to the
current primary (the virtual IP of a real deployment). A multi-host DSN
(``host=a,b target_session_attrs=read-write``) would serve psycopg too, but the DSN would
then name two servers and the kit's admin and final-state reads would need the same
care; one forwarder per replicated server serves both backends the same way (Redis has
no multi-host URL). The replica reaches the primary through a second forwarder, the
*replication link*, which the failover's ``replica_lag`` holds.

**Failover** (:meth:`ReplicatedPostgresServer.failover`): the link holds what the
primary sends for ``replica_lag`` seconds if asked (the replica lags, as behind a
congested link), the primary's process group is SIGKILLed and the link closed (what it
held is gone with the primary), the replica promoted (``SELECT pg_promote()``: it
replays all it received, then takes writes), a fresh replica of it made
(``pg_basebackup``), and the clients' forwarder switched to the new primary, which
closes every connection to the old one: the workers' storage reconnects. The old
primary is started once more on a spare port and stopped cleanly, so that it frees its
shared memory (:meth:`~rdq_postgres.local.LocalPostgresNode.free_shared_memory`, as
:meth:`LocalPostgresServer.close` does after a kill), and deleted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from rdq_compliance.provision.backend import FAILOVER, ProvisionRequest, ProvisionUnavailable
from rdq_compliance.provision.forwarder import Forwarder
from rdq_compliance.provision.local_server import start_rung
from rdq_compliance.provision.process import remove_tree, run_to_completion
from rdq_postgres.local import (
    DATABASE,
    SUPERUSER,
    LocalPostgresNode,
    LocalPostgresServer,
    dsn_for,
    new_node,
    postgres_binaries,
    postgres_env,
)
from rdq_postgres.options import (
    LOCAL_OPTIONS,
    PG_BIN_DIR,
    replica_mode,
)

__all__ = ["ReplicatedPostgres", "ReplicatedPostgresServer", "start_replicated_server"]

#: Settings of every node: keep WAL for a replica that falls behind.
REPLICATION_SETTINGS: tuple[str, ...] = ("wal_level=replica", "wal_keep_size=256MB")
#: And of every node of ``pg_replica=sync`` (``synchronous_standby_names`` is set once
#: the node has a replica streaming: before, every commit would wait for none).
SYNC_SETTINGS: tuple[str, ...] = ("synchronous_commit=remote_apply",)
#: Seconds ``pg_promote`` may take.
PROMOTE_TIMEOUT = 30


class ReplicatedPostgres:
    """The primary and its replica (each a :class:`LocalPostgresNode` in a folder of its
    own) and the forwarders: the clients' and the replication link."""

    def __init__(
        self,
        template: LocalPostgresNode,
        root: Path,
        private_root: bool,
        mode: str,
        basebackup: Path,
    ) -> None:
        self.template = template
        self.basebackup = basebackup
        self.root = root
        self.private_root = private_root
        self.mode = mode
        self.primary: LocalPostgresNode | None = None
        self.replica: LocalPostgresNode | None = None
        self.forwarder: Forwarder | None = None
        self.link: Forwarder | None = None
        self._next = 0

    @property
    def settings(self) -> tuple[str, ...]:
        return REPLICATION_SETTINGS + (SYNC_SETTINGS if self.mode == "sync" else ())

    def _node(self) -> LocalPostgresNode:
        folder = self.root / f"node-{self._next}"
        self._next += 1
        remove_tree(folder)
        folder.mkdir(mode=0o700)
        user = self.template.user
        if user is not None:
            os.chown(folder, user.uid, user.gid)
        watchdog = (self.root,) if self.private_root else ()
        return LocalPostgresNode(
            binaries=self.template.binaries,
            base=folder,
            port=0,
            user=user,
            max_connections=self.template.max_connections,
            start_timeout=self.template.start_timeout,
            private_base=True,  # the node's folder is its own: removed with it
            settings=self.settings,
            watchdog_cleanup=watchdog,
        )

    def create(self) -> None:
        """initdb and start the primary, create the database, add a replica."""
        primary = self._node()
        self.primary = primary
        primary.initdb()
        primary.start_on_free_port()
        with _connect(primary.port, "postgres") as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        self._add_replica()
        self.forwarder = Forwarder(("127.0.0.1", primary.port), name="rdq-pg-primary")

    def _add_replica(self) -> None:
        """``pg_basebackup -R`` of the primary through a fresh link; start; wait."""
        assert self.primary is not None
        self.link = Forwarder(("127.0.0.1", self.primary.port), name="rdq-pg-link")
        replica = self._node()
        self.replica = replica
        run_to_completion(
            [
                self.basebackup,
                *("-D", replica.datadir, "-R", "-X", "stream", "-c", "fast", "--no-sync"),
                *("-h", "127.0.0.1", "-p", str(self.link.port), "-U", SUPERUSER),
            ],
            log_path=replica.base / "basebackup.log",
            cwd=replica.base,
            env=postgres_env(replica.user),
            user=replica.user,
            cleanup_paths=[replica.base],
            timeout=120.0,
        )
        replica.start_on_free_port()
        self.wait_streaming("async")
        if self.mode == "sync":
            with _connect(self.primary.port, "postgres") as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
            self.wait_streaming("sync")

    def wait_streaming(self, want: str) -> None:
        """Until the primary shows its replica streaming with ``sync_state`` ``want``."""
        assert self.primary is not None and self.primary.process is not None
        port = self.primary.port

        def streaming() -> bool:
            with _connect(port, "postgres") as conn:
                rows = conn.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
            return any(state == "streaming" and sync == want for state, sync in rows)

        self.primary.process.wait_ready(
            streaming, self.template.start_timeout, what=f"a {want} replica streaming on {port}"
        )

    def failover(self, replica_lag: float) -> str:
        old, promoted, link = self.primary, self.replica, self.link
        assert old is not None and promoted is not None and link is not None
        if replica_lag > 0:
            link.hold()
            time.sleep(replica_lag)
        old.kill()
        link.close()  # what it held is lost with the primary
        with _connect(promoted.port, "postgres") as conn:
            row = conn.execute("SELECT pg_promote(true, %s)", (PROMOTE_TIMEOUT,)).fetchone()
        if not row or not row[0]:
            raise ProvisionUnavailable(
                f"pg_promote() on 127.0.0.1:{promoted.port} did not finish within "
                f"{PROMOTE_TIMEOUT}s; see {promoted.log_path}"
            )
        self.primary, self.replica = promoted, None
        self._add_replica()
        assert self.forwarder is not None and self.replica is not None
        self.forwarder.switch(("127.0.0.1", promoted.port))
        old.free_shared_memory()
        old.remove()
        return f"postgres 127.0.0.1:{promoted.port} (new replica 127.0.0.1:{self.replica.port})"

    def nodes(self) -> list[LocalPostgresNode]:
        return [n for n in (self.primary, self.replica) if n is not None]

    def close(self) -> None:
        """Close the forwarders, stop and delete every node (and a private root)."""
        for forwarder in (self.forwarder, self.link):
            if forwarder is not None:
                forwarder.close()
        for node in self.nodes():
            node.discard()
        if self.private_root:
            remove_tree(self.root)

    discard = close


def _basebackup_beside(postgres: Path) -> Path | None:
    """``pg_basebackup`` in the folder of ``postgres``, or of the file it links to."""
    for folder in (postgres.parent, Path(os.path.realpath(postgres)).parent):
        candidate = folder / "pg_basebackup"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _connect(port: int, dbname: str) -> psycopg.Connection:
    return psycopg.connect(
        host="127.0.0.1",
        port=port,
        user=SUPERUSER,
        dbname=dbname,
        autocommit=True,
        connect_timeout=5,
    )


class ReplicatedPostgresServer(LocalPostgresServer):
    """The pair as a :class:`~rdq_compliance.provision.backend.Server`: the local rung's
    faults act on the current primary; ``failover`` moves to the replica."""

    faults = LocalPostgresServer.faults | {FAILOVER}

    def __init__(self, pair: ReplicatedPostgres) -> None:
        assert pair.primary is not None and pair.replica is not None
        assert pair.forwarder is not None
        super().__init__(pair.primary)
        self.pair = pair
        self.dsn = dsn_for(pair.forwarder.port)
        how = {
            "async": "asynchronous streaming replication",
            "sync": "synchronous replication: synchronous_commit=remote_apply",
        }[pair.mode]
        # The addresses of primary and replica change at a failover: named as started.
        self.origin = (
            f"{self.origin.replace(' on 127.0.0.1:', ', started as primary 127.0.0.1:')} and "
            f"replica 127.0.0.1:{pair.replica.port} ({how}), clients through the forwarder "
            f"{pair.forwarder.address}"
        )

    def failover(self, replica_lag: float = 0.0) -> str:
        with self.faulting("failover of {origin} failed"):
            promoted = self.pair.failover(replica_lag)
            assert self.pair.primary is not None
            self.node = self.pair.primary
        return promoted

    def pids(self) -> list[int]:
        return sorted(pid for node in self.pair.nodes() for pid in node.pids())

    def remove_data(self) -> None:
        self.pair.close()  # every node (the primary was stopped), the forwarders, the root


def start_replicated_server(request: ProvisionRequest) -> ReplicatedPostgresServer:
    """Rung 2 with ``pg_replica=async|sync`` (see the module docstring)."""
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    mode = replica_mode(options)
    binaries = postgres_binaries(options[PG_BIN_DIR])
    basebackup = _basebackup_beside(binaries["postgres"])
    if basebackup is None:
        raise ProvisionUnavailable(
            f"pg_replica={mode} needs pg_basebackup beside {binaries['postgres']} (or the "
            "file it links to); install the PostgreSQL client tools of the same version"
        )
    template = new_node(options, binaries, Path(request.workdir))  # its base: the pair's root
    pair = ReplicatedPostgres(template, template.base, template.private_base, mode, basebackup)
    return start_rung(
        pair,
        pair.create,
        ReplicatedPostgresServer,
        failure=f"the local replicated PostgreSQL ({binaries['postgres']}) did not start",
    )
