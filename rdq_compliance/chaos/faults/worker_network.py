"""The network a partition campaign's workers run in on this machine (see
:mod:`rdq_compliance.provision.netns`).

:func:`worker_network` builds it when the scenario partitions workers that run here
(the :class:`~rdq_compliance.chaos.launcher.LocalLauncher`'s partitioner): one namespace
per worker slot, each joined to a router namespace that relays to the server's own
address; every worker of slot *i* runs in namespace *i* (:meth:`WorkerNetwork.launch`)
and connects through the DSN :meth:`~rdq_compliance.provision.backend.Server.dsn_via`
gives for its relay. The nemesis cuts slots off (:meth:`WorkerNetwork.partition`) and
heals them.

When the network cannot be built, it says why, and the campaign runs without it (the
partitions are left out of the plan with that note): not root, no ``ip``/``nft``, an
embedded store (SQLite, memory: no network to partition), a server not reached at one
TCP address (a Redis Cluster, whose redirects name its nodes' real addresses), or a
failure of the namespace commands themselves.

The harness's own storage (enqueue, redrives, progress, final state) reaches the server
from a namespace of its own too, through its own relay in the router (never partitioned):
:meth:`WorkerNetwork.harness_storage` opens it on a thread inside that namespace and runs
every call there. The server's management (namespaces, faults) stays in the machine's
namespace, on the server's own address.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from rdq_compliance.provision import netns
from rdq_compliance.provision.backend import Server, UnsupportedFault
from rdq_core.spi import Storage


@dataclass(frozen=True)
class Launch:
    """Where a slot's workers run on this machine: a command prefix, and the DSN they use."""

    prefix: tuple[str, ...]
    dsn: str


class _StorageInNamespace:
    """A storage whose every call runs on a thread inside the harness namespace."""

    def __init__(self, runner: netns.InNamespace, open_storage: Callable[[], Storage]) -> None:
        self._runner = runner
        self._storage = runner.call(open_storage)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._storage, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self._runner.call(attr, *a, **kw)

    def close(self) -> None:
        try:
            self._runner.call(self._storage.close)
        finally:
            self._runner.close()


@dataclass
class WorkerNetwork:
    """A built network: where each slot's workers run, and the partition switch."""

    topology: netns.Topology
    server: Server

    def launch(self, slot: int) -> Launch:
        host, port = self.topology.address(slot)
        return Launch(tuple(self.topology.command_prefix(slot)), self.server.dsn_via(host, port))

    def harness_storage(self, open_storage: Callable[[str], Storage]) -> Storage:
        """``open_storage(dsn)`` through the harness's relay, run inside its namespace."""
        dsn = self.server.dsn_via(*self.topology.harness_address())
        runner = netns.InNamespace(self.topology.harness.namespace)
        try:
            return cast(Storage, _StorageInNamespace(runner, lambda: open_storage(dsn)))
        except BaseException:
            runner.close()
            raise

    def span(self, slots: Sequence[int]) -> list[int]:
        return sorted(set(slots))  # one namespace per slot: a cut is the slots asked

    def partition(self, slots: Sequence[int]) -> None:
        self.topology.partition(slots)

    def lose(self, slots: Sequence[int]) -> None:
        self.topology.lose(slots)

    def heal(self, slots: Sequence[int]) -> None:
        self.topology.heal(slots)

    def close(self) -> None:
        self.topology.close()


def worker_network(
    server: Server, slots: int, backend: str, *, loss_percent: int = 0
) -> tuple[WorkerNetwork | None, str]:
    """``(network, "")``, or ``(None, why it cannot be built)``.

    The server is asked first: a store with no network to partition (an embedded one)
    says so whatever this machine lacks, so the reason names the store, not the host."""
    try:
        address = server.network_address()
        server.dsn_via(*address)
    except UnsupportedFault as exc:
        return None, (
            f"the {backend} server ({server.origin}) is not reached over one TCP address, "
            f"so there is no network between its clients and it to partition: {exc}"
        )
    why = netns.unavailable()
    if why:
        return None, why
    netns.sweep_stale()
    try:
        topology = netns.Topology(slots, address, loss_percent=loss_percent).open()
    except netns.NetnsError as exc:
        return None, f"the network namespaces could not be built: {exc}"
    return WorkerNetwork(topology, server), ""
