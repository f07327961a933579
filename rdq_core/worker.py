"""The worker loop: claim due tasks, run their handlers, keep their leases, report.

Rules this module keeps (``contract.md#2-the-model``, and the one rule):

- **Claim** at most ``min(batch, free handler slots)`` tasks per poll. A poll that finds
  nothing sleeps ``poll_interval``, doubling up to ``max_poll_interval``. A poll that
  fails (``BackendUnavailable`` or any other error) is reported to the observer and
  retried after a capped, jittered backoff: the loop never dies of a storage outage.
- **Attempt number.** ``TaskContext.attempt_no`` is ``max(attempt_no in history) + 1``
  (invariant H), never derived from ``attempt_count``, which redrive resets.
- **Poison pill.** A task claimed with ``attempt_count >= policy.max_attempts`` (its
  budget was spent, e.g. by LEASE_EXPIRED reclaims) is dead-lettered *without running
  it*, with error type ``rdq.AttemptsExhausted`` and outcome ``RETRYABLE_FAILURE``
  (its failures were retryable ones; the budget ran out). A task whose handler name is
  unknown is dead-lettered at once: ``rdq.UnknownHandler``, ``PERMANENT_FAILURE``.
- **Heartbeat.** One thread per worker extends the lease of every running task every
  ``lease * heartbeat_fraction``. ``StaleClaim`` means the lease is lost. After
  ``BackendUnavailable`` (or any other error) it retries until the lease would have
  expired by the worker's monotonic clock, measured conservatively from the moment the
  last successful claim/extend call was *sent*; then the lease counts as lost.
- **Lease lost.** ``ctx.lease_lost`` is set and the worker reports **nothing** for that
  claim, whatever the handler does afterwards: somebody else may own the task now, and
  an unreported claim costs at most one lease (the task is reclaimed with a
  LEASE_EXPIRED attempt). Python cannot kill a thread, so cancellation is
  cooperative: a long handler should call ``ctx.check()`` (raises :class:`LeaseLost`)
  or watch ``ctx.lease_lost`` between steps.
- **Outcome.** Success → ``complete``; an exception → ``policy.decide`` →
  ``reschedule(delay, error)`` or ``dead_letter(error, outcome)``. A report that hits
  ``BackendUnavailable`` is retried with the same token (safe: fenced by the token)
  with backoff for up to ``report_retry_for``. ``StaleClaim`` on a report means the
  lease was lost: it is told to the observer, never raised. If a retried report gets
  ``StaleClaim`` the worker reads the task back: an attempt that started at this
  claim's ``claimed_at`` with a non-LEASE_EXPIRED outcome shows an earlier,
  unacknowledged call took effect, and the result is ``"ok"``.
- **Chaos-testing aid.** ``report_after_lease_loss=True`` (off by default; never for
  production) makes the worker behave like a zombie that did not notice it lost its
  lease: it still makes the outcome report after the lease is lost (a correct backend
  refuses it with ``StaleClaim``, reported to the observer like any stale report). Late
  *heartbeats* need no flag: after a pause (SIGSTOP/SIGCONT) the heartbeat thread beats
  without first looking at the clock, so a zombie's late heartbeat is always attempted.
- **Observer.** Every hook is called from whichever worker thread acts (claim loop,
  handler threads, heartbeat thread), so an observer must be thread-safe. An exception
  raised by a hook is logged and swallowed.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from rdq_core import validation as v
from rdq_core.errors import BackendUnavailable, InvalidArgument, StaleClaim
from rdq_core.model import (
    ATTEMPTS_EXHAUSTED_ERROR,
    Claim,
    ErrorInfo,
    Outcome,
    Task,
)
from rdq_core.retry import RetryPolicy, error_info
from rdq_core.spi import Storage

log = logging.getLogger("rdq.worker")

#: Error type recorded when a task names a handler this worker does not have.
UNKNOWN_HANDLER_ERROR = "rdq.UnknownHandler"

ReportKind = Literal["complete", "reschedule", "dead_letter"]
#: ``"ok"`` accepted; ``"stale"`` rejected (the claim is dead); ``"unavailable"`` the
#: storage could not be reached: the call may or may not have taken effect; an
#: exception: any other error (not retried).
ReportResult = Literal["ok", "stale", "unavailable"] | BaseException


class LeaseLost(Exception):
    """Raised by :meth:`TaskContext.check` once the worker no longer holds the lease."""


class TaskContext:
    """What a handler receives: the claimed task, its claim, and the lease state.

    ``attempt_no`` is the number the storage will give this attempt (invariant H).
    ``lease_lost`` is set when the lease is lost; the handler should stop as soon as it
    can (see :meth:`check`); whatever it returns then is not reported.
    """

    __slots__ = ("_expiry", "_lock", "attempt_no", "claim", "lease_lost", "task", "worker")

    def __init__(self, claim: Claim, worker: str) -> None:
        self.claim = claim
        self.task: Task = claim.task
        self.attempt_no: int = claim.task.next_attempt_no
        self.worker = worker
        self.lease_lost = threading.Event()
        self._lock = threading.Lock()
        self._expiry = claim.lease_expires_at

    @property
    def token(self) -> str:
        return self.claim.token

    @property
    def payload(self) -> bytes:
        return self.task.payload

    @property
    def lease_expires_at(self) -> datetime:
        """The lease expiry by the storage's clock, as of the last successful heartbeat."""
        with self._lock:
            return self._expiry

    def _extended(self, expiry: datetime) -> None:
        with self._lock:
            self._expiry = expiry

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease is lost (cooperative cancellation)."""
        if self.lease_lost.is_set():
            raise LeaseLost(f"task {self.task.id!r}: the lease of claim {self.token[:8]}… was lost")

    def __repr__(self) -> str:
        return (
            f"TaskContext(task={self.task.id!r}, attempt_no={self.attempt_no}, "
            f"token={self.token[:8]}…, lost={self.lease_lost.is_set()})"
        )


Handler = Callable[[TaskContext], object]


class WorkerObserver:
    """Hooks a journal implements; every method is a no-op here. Must be thread-safe.

    A poll is ``on_claim_begin`` then ``on_claim_end`` (its claims, possibly none) and,
    when it claimed any, ``on_claim``; or ``on_claim_begin`` then ``on_claim_error``.
    Order for one claimed task that runs: ``on_claim`` (for its batch), ``on_start``,
    any ``on_heartbeat_begin``/``on_heartbeat`` pairs, ``on_handler_end``, then per
    storage call ``on_report_begin``/``on_report_end`` (several if retried), then
    ``on_report`` with the final result. ``on_lease_lost`` comes when the lease is found
    lost (by the heartbeat, or a report rejected as stale). A poison pill or unknown
    handler skips ``on_start``/``on_handler_end``.
    """

    def on_claim_begin(self, limit: int) -> None:
        """A poll is about to claim up to ``limit`` tasks."""

    def on_claim_end(self, claims: Sequence[Claim]) -> None:
        """A poll returned these claims (called for an empty poll too)."""

    def on_claim(self, claims: Sequence[Claim]) -> None:
        """A poll claimed these tasks (not called for an empty poll)."""

    def on_claim_error(self, exc: BaseException) -> None:
        """A poll failed; the worker backs off and polls again."""

    def on_start(self, ctx: TaskContext) -> None:
        """The handler is about to run."""

    def on_handler_end(self, ctx: TaskContext, error: BaseException | None) -> None:
        """The handler returned (``error is None``) or raised ``error``."""

    def on_heartbeat_begin(self, task_id: str, token: str) -> None:
        """A lease extension is about to be sent."""

    def on_heartbeat(self, task_id: str, token: str, result: datetime | BaseException) -> None:
        """A lease extension returned the new expiry, or failed with an exception."""

    def on_report_begin(self, kind: ReportKind, task_id: str, token: str) -> None:
        """An outcome call (``complete``/``reschedule``/``dead_letter``) is about to be made."""

    def on_report_end(
        self, kind: ReportKind, task_id: str, token: str, result: ReportResult
    ) -> None:
        """That call returned: ``"ok"``, ``"stale"``, ``"unavailable"`` or an exception."""

    def on_report(self, kind: ReportKind, task_id: str, token: str, result: ReportResult) -> None:
        """The final result of reporting this claim's outcome, after any retries."""

    def on_lease_lost(self, task_id: str, token: str) -> None:
        """The worker no longer holds this claim; it will report nothing for it."""


@dataclass(eq=False)
class _Running:
    """A task whose handler is running, as the heartbeat thread sees it."""

    ctx: TaskContext
    deadline: float  # monotonic time until which the lease surely holds
    next_beat: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False  # the handler finished: no more heartbeats
    lost: bool = False


_names = itertools.count(1)


def _seconds(td: timedelta) -> float:
    return td / timedelta(seconds=1)


class Worker:
    """Claims tasks of one queue and runs them on ``concurrency`` handler threads.

    - ``lease``: the lease asked for at claim and at each heartbeat;
    - ``batch``: the most tasks one poll claims (never more than free handler slots);
    - ``heartbeat_fraction``: heartbeat every ``lease * heartbeat_fraction`` (0 < f < 1);
    - ``poll_interval`` / ``max_poll_interval``: idle sleep and backoff after a failed
      storage call, doubling from the first up to the second;
    - ``report_retry_for``: how long a report is retried on ``BackendUnavailable``
      (default: ``lease``);
    - ``rng_seed``: seeds the backoff jitter (deterministic for one handler thread);
    - ``report_after_lease_loss``: a chaos-testing aid, off by default: report the outcome
      even after the lease is lost (see the module rules); never for production.

    Bad arguments raise ``InvalidArgument``. A worker runs one session at a time
    (``run``, ``run_once`` or ``run_until_idle``).
    """

    def __init__(
        self,
        storage: Storage,
        queue: str,
        handlers: Mapping[str, Handler],
        *,
        policy: RetryPolicy | None = None,
        lease: timedelta = timedelta(seconds=30),
        batch: int = 1,
        concurrency: int = 1,
        heartbeat_fraction: float = 1 / 3,
        poll_interval: timedelta = timedelta(milliseconds=200),
        max_poll_interval: timedelta = timedelta(seconds=2),
        report_retry_for: timedelta | None = None,
        observer: WorkerObserver | None = None,
        rng_seed: int | None = None,
        name: str | None = None,
        report_after_lease_loss: bool = False,
    ) -> None:
        self.storage = storage
        self.queue = v.queue_name(queue)
        if not isinstance(handlers, Mapping):
            raise InvalidArgument(f"handlers must map handler names to callables, got {handlers!r}")
        for key, fn in handlers.items():
            v.handler_name(key)
            if not callable(fn):
                raise InvalidArgument(f"handler {key!r} is not callable: {fn!r}")
        self.handlers: dict[str, Handler] = dict(handlers)
        self.policy = RetryPolicy() if policy is None else policy
        if not isinstance(self.policy, RetryPolicy):
            raise InvalidArgument(f"policy must be a RetryPolicy, got {policy!r}")
        self.lease = v.lease(lease)
        self.batch = v.limit(batch)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument(f"concurrency must be an int >= 1, got {concurrency!r}")
        self.concurrency = concurrency
        if (
            isinstance(heartbeat_fraction, bool)
            or not isinstance(heartbeat_fraction, (int, float))
            or not 0 < heartbeat_fraction < 1
        ):
            raise InvalidArgument(
                f"heartbeat_fraction must be a number in (0, 1), got {heartbeat_fraction!r}"
            )
        self.heartbeat_fraction = float(heartbeat_fraction)
        for label, value in (
            ("poll_interval", poll_interval),
            ("max_poll_interval", max_poll_interval),
        ):
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise InvalidArgument(f"{label} must be a positive timedelta, got {value!r}")
        if max_poll_interval < poll_interval:
            raise InvalidArgument(
                f"max_poll_interval ({max_poll_interval}) must be >= "
                f"poll_interval ({poll_interval})"
            )
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        retry_for = self.lease if report_retry_for is None else report_retry_for
        if not isinstance(retry_for, timedelta) or retry_for < timedelta(0):
            raise InvalidArgument(f"report_retry_for must be a timedelta >= 0, got {retry_for!r}")
        self.report_retry_for = retry_for
        if observer is not None and not isinstance(observer, WorkerObserver):
            raise InvalidArgument(f"observer must be a WorkerObserver, got {observer!r}")
        self.observer = observer
        if not isinstance(report_after_lease_loss, bool):
            raise InvalidArgument(
                f"report_after_lease_loss must be a bool, got {report_after_lease_loss!r}"
            )
        self.report_after_lease_loss = report_after_lease_loss
        self.name = name or f"rdq-worker-{os.getpid()}-{next(_names)}"
        self._rng = random.Random(rng_seed)
        self._rng_lock = threading.Lock()
        self._slots = threading.Condition()
        self._running = 0
        self._active = False
        self._pool: ThreadPoolExecutor | None = None
        self._heartbeat: _Heartbeat | None = None

    # ---- public API -------------------------------------------------------------------------

    def run_once(self) -> int:
        """Claim one batch (``min(batch, concurrency)``), run it to completion.

        Returns how many tasks were handled (run, or dead-lettered unrun). A failed
        claim is reported to the observer and counts as 0; it is not retried here.
        """
        with self._session():
            try:
                sent, claims = self._claim(min(self.batch, self.concurrency))
            except Exception as exc:
                self._claim_failed(exc)
                return 0
            wait_futures([self._submit(sent, c) for c in claims])
            return len(claims)

    def run(self, stop: threading.Event) -> int:
        """Poll and run tasks until ``stop`` is set; then finish in-flight tasks and return.

        Returns how many tasks were handled. Never raises for storage errors.
        """
        handled = 0
        idle = poll = _seconds(self.poll_interval)
        backoff = poll
        cap = _seconds(self.max_poll_interval)
        with self._session():
            while not stop.is_set():
                free = self._wait_for_slot(stop)
                if free == 0:
                    break
                try:
                    sent, claims = self._claim(min(self.batch, free))
                except Exception as exc:
                    self._claim_failed(exc)
                    stop.wait(self._jittered(backoff))
                    backoff = min(backoff * 2, cap)
                    continue
                backoff = poll
                if not claims:
                    stop.wait(idle)
                    idle = min(idle * 2, cap)
                    continue
                idle = poll
                for claim in claims:
                    self._submit(sent, claim)
                handled += len(claims)
        return handled

    def run_until_idle(self, max_seconds: float = 10.0) -> int:
        """``run_once`` repeatedly until the queue holds no PENDING or IN_FLIGHT task
        (by ``stats``), or ``max_seconds`` have passed. Returns how many were handled.
        Meant for tests: a task rescheduled into the future keeps it polling."""
        end = time.monotonic() + max_seconds
        handled = 0
        while time.monotonic() < end:
            n = self.run_once()
            handled += n
            if n:
                continue
            if self._queue_drained():
                break
            time.sleep(max(0.0, min(_seconds(self.poll_interval), end - time.monotonic())))
        return handled

    # ---- sessions and slots -----------------------------------------------------------------

    @contextmanager
    def _session(self) -> Iterator[None]:
        with self._slots:
            if self._active:
                raise RuntimeError(f"worker {self.name} is already running")
            self._active = True
        heartbeat = _Heartbeat(self)
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.name)
        self._heartbeat, self._pool = heartbeat, pool
        heartbeat.start()
        try:
            yield
        finally:
            pool.shutdown(wait=True)
            heartbeat.stop()
            with self._slots:
                self._pool = self._heartbeat = None
                self._active = False

    def _wait_for_slot(self, stop: threading.Event) -> int:
        """Block until a handler slot is free (returns how many) or ``stop`` is set (0)."""
        with self._slots:
            while self._running >= self.concurrency:
                if stop.is_set():
                    return 0
                self._slots.wait(0.05)
            return 0 if stop.is_set() else self.concurrency - self._running

    def _submit(self, sent: float, claim: Claim) -> Future[None]:
        assert self._pool is not None
        with self._slots:
            self._running += 1
        return self._pool.submit(self._execute, sent, claim)

    def _execute(self, sent: float, claim: Claim) -> None:
        try:
            self._process(sent, claim)
        except Exception:
            log.exception("%s: unexpected error handling task %r", self.name, claim.task_id)
        finally:
            with self._slots:
                self._running -= 1
                self._slots.notify_all()

    # ---- claiming ---------------------------------------------------------------------------

    def _claim(self, limit: int) -> tuple[float, list[Claim]]:
        self._notify("on_claim_begin", limit)
        sent = time.monotonic()
        claims = self.storage.claim_due(self.queue, limit, self.lease)
        self._notify("on_claim_end", claims)
        if claims:
            self._notify("on_claim", claims)
        return sent, claims

    def _claim_failed(self, exc: Exception) -> None:
        if isinstance(exc, BackendUnavailable):
            log.warning("%s: claim failed, storage unavailable: %s", self.name, exc)
        else:
            log.error("%s: claim failed: %r", self.name, exc)
        self._notify("on_claim_error", exc)

    def _jittered(self, seconds: float) -> float:
        with self._rng_lock:
            return seconds / 2 + self._rng.uniform(0, seconds / 2)

    def _queue_drained(self) -> bool:
        try:
            stats = self.storage.stats(self.queue)
        except Exception:
            return False
        return stats.pending == 0 and stats.in_flight == 0

    # ---- running one task -------------------------------------------------------------------

    def _process(self, sent: float, claim: Claim) -> None:
        ctx = TaskContext(claim, self.name)
        task = claim.task
        if task.attempt_count >= self.policy.max_attempts:
            self._report(
                ctx,
                "dead_letter",
                error=ErrorInfo(
                    ATTEMPTS_EXHAUSTED_ERROR,
                    f"claimed with attempt_count {task.attempt_count} >= max_attempts "
                    f"{self.policy.max_attempts} (earlier leases expired); not run",
                ),
                outcome=Outcome.RETRYABLE_FAILURE,
            )
            return
        handler = self.handlers.get(task.handler)
        if handler is None:
            self._report(
                ctx,
                "dead_letter",
                error=ErrorInfo(
                    UNKNOWN_HANDLER_ERROR,
                    f"worker {self.name} has no handler {task.handler!r}",
                ),
                outcome=Outcome.PERMANENT_FAILURE,
            )
            return
        assert self._heartbeat is not None
        lease = _seconds(self.lease)
        entry = _Running(ctx, deadline=sent + lease, next_beat=sent + self._beat_interval)
        self._heartbeat.add(entry)
        self._notify("on_start", ctx)
        error: BaseException | None = None
        try:
            handler(ctx)
        except BaseException as exc:  # a handler thread must always end in a report
            error = exc
        held = self._heartbeat.finish(entry)
        self._notify("on_handler_end", ctx, error)
        if not held and not self.report_after_lease_loss:
            return
        if error is None:
            self._report(ctx, "complete")
            return
        with self._rng_lock:
            decision = self.policy.decide(task.attempt_count, error, self._rng)
        info = error_info(error)
        if decision.retry:
            assert decision.delay is not None
            self._report(ctx, "reschedule", delay=decision.delay, error=info)
        else:
            self._report(ctx, "dead_letter", error=info, outcome=decision.outcome)

    @property
    def _beat_interval(self) -> float:
        return _seconds(self.lease) * self.heartbeat_fraction

    # ---- reporting --------------------------------------------------------------------------

    def _report(
        self,
        ctx: TaskContext,
        kind: ReportKind,
        *,
        delay: timedelta | None = None,
        error: ErrorInfo | None = None,
        outcome: Outcome = Outcome.PERMANENT_FAILURE,
    ) -> ReportResult:
        """Make one outcome call, retrying it on ``BackendUnavailable``; never raises."""
        task_id, token = ctx.task.id, ctx.token

        def call() -> None:
            if kind == "complete":
                self.storage.complete(task_id, token)
            elif kind == "reschedule":
                assert delay is not None
                self.storage.reschedule(task_id, token, delay, error)
            else:
                self.storage.dead_letter(task_id, token, error, outcome)

        give_up = time.monotonic() + _seconds(self.report_retry_for)
        pause = _seconds(self.poll_interval)
        uncertain = False
        result: ReportResult
        while True:
            self._notify("on_report_begin", kind, task_id, token)
            try:
                call()
            except StaleClaim:
                self._notify("on_report_end", kind, task_id, token, "stale")
                result = self._settle_stale(ctx) if uncertain else "stale"
                break
            except BackendUnavailable:
                self._notify("on_report_end", kind, task_id, token, "unavailable")
                uncertain = True
                if time.monotonic() + pause > give_up:
                    result = "unavailable"
                    log.warning("%s: gave up reporting %s for %r", self.name, kind, task_id)
                    break
                time.sleep(pause)
                pause = min(pause * 2, _seconds(self.max_poll_interval))
                continue
            except Exception as exc:
                log.error("%s: %s for %r failed: %r", self.name, kind, task_id, exc)
                self._notify("on_report_end", kind, task_id, token, exc)
                result = exc
                break
            else:
                self._notify("on_report_end", kind, task_id, token, "ok")
                result = "ok"
                break
        self._notify("on_report", kind, task_id, token, result)
        if result == "stale" and not ctx.lease_lost.is_set():
            ctx.lease_lost.set()
            self._notify("on_lease_lost", task_id, token)
        return result

    def _settle_stale(self, ctx: TaskContext) -> ReportResult:
        """``StaleClaim`` after an unacknowledged call: did that call take effect?

        An attempt starting at this claim's ``claimed_at`` that is not LEASE_EXPIRED is
        this claim's outcome (SPI: an outcome's attempt starts at the claim's
        ``claimed_at``). Unreadable task → ``"unavailable"`` (unknown).
        """
        try:
            task = self.storage.get(ctx.task.id)
        except Exception:
            return "unavailable"
        for attempt in task.attempts:
            if (
                attempt.started_at == ctx.claim.claimed_at
                and attempt.outcome is not Outcome.LEASE_EXPIRED
            ):
                return "ok"
        return "stale"

    # ---- observer ---------------------------------------------------------------------------

    def _notify(self, hook: str, *args: object) -> None:
        if self.observer is None:
            return
        try:
            getattr(self.observer, hook)(*args)
        except Exception:
            log.exception("%s: observer hook %s failed", self.name, hook)


class _Heartbeat:
    """One thread extending the leases of all running tasks of a worker."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._cond = threading.Condition()
        self._entries: set[_Running] = set()
        self._stopped = False
        self._thread = threading.Thread(
            target=self._loop, name=f"{worker.name}-heartbeat", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join()

    def add(self, entry: _Running) -> None:
        with self._cond:
            self._entries.add(entry)
            self._cond.notify_all()

    def finish(self, entry: _Running) -> bool:
        """Stop beating for ``entry`` (waits out a beat in progress); False if lost."""
        with self._cond:
            self._entries.discard(entry)
        with entry.lock:
            entry.done = True
            return not entry.lost

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                due = [e for e in self._entries if e.next_beat <= now]
                if not due:
                    wake = min((e.next_beat for e in self._entries), default=None)
                    self._cond.wait(None if wake is None else wake - now)
                    continue
            for entry in due:
                self._beat(entry)

    def _beat(self, entry: _Running) -> None:
        w = self._worker
        ctx = entry.ctx
        task_id, token = ctx.task.id, ctx.token
        with entry.lock:
            if entry.done or entry.lost:
                return
            w._notify("on_heartbeat_begin", task_id, token)
            sent = time.monotonic()
            try:
                expiry = w.storage.extend_lease(task_id, token, w.lease)
            except StaleClaim as exc:
                w._notify("on_heartbeat", task_id, token, exc)
                entry.lost = True
            except Exception as exc:
                w._notify("on_heartbeat", task_id, token, exc)
                now = time.monotonic()
                if now >= entry.deadline:
                    entry.lost = True
                else:
                    retry = min(w._beat_interval, max(0.01, (entry.deadline - now) / 3))
                    entry.next_beat = min(now + retry, entry.deadline)
            else:
                entry.deadline = sent + _seconds(w.lease)
                entry.next_beat = sent + w._beat_interval
                ctx._extended(expiry)
                w._notify("on_heartbeat", task_id, token, expiry)
            if not entry.lost:
                return
            ctx.lease_lost.set()
        log.warning("%s: lease of task %r lost", w.name, task_id)
        w._notify("on_lease_lost", task_id, token)
        with self._cond:
            self._entries.discard(entry)
