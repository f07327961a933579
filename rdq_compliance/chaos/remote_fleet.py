"""A campaign's remote fleet: the SSH launcher that answers what depends on other hosts.

A :class:`RemoteLauncher` connects to the hosts of a hosts file
(:mod:`rdq_compliance.chaos.fleet_hosts`) for one campaign: an
:class:`~rdq_compliance.chaos.ssh_launcher.SshLauncher` whose workers reach the
server at the address each host names (``server_address``), and which is the
campaign's :class:`~rdq_compliance.chaos.launcher.CampaignLauncher`: its partitioner is
a :class:`~rdq_compliance.chaos.faults.host_network.HostNetwork` that cuts whole hosts,
a clock skew is a whole host's, and its notes and hosts say where the workers ran and
how far each host's clock was from the runner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rdq_compliance.chaos.faults.host_network import HostNetwork
from rdq_compliance.chaos.fleet_hosts import FleetHosts, Host
from rdq_compliance.chaos.libfaketime import Skew
from rdq_compliance.chaos.ssh_launcher import FleetError, SshLauncher
from rdq_compliance.provision.backend import Server, UnsupportedFault


class RemoteLauncher(SshLauncher):
    """The SSH launcher of one campaign writing to ``outdir``, connected to ``fleet``'s
    hosts (see the module's docstring); a :class:`~rdq_compliance.chaos.ssh_launcher.FleetError`
    if ``server`` (of ``backend``) is not reached over one TCP address. ``server_port`` is
    the server's port, which a cut matches. The journals are mirrored into ``outdir``'s
    folder ``history``, the logs fetched into its ``logs``."""

    def __init__(
        self,
        fleet: FleetHosts,
        server: Server,
        backend: str,
        outdir: Path,
        slots: int,
        *,
        history: str = "history",
    ) -> None:
        try:
            address = server.network_address()
            server.dsn_via(*address)
        except UnsupportedFault as exc:
            raise FleetError(
                f"the {backend} server ({server.origin}) is not reached over one TCP address, "
                f"so workers on other hosts cannot be pointed at it: {exc}"
            ) from None
        server_host, server_port = address

        def dsn_for(host: Host) -> str:
            return server.dsn_via(host.server_address or server_host, server_port)

        super().__init__(
            fleet,
            history_dir=Path(outdir) / history,
            log_dir=Path(outdir) / "logs",
            dsn_for=dsn_for,
            slots=slots,
        )
        self.server_port = server_port
        self._gaps_said: int | None = None  # None: nothing noted yet

    def partitioner(
        self, server: Server, backend: str, slots: int, *, loss_percent: int
    ) -> tuple[HostNetwork, str]:
        """Whole hosts cut off the server by nftables on the host."""
        return HostNetwork(self, self.server_port, loss_percent=loss_percent), ""

    def place_skews(self, skews: Sequence[Skew], library: Path) -> list[tuple[Skew, str | None]]:
        """A clock skew is a host's: every slot on the host of a skewed slot runs with
        that slot's skew (the first one drawn for the host), under the host's own
        libfaketime (the hosts file's ``faketime``)."""
        by_host: dict[str, Skew] = {}
        for skew in skews:
            by_host.setdefault(self.host_of(skew.slot), skew)
        return [
            (replace(by_host[host], slot=slot), host)
            for slot in range(self.slots)
            if (host := self.host_of(slot)) in by_host
        ]

    def notes(self) -> list[str]:
        """The hosts and their clocks against the runner's (the first call), then the
        journals that could not be fetched whole (:attr:`gaps`)."""
        said, self._gaps_said = self._gaps_said, len(self.gaps)
        if said is not None:
            return self.gaps[said:]
        clocks = "; ".join(
            f"{c.host} {c.offset * 1000:+.2f} ms ± {c.uncertainty * 1000:.2f} ms"
            for c in self.clocks()
        )
        return [
            f"workers on {len(self.fleet.hosts)} host(s) over SSH ({self.fleet.describe()}); "
            f"their clocks against the runner's: {clocks}",
            *self.gaps,
        ]

    def hosts(self) -> list[dict[str, object]]:
        clocks = {c.host: c for c in self.clocks()}
        out: list[dict[str, object]] = []
        for link in self.links:
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
