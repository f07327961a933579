"""A deployed campaign's workers: each one a real process tree, supervised.

Each worker is started from ``system.worker(name, profile, probe_path, dsn)`` by the
campaign's :class:`~rdq_compliance.deployed.places.Places`: on this machine
(:class:`~rdq_compliance.deployed.local_places.LocalPlaces`, the default) or on a host of
an SSH fleet (:class:`~rdq_compliance.deployed.remote_places.RemotePlaces`), each behind
the kit's watchdog (it dies with the harness), its output in ``logs/<name>.log``. Its
probe journals to ``probe/<name>.<n>.jsonl``, one file per incarnation ``n`` (a line torn
by a kill never runs into the next incarnation's first).

The fleet supervises them as systemd's ``Restart=always`` does: a worker whose leader
exits, on its own or killed, is started again ``restart_after`` seconds later under the
same name; what is left of its process tree is stopped first (``KillMode=control-group``).
Every exit is recorded (:class:`Exit`: code, time, what caused it, when it was started
again).

The nemesis acts through :meth:`Fleet.kill` and :meth:`Fleet.pause` (every process of the
tree), :meth:`Fleet.part_pids` (the processes of one part, by role: ``leader`` is the pid
started, ``descendants`` every process under it) and :meth:`Fleet.kill_pid`, and through
the places for what needs more than a signal (:attr:`Fleet.places`: a partition, a clock
skew).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from rdq_compliance.deployed.local_places import LocalPlaces
from rdq_compliance.deployed.places import Places, WorkerTree
from rdq_compliance.deployed.system import DeployedSystem, Part, WorkerLaunch, takes_dsn
from rdq_compliance.provision.process import ProcessFailed

__all__ = ["Exit", "Fleet", "WorkerFailed"]


class WorkerFailed(ProcessFailed):
    """A worker could not be started, or exited on its own as soon as it was."""


@dataclass(frozen=True)
class Exit:
    """A worker's leader exited: ``code`` (negative: the signal), ``at`` (harness clock),
    ``cause`` (``killed by the nemesis``, ``on its own``, ``stopped by the harness``, on a
    fleet ``its host <name> was lost``), the pids of its tree stopped after it, and when
    it was started again (``None``: never)."""

    worker: str
    incarnation: int
    code: int | None
    at: float
    cause: str
    remnants: tuple[int, ...] = ()
    restarted: float | None = None


@dataclass(eq=False)
class _Slot:
    name: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    process: WorkerTree | None = None
    incarnation: int = 0
    starts: list[float] = field(default_factory=list)
    cause: str | None = None  # why the next exit happens, when the harness causes it
    paused: bool = False
    thread: threading.Thread | None = None


class Fleet:
    """The named workers of one campaign, started, supervised and stopped."""

    def __init__(
        self,
        system: DeployedSystem,
        profile: str,
        names: tuple[str, ...],
        folder: Path,
        *,
        restart_after: float = 1.0,
        grace: float = 5.0,
        clock: Callable[[], float] = time.time,
        places: Places | None = None,
    ) -> None:
        self.system = system
        self.profile = profile
        self.folder = Path(folder)
        self.places: Places = places or LocalPlaces(
            self.folder, names, takes_dsn=takes_dsn(system), grace=grace
        )
        self._takes_dsn = takes_dsn(system)
        self.restart_after = restart_after
        self.grace = grace
        self.clock = clock
        self.slots = {n: _Slot(n) for n in names}
        self.exits: list[Exit] = []
        self.launches: dict[str, list[str]] = {}
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    # ---- files ---------------------------------------------------------------------

    def log_path(self, name: str) -> Path:
        return self.places.log_path(name)

    def probe_paths(self) -> list[Path]:
        """Every probe journal the workers' incarnations were given (those that exist)."""
        return sorted(p for p in (self.folder / "probe").glob("*.jsonl") if p.is_file())

    # ---- starting and supervising --------------------------------------------------

    def start(self) -> None:
        """Start every worker and its supervisor thread."""
        (self.folder / "probe").mkdir(parents=True, exist_ok=True)
        for slot in self.slots.values():
            with slot.lock:
                self._launch(slot)
        for slot in self.slots.values():
            slot.thread = threading.Thread(
                target=self._supervise, args=(slot,), name=f"supervise-{slot.name}", daemon=True
            )
            slot.thread.start()

    def _launch_for(self, name: str) -> Callable[[str, str | None], WorkerLaunch]:
        def launch(probe_path: str, dsn: str | None) -> WorkerLaunch:
            if dsn is not None and self._takes_dsn:
                made = self.system.worker(name, self.profile, probe_path, dsn=dsn)
            else:
                made = self.system.worker(name, self.profile, probe_path)
            self.launches.setdefault(name, list(made.argv))
            return made

        return launch

    def _launch(self, slot: _Slot) -> None:
        """Start the next incarnation of ``slot`` (its lock held)."""
        slot.incarnation += 1
        try:
            process = self.places.start(slot.name, slot.incarnation, self._launch_for(slot.name))
        except (ProcessFailed, OSError, RuntimeError) as exc:
            raise WorkerFailed(f"worker {slot.name} could not be started: {exc}") from None
        slot.process = process
        slot.paused = False
        slot.cause = None
        with self._changed:
            slot.starts.append(self.clock())
            self._changed.notify_all()

    def _supervise(self, slot: _Slot) -> None:
        while True:
            process = slot.process
            if process is None:
                return
            code = process.wait()
            at = self.clock()
            with slot.lock:
                remnants = tuple(process.pids())
                process.stop(grace=0.0)  # what is left of the tree; releases the watchdog
                stopping = self._stopping.is_set()
                lost = getattr(process, "lost", None)  # a fleet's host that dropped
                cause = (
                    slot.cause or lost or ("stopped by the harness" if stopping else "on its own")
                )
                exit_ = Exit(slot.name, slot.incarnation, code, at, cause, remnants)
                slot.process = None
            with self._changed:
                self.exits.append(exit_)
                self._changed.notify_all()
            if stopping or self._stopping.wait(self.restart_after):
                return
            with slot.lock:
                if self._stopping.is_set():
                    return
                try:
                    self._launch(slot)
                except WorkerFailed:
                    return  # the exit stays recorded with no restart
            with self._changed:
                i = self.exits.index(exit_)
                self.exits[i] = replace(exit_, restarted=slot.starts[-1])
                self._changed.notify_all()

    def check_started(self, settle: float) -> None:
        """Wait ``settle`` seconds; a worker that exited on its own meanwhile is
        :class:`WorkerFailed` (with its log's last lines)."""
        self._stopping.wait(settle)
        with self._lock:
            early = [e for e in self.exits if e.cause == "on its own"]
        if early:
            e = early[0]
            raise WorkerFailed(
                f"worker {e.worker} exited with status {e.code} within {settle:g} s of its "
                f"start (its log: {self.log_path(e.worker)})",
                self.places.log_tail(e.worker),
            )

    # ---- what the nemesis does -----------------------------------------------------

    def live(self, *, paused: bool = False) -> frozenset[str]:
        """The workers running now (leader alive, not paused; paused ones too when
        ``paused``: their processes and connections exist, stopped)."""
        return frozenset(
            s.name
            for s in self.slots.values()
            if s.process is not None and s.process.running and (paused or not s.paused)
        )

    def kill(self, name: str) -> tuple[float, list[int]] | None:
        """SIGKILL every process of worker ``name``; ``(when they were all gone, their
        pids)``, or ``None`` when it has no live process."""
        slot = self.slots[name]
        with slot.lock:
            process = slot.process
            if process is None or not process.running:
                return None
            slot.cause = "killed by the nemesis"
            pids = process.kill()
            return self.clock(), pids

    def pause(self, name: str) -> list[int]:
        """SIGSTOP every process of worker ``name``; the pids stopped (``[]``: none live)."""
        slot = self.slots[name]
        with slot.lock:
            if slot.process is None or not slot.process.running:
                return []
            slot.paused = True
            return slot.process.pause()

    def resume(self, name: str) -> list[int]:
        """SIGCONT every process of worker ``name``; the pids continued."""
        slot = self.slots[name]
        with slot.lock:
            slot.paused = False
            return slot.process.resume() if slot.process is not None else []

    def heal(self) -> list[str]:
        """Continue every paused worker; their names."""
        paused = [s.name for s in self.slots.values() if s.paused]
        for name in paused:
            self.resume(name)
        return paused

    def part_pids(self, name: str, part: Part) -> list[int]:
        """The live processes of ``part`` of worker ``name``: the leader (the pid started)
        or its descendants (recursive), sorted."""
        slot = self.slots[name]
        process = slot.process
        if process is None or not process.running:
            return []
        if part.role == "leader":
            return [process.pid]
        return process.under()

    def kill_pid(self, name: str, pid: int) -> float | None:
        """SIGKILL process ``pid`` of worker ``name``; when it was gone (``None``: it was
        gone already). Killing the leader ends the worker (the supervisor restarts it)."""
        slot = self.slots[name]
        with slot.lock:
            process = slot.process
            if process is None:
                return None
            leader = process.running and pid == process.pid
            if leader:
                slot.cause = "killed by the nemesis (its leader part)"
        if not process.kill_one(pid):
            if leader:
                slot.cause = None
            return None
        return self.clock()

    # ---- what needs more than a signal (the places) --------------------------------

    def partition(self, name: str) -> tuple[str, ...]:
        """Cut worker ``name`` (on a fleet, its host) off the server; the workers cut."""
        return self.places.partition(name)

    def heal_partition(self, name: str) -> None:
        self.places.heal(name)

    def skew(self, name: str, offset: float) -> tuple[str, ...]:
        """Move worker ``name``'s clock (on a fleet, its host's) ``offset`` s ahead; the
        workers skewed."""
        return self.places.skew(name, offset)

    def started_after(self, name: str, t: float, timeout: float) -> float | None:
        """When worker ``name`` was next started after ``t`` (waits up to ``timeout``
        seconds for it); ``None`` if it was not."""
        slot = self.slots[name]
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                later = [s for s in slot.starts if s > t]
                if later:
                    return later[0]
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping.is_set():
                    return None
                self._changed.wait(left)

    # ---- stopping ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every worker: SIGTERM to its leader, SIGKILL to its tree after the grace
        (the workers in parallel); idempotent."""
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()

        def stop_one(slot: _Slot) -> None:
            with slot.lock:
                if slot.process is not None:
                    slot.cause = slot.cause or "stopped by the harness"
                    slot.process.stop()

        threads = [threading.Thread(target=stop_one, args=(s,)) for s in self.slots.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for slot in self.slots.values():
            if slot.thread is not None:
                slot.thread.join(self.grace + 30.0)

    def incarnations(self) -> dict[str, list[float]]:
        """Each worker's start times."""
        return {s.name: list(s.starts) for s in self.slots.values()}
