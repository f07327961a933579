"""A deployed campaign's workers on the hosts of an SSH fleet: :class:`RemotePlaces`.

The chaos campaigns' remote fleet does the SSH work
(:class:`~rdq_compliance.chaos.remote_fleet.RemoteLauncher`, a hosts file as
``rdq-chaos run --fleet`` reads it, ``docs/fleet.md``): one connection per host, the
host's kit checked against the runner's, each host's clock measured before and after,
every process started under the kit's watchdog on its host (it dies with its SSH channel,
so with the harness), its journal mirrored here over SFTP and its log fetched.

Worker *i* (``w1`` is 0) runs on host *i* mod the hosts, started from the system's launch
(its argv, environment and folder) with:

- the probe's path in the host's campaign folder (``<worker>.<incarnation>.jsonl``,
  mirrored to ``probe/`` here, each time moved onto the runner's clock by the host's
  measured offset) and the DSN the host reaches the server with (the server's address
  as the hosts file's ``server_address`` names it);
- a command from the runner's interpreter or its folder (``sys.executable``, a console
  script beside it) run from the host's ``python`` or its folder;
- the hosts file's ``env`` (a ``PYTHONPATH`` of the launch's first), and the folder the
  launch names, made if missing.

A whole-worker SIGKILL, SIGSTOP or SIGCONT and a part kill are the watchdog's, on the
host (``_watchdog.py``'s tree commands). A partition cuts the worker's **whole host**
from the server (:class:`~rdq_compliance.chaos.faults.host_network.HostNetwork`'s
nftables table on the host); a clock skew is the whole host's: every worker of a host
with a skew planned runs under the host's libfaketime (the hosts file's ``faketime``),
its clock read from the host's ``clock.faketime``, which the skew rewrites over SFTP.

The campaign's clock uncertainty comes from the measured clocks: twice the largest
host's uncertainty (two hosts' times, each within its own), plus the harness's
:data:`~rdq_compliance.deployed.places.LOCAL_UNCERTAINTY`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rdq_compliance.chaos.faults.host_network import HostNetwork
from rdq_compliance.chaos.fleet_hosts import FleetHosts
from rdq_compliance.chaos.libfaketime import follow_env, offset_spec
from rdq_compliance.chaos.remote_fleet import RemoteLauncher
from rdq_compliance.chaos.ssh_launcher import FleetError, HostLink, RemoteProcess, SshWorker
from rdq_compliance.deployed.places import LOCAL_UNCERTAINTY, LaunchFor, Reach
from rdq_compliance.provision.backend import Server

__all__ = ["CLOCK_FILE", "RemotePlaces", "RemoteTree", "host_argv"]

#: The clock file of a skewed host, in its campaign folder.
CLOCK_FILE = "clock.faketime"
#: Seconds a command to a worker's watchdog may take (a kill waits for the whole tree).
_ANSWER_S = 30.0


def host_argv(argv: Sequence[str], python: str) -> tuple[str, ...]:
    """``argv`` as the host runs it: the runner's interpreter replaced by the host's
    ``python``, a program in the runner's interpreter's folder (a console script of its
    venv) by the one of that name beside ``python``; anything else as it is."""
    if not argv:
        return ()
    first, here = argv[0], Path(sys.executable)
    if first == sys.executable:
        first = python
    elif Path(first).parent == here.parent:
        first = str(Path(python).parent / Path(first).name)
    return (first, *argv[1:])


class RemoteTree:
    """A worker incarnation on a host: its watchdog there, reached over the host's SSH
    connection (a :class:`~rdq_compliance.deployed.places.WorkerTree`)."""

    def __init__(self, worker: SshWorker, grace: float) -> None:
        self.worker = worker
        self.grace = grace

    @property
    def pid(self) -> int:
        return self.worker.remote_pid

    @property
    def running(self) -> bool:
        return self.worker.running

    @property
    def lost(self) -> str | None:
        """Why the worker ended with its host, when its host's connection was lost."""
        link = self.worker.link
        return f"its host {link.host.name} was lost" if link.lost else None

    def wait(self, timeout: float | None = None) -> int | None:
        return self.worker.wait(timeout)

    def _ask(self, command: str, timeout: float = _ANSWER_S) -> dict[str, Any] | None:
        """The watchdog's answer, or ``None`` when its channel is gone."""
        if self.worker.released or self.worker.link.lost:
            return None
        try:
            return self.worker.command(command, timeout)
        except (EOFError, TimeoutError, OSError):
            return None

    def pids(self) -> list[int]:
        reply = self._ask("pids")
        return [int(p) for p in reply["tree"]] if reply else []

    def under(self) -> list[int]:
        reply = self._ask("pids")
        return [int(p) for p in reply["under"]] if reply else []

    def kill(self) -> list[int]:
        reply = self._ask("kill")
        self.worker.wait(5.0)
        return [int(p) for p in reply.get("killed", [])] if reply else []

    def pause(self) -> list[int]:
        reply = self._ask("pause")
        return [int(p) for p in reply["pids"]] if reply else []

    def resume(self) -> list[int]:
        reply = self._ask("resume")
        return [int(p) for p in reply["pids"]] if reply else []

    def kill_one(self, pid: int) -> bool:
        reply = self._ask(f"signal-pid {int(pid)} 9")
        return bool(reply and reply.get("hit"))

    def stop(self, grace: float | None = None) -> None:
        grace = self.grace if grace is None else grace
        self._ask(f"stop {grace:g}", grace + _ANSWER_S)
        self.worker.release()


class RemotePlaces:
    """The ``workers`` of a campaign writing to ``folder``, on the hosts of ``fleet`` (see
    the module's docstring); connects at once (a
    :class:`~rdq_compliance.chaos.ssh_launcher.FleetError` names a host that cannot be
    used). ``takes_dsn``: whether the system's ``worker`` takes the DSN a host reaches the
    server with (without it, no host may name a ``server_address`` of its own)."""

    def __init__(
        self,
        fleet: FleetHosts,
        server: Server,
        backend: str,
        folder: Path,
        workers: Sequence[str],
        *,
        takes_dsn: bool = True,
        grace: float = 5.0,
    ) -> None:
        self.folder = Path(folder)
        self.workers = tuple(workers)
        self.grace = grace
        if not takes_dsn:
            own = [h.name for h in fleet.hosts if h.server_address]
            if own:
                raise FleetError(
                    f"the system's worker() takes no dsn, so its workers cannot be pointed at "
                    f"the server as host(s) {', '.join(own)} reach it (their server_address)"
                )
        self.launcher = RemoteLauncher(
            fleet, server, backend, self.folder, len(self.workers), history="probe"
        )
        self.network = HostNetwork(self.launcher, self.launcher.server_port)
        self._skewed: set[str] = set()  # hosts whose workers run under a clock file
        self._notes: list[str] | None = None

    # ---- where the workers are ---------------------------------------------------------

    def host_of(self, worker: str) -> str:
        return self.launcher.host_of(self.workers.index(worker))

    def _link(self, host: str) -> HostLink:
        return next(ln for ln in self.launcher.links if ln.host.name == host)

    def reach(self) -> Reach:
        cannot: dict[str, str] = {}
        bare = [h.name for h in self.launcher.fleet.hosts if not h.faketime]
        if bare:
            cannot["clock-skew"] = (
                f"the hosts file gives no libfaketime for host(s) {', '.join(bare)} "
                "(a host's or [fleet]'s faketime key)"
            )
        return Reach({w: self.host_of(w) for w in self.workers}, cannot)

    def log_path(self, worker: str) -> Path:
        return self.folder / "logs" / f"{worker}.log"

    def log_tail(self, worker: str, lines: int = 20) -> str:
        link = self._link(self.host_of(worker))
        with contextlib.suppress(Exception):
            self.launcher.call(
                link.sftp.get(f"{link.workdir}/{worker}.log", os.fspath(self.log_path(worker)))
            )
        try:
            text = self.log_path(worker).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ---- starting ----------------------------------------------------------------------

    def prepare_skews(self, workers: Sequence[str]) -> None:
        for host in sorted({self.host_of(w) for w in workers}):
            self.launcher.put_text(self._link(host), CLOCK_FILE, offset_spec(0.0))
            self._skewed.add(host)

    def start(self, worker: str, incarnation: int, launch_for: LaunchFor) -> RemoteTree:
        fleet = self.launcher.fleet

        def make(link: HostLink) -> RemoteProcess:
            host = link.host
            probe = f"{link.workdir}/{worker}.{incarnation}.jsonl"
            launch = launch_for(probe, self.launcher.dsn_for(host))
            env = {**dict(fleet.env), **launch.env}
            paths = (launch.env.get("PYTHONPATH"), dict(fleet.env).get("PYTHONPATH"))
            joined = os.pathsep.join(p for p in paths if p)
            if joined:
                env["PYTHONPATH"] = joined
            if host.name in self._skewed:
                if not host.faketime:
                    raise FleetError(f"host {host.name}: no faketime library to skew it with")
                clock = f"{link.workdir}/{CLOCK_FILE}"
                env.update(follow_env(clock, host.faketime, link.site, env.get("PYTHONPATH")))
            return RemoteProcess(
                f"{worker}.{incarnation}",
                host_argv(launch.argv, host.python),
                tuple(sorted(env.items())),
                cwd=launch.cwd,
                log=worker,
            )

        spawned = self.launcher.spawn(self.workers.index(worker), make)
        return RemoteTree(spawned, self.grace)

    # ---- the faults --------------------------------------------------------------------

    def _together(self, worker: str) -> tuple[str, ...]:
        return self.reach().together(worker)

    def partition(self, worker: str) -> tuple[str, ...]:
        host = self.host_of(worker)
        if not self.network.cut_host(host):
            raise FleetError(f"host {host} is lost or cut already")
        return self._together(worker)

    def heal(self, worker: str) -> None:
        self.network.heal_host(self.host_of(worker))

    def skew(self, worker: str, offset: float) -> tuple[str, ...]:
        host = self.host_of(worker)
        if host not in self._skewed:
            raise FleetError(f"host {host}'s workers were not started under a clock that moves")
        self.launcher.put_text(self._link(host), CLOCK_FILE, offset_spec(offset))
        return self._together(worker)

    def unskew(self) -> None:
        for host in sorted(self._skewed):
            link = self._link(host)
            if not link.lost:
                with contextlib.suppress(Exception):
                    self.launcher.put_text(link, CLOCK_FILE, offset_spec(0.0))

    # ---- after the workers stopped -----------------------------------------------------

    def collect(self) -> None:
        self.launcher.collect()

    def uncertainty(self) -> tuple[float, str]:
        clocks = self.launcher.clocks()
        worst = max((c.uncertainty for c in clocks), default=0.0)
        value = round(LOCAL_UNCERTAINTY + 2 * worst, 6)
        each = "; ".join(
            f"{c.host} {c.offset * 1000:+.2f} ms ± {c.uncertainty * 1000:.2f} ms" for c in clocks
        )
        return value, (
            f"{value:g} s: the workers ran on {len(clocks)} host(s) whose clocks were measured "
            f"against the harness's before and after the campaign ({each}); twice the largest "
            f"uncertainty (two hosts' times, each within its own) plus {LOCAL_UNCERTAINTY:g} s "
            "for the harness's lag between reading its clock and a signal taking effect"
        )

    def hosts(self) -> list[dict[str, object]]:
        placed = self.reach().hosts
        out = self.launcher.hosts()
        for entry in out:
            entry["workers"] = sorted(w for w, h in placed.items() if h == entry["name"])
            entry["skewed"] = entry["name"] in self._skewed
        return out

    def notes(self) -> list[str]:
        if self._notes is None:
            self._notes = []
        self._notes += self.launcher.notes()
        return list(self._notes)

    def close(self) -> None:
        try:
            self.network.close()
        finally:
            self.launcher.close()
