"""A campaign's set-up: where its workers run, and what its fault families set up.

:func:`open_launcher` gives the campaign's launcher: workers on this machine
(:class:`~rdq_compliance.chaos.launcher.LocalLauncher`), or, given a hosts file, on its
hosts over SSH (:class:`~rdq_compliance.chaos.remote_fleet.RemoteLauncher`; asyncssh,
the ``ssh`` extra, is loaded only then).

:class:`CampaignSetup` is the context each fault family of the scenario sets up with
before the workers start and tears down with once they stopped
(:class:`~rdq_compliance.chaos.faults.family.SetupContext`, through
:meth:`~rdq_compliance.chaos.faults.combined.Families.setup`): entered, it sets every
family up; left, it tears them down in reverse order, on an error too. What they set up
is kept in it for the planner, the fleet and the nemesis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from rdq_compliance.chaos.faults.combined import Faults
from rdq_compliance.chaos.faults.counters import Counters
from rdq_compliance.chaos.faults.family import Counts, FaultFamily
from rdq_compliance.chaos.faults.network import NO_NETWORK
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.launcher import CampaignLauncher, LocalLauncher, Network
from rdq_compliance.chaos.libfaketime import Skew
from rdq_compliance.provision.backend import Server
from rdq_core.spi import Storage

if TYPE_CHECKING:  # the SSH fleet's modules need asyncssh (the ``ssh`` extra): loaded on use
    from rdq_compliance.chaos.fleet_hosts import FleetHosts

S = TypeVar("S")
C = TypeVar("C", bound=Counts)


def open_launcher(
    fleet_hosts: FleetHosts | None, server: Server, backend: str, outdir: Path, slots: int
) -> CampaignLauncher:
    """The launcher of a campaign writing to ``outdir``: on ``fleet_hosts`` over SSH,
    else on this machine."""
    if fleet_hosts is None:
        return LocalLauncher(
            history_dir=outdir / "history", control_dir=outdir / "control", log_dir=outdir / "logs"
        )
    from rdq_compliance.chaos.remote_fleet import RemoteLauncher

    return RemoteLauncher(fleet_hosts, server, backend, outdir, slots)


@dataclass
class CampaignSetup:
    """One campaign's :class:`~rdq_compliance.chaos.faults.family.SetupContext` (see the
    module's docstring)."""

    faults: Faults
    server: Server
    backend: str
    launcher: CampaignLauncher
    seed: int
    slots: int
    journal: LockedJournal
    counters: Counters
    network: Network | None = None
    no_network: str | None = NO_NETWORK
    skews: dict[int, Skew] = field(default_factory=dict)
    on_skew: Callable[[str, Skew], None] | None = None

    def settings(self, family: FaultFamily[S, Any]) -> S:
        return self.faults.of(family)

    def counts(self, family: FaultFamily[Any, C]) -> C:
        return self.counters.of(family)

    def note(self, text: str) -> None:
        self.counters.notes.append(text)

    def harness_storage(self, open_storage: Callable[[str | None], Storage]) -> Storage:
        """The harness's own storage, ``open_storage(dsn)`` (``None``: the server's own
        DSN): past the network's cuts when there is one."""
        if self.network is None:
            return open_storage(None)
        return self.network.harness_storage(open_storage)

    def __enter__(self) -> CampaignSetup:
        self.faults.families.setup(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.faults.families.teardown(self)
