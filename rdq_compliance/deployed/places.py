"""Where a deployed campaign's workers run, and what can be done to them there.

The fleet (:mod:`rdq_compliance.deployed.fleet`) supervises named workers; a
:class:`Places` starts each incarnation of one from the system's launch and hands back a
:class:`WorkerTree`, the handle the fleet and the nemesis act through (kill or freeze the
whole tree, list it, kill one of its processes, stop it). Two implementations:

- :class:`~rdq_compliance.deployed.local_places.LocalPlaces`: process trees on this
  machine, each behind the kit's watchdog; a worker is partitioned from the server in a
  network namespace of its own, and its clock skewed by libfaketime;
- :class:`~rdq_compliance.deployed.remote_places.RemotePlaces`: process trees on the
  hosts of an SSH fleet, each behind the kit's watchdog on its host; a partition cuts a
  whole host from the server and a clock skew is a whole host's.

:class:`Reach` says, before the plan is drawn, which host each worker runs on and which
worker faults these places cannot do (and why), so the plan lists them as not run.

A clock skew is a jump ahead: the skewed workers' time of day moves ``offset`` seconds
ahead at once and stays there until the workers are stopped (:meth:`Places.unskew`,
after the drain). A clock set back would read some moments twice, and a journal time
read then could not be taken back to true time; a jump ahead reads no moment twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rdq_compliance.deployed.system import WorkerLaunch

__all__ = ["LOCAL_UNCERTAINTY", "WORKER_FAULTS", "LaunchFor", "Places", "Reach", "WorkerTree"]

#: The clock uncertainty of a campaign on one host (seconds): the harness and every worker
#: read the same kernel clock, so two times are ordered but for the harness's own lag
#: between reading the clock and a signal taking effect, bounded here.
LOCAL_UNCERTAINTY = 0.05

#: The faults a :class:`Places` does beyond signals (the plan's kinds).
WORKER_FAULTS = ("partition", "clock-skew")

#: The system's launch of one worker incarnation, given the probe's path *on the host the
#: worker runs on* and the DSN it reaches the server with there (``None``: the one the
#: system was bound with).
LaunchFor = Callable[[str, str | None], WorkerLaunch]


@dataclass(frozen=True)
class Reach:
    """What a campaign's places can do beyond signals: the host of each worker (a
    partition or a clock skew there hits every worker of the host; none given: each
    worker is its own), and the worker faults (:data:`WORKER_FAULTS`) they cannot do,
    with why."""

    hosts: Mapping[str, str] = field(default_factory=dict)
    cannot: Mapping[str, str] = field(default_factory=dict)

    def host(self, worker: str) -> str:
        return self.hosts.get(worker, worker)

    def together(self, worker: str) -> tuple[str, ...]:
        """The workers on ``worker``'s host (itself among them), sorted."""
        host = self.host(worker)
        return tuple(sorted({w for w, h in self.hosts.items() if h == host} | {worker}))


class WorkerTree(Protocol):
    """One started incarnation of a worker: its process tree, wherever it runs."""

    @property
    def pid(self) -> int:
        """The leader's pid on its host (the process started)."""
        ...

    @property
    def running(self) -> bool:
        """Whether the leader still runs."""
        ...

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the leader's exit; its status (negative: a signal), ``None`` on timeout."""
        ...

    def pids(self) -> list[int]:
        """Every live process of the tree (on its host)."""
        ...

    def under(self) -> list[int]:
        """The leader's live descendants, sorted."""
        ...

    def kill(self) -> list[int]:
        """SIGKILL every process of the tree; returns once they are gone, with their pids."""
        ...

    def pause(self) -> list[int]:
        """SIGSTOP every process of the tree; the pids stopped (``[]``: none live)."""
        ...

    def resume(self) -> list[int]:
        """SIGCONT every process of the tree; the pids continued."""
        ...

    def kill_one(self, pid: int) -> bool:
        """SIGKILL process ``pid`` of the tree; returns once it is gone. ``False``: it was
        no live process of the tree."""
        ...

    def stop(self, grace: float | None = None) -> None:
        """The stop signal to the leader, SIGKILL to what is left after ``grace``, and
        release the watchdog (idempotent)."""
        ...


class Places(Protocol):
    """Where a campaign's workers run (see the module's docstring)."""

    def reach(self) -> Reach: ...

    def start(self, worker: str, incarnation: int, launch_for: LaunchFor) -> WorkerTree:
        """Start incarnation ``incarnation`` of ``worker``; its probe journal is readable
        here as ``probe/<worker>.<incarnation>.jsonl`` of the campaign's folder (at once,
        or once :meth:`collect` ran)."""
        ...

    def log_path(self, worker: str) -> Path:
        """Where ``worker``'s output is readable here (at once, or after :meth:`collect`)."""
        ...

    def log_tail(self, worker: str, lines: int = 20) -> str: ...

    def prepare_skews(self, workers: Sequence[str]) -> None:
        """Run ``workers`` (and, on a fleet, every worker of their hosts) under a clock
        that :meth:`skew` can move, from their first start on (call before any start)."""
        ...

    def partition(self, worker: str) -> tuple[str, ...]:
        """Cut ``worker`` (on a fleet: its whole host) off the server, both ways; the
        workers cut."""
        ...

    def heal(self, worker: str) -> None:
        """Undo :meth:`partition` of ``worker``."""
        ...

    def skew(self, worker: str, offset: float) -> tuple[str, ...]:
        """Move ``worker``'s clock (on a fleet: its host's) ``offset`` seconds ahead at
        once; the workers skewed."""
        ...

    def unskew(self) -> None:
        """Set every skewed clock right (once the workers are stopped)."""
        ...

    def collect(self) -> None:
        """Bring every journal and log here (after the workers stopped)."""
        ...

    def uncertainty(self) -> tuple[float, str]:
        """The campaign's clock uncertainty in seconds, and why (after :meth:`collect`)."""
        ...

    def hosts(self) -> list[dict[str, object]]:
        """Per host other than this machine: name, address, measured clock, workers."""
        ...

    def notes(self) -> list[str]:
        """What the report says of where the workers ran."""
        ...

    def close(self) -> None:
        """Heal what is cut, take down what was built, close the connections."""
        ...
