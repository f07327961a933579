"""Partitions of whole hosts of a remote fleet: :class:`HostNetwork`.

The :class:`~rdq_compliance.chaos.remote_fleet.RemoteLauncher`'s partitioner: the
network fault (:mod:`rdq_compliance.chaos.faults.network`) cuts a whole host of the
fleet off the server, or makes it lose packets, by an nftables table the host holds for
as long as the cut lasts, put in and taken out over the launcher's SSH connection to
that host. A cut lives as long as the channel of its helper process: a runner that dies
heals every cut it made.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Callable, Sequence

import asyncssh

from rdq_compliance.chaos.ssh_launcher import FleetError, HostLink, SshLauncher
from rdq_core.spi import Storage

#: Run on a host for the length of a cut: puts the nftables table in, says ``cut``, waits
#: for end of file on stdin (the heal, or the runner's death: the channel closes), then
#: deletes the table, whatever happened after it went in (a runner that died while the
#: cut was being made: the ``cut`` line cannot be written). So a SIGKILLed runner leaves
#: no host cut off.
_CUT = r"""
import subprocess, sys
table, rules = sys.argv[1], sys.argv[2]
try:
    subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)
    print("cut", flush=True)  # a runner gone already: BrokenPipeError, and the finally
    sys.stdin.read()
finally:
    subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)
"""
#: The nftables table a cut puts on a host.
CUT_TABLE = "rdq_fleet_cut"


class HostNetwork:
    """The partition fault on a remote fleet: a whole host cut from the server (or made to
    lose packets to it), by nftables rules on that host over SSH (the SSH user must be
    allowed to run ``nft``: root, on the kit's test hosts). Rules match the server's
    address as the host sees it (``server_address``) and its port, both ways, so the
    host's SSH session to the runner stays up.

    The harness's own storage goes to the server from the runner's machine, on no host:
    no cut reaches it (:meth:`harness_storage`)."""

    def __init__(self, launcher: SshLauncher, server_port: int, *, loss_percent: int = 0) -> None:
        self.launcher = launcher
        self.port = server_port
        self.loss_percent = loss_percent
        self._cuts: dict[str, asyncssh.SSHClientProcess[str]] = {}

    def harness_storage(self, open_storage: Callable[[str | None], Storage]) -> Storage:
        """``open_storage(None)``: the server's own DSN, from the runner's machine."""
        return open_storage(None)

    def span(self, slots: Sequence[int]) -> list[int]:
        """Every slot on the hosts of ``slots``: what cutting those hosts cuts."""
        hosts = {self.launcher.host_of(s) for s in slots}
        return sorted(s for s in range(self.launcher.slots) if self.launcher.host_of(s) in hosts)

    def _links(self, slots: Sequence[int]) -> list[HostLink]:
        names = {self.launcher.host_of(s) for s in slots}
        return [ln for ln in self.launcher.links if ln.host.name in names]

    def partition(self, slots: Sequence[int]) -> None:
        self._cut(slots, "drop")

    def lose(self, slots: Sequence[int]) -> None:
        self._cut(slots, f"numgen random mod 100 < {int(self.loss_percent)} drop")

    def _cut(self, slots: Sequence[int], verdict: str) -> None:
        for link in self._links(slots):
            self._cut_link(link, verdict)

    def cut_host(self, name: str) -> bool:
        """Cut host ``name`` off the server (every packet dropped both ways); whether a
        cut was put in (not when the host is lost or cut already)."""
        link = next((ln for ln in self.launcher.links if ln.host.name == name), None)
        if link is None:
            raise FleetError(f"no host {name!r} in the fleet")
        return self._cut_link(link, "drop")

    def heal_host(self, name: str) -> None:
        """Take host ``name``'s cut out (nothing when it has none)."""
        process = self._cuts.pop(name, None)
        link = next((ln for ln in self.launcher.links if ln.host.name == name), None)
        if process is not None and link is not None and not link.lost:
            self.launcher.call(self._close(process), 30.0)

    def _cut_link(self, link: HostLink, verdict: str) -> bool:
        if link.host.name in self._cuts or link.lost:
            return False
        address = link.host.server_address or link.host.address
        rules = (
            f"table inet {CUT_TABLE} {{\n"
            f"  chain out {{ type filter hook output priority 0; "
            f"ip daddr {address} tcp dport {self.port} {verdict}; }}\n"
            f"  chain in {{ type filter hook input priority 0; "
            f"ip saddr {address} tcp sport {self.port} {verdict}; }}\n"
            "}\n"
        )
        self._cuts[link.host.name] = self.launcher.call(self._open(link, rules), 30.0)
        return True

    async def _open(self, link: HostLink, rules: str) -> asyncssh.SSHClientProcess[str]:
        command = (
            f"{shlex.quote(link.host.python)} -I -S -u -c {shlex.quote(_CUT)} "
            f"{CUT_TABLE} {shlex.quote(rules)}"
        )
        process = await link.conn.create_process(command)
        line = await asyncio.wait_for(process.stdout.readline(), 20.0)
        if line.strip() != "cut":
            errors = await asyncio.wait_for(process.stderr.read(), 5.0)
            process.close()
            raise FleetError(
                f"host {link.host.name}: nftables refused the cut ({errors.strip()[-300:]}): "
                "the SSH user must be allowed to run nft on the host"
            )
        return process

    def heal(self, slots: Sequence[int]) -> None:
        for link in self._links(slots):
            self.heal_host(link.host.name)

    async def _close(self, process: asyncssh.SSHClientProcess[str]) -> None:
        process.stdin.write_eof()
        await asyncio.wait_for(process.wait_closed(), 20.0)

    def close(self) -> None:
        for name in list(self._cuts):
            process = self._cuts.pop(name)
            with contextlib.suppress(Exception):
                self.launcher.call(self._close(process), 30.0)
