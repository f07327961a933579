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

**Skewed slots.** A slot given a :class:`~rdq_compliance.chaos.faults.libfaketime.Skew`
runs every worker it ever holds under libfaketime with that skew (see
:mod:`rdq_compliance.chaos.faults.libfaketime`): a respawned worker keeps its slot's
clock. ``on_skew`` hears of each such worker (name, skew) just before it starts, so the
harness journals the skew before the worker's first event.

A *launcher* (optional) places each slot's workers: for a slot it gives a command prefix
(e.g. ``ip netns exec <namespace>``, which execs, so the pid stays the worker's) and the
DSN the worker connects to (e.g. a relay inside that namespace) — see
:mod:`rdq_compliance.chaos.faults.worker_network`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rdq_compliance.chaos.faults.libfaketime import Skew, skew_env, time_base
from rdq_compliance.chaos.worker_main import WorkerConfig
from rdq_compliance.provision.process import ManagedProcess

#: Grace the watchdog gives a worker after SIGTERM when the harness is gone.
ORPHAN_GRACE = 0.2


@dataclass(eq=False)
class WorkerProc:
    """One worker process in a slot."""

    name: str
    slot: int
    process: ManagedProcess
    started: float = field(default_factory=time.monotonic)
    paused: bool = False
    armed: str | None = None
    armed_at: float = 0.0
    expected_exit: bool = False
    skew: Skew | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running


@dataclass(frozen=True)
class Launch:
    """Where a slot's workers run: a command prefix, and the DSN they connect to."""

    prefix: tuple[str, ...]
    dsn: str


@dataclass(frozen=True)
class Exit:
    """A worker that ended without the fleet killing it (a self-kill, or a crash)."""

    worker: WorkerProc
    returncode: int | None
    armed: str | None


class Fleet:
    """Start, kill, pause, resume and replace worker processes; stop them all."""

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
        faketime: Path | None = None,
        on_skew: Callable[[str, Skew], None] | None = None,
        launcher: Callable[[int], Launch] | None = None,
    ) -> None:
        self.template = template
        self.size = size
        self.history_dir = Path(history_dir)
        self.control_dir = Path(control_dir)
        self.log_dir = Path(log_dir)
        self.on_spawn = on_spawn
        self.skews: dict[int, Skew] = dict(skews or {})
        if self.skews and faketime is None:
            raise ValueError("skewed slots need the libfaketime library (faketime=...)")
        self.faketime = faketime
        self.on_skew = on_skew
        self.launcher = launcher
        self.slots: list[WorkerProc | None] = [None] * size
        self.retired: list[WorkerProc] = []
        self._next = 0
        self._lock = threading.RLock()
        for folder in (self.history_dir, self.control_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)

    # ---- starting -----------------------------------------------------------------------

    def start(self) -> None:
        for slot in range(self.size):
            self.spawn(slot)

    def spawn(self, slot: int) -> WorkerProc:
        """Start a fresh worker process (new name) in ``slot``."""
        with self._lock:
            name = f"w{self._next}"
            self._next += 1
        control = self.control_dir / f"{name}.point"
        control.write_text("none\n")
        config = replace(
            self.template,
            proc=name,
            journal=os.fspath(self.history_dir / f"{name}.jsonl"),
            control=os.fspath(control),
            seed=(self.template.seed * 1_000_003 + self._next) % 2**63,
        )
        env = dict(os.environ)
        skew = self.skews.get(slot)
        if skew is not None:
            assert self.faketime is not None
            env.update(skew_env(skew, self.faketime))
            config = replace(config, time_base=time_base())
            if self.on_skew is not None:
                self.on_skew(name, skew)
        prefix: tuple[str, ...] = ()
        if self.launcher is not None:
            launch = self.launcher(slot)
            prefix = launch.prefix
            config = replace(config, spec=replace(config.spec, dsn=launch.dsn))
        process = ManagedProcess(
            [*prefix, sys.executable, "-m", "rdq_compliance.chaos.worker_main", config.to_json()],
            log_path=self.log_dir / f"{name}.log",
            env=env,
            stop_signal=signal.SIGTERM,
            grace=ORPHAN_GRACE,
        )
        process.start()
        proc = WorkerProc(name, slot, process, skew=skew)
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
            wd = w.process.watchdog_pid
            if wd is not None and _alive(wd):
                out.append(wd)
            out.extend(w.process.pids())
        return sorted(set(out))

    def exited(self) -> list[Exit]:
        """Workers that ended by themselves since the last call (to be replaced)."""
        out = []
        for w in self.workers():
            if not w.running and not w.expected_exit:
                w.expected_exit = True
                out.append(Exit(w, w.process.returncode, w.armed))
        return out

    # ---- faults ---------------------------------------------------------------------------

    def arm(self, worker: WorkerProc, point: str) -> None:
        """Ask ``worker`` to SIGKILL itself at the next ``point`` (``"none"`` disarms)."""
        control = self.control_dir / f"{worker.name}.point"
        tmp = control.with_suffix(".tmp")
        tmp.write_text(point + "\n")
        os.replace(tmp, control)
        worker.armed = None if point == "none" else point
        worker.armed_at = time.monotonic()

    def kill(self, worker: WorkerProc) -> None:
        """SIGKILL ``worker`` now (paused or not) and release its watchdog."""
        worker.expected_exit = True
        _signal(worker.pid, signal.SIGKILL)
        self.retire(worker)

    def retire(self, worker: WorkerProc) -> None:
        """Release a dead worker's watchdog (kills whatever is left of it)."""
        with contextlib.suppress(Exception):
            worker.process.stop(grace=0.0)
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
        _signal(worker.pid, signal.SIGSTOP)

    def resume(self, worker: WorkerProc) -> None:
        _signal(worker.pid, signal.SIGCONT)
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
                _signal(w.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for w in workers:
            w.process.wait(max(0.0, deadline - time.monotonic()))
        for w in workers:
            self.retire(w)
        for w in self.retired:
            with contextlib.suppress(Exception):
                w.process.stop(grace=0.0)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
