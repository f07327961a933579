"""A deployed campaign's workers on this machine: :class:`LocalPlaces`.

Each incarnation is a :class:`~rdq_compliance.provision.process.ManagedProcess` (its own
session, behind the kit's watchdog: it dies with the harness), started from the system's
launch with the harness's environment, its output appended to ``logs/<worker>.log``, its
probe journaling to ``probe/<worker>.<incarnation>.jsonl``.

Two faults need more than signals, and are built only when the plan asks for them:

- **partition**: every worker runs in a network namespace of its own, reaching the server
  through a relay (:func:`~rdq_compliance.chaos.faults.worker_network.worker_network`, the
  chaos campaigns' network: root, ``ip``, ``nft``, a server at one TCP address), started
  with the DSN of its relay (the system's ``worker`` must take a ``dsn``); a partition
  drops every packet between the worker's namespace and the server, both ways;
- **clock skew**: a skewed worker runs under libfaketime with its clock read from
  ``clock/<worker>.faketime`` (:func:`~rdq_compliance.chaos.libfaketime.follow_env`),
  which the skew rewrites: its time of day jumps ahead at once, its monotonic clock
  stays true.

Without them the campaign says why (:meth:`LocalPlaces.reach`) and the plan lists the
faults as not run.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from rdq_compliance.chaos.faults.worker_network import WorkerNetwork, worker_network
from rdq_compliance.chaos.libfaketime import (
    INSTALL_HINT,
    SITE,
    find_libfaketime,
    follow_env,
    offset_spec,
)
from rdq_compliance.deployed.places import LOCAL_UNCERTAINTY, LaunchFor, Reach
from rdq_compliance.provision.backend import Server
from rdq_compliance.provision.process import ManagedProcess, descendants

__all__ = ["LocalPlaces", "LocalTree"]

#: Seconds :meth:`LocalTree.kill_one` waits for the process to be gone.
_GONE_TIMEOUT = 10.0


class LocalTree:
    """A worker incarnation on this machine: a :class:`ManagedProcess` (a
    :class:`~rdq_compliance.deployed.places.WorkerTree`)."""

    def __init__(self, process: ManagedProcess) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running

    def wait(self, timeout: float | None = None) -> int | None:
        return self.process.wait(timeout)

    def pids(self) -> list[int]:
        return self.process.pids()

    def under(self) -> list[int]:
        return descendants(self.process.pid) if self.process.running else []

    def kill(self) -> list[int]:
        pids = self.process.pids()
        self.process.kill()
        return pids

    def pause(self) -> list[int]:
        return self.process.pause()

    def resume(self) -> list[int]:
        return self.process.resume()

    def kill_one(self, pid: int) -> bool:
        if pid not in self.process.pids():
            return False
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            return False
        deadline = time.monotonic() + _GONE_TIMEOUT
        while time.monotonic() < deadline and _alive(proc):
            time.sleep(0.005)
        return True

    def stop(self, grace: float | None = None) -> None:
        self.process.stop(grace)


def _alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (a zombie, dead but not reaped by its parent, does not)."""
    try:
        return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


class LocalPlaces:
    """The ``workers`` of a campaign writing to ``folder``, on this machine (see the
    module's docstring). :meth:`open_partitions` and :meth:`open_skews` build what those
    faults need; without them, :meth:`reach` says why they cannot run."""

    def __init__(
        self,
        folder: Path,
        workers: Sequence[str],
        *,
        takes_dsn: bool = True,
        grace: float = 5.0,
    ) -> None:
        self.folder = Path(folder)
        self.workers = tuple(workers)
        self.takes_dsn = takes_dsn
        self.grace = grace
        self.network: WorkerNetwork | None = None
        self.library: Path | None = None
        self._cannot: dict[str, str] = {
            "partition": "the campaign built no network namespaces for its workers",
            "clock-skew": "the campaign did not look for libfaketime",
        }
        self._skewed: set[str] = set()

    # ---- what the plan may ask -----------------------------------------------------

    def open_partitions(self, server: Server, backend: str) -> None:
        """Build a network namespace per worker (or say why not, :meth:`reach`)."""
        if not self.takes_dsn:
            self._cannot["partition"] = (
                "the system's worker() takes no dsn, so its workers cannot be pointed at "
                "the server through the relay of a network namespace"
            )
            return
        network, why = worker_network(server, len(self.workers), backend)
        if network is None:
            self._cannot["partition"] = why
            return
        self.network = network
        self._cannot.pop("partition", None)

    def open_skews(self) -> None:
        """Find libfaketime (or say why a clock cannot be skewed, :meth:`reach`)."""
        self.library = find_libfaketime()
        if self.library is None:
            self._cannot["clock-skew"] = f"libfaketime is not installed ({INSTALL_HINT})"
        else:
            self._cannot.pop("clock-skew", None)

    def reach(self) -> Reach:
        return Reach({}, dict(self._cannot))

    # ---- starting --------------------------------------------------------------------

    def _clock_file(self, worker: str) -> Path:
        return self.folder / "clock" / f"{worker}.faketime"

    def prepare_skews(self, workers: Sequence[str]) -> None:
        if not workers:
            return
        if self.library is None:
            raise RuntimeError(f"no libfaketime to skew {', '.join(workers)} with")
        for worker in workers:
            self._write_clock(worker, 0.0)
            self._skewed.add(worker)

    def _write_clock(self, worker: str, offset: float) -> None:
        path = self._clock_file(worker)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(offset_spec(offset))
        os.replace(tmp, path)

    def log_path(self, worker: str) -> Path:
        return self.folder / "logs" / f"{worker}.log"

    def log_tail(self, worker: str, lines: int = 20) -> str:
        try:
            text = self.log_path(worker).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self, worker: str, incarnation: int, launch_for: LaunchFor) -> LocalTree:
        probe = self.folder / "probe" / f"{worker}.{incarnation}.jsonl"
        probe.parent.mkdir(parents=True, exist_ok=True)
        prefix: tuple[str, ...] = ()
        dsn = None
        if self.network is not None:
            place = self.network.launch(self.workers.index(worker))
            prefix, dsn = place.prefix, place.dsn
        launch = launch_for(str(probe), dsn)
        env = {**os.environ, **launch.env}
        if worker in self._skewed:
            assert self.library is not None
            env.update(
                follow_env(
                    str(self._clock_file(worker)), str(self.library), str(SITE),
                    env.get("PYTHONPATH"),
                )
            )  # fmt: skip
        process = ManagedProcess(
            [*prefix, *launch.argv],
            log_path=self.log_path(worker),
            cwd=Path(launch.cwd) if launch.cwd else None,
            env=env,
            grace=self.grace,
        )
        process.start()
        return LocalTree(process)

    # ---- the faults ------------------------------------------------------------------

    def partition(self, worker: str) -> tuple[str, ...]:
        if self.network is None:
            raise RuntimeError(self._cannot["partition"])
        self.network.partition([self.workers.index(worker)])
        return (worker,)

    def heal(self, worker: str) -> None:
        if self.network is not None:
            self.network.heal([self.workers.index(worker)])

    def skew(self, worker: str, offset: float) -> tuple[str, ...]:
        if worker not in self._skewed:
            raise RuntimeError(f"worker {worker} was not started under a clock that can move")
        self._write_clock(worker, offset)
        return (worker,)

    def unskew(self) -> None:
        for worker in sorted(self._skewed):
            self._write_clock(worker, 0.0)

    # ---- after the workers stopped ---------------------------------------------------

    def collect(self) -> None:
        return None

    def uncertainty(self) -> tuple[float, str]:
        return LOCAL_UNCERTAINTY, (
            f"{LOCAL_UNCERTAINTY:g} s: one host, one clock (the harness and every worker read "
            "the same kernel clock); the bound covers the harness's lag between reading it "
            "and a signal taking effect"
        )

    def hosts(self) -> list[dict[str, object]]:
        return []

    def notes(self) -> list[str]:
        out = []
        if self.network is not None:
            out.append(
                "each worker ran in a network namespace of its own, reaching the server "
                "through a relay (what a partition cuts)"
            )
        if self._skewed:
            out.append(
                f"{', '.join(sorted(self._skewed))} ran under libfaketime ({self.library}), "
                "their clocks read from a file the skew rewrote"
            )
        return out

    def close(self) -> None:
        if self.network is not None:
            self.network.close()
            self.network = None
