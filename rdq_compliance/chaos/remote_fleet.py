"""A campaign's remote fleet: the SSH launcher, the hosts' partitions, the clock events.

:func:`open_remote_fleet` connects to the hosts of a hosts file
(:mod:`rdq_compliance.chaos.fleet_hosts`) for one campaign: an
:class:`~rdq_compliance.chaos.ssh_launcher.SshLauncher` whose workers reach the server
at the address each host names (``server_address``), and, when the scenario partitions,
a :class:`~rdq_compliance.chaos.ssh_launcher.HostNetwork` that cuts whole hosts.
:func:`journal_clocks` writes each host's measured clock offset into the harness's
journal (``op: "host", kind: "clock"``), where the checker and the report read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rdq_compliance.chaos.events import INFO
from rdq_compliance.chaos.faults.clock_skew import ClockSkewCounts
from rdq_compliance.chaos.faults.network import FAMILY as NETWORK
from rdq_compliance.chaos.faults.network import NO_NETWORK
from rdq_compliance.chaos.fleet_hosts import FleetHosts, Host
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.launcher import ClockOffset
from rdq_compliance.chaos.libfaketime import Skew
from rdq_compliance.chaos.scenario import Scenario
from rdq_compliance.chaos.ssh_launcher import FleetError, HostNetwork, SshLauncher
from rdq_compliance.provision.backend import Server, UnsupportedFault


@dataclass
class RemoteFleet:
    """The pieces of a remote fleet the runner uses."""

    launcher: SshLauncher
    network: HostNetwork | None
    no_network: str
    note: str

    def journal_clocks(self, journal: LockedJournal, *, final: bool = False) -> None:
        journal_clocks(journal, self.launcher.clocks(), final=final)

    def describe_hosts(self) -> list[dict[str, object]]:
        """Per host: name, SSH URL, clock offset and uncertainty (s), lost or not."""
        clocks = {c.host: c for c in self.launcher.clocks()}
        out: list[dict[str, object]] = []
        for link in self.launcher.links:
            c = clocks.get(link.host.name)
            out.append(
                {
                    "name": link.host.name,
                    "url": link.host.url,
                    "offset": c.offset if c else None,
                    "uncertainty": c.uncertainty if c else None,
                    "lost": link.lost,
                }
            )
        return out

    def host_skews(
        self, skews: Sequence[Skew], slots: int, counts: ClockSkewCounts
    ) -> tuple[Skew, ...]:
        """A clock skew is a host's: every slot on the host of a skewed slot runs with
        that slot's skew (the first one drawn for the host); ``counts`` say so."""
        by_host: dict[str, Skew] = {}
        for skew in skews:
            by_host.setdefault(self.launcher.host_of(skew.slot), skew)
        out = tuple(
            replace(by_host[host], slot=slot)
            for slot in range(slots)
            if (host := self.launcher.host_of(slot)) in by_host
        )
        counts.skewed_slots = {
            s.slot: f"{s.offset:+.3f}s, rate x{s.drift:.4f} (host {self.launcher.host_of(s.slot)})"
            for s in out
        }
        return out


def open_remote_fleet(
    fleet: FleetHosts, scenario: Scenario, server: Server, backend: str, outdir: Path, slots: int
) -> RemoteFleet:
    """Connect to ``fleet``'s hosts for one campaign (see the module's docstring)."""
    try:
        address = server.network_address()
        server.dsn_via(*address)
    except UnsupportedFault as exc:
        raise FleetError(
            f"the {backend} server ({server.origin}) is not reached over one TCP address, so "
            f"workers on other hosts cannot be pointed at it: {exc}"
        ) from None
    host_port = address[1]

    def dsn_for(host: Host) -> str:
        return server.dsn_via(host.server_address or address[0], host_port)

    launcher = SshLauncher(
        fleet,
        history_dir=Path(outdir) / "history",
        log_dir=Path(outdir) / "logs",
        dsn_for=dsn_for,
        slots=slots,
    )
    settings = scenario.faults.of(NETWORK)
    network: HostNetwork | None = None
    no_network = NO_NETWORK
    if settings.partitions or settings.losses:
        network = HostNetwork(
            launcher, host_port, loss_percent=settings.loss_percent if settings.losses else 0
        )
        no_network = ""
    clocks = "; ".join(
        f"{c.host} {c.offset * 1000:+.2f} ms ± {c.uncertainty * 1000:.2f} ms"
        for c in launcher.clocks()
    )
    note = (
        f"workers on {len(fleet.hosts)} host(s) over SSH ({fleet.describe()}); "
        f"their clocks against the runner's: {clocks}"
    )
    return RemoteFleet(launcher, network, no_network, note)


def journal_clocks(
    journal: LockedJournal, clocks: list[ClockOffset], *, final: bool = False
) -> None:
    """One ``clock`` event per host: its offset and uncertainty (s), and when measured."""
    for c in clocks:
        journal.write(
            INFO,
            "host",
            kind="clock",
            host=c.host,
            offset=c.offset,
            uncertainty=c.uncertainty,
            samples=c.samples,
            final=final,
        )
