"""The plugin interface a backend registers under the ``rdq.backends`` entry point.

This is the kit's side of a backend (its *plugin half*); the storage half implements
:class:`rdq_core.spi.Storage` and needs nothing from the kit.

A backend package exposes one :class:`Backend` instance, e.g. in its
``pyproject.toml``::

    [project.entry-points."rdq.backends"]
    mystore = "rdq_mystore.plugin:backend"

The kit then provisions a :class:`Server` (an explicit DSN, a server it starts,
a container, or an embedded location), creates an isolated namespace per test,
and opens :class:`~rdq_core.spi.Storage` objects in it — in its own process and,
through a picklable :class:`StorageSpec`, in worker processes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from rdq_compliance.provision.options import RungOptions
from rdq_core.errors import RdqError
from rdq_core.spi import Storage

if TYPE_CHECKING:
    from rdq_compliance.known_upstream import KnownUpstream


class ProvisionUnavailable(RdqError):
    """No server could be provisioned for a backend; the message names the remedies."""


class ServerStartFailed(ProvisionUnavailable):
    """A rung found what it runs (the binaries, the image) but the server it started
    failed (a bad binary, a bad setting, a data folder it cannot write): an error to
    report, not a missing server. The ladder still tries the next rung; when none gives
    a server, :meth:`Backend.provision` raises this, and the kit ends the run with one
    error (exit 4) instead of skipping every test."""


#: Faults a server may support; the chaos harness only schedules those it declares.
#: ``kill_server``: SIGKILL the server (:meth:`Server.kill`); ``restart_server``: start it
#: again on the same address and data (:meth:`Server.restart`); ``pause_server``: SIGSTOP
#: it and later SIGCONT it (:meth:`Server.pause`, :meth:`Server.resume`): it keeps its
#: sockets but answers nothing meanwhile; ``cut_connections``: terminate the clients'
#: connections to one namespace (:meth:`Server.cut_connections`).
KILL_SERVER = "kill_server"
RESTART_SERVER = "restart_server"
PAUSE_SERVER = "pause_server"
CUT_CONNECTIONS = "cut_connections"
#: ``failover``: SIGKILL the primary of a replicated server, promote its replica and move
#: the server's address to it (:meth:`Server.failover`); what the old primary had
#: acknowledged but not yet replicated is lost unless replication is synchronous.
FAILOVER = "failover"
#: Every fault name the kit knows: ``Server.faults`` is drawn from these, and
#: ``rdq_requires_fault`` may only ask for these (any other name is an error).
FAULTS: frozenset[str] = frozenset(
    {KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS, FAILOVER}
)


@dataclass(frozen=True)
class StorageSpec:
    """Everything a process needs to open the same storage: picklable, printable."""

    backend: str
    dsn: str
    namespace: str


@dataclass(frozen=True)
class ProvisionRequest:
    """What the kit asks a backend to provision.

    ``dsn`` is an explicit server address (skip every other rung of the ladder);
    ``workdir`` is a private temporary folder the server may live in;
    ``options`` are backend-specific settings (``--rdq-option key=value``);
    ``allow_docker`` permits the container rung.
    """

    workdir: Path
    dsn: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    allow_docker: bool = True


class UnsupportedFault(NotImplementedError):
    """The server cannot inject this fault (e.g. it was given by DSN, not started by us)."""


class Server(ABC):
    """A provisioned storage location: a server the kit started or was given.

    ``close()`` stops and removes whatever the kit started, and is idempotent.
    """

    #: The address workers connect to.
    dsn: str
    #: How it was provisioned, for humans: ``"given DSN"``, ``"local binary ..."``, ...
    origin: str = "embedded"
    #: What server software and version answers, for humans (``"PostgreSQL 15.4"``), shown
    #: in the end-of-run summary; ``None`` when the backend does not say.
    version: str | None = None
    #: The faults :meth:`kill`, :meth:`restart`, :meth:`pause`/:meth:`resume` and
    #: :meth:`cut_connections` support (names from :data:`FAULTS`).
    faults: frozenset[str] = frozenset()
    #: The built-in chaos scenario the chaos suite runs on this server unless
    #: ``--rdq-chaos-scenario`` names one: ``"standard"``, or ``"compact"`` (every fault
    #: kind, a smaller workload) for a server too slow to drain the standard one in time.
    chaos_scenario: str = "standard"
    #: How many times longer than the kit's defaults the conformance suite's timed races
    #: may run on this server (a throughput allowance for a slow server: the rules
    #: checked are the same, only the patience grows).
    race_time_factor: float = 1.0
    #: The share of the conformance suite's claim races' tasks run on this server (the
    #: same workers, limits and checks, fewer tasks): 1.0 but for a server too slow to
    #: race the full count in CI time, the way ``chaos_scenario`` picks the compact
    #: campaign; never below a floor of tasks per worker
    #: (:func:`rdq_compliance.suite.concurrency.race_tasks`).
    race_size: float = 1.0

    @abstractmethod
    def create_namespace(self) -> str:
        """Create an isolated, empty namespace (schema, key prefix, database, file)."""

    @abstractmethod
    def drop_namespace(self, namespace: str) -> None:
        """Remove a namespace and everything in it; idempotent."""

    def recorded_namespaces(self) -> Mapping[str, str | None]:
        """Every namespace of the kit's on the server, each with the owner record stored
        with it (``None`` where there is none).

        The hook of the sweep (:mod:`rdq_compliance.provision.owners`): a server that fills
        it stores :func:`~rdq_compliance.provision.owners.owner_record` with each
        namespace in :meth:`create_namespace`, and the next run given the same DSN drops
        the namespaces of runs that died (a SIGKILL, a SIGTERM) through
        :meth:`drop_namespace`. Default: the server keeps no records, nothing is swept."""
        raise UnsupportedFault(f"{type(self).__name__} keeps no owner records of its namespaces")

    def discard_namespace(self, namespace: str) -> None:
        """The caller is done with ``namespace``: drop it now, or later in the background
        (a server that can keeps test set-up off the clock that way); :meth:`close` drops
        it at the latest. Nothing may use the namespace any more. Default: drop it now."""
        self.drop_namespace(namespace)

    @abstractmethod
    def close(self) -> None:
        """Stop what the kit started; leave a given server running."""

    def kill(self) -> None:
        """SIGKILL the server (it stays down until :meth:`restart`)."""
        raise UnsupportedFault(f"{type(self).__name__} cannot kill its server")

    def restart(self) -> None:
        """Start the server again after :meth:`kill` (or stop it cleanly and start it)."""
        raise UnsupportedFault(f"{type(self).__name__} cannot restart its server")

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its sockets and answers nothing until :meth:`resume`."""
        raise UnsupportedFault(f"{type(self).__name__} cannot pause its server")

    def resume(self) -> None:
        """SIGCONT the server after :meth:`pause` (a no-op if it is not paused)."""
        raise UnsupportedFault(f"{type(self).__name__} cannot resume its server")

    def cut_connections(self, namespace: str) -> int:
        """Terminate clients' connections to the namespace; returns how many."""
        raise UnsupportedFault(f"{type(self).__name__} cannot cut connections")

    def failover(self, replica_lag: float = 0.0) -> str:
        """SIGKILL the primary, promote the replica, move :attr:`dsn`'s address to it.

        ``replica_lag`` > 0 first holds the replication link for that many seconds while
        the primary goes on acknowledging writes — a replica that lags, as one behind a
        congested link does. Clients reconnect to the same :attr:`dsn` and reach
        the new primary; a fresh replica of it is started, so a later failover works too.
        Returns a line for the journal (which process became the primary)."""
        raise UnsupportedFault(f"{type(self).__name__} has no replica to fail over to")

    def pids(self) -> list[int]:
        """Process ids of server processes the kit started (for leak checks)."""
        return []

    def forget_connections(self) -> None:
        """The server's own connections (its admin connection) died with its process — a
        kill, a restart, a failover: drop them, so that the next call opens new ones.
        The faults of a server the kit owns call it (``LocalFaults``, ``ContainerFaults``);
        the default keeps no connection."""
        return None

    # ---- network partitions: where clients connect, and the DSN through another address --

    def network_address(self) -> tuple[str, int]:
        """The one TCP address (host, port) every client of :attr:`dsn` connects to.

        The chaos harness relays a partitioned worker's connections to it. The default
        reads a URL DSN (``scheme://[user@]host:port/...``); a server reached otherwise
        (embedded, several addresses, a cluster that redirects clients to its nodes)
        raises :class:`UnsupportedFault` saying why.
        """
        return url_address(self.dsn)

    def dsn_via(self, host: str, port: int) -> str:
        """:attr:`dsn` rewritten so that a client connects to ``host:port`` (a relay of
        :meth:`network_address`) and to nothing else. The default replaces the URL's
        host and port; override it when the driver would go around that address (a
        replica-set URI the driver rediscovers, a cluster's redirects)."""
        return url_via(self.dsn, host, port)


def url_address(dsn: str) -> tuple[str, int]:
    """``(host, port)`` of a URL DSN with one host and an explicit port."""
    try:
        url = urlsplit(dsn)
        host, port = url.hostname, url.port
    except ValueError as exc:
        raise UnsupportedFault(f"the DSN is not a URL with one host:port ({exc})") from None
    if not url.scheme or not host or port is None or "," in url.netloc:
        raise UnsupportedFault(
            "the DSN is not a URL with one host and an explicit port "
            "(scheme://[user@]host:port/...), so its clients cannot be relayed"
        )
    return host, port


def url_via(dsn: str, host: str, port: int) -> str:
    """``dsn`` (a URL) with its host and port replaced by ``host:port``."""
    url_address(dsn)
    url = urlsplit(dsn)
    user = url.netloc.rpartition("@")[0]
    netloc = f"{user}@{host}:{port}" if user else f"{host}:{port}"
    return urlunsplit((url.scheme, netloc, url.path, url.query, url.fragment))


class Backend(ABC):
    """A storage plugin: how to provision a server and how to open storage on it.

    A server backend implements the three rungs of the provisioning ladder and
    inherits :meth:`provision`, which tries them in order: an explicit DSN, a local
    server started from binaries, a container when Docker answers. Each rung raises
    ``ProvisionUnavailable`` saying why it could not serve; when all fail, the error
    names every remedy. An embedded backend overrides :meth:`provision` instead.
    """

    #: The name users pass to ``--rdq-backend``.
    name: str
    #: The backend's expected-failure ledger: known gaps, as rule id or test id -> reason.
    #: Those tests still run and are reported as expected failures; one that passes fails
    #: the run (strict). ``[tool.rdq.expected-failures]`` adds entries (see
    #: :mod:`rdq_compliance.ledger`).
    expected_failures: Mapping[str, str] = MappingProxyType({})
    #: Behaviours of the library a public issue tracks, each a
    #: :class:`~rdq_compliance.known_upstream.KnownUpstream` naming the issue and what it
    #: covers: reported as known upstream while present, failing the run once gone.
    #: ``[[tool.rdq.known-upstream]]`` adds entries.
    known_upstream: Sequence[KnownUpstream] = ()

    def neighbour_queues(self, count: int) -> Sequence[str] | None:
        """At least ``count`` queue names this backend stores side by side (one shard,
        bucket, partition or collection), for the suite's queue-isolation test and the
        stateful machine (which plays on the first two); ``None`` (the default) when it
        does not say, and the suite then spreads its test over so many queue names that
        any bucketing into a few thousand buckets puts some of them together
        (``rdq_compliance.suite.test_neighbours``), the machine on a pair drawn from its
        seed (``rdq_compliance.queue_names``)."""
        return None

    def options(self) -> Sequence[RungOptions] | None:
        """Every ``--rdq-option`` key this backend reads, as the :class:`RungOptions` of
        its rungs. The kit checks the options a user gives against them before any test
        runs: a key no installed backend declares ends the run as a usage error naming
        the closest known keys (a misspelt ``redis_clustr=3`` would otherwise run the kit
        on one server), and a key of another backend is named in the header as unused.
        ``None`` (the default) means the backend does not say; then only keys that
        another installed backend declares can be told apart, and the header says the
        others were not checked. A backend that reads no options returns ``()``."""
        return None

    def provision(self, request: ProvisionRequest) -> Server:
        """Find or start a server, or raise ``ProvisionUnavailable`` naming the remedies."""
        if request.dsn:
            return self.server_from_dsn(request.dsn, request)
        reasons = []
        failed = False
        local, container = self.rungs()
        rungs = [("local binaries", self.start_local_server)] if local else []
        if container and request.allow_docker:
            rungs.append(("container", self.start_container))
        for label, rung in rungs:
            try:
                return rung(request)
            except ProvisionUnavailable as exc:
                reasons.append(f"{label}: {exc}")
                failed = failed or isinstance(exc, ServerStartFailed)
        if container and not request.allow_docker:
            reasons.append("container: not tried (--rdq-no-docker)")
        if failed:
            raise ServerStartFailed("; ".join(reasons))
        env = f"RDQ_{self.name.upper().replace('-', '_')}_DSN"
        remedies = [f"pass a server address with --rdq-dsn or {env}"]
        if local:
            remedies.append(f"install the {self.name} server binaries on PATH")
        if container:
            remedies.append("start Docker for a container")
        if not rungs:
            reasons.append(f"backend {self.name!r} takes only a server address (a DSN)")
        listed = "; ".join(f"({n}) {r}" for n, r in enumerate(remedies, 1))
        raise ProvisionUnavailable(
            f"no {self.name} server could be provisioned. "
            f"Remed{'ies' if len(remedies) > 1 else 'y'}: {listed}. Tried: " + "; ".join(reasons)
        )

    def rungs(self) -> tuple[bool, bool]:
        """Which rungs after the DSN this backend has: (local binaries, container) --
        whether its class overrides :meth:`start_local_server` and :meth:`start_container`.
        The remedies a skip prints name only these."""
        cls = type(self)
        return (
            cls.start_local_server is not Backend.start_local_server,
            cls.start_container is not Backend.start_container,
        )

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        """Rung 1: wrap a server the user gave by address (never stopped by the kit)."""
        raise ProvisionUnavailable(f"backend {self.name!r} does not take a DSN")

    def start_local_server(self, request: ProvisionRequest) -> Server:
        """Rung 2: start a private server from local binaries in ``request.workdir``."""
        raise ProvisionUnavailable("this backend cannot start a local server")

    def start_container(self, request: ProvisionRequest) -> Server:
        """Rung 3: start a container (testcontainers) when Docker answers."""
        raise ProvisionUnavailable("this backend has no container image")

    @abstractmethod
    def open(self, dsn: str, namespace: str) -> Storage:
        """Open storage in an existing namespace (called in any process)."""
