"""Where a campaign's workers run: the launcher interface the fleet drives every worker through.

:class:`~rdq_compliance.chaos.fleet.Fleet` keeps slots, names, respawns and the
bookkeeping of faults; a :class:`Launcher` does what touches a process: start one,
signal it (SIGKILL, SIGSTOP, SIGCONT, SIGTERM), tell it where to kill itself (its
control point), see whether it lives, release it, and say where its journal and log
are *on this machine* and how far its host's clock is from this one's. Two
implementations:

- :class:`LocalLauncher` (here): child processes of the runner, each behind the kit's
  watchdog (:class:`~rdq_compliance.provision.process.ManagedProcess`), optionally
  placed by a *placement* (a command prefix such as ``ip netns exec``, and the DSN to
  use there: the partition fault's namespaces) and skewed by libfaketime;
- :class:`~rdq_compliance.chaos.ssh_launcher.SshLauncher`: processes on other hosts
  over SSH.

A campaign asks its launcher (a :class:`CampaignLauncher`) what depends on where the
workers run, so that the runner and the fault families never ask whether they run here:
the network that cuts worker slots off the server (:meth:`CampaignLauncher.partitioner`:
here :func:`~rdq_compliance.chaos.faults.worker_network.worker_network`'s namespaces, on
other hosts :class:`~rdq_compliance.chaos.faults.host_network.HostNetwork`'s cuts of
whole hosts), where clock skews land (:meth:`CampaignLauncher.place_skews`: per slot
here, per host there), what to note of the hosts and what to report of them.
:class:`LocalLauncher` is one; the SSH one is
:class:`~rdq_compliance.chaos.remote_fleet.RemoteLauncher`.

The fleet reads a worker's journal from :meth:`Launcher.journal_path` while the
campaign runs (the nemesis tails it to kill inside a claim); a remote launcher mirrors
the remote file there. A launcher reports a host it lost (:meth:`Launcher.lost_hosts`)
rather than raising: a host that drops mid-campaign is a fault of the campaign, not a
crash of the runner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from rdq_compliance.chaos.events import INFO
from rdq_compliance.chaos.faults.worker_network import Launch, WorkerNetwork, worker_network
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.libfaketime import Skew, skew_env, time_base
from rdq_compliance.chaos.worker_main import WorkerConfig
from rdq_compliance.provision.backend import Server
from rdq_compliance.provision.process import ManagedProcess
from rdq_core.spi import Storage

#: Grace the watchdog gives a worker after SIGTERM when the harness is gone.
ORPHAN_GRACE = 0.2

#: The host name of the runner's own machine, as lanes and journals name it.
LOCAL_HOST = "local"


@dataclass(frozen=True)
class ClockOffset:
    """A host's wall clock against the runner's: ``host - runner`` in seconds, within
    ``± uncertainty`` (half the best round trip of the measurement)."""

    host: str
    offset: float
    uncertainty: float
    samples: int


@dataclass(frozen=True)
class WorkerStart:
    """What the fleet asks a launcher to start: one worker of one slot."""

    name: str
    slot: int
    config: WorkerConfig
    skew: Skew | None


class WorkerHandle(Protocol):
    """One started worker process, wherever it runs."""

    @property
    def pid(self) -> int:
        """Its pid on its host."""
        ...

    @property
    def host(self) -> str: ...

    @property
    def running(self) -> bool: ...

    @property
    def returncode(self) -> int | None: ...

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the worker (not its tree); a gone worker is no error."""
        ...

    def wait(self, timeout: float) -> int | None: ...

    def release(self) -> None:
        """Kill whatever is left of it and free what held it (idempotent)."""
        ...

    def local_pids(self) -> list[int]:
        """The processes of *this* machine it still holds (its watchdog, the worker when
        local): what a leftover check looks for."""
        ...

    def log_tail(self, lines: int = 30) -> str: ...


class Launcher(Protocol):
    """Starts workers and reaches them; see the module's docstring."""

    def host_of(self, slot: int) -> str:
        """The host slot ``slot``'s workers run on (a lane group of the timeline)."""
        ...

    def start(self, start: WorkerStart) -> WorkerHandle: ...

    def arm(self, name: str, point: str) -> None:
        """Write worker ``name``'s control point (``"none"`` disarms)."""
        ...

    def journal_path(self, name: str) -> Path:
        """Where worker ``name``'s journal is readable on this machine."""
        ...

    def clocks(self) -> list[ClockOffset]:
        """Every host's measured clock offset (empty: the runner's own clock only)."""
        ...

    def lost_hosts(self) -> list[str]:
        """Hosts this launcher lost the connection to (each reported once)."""
        ...

    def collect(self) -> None:
        """Bring every journal and log to this machine (after the workers stopped)."""
        ...

    def leftovers(self) -> list[str]:
        """Worker processes still alive on other hosts after the fleet stopped
        (``"<host> pid <n>"``); this machine's are :meth:`WorkerHandle.local_pids`."""
        ...

    def close(self) -> None: ...


class Network(Protocol):
    """A network that cuts a campaign's worker slots off the server (a
    :class:`~rdq_compliance.chaos.faults.family.Partitioner`), and how the harness's own
    storage reaches the server past its cuts."""

    def span(self, slots: Sequence[int]) -> list[int]: ...

    def partition(self, slots: Sequence[int]) -> None: ...

    def lose(self, slots: Sequence[int]) -> None: ...

    def heal(self, slots: Sequence[int]) -> None: ...

    def harness_storage(self, open_storage: Callable[[str | None], Storage]) -> Storage:
        """The harness's storage, ``open_storage(dsn)`` (``None``: the server's own DSN)
        where no cut reaches it."""
        ...

    def close(self) -> None:
        """Heal whatever is still cut, and take the network down."""
        ...


class CampaignLauncher(Launcher, Protocol):
    """A launcher as a campaign uses it: it also answers what depends on where its
    workers run (see the module's docstring)."""

    def partitioner(
        self, server: Server, backend: str, slots: int, *, loss_percent: int
    ) -> tuple[Network | None, str]:
        """The network that cuts worker slots off ``server`` (losses drop
        ``loss_percent`` % of their packets), or ``(None, why it cannot be built)``."""
        ...

    def place_skews(self, skews: Sequence[Skew], library: Path) -> list[tuple[Skew, str | None]]:
        """The clocks the slots run with, from the skews drawn (libfaketime's ``library``
        on this machine): each with the host whose clock it is (``None``: its slot's own)."""
        ...

    def notes(self) -> list[str]:
        """What the campaign's notes say of where the workers run: each note once."""
        ...

    def hosts(self) -> list[dict[str, object]]:
        """Per host the workers ran on other than this machine: name, SSH URL, clock
        offset and uncertainty (s), lost or not."""
        ...


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


# ---- the local launcher --------------------------------------------------------------------


@dataclass(eq=False)
class LocalWorker:
    """A worker started by :class:`LocalLauncher`: a :class:`ManagedProcess`."""

    process: ManagedProcess

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def host(self) -> str:
        return LOCAL_HOST

    @property
    def running(self) -> bool:
        return self.process.running

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.process.pid, signum)

    def wait(self, timeout: float) -> int | None:
        return self.process.wait(timeout)

    def release(self) -> None:
        with contextlib.suppress(Exception):
            self.process.stop(grace=0.0)

    def local_pids(self) -> list[int]:
        out: list[int] = []
        wd = self.process.watchdog_pid
        if wd is not None and _alive(wd):
            out.append(wd)
        out.extend(self.process.pids())
        return out

    def log_tail(self, lines: int = 30) -> str:
        return self.process.log_tail(lines)


class LocalLauncher:
    """Workers as child processes of this machine (see the module's docstring); a
    :class:`CampaignLauncher`.

    ``placement`` (optional) gives a slot's command prefix and DSN; ``faketime`` is the
    libfaketime library a skewed worker runs under. :meth:`partitioner` and
    :meth:`place_skews` set them for a campaign.
    """

    def __init__(
        self,
        *,
        history_dir: Path,
        control_dir: Path,
        log_dir: Path,
        placement: Callable[[int], Launch] | None = None,
        faketime: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.history_dir = Path(history_dir)
        self.control_dir = Path(control_dir)
        self.log_dir = Path(log_dir)
        self.placement = placement
        self.faketime = faketime
        self.env = dict(os.environ if env is None else env)
        for folder in (self.history_dir, self.control_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)

    def host_of(self, slot: int) -> str:
        return LOCAL_HOST

    def _control(self, name: str) -> Path:
        return self.control_dir / f"{name}.point"

    def start(self, start: WorkerStart) -> LocalWorker:
        control = self._control(start.name)
        control.write_text("none\n")
        config = replace(
            start.config,
            journal=os.fspath(self.journal_path(start.name)),
            control=os.fspath(control),
        )
        env = dict(self.env)
        if start.skew is not None:
            if self.faketime is None:
                raise ValueError("skewed slots need the libfaketime library (faketime=...)")
            env.update(skew_env(start.skew, self.faketime))
            config = replace(config, time_base=time_base())
        prefix: tuple[str, ...] = ()
        if self.placement is not None:
            launch = self.placement(start.slot)
            prefix = launch.prefix
            config = replace(config, spec=replace(config.spec, dsn=launch.dsn))
        process = ManagedProcess(
            [*prefix, sys.executable, "-m", "rdq_compliance.chaos.worker_main", config.to_json()],
            log_path=self.log_dir / f"{start.name}.log",
            env=env,
            stop_signal=signal.SIGTERM,
            grace=ORPHAN_GRACE,
        )
        process.start()
        return LocalWorker(process)

    def arm(self, name: str, point: str) -> None:
        control = self._control(name)
        tmp = control.with_suffix(".tmp")
        tmp.write_text(point + "\n")
        os.replace(tmp, control)

    def journal_path(self, name: str) -> Path:
        return self.history_dir / f"{name}.jsonl"

    def clocks(self) -> list[ClockOffset]:
        return []

    def lost_hosts(self) -> list[str]:
        return []

    def collect(self) -> None:
        return None

    def leftovers(self) -> list[str]:
        return []

    def close(self) -> None:
        return None

    def partitioner(
        self, server: Server, backend: str, slots: int, *, loss_percent: int
    ) -> tuple[WorkerNetwork | None, str]:
        """A network namespace per slot (:func:`worker_network`); the slots' workers
        start in theirs from now on."""
        network, why = worker_network(server, slots, backend, loss_percent=loss_percent)
        if network is not None:
            self.placement = network.launch
        return network, why

    def place_skews(self, skews: Sequence[Skew], library: Path) -> list[tuple[Skew, str | None]]:
        """Each skew is its slot's; skewed workers run under ``library``."""
        self.faketime = library
        return [(skew, None) for skew in skews]

    def notes(self) -> list[str]:
        return []

    def hosts(self) -> list[dict[str, object]]:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
