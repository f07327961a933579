"""One chaos worker process: the rdq_core worker loop, journaled, with kill points.

Run as ``python -m rdq_compliance.chaos.worker_main '<json config>'`` (the fleet does,
through a watchdog; see :mod:`rdq_compliance.chaos.fleet`). The process

- opens the storage with :func:`rdq_compliance.session.open_storage` (any backend, any
  process) and runs :class:`rdq_core.worker.Worker` with ``report_after_lease_loss=True``
  (a zombie still tries its late outcome, which a correct backend refuses);
- journals every step to ``<journal>`` through a :class:`JournalObserver`;
- runs the chaos handlers: the task's payload (JSON) says what to do — work for a while
  (sleep plus a little CPU, counted in running time: a pause does no work), fail
  retryably a number of times, fail permanently, or overrun its lease while its
  heartbeats are dropped (a blocked loop);
- **kill points**: the harness writes a point name (``after_claim``, ``in_handler``,
  ``before_report``, ``after_report``, or ``none``) to the file ``<control>`` (atomically,
  by rename); the main thread looks at it every 20 ms (no signal: a signal could arrive
  before a fresh process installed its handler); at the next occurrence of that point
  the worker journals ``info self_kill`` and SIGKILLs itself;
- under a skewed clock (``time_base`` set: the fleet started it under libfaketime, see
  :mod:`rdq_compliance.chaos.libfaketime`) journals true time (its monotonic clock
  plus the harness's ``time_base``) and sleeps on the real monotonic clock;
- stops on SIGTERM (finishing the tasks in hand), and dies with its parent: the parent
  is the fleet's watchdog, and ``PR_SET_PDEATHSIG`` turns its death into our SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from rdq_compliance.chaos.events import INFO, Journal
from rdq_compliance.chaos.journal_observer import JournalObserver, LockedJournal
from rdq_compliance.chaos.libfaketime import patch_sleep, true_time
from rdq_compliance.provision.backend import StorageSpec
from rdq_compliance.session import open_storage
from rdq_core.model import Claim, Outcome
from rdq_core.retry import PermanentError, RetryableError, RetryPolicy
from rdq_core.spi import Storage
from rdq_core.worker import ReportKind, ReportResult, TaskContext, Worker

log = logging.getLogger("rdq.chaos.worker")

#: The handler names of the chaos workload (one per behaviour; the payload says the rest).
HANDLERS: tuple[str, ...] = ("chaos.ok", "chaos.flaky", "chaos.permanent", "chaos.overrun")
SELF_KILL_POINTS: tuple[str, ...] = ("after_claim", "in_handler", "before_report", "after_report")

_PR_SET_PDEATHSIG = 1
#: Longest step of simulated work between two looks at the kill switch.
_STEP = 0.02
#: The most one step of simulated work counts for (see :meth:`ChaosHandler.work`).
_CREDIT = 2 * _STEP
#: Less work than this left is none (a shorter sleep may not move the clock at all).
_MIN_SLEEP = 1e-6


@dataclass(frozen=True)
class WorkerConfig:
    """What the fleet tells a worker process (JSON on the command line)."""

    proc: str
    spec: StorageSpec
    queue: str
    journal: str
    control: str
    lease: float
    batch: int
    concurrency: int
    heartbeat_fraction: float
    poll_interval: float
    max_poll_interval: float
    max_attempts: int
    retry_base: float
    retry_cap: float
    seed: int
    #: The harness's ``time.time() - time.monotonic()`` when this worker's wall clock is
    #: skewed (``None``: it is not): its journal's times are ``monotonic() + time_base``.
    time_base: float | None = None

    def to_json(self) -> str:
        data = dict(self.__dict__)
        data["spec"] = dict(self.spec.__dict__)
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        data = json.loads(text)
        data["spec"] = StorageSpec(**data["spec"])
        return cls(**data)


# ---- dying with the parent ----------------------------------------------------------------


def die_with_parent() -> None:
    """SIGKILL us when our parent (the watchdog) dies (Linux); exit if it is gone already."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or parent == 1:
        os._exit(0)


# ---- kill points --------------------------------------------------------------------------


class KillSwitch:
    """The point at which this worker SIGKILLs itself next (set by the harness)."""

    def __init__(self, control: Path, journal: LockedJournal) -> None:
        self.control = control
        self.journal = journal
        self.armed: str | None = None
        self._lock = threading.Lock()
        self._seen: tuple[int, int] | None = None

    def poll(self) -> None:
        """Re-read the control file if it changed."""
        try:
            st = os.stat(self.control)
            stamp = (st.st_mtime_ns, st.st_ino)
            if stamp == self._seen:
                return
            text = self.control.read_text().strip()
        except OSError:
            return
        self._seen = stamp
        self.armed = text if text in SELF_KILL_POINTS else None

    def fire(self, point: str, task: str | None = None, token: str | None = None) -> None:
        """If armed for ``point``: journal ``self_kill`` and SIGKILL this process."""
        if self.armed != point:
            return
        with self._lock:
            if self.armed != point:
                return
            fields: dict[str, Any] = {"point": point}
            if task is not None:
                fields.update(task=task, token=token)
            self.journal.write(INFO, "self_kill", **fields)
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # pragma: no cover - SIGKILL is not deliverable late


class Blocked:
    """Claims (by token) whose heartbeats are dropped: a simulated blocked loop."""

    def __init__(self) -> None:
        self._tokens: set[str] = set()
        self._lock = threading.Lock()

    def add(self, token: str) -> None:
        with self._lock:
            self._tokens.add(token)

    def discard(self, token: str) -> None:
        with self._lock:
            self._tokens.discard(token)

    def __contains__(self, token: object) -> bool:
        with self._lock:
            return token in self._tokens


class HeartbeatDropped(Exception):
    """The storage wrapper dropped a heartbeat (the task's loop is 'blocked')."""


class ReportDropped(Exception):
    """The storage wrapper dropped the outcome of an abandoned claim (the worker 'died'
    before reporting it; the journal says nothing of it either)."""


class ChaosStorage:
    """Wraps the real storage; ``extend_lease`` of a blocked claim and the outcome of an
    abandoned one never reach it."""

    def __init__(self, inner: Storage, blocked: Blocked, abandoned: Blocked) -> None:
        self._inner = inner
        self._blocked = blocked
        self._abandoned = abandoned

    def _dropped(self, task_id: str, token: str) -> None:
        if token in self._abandoned:
            raise ReportDropped(f"outcome of {task_id!r} dropped (claim abandoned)")

    def complete(self, task_id: str, token: str) -> None:
        self._dropped(task_id, token)
        self._inner.complete(task_id, token)

    def reschedule(self, task_id: str, token: str, *args: Any) -> None:
        self._dropped(task_id, token)
        self._inner.reschedule(task_id, token, *args)

    def dead_letter(self, task_id: str, token: str, *args: Any) -> None:
        self._dropped(task_id, token)
        self._inner.dead_letter(task_id, token, *args)

    def extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        if token in self._blocked:
            raise HeartbeatDropped(f"heartbeat of {task_id!r} dropped (blocked loop)")
        return self._inner.extend_lease(task_id, token, lease)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ChaosObserver(JournalObserver):
    """The journal, plus the kill points, plus silence about dropped heartbeats and the
    dropped outcomes of abandoned claims."""

    def __init__(
        self, journal: LockedJournal, switch: KillSwitch, blocked: Blocked, abandoned: Blocked
    ) -> None:
        super().__init__(journal)
        self.switch = switch
        self.blocked = blocked
        self.abandoned = abandoned

    def on_claim(self, claims: Sequence[Claim]) -> None:
        first = claims[0]
        self.switch.fire("after_claim", first.task.id, first.token)

    def on_heartbeat_begin(self, task_id: str, token: str) -> None:
        if token not in self.blocked:
            super().on_heartbeat_begin(task_id, token)

    def on_heartbeat(self, task_id: str, token: str, result: datetime | BaseException) -> None:
        if not isinstance(result, HeartbeatDropped):
            super().on_heartbeat(task_id, token, result)

    def on_report_begin(self, kind: ReportKind, task_id: str, token: str) -> None:
        if token in self.abandoned:
            return
        self.switch.fire("before_report", task_id, token)
        super().on_report_begin(kind, task_id, token)

    def on_report_end(
        self, kind: ReportKind, task_id: str, token: str, result: ReportResult
    ) -> None:
        if not isinstance(result, ReportDropped):
            super().on_report_end(kind, task_id, token, result)

    def on_report(self, kind: ReportKind, task_id: str, token: str, result: ReportResult) -> None:
        if token not in self.abandoned:
            self.switch.fire("after_report", task_id, token)


# ---- the handlers -------------------------------------------------------------------------


class ChaosHandler:
    """Runs a task as its payload says; see :class:`~rdq_compliance.chaos.scenario.HandlerMix`."""

    def __init__(self, switch: KillSwitch, blocked: Blocked, abandoned: Blocked) -> None:
        self.switch = switch
        self.blocked = blocked
        self.abandoned = abandoned

    def work(self, ctx: TaskContext, seconds: float) -> None:
        """Sleep and burn a little CPU for ``seconds`` of running time; a kill point
        between steps.

        Time the process spent stopped is not work done: a gap between two steps longer
        than :data:`_CREDIT` (a SIGSTOP, which lasts past the lease) counts as one step.
        So a worker paused mid-task resumes with the rest of its task still to do, as a
        real handler would, and its heartbeat thread beats (late) while the handler is
        still running — the moment bug class ``stale-heartbeat`` shows — instead of the
        handler and the heartbeat racing to be first after the resume.
        """
        done = 0.0
        last = time.monotonic()
        block = ctx.task.id.encode() * 64
        while True:
            self.switch.fire("in_handler", ctx.task.id, ctx.token)
            now = time.monotonic()
            done += min(now - last, _CREDIT)
            last = now
            if seconds - done < _MIN_SLEEP:
                return
            hashlib.sha256(block).digest()  # a little real CPU work
            time.sleep(min(_STEP, seconds - done))

    def __call__(self, ctx: TaskContext) -> None:
        spec = json.loads(ctx.payload)
        kind = spec.get("kind")
        seconds = float(spec.get("s", 0.0))
        if kind == "ok":
            self.work(ctx, seconds)
        elif kind == "flaky":
            failed = sum(1 for a in ctx.task.attempts if a.outcome is Outcome.RETRYABLE_FAILURE)
            self.work(ctx, seconds)
            if failed < int(spec.get("failures", 1)):
                raise RetryableError(f"flaky: failure {failed + 1} of {spec.get('failures')}")
        elif kind == "permanent":
            self.work(ctx, seconds)
            raise PermanentError("permanent: this task always fails")
        elif kind == "overrun":
            if ctx.attempt_no <= int(spec.get("times", 1)):
                self.blocked.add(ctx.token)
                try:
                    self.work(ctx, seconds)  # ignores ctx.lease_lost: the loop is blocked
                    if spec.get("abandon"):
                        self.abandoned.add(ctx.token)  # its outcome is never reported
                finally:
                    self.blocked.discard(ctx.token)
            else:
                self.work(ctx, float(spec.get("after", 0.02)))
        else:
            raise PermanentError(f"unknown chaos behaviour {kind!r}")


# ---- main ---------------------------------------------------------------------------------


def build_worker(
    config: WorkerConfig, storage: Storage, observer: ChaosObserver, handler: ChaosHandler
) -> Worker:
    policy = RetryPolicy(
        max_attempts=config.max_attempts,
        base=timedelta(seconds=config.retry_base),
        cap=timedelta(seconds=config.retry_cap),
    )
    return Worker(
        storage,
        config.queue,
        dict.fromkeys(HANDLERS, handler),
        policy=policy,
        lease=timedelta(seconds=config.lease),
        batch=config.batch,
        concurrency=config.concurrency,
        heartbeat_fraction=config.heartbeat_fraction,
        poll_interval=timedelta(seconds=config.poll_interval),
        max_poll_interval=timedelta(seconds=config.max_poll_interval),
        observer=observer,
        rng_seed=config.seed,
        name=config.proc,
        report_after_lease_loss=True,
    )


def run(config: WorkerConfig) -> int:
    stop = threading.Event()
    if config.time_base is not None:
        patch_sleep()
        journal_file = Journal(Path(config.journal), config.proc, true_time(config.time_base))
    else:
        journal_file = Journal(Path(config.journal), config.proc)
    journal = LockedJournal(journal_file)
    switch = KillSwitch(Path(config.control), journal)
    blocked = Blocked()
    abandoned = Blocked()

    def on_term(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides when we stop
    switch.poll()
    storage = open_storage(config.spec)
    try:
        wrapped = cast(Storage, ChaosStorage(storage, blocked, abandoned))
        observer = ChaosObserver(journal, switch, blocked, abandoned)
        worker = build_worker(config, wrapped, observer, ChaosHandler(switch, blocked, abandoned))
        loop = threading.Thread(target=worker.run, args=(stop,), name=f"{config.proc}-loop")
        loop.start()
        while loop.is_alive():  # the main thread handles signals and watches the control file
            loop.join(0.02)
            switch.poll()
    finally:
        with contextlib.suppress(Exception):
            storage.close()
        journal.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m rdq_compliance.chaos.worker_main '<json config>'", file=sys.stderr)
        return 2
    die_with_parent()
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    text = args[0]
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    return run(WorkerConfig.from_json(text))


if __name__ == "__main__":
    sys.exit(main())
