"""The worker fleet: N real worker processes that die with the harness.

Each worker (:mod:`rdq_compliance.chaos.worker_main`) is launched through
:class:`rdq_compliance.provision.process.ManagedProcess`, i.e. by a small watchdog process
that holds a pipe whose only writer is the harness. **Workers die with the harness:** when the
harness process dies — SIGKILL included — the kernel closes the pipe, the watchdog reads
end of file and SIGKILLs its worker (a SIGSTOPped worker too: SIGKILL needs no SIGCONT),
then exits. The worker in turn sets ``PR_SET_PDEATHSIG`` so that the death of its
watchdog kills it. Every worker runs in a session of its own, so a terminal's Ctrl-C
reaches the harness only, which stops the fleet in order.

The fleet has fixed *slots* (0..N-1). A killed worker is replaced at once by a fresh
process with a new name (``w8``, ``w9``, ...) in the same slot, so the fleet size stays
constant and every process has its own journal ``<history>/<name>.jsonl``.

**Skewed slots.** A slot given a :class:`~rdq_compliance.chaos.libfaketime.Skew`
runs every worker it ever holds under libfaketime with that skew (see
:mod:`rdq_compliance.chaos.libfaketime`): a respawned worker keeps its slot's
clock. ``on_skew`` hears of each such worker (name, skew) just before it starts, so the
harness journals the skew before the worker's first event.

**Where the workers run** is a :class:`~rdq_compliance.chaos.launcher.Launcher`'s
business: every operation that touches a process (start, signal, arm the control point,
release) goes through it. By default a
:class:`~rdq_compliance.chaos.launcher.LocalLauncher` starts them on this machine; its
*placement* (set when a partition campaign's network is built) gives each slot a command
prefix (e.g. ``ip netns exec <namespace>``, which execs, so the pid stays the worker's)
and the DSN the worker connects to (e.g. a relay inside that namespace) — see
:mod:`rdq_compliance.chaos.faults.worker_network`. An
:class:`~rdq_compliance.chaos.ssh_launcher.SshLauncher` starts them on other hosts.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rdq_compliance.chaos.launcher import (
    ORPHAN_GRACE,
    Launcher,
    LocalLauncher,
    WorkerHandle,
    WorkerStart,
)
from rdq_compliance.chaos.libfaketime import Skew
from rdq_compliance.chaos.worker_main import WorkerConfig

__all__ = ["ORPHAN_GRACE", "Exit", "Fleet", "WorkerProc"]


@dataclass(eq=False)
class WorkerProc:
    """One worker process in a slot."""

    name: str
    slot: int
    handle: WorkerHandle
    host: str
    started: float = field(default_factory=time.monotonic)
    paused: bool = False
    armed: str | None = None
    armed_at: float = 0.0
    expected_exit: bool = False
    skew: Skew | None = None

    @property
    def pid(self) -> int:
        return self.handle.pid

    @property
    def running(self) -> bool:
        return self.handle.running

    def log_tail(self, lines: int = 30) -> str:
        return self.handle.log_tail(lines)


@dataclass(frozen=True)
class Exit:
    """A worker that ended without the fleet killing it (a self-kill, or a crash)."""

    worker: WorkerProc
    returncode: int | None
    armed: str | None


class Fleet:
    """Start, kill, pause, resume and replace worker processes; stop them all.

    ``launcher`` starts them (by default a :class:`LocalLauncher` writing to
    ``history_dir``, ``control_dir`` and ``log_dir``); ``skews`` are the skewed slots'
    clocks, ``on_skew`` hears of each worker started under one."""

    def __init__(
        self,
        template: WorkerConfig,
        size: int,
        *,
        history_dir: Path,
        control_dir: Path,
        log_dir: Path,
        on_spawn: Callable[[WorkerProc], None] | None = None,
        skews: Mapping[int, Skew] | None = None,
        on_skew: Callable[[str, Skew], None] | None = None,
        launcher: Launcher | None = None,
    ) -> None:
        self.template = template
        self.size = size
        self.history_dir = Path(history_dir)
        self.on_spawn = on_spawn
        self.skews: dict[int, Skew] = dict(skews or {})
        if launcher is None:
            launcher = LocalLauncher(
                history_dir=history_dir, control_dir=control_dir, log_dir=log_dir
            )
        self.launcher: Launcher = launcher
        self.on_skew = on_skew
        self.slots: list[WorkerProc | None] = [None] * size
        self.retired: list[WorkerProc] = []
        self._next = 0
        self._lock = threading.RLock()
        self.history_dir.mkdir(parents=True, exist_ok=True)

    def journal_path(self, worker: WorkerProc | str) -> Path:
        """Where ``worker``'s journal is readable on this machine (the nemesis tails it)."""
        return self.launcher.journal_path(worker if isinstance(worker, str) else worker.name)

    # ---- starting -----------------------------------------------------------------------

    def start(self) -> None:
        for slot in range(self.size):
            self.spawn(slot)

    def spawn(self, slot: int) -> WorkerProc:
        """Start a fresh worker process (new name) in ``slot``."""
        with self._lock:
            name = f"w{self._next}"
            self._next += 1
        config = replace(
            self.template,
            proc=name,
            seed=(self.template.seed * 1_000_003 + self._next) % 2**63,
        )
        skew = self.skews.get(slot)
        if skew is not None and self.on_skew is not None:
            self.on_skew(name, skew)
        handle = self.launcher.start(WorkerStart(name, slot, config, skew))
        proc = WorkerProc(name, slot, handle, self.launcher.host_of(slot), skew=skew)
        with self._lock:
            self.slots[slot] = proc
        if self.on_spawn is not None:
            self.on_spawn(proc)
        return proc

    # ---- looking --------------------------------------------------------------------------

    def workers(self) -> list[WorkerProc]:
        with self._lock:
            return [w for w in self.slots if w is not None]

    def in_slot(self, slot: int) -> WorkerProc | None:
        with self._lock:
            return self.slots[slot]

    def pids(self) -> list[int]:
        """Every live process of the fleet: workers and their watchdogs."""
        out: list[int] = []
        for w in self.workers() + self.retired:
            out.extend(w.handle.local_pids())
        return sorted(set(out))

    def exited(self) -> list[Exit]:
        """Workers that ended by themselves since the last call (to be replaced)."""
        out = []
        for w in self.workers():
            if not w.running and not w.expected_exit:
                w.expected_exit = True
                out.append(Exit(w, w.handle.returncode, w.armed))
        return out

    def lost_hosts(self) -> list[str]:
        """Hosts the launcher lost since the last call (their workers are gone)."""
        return self.launcher.lost_hosts()

    # ---- faults ---------------------------------------------------------------------------

    def arm(self, worker: WorkerProc, point: str) -> None:
        """Ask ``worker`` to SIGKILL itself at the next ``point`` (``"none"`` disarms)."""
        self.launcher.arm(worker.name, point)
        worker.armed = None if point == "none" else point
        worker.armed_at = time.monotonic()

    def kill(self, worker: WorkerProc) -> None:
        """SIGKILL ``worker`` now (paused or not) and release its watchdog."""
        worker.expected_exit = True
        worker.handle.signal(signal.SIGKILL)
        self.retire(worker)

    def retire(self, worker: WorkerProc) -> None:
        """Release a dead worker's watchdog (kills whatever is left of it)."""
        worker.handle.release()
        with self._lock:
            if self.slots[worker.slot] is worker:
                self.slots[worker.slot] = None
            self.retired.append(worker)

    def replace(self, worker: WorkerProc) -> WorkerProc:
        """Retire ``worker`` (dead) and start a fresh process in its slot."""
        self.retire(worker)
        return self.spawn(worker.slot)

    def pause(self, worker: WorkerProc) -> None:
        worker.paused = True
        worker.handle.signal(signal.SIGSTOP)

    def resume(self, worker: WorkerProc) -> None:
        worker.handle.signal(signal.SIGCONT)
        worker.paused = False

    # ---- stopping ---------------------------------------------------------------------------

    def stop(self, grace: float = 5.0) -> None:
        """SIGCONT the paused, SIGTERM all (they finish what they hold), SIGKILL after
        ``grace`` seconds; release every watchdog. Idempotent."""
        workers = self.workers()
        for w in workers:
            w.expected_exit = True
            if w.paused:
                self.resume(w)
            if w.running:
                w.handle.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for w in workers:
            w.handle.wait(max(0.0, deadline - time.monotonic()))
        for w in workers:
            self.retire(w)
        for w in self.retired:
            w.handle.release()
        self.launcher.collect()
