"""``RqStorage``: the storage SPI on RQ 3.0.0 (https://github.com/rq/rq), whose worker
logic runs in-process, driven call by call the way rq's own work loop drives it.

**The adapter rules** (what keeps whatever the kit finds about rq, not about this file):

1. every **write** goes through rq's own functions: its public API first (``Queue.
   enqueue_call`` / ``enqueue_in``, ``FailedJobRegistry.requeue`` / ``remove``,
   ``FinishedJobRegistry.remove``), and otherwise only the ``Worker`` / ``RQScheduler``
   methods rq's own ``Worker.work()`` loop calls (``dequeue_job_and_maintain_ttl``,
   ``prepare_execution``, ``prepare_job_execution``, ``maintain_heartbeats``,
   ``_finalize_success``, ``_finalize_failure``, the scheduler's ``acquire_locks`` /
   ``register_birth`` / ``enqueue_scheduled_jobs`` / ``release_locks`` /
   ``register_death``). Reads
   are plain Redis reads of rq's keys (``ZSCORE``, ``ZRANGE``, ``LLEN``, ``XRANGE``, ...)
   or rq's read-only calls (``Job.fetch``, ``Result.restore``), never a read rq turns into
   a write (``registry.get_job_ids()`` / ``count`` with their default ``cleanup=True``);
2. the adapter **never checks a token or a status itself** and adds no lock, guard or
   retry rq lacks: rq's outcome calls take the ``Job`` and ``Execution`` objects they are
   handed and check neither, and whatever rq accepts is reported accepted (that is what
   the kit's fencing tests measure);
3. a claim's **token is rq's execution id** (``Execution.id``, ``uuid4().hex``: 32
   lowercase hex digits, the id rq writes into ``rq:wip:<queue>`` as ``<job id>:<execution
   id>`` and into every ``Result``). A report is made with what the claiming rq worker
   holds in memory, as rq's forked work horse reports: that ``Worker``, the ``Job`` object
   its dequeue returned and ``prepare_job_execution`` prepared, its ``Queue`` and its
   ``Execution`` -- never a fresh read of the job, so a job deleted meanwhile is written
   again by the outcome, as rq's horse writes it (``Job.save`` in ``_handle_success``). The
   horse's memory ends with its outcome: a later report with the same token, or a token
   this storage never handed out (reports no rq worker makes), is made with what rq keeps
   in Redis instead -- the job read with ``Job.fetch`` (rq's ``NoSuchJobError`` when it is
   gone, which the SPI names ``StaleClaim``) and an ``Execution`` of that id with the
   start and worker name ``rq:execution:<job>:<id>`` still holds;
4. **stale-work recovery runs as a deployed worker runs it**: rq's maintenance
   (``Worker.run_maintenance_tasks`` -> ``clean_registries``: ``StartedJobRegistry.cleanup``
   re-enqueues an execution whose heartbeat TTL ran out, or fails it with
   ``AbandonedJobError`` once the job's retries are spent; ``IntermediateQueue.cleanup``
   for a job stuck between dequeue and registration), run by the claiming worker inside
   ``dequeue_job_and_maintain_ttl`` whenever its ``maintenance_interval`` has passed
   (``rq_maintenance_interval``, 1 s for the kit, rq's default 600 s). The kit's lease
   maps to nothing: rq gives every execution the heartbeat TTL of the worker that runs
   it, ``job_monitoring_interval + 60`` (``rq_lease``, 61 s by default, rq's default 90 s)
   -- ``Capabilities.lease_model = "fixed"``.

Mapping ids (rdq task id <-> rq job id, rdq queue <-> rq queue, the namespace carried in
both: :mod:`rdq_rq.names`) is the adapter's business, not a guard.

**Deployment** (what every enqueue and every worker of this adapter uses): jobs are
enqueued with ``unique=True`` (rq's refusal of a duplicate id), ``timeout=-1`` (no job
timeout: the heartbeat TTL is then exactly ``job_monitoring_interval + 60``),
``result_ttl=-1`` (a finished job is kept until purged), ``failure_ttl`` of 10 years and
``retry=Retry(max=10**9)`` (so that rq's abandoned-job cleanup re-enqueues a reclaimed job
instead of failing it: ``StartedJobRegistry.cleanup`` retries while ``retries_left``,
registry.py L310-315). One ``rq.Worker`` per (storage, thread, queue), listening on that
one queue (so rq dequeues with ``LMOVE`` into its intermediate list), never forked:
``prepare_for_work=False`` so that rq does not rename the storage's connection
(``CLIENT SETNAME``), with ``worker_ttl=16`` (rq raises the client's socket timeout to
``worker_ttl - 15 + 10`` = 11 s; the adapter never blocks in ``BLMOVE``).

**SPI -> rq** (each hook's docstring says more):

- ``enqueue``: ``Queue.enqueue_call`` (due now) or ``Queue.enqueue_in`` (a delay, a
  negative one too); a ``DuplicateJobError`` is ``False`` in the same queue,
  ``IdConflict`` in another;
- ``claim_due``: the scheduler's burst step (``acquire_locks``, ``register_birth``,
  ``enqueue_scheduled_jobs``, ``release_locks``, ``register_death``, as
  ``Worker._start_scheduler(burst=True)`` runs it, on the calling thread's own
  ``RQScheduler``), then up to ``limit`` times ``dequeue_job_and_maintain_ttl(None)``
  (maintenance when due, then ``LMOVE``), ``prepare_execution``,
  ``prepare_job_execution(remove_from_intermediate_queue=True)``;
- ``extend_lease``: ``maintain_heartbeats`` (``ZADD XX`` of the execution in ``rq:wip``);
- ``complete``: ``_finalize_success(job, queue, execution, None)`` (what ``perform_job``
  calls when the job returned);
- ``reschedule``: ``_finalize_success`` with the job returning ``Retry(max=10**9,
  interval=ceil(delay))`` (docs/docs/results.md, "Asking RQ to Retry");
- ``dead_letter``: ``job.retries_left = 0`` (the knob docs/docs/exceptions.md gives a
  work-horse-killed handler), then ``_finalize_failure`` (what ``perform_job`` calls when
  the job raised) with the error as the exception the job raised;
- ``redrive``: ``FailedJobRegistry.requeue``; ``purge``: ``FailedJobRegistry.remove(
  delete_job=True)``; ``purge_succeeded``: ``FinishedJobRegistry.remove(delete_job=True)``;
- ``get`` / ``dlq_list`` / ``stats``: reads of the job hash, its ``Result`` stream and
  rq's registries.

**Clock.** rq takes every time from the *client's* clock: ``rq.utils.now()`` for the
timestamps it writes, ``rq.utils.current_timestamp()`` -- the same clock truncated to
whole seconds -- for every registry score (a lease's end, a due time, a DLQ entry). So
``now()`` is this process's clock (``rq.utils.now``), and ``lease_expires_at`` is the
``rq:wip`` score rq wrote, a whole second: up to 1 s short of ``claimed_at +
fixed_lease``.

**Errors.** A redis-py error that reaches the adapter is ``BackendUnavailable`` (the SPI
lets no driver exception escape). An error rq catches and only logs stays rq's:
``handle_job_failure`` logs a failed ``pipeline.execute()`` ("failed to persist failure of
job ...") and carries on, and so does ``dead_letter``. rq's own reconnect loop in
``dequeue_job_and_maintain_ttl`` (sleep 1, 2, 4 ... 60 s and try again on a connection
error) is rq's and stays: a claim waits for the server.

**Connection.** ``redis.Redis.from_url(url)``, as rq's CLI makes its connection
(``get_redis_from_config`` / ``CliConfig.connection``, ``rq/cli/helpers.py``), named
``rdq:<namespace>`` and otherwise left at redis-py's defaults: the adapter sets no retry,
timeout or health check of its own. rq's ``Worker`` raises the socket timeout itself when
it is built (``_set_connection``: ``worker_ttl - 15 + 10`` = 11 s here).

**Storage half.** This module and what it builds on (``names``, ``dsn``, ``admin``)
import only the standard library, :mod:`rdq_core`, rq and redis-py.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any

import redis
from rq import Queue, Retry, Worker
from rq.exceptions import DuplicateJobError, InvalidJobOperation, NoSuchJobError
from rq.executions import Execution, ExecutionRegistry
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, FinishedJobRegistry, ScheduledJobRegistry
from rq.results import Result
from rq.scheduler import RQScheduler
from rq.utils import current_timestamp, utcparse
from rq.utils import now as rq_now

from rdq_core import cursor as cursors
from rdq_core.errors import BackendUnavailable, IdConflict, InvalidArgument, NotFound, StaleClaim
from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    Attempt,
    ByIds,
    Capabilities,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Status,
    Task,
)
from rdq_core.spi import Storage
from rdq_rq import dsn as dsns
from rdq_rq.names import Names

__all__ = ["RqStorage"]

UTC = timezone.utc
#: ``Retry(max=...)`` of every enqueue and every reschedule: never reached.
RETRY_MAX = 10**9
#: ``failure_ttl`` of every job: a dead job stays until purged (not -1: rq would score
#: the FailedJobRegistry entry -1 and the DLQ would lose its order).
FAILURE_TTL = 10 * 365 * 86_400
#: ``worker_ttl`` of the adapter's workers (see the module docstring).
WORKER_TTL = 16
#: Where headers live in the job's ``meta``.
HEADERS_META = "rdq_headers"
#: How many claims a storage holds in memory (what each claiming worker's horse holds).
HELD_CLAIMS = 65_536
#: What rq's abandoned-job cleanup writes as the failure (registry.py L318-320).
ABANDONED_PREFIX = "Moved to FailedJobRegistry, due to AbandonedJobError"
#: How many DLQ entries a page reads at a time.
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

_STATUS = {
    JobStatus.QUEUED: Status.PENDING,
    JobStatus.SCHEDULED: Status.PENDING,
    JobStatus.DEFERRED: Status.PENDING,
    JobStatus.STARTED: Status.IN_FLIGHT,
    JobStatus.FINISHED: Status.SUCCEEDED,
    JobStatus.FAILED: Status.DEAD,
    JobStatus.STOPPED: Status.DEAD,
    JobStatus.CANCELED: Status.DEAD,
}
_TERMINAL_RESULTS = (
    Result.Type.FAILED,
    Result.Type.STOPPED,
    Result.Type.MAX_RETRIES_EXCEEDED,
)


@dataclass(frozen=True)
class _Held:
    """What an rq worker holds in memory about a job it took, as its forked work horse
    inherits it: the worker, the ``Job`` object of its dequeue (as ``prepare_job_execution``
    left it), the queue and the execution."""

    worker: Worker
    job: Job
    queue: Queue
    execution: Execution


# ---- the storage ------------------------------------------------------------------------------


class RqStorage(Storage):
    """The SPI on rq, in one namespace (see the module docstring). Safe to share between
    threads: each thread drives rq workers of its own (an ``rq.Worker`` is one loop)."""

    def __init__(self, dsn: str, namespace: str) -> None:
        if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
            raise InvalidArgument(
                f"invalid rq namespace {namespace!r}: use 1 to 64 characters from [A-Za-z0-9_-]"
            )
        self.target = dsns.parse(dsn)
        self.namespace = namespace
        self.names = Names(namespace)
        self.where = f"rq on redis {self.target.masked!r}"
        self.lease = timedelta(seconds=self.target.lease_s)
        # One client (one pool) for everything this storage does, made as rq's CLI makes
        # its own (module docstring, "Connection"); every connection is named
        # ``rdq:<namespace>``: the kit's cut_connections fault finds them by that name.
        self._client = redis.Redis.from_url(self.target.url, client_name=f"rdq:{namespace}")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._workers: list[Worker] = []
        self._schedulers: list[RQScheduler] = []
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._capabilities: Capabilities | None = None
        self._closed = False

    # ---- plumbing ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        if self._closed:
            raise BackendUnavailable(f"{self.where}: the storage is closed; open a new one")
        try:
            yield
        except redis.RedisError as exc:
            raise BackendUnavailable(
                f"{self.where}: {action}: {type(exc).__name__}: "
                f"{str(exc).strip() or 'no detail'} (the outcome is unknown)"
            ) from None

    def _worker(self, rq_queue: str) -> Worker:
        """This thread's rq worker on ``rq_queue`` (made, and its birth registered, on first
        use: what ``Worker.work()`` does in ``bootstrap``)."""
        workers: dict[str, Worker] | None = getattr(self._local, "workers", None)
        if workers is None:
            workers = self._local.workers = {}
        worker = workers.get(rq_queue)
        if worker is None:
            worker = Worker(
                [rq_queue],
                name=self.names.worker(uuid.uuid4().hex),
                connection=self._client,
                maintenance_interval=self.target.maintenance_interval_s,
                worker_ttl=WORKER_TTL,
                job_monitoring_interval=self.target.lease_s - 60,
                prepare_for_work=False,
            )
            # what prepare_for_work would set, but for CLIENT SETNAME (module docstring)
            worker.hostname = socket.gethostname()
            worker.pid = os.getpid()
            worker.register_birth()
            workers[rq_queue] = worker
            with self._lock:
                self._workers.append(worker)
        return worker

    def _scheduler(self, rq_queue: str) -> RQScheduler:
        """This thread's rq scheduler on ``rq_queue``: one per worker, as each rq worker
        started ``--with-scheduler`` has its own (made on first use; it opens a connection
        pool of its own, with the client's settings)."""
        schedulers: dict[str, RQScheduler] | None = getattr(self._local, "schedulers", None)
        if schedulers is None:
            schedulers = self._local.schedulers = {}
        scheduler = schedulers.get(rq_queue)
        if scheduler is None:
            scheduler = schedulers[rq_queue] = RQScheduler(
                [rq_queue],
                connection=self._client,
                logging_level=logging.WARNING,
                name=self.names.scheduler(uuid.uuid4().hex),
            )
            with self._lock:
                self._schedulers.append(scheduler)
        return scheduler

    def _promote(self, rq_queue: str) -> None:
        """rq's scheduler, one burst pass, as ``Worker._start_scheduler(burst=True)`` runs it:
        ``acquire_locks`` (the queue's lock in Redis, if nobody holds it); when taken,
        ``register_birth``, ``enqueue_scheduled_jobs`` (the due jobs of the
        ScheduledJobRegistry to the queue), then ``release_locks`` and ``register_death``.
        Whoever holds the lock promotes, the others go on to dequeue; a holder that died
        keeps it for ``interval + 60`` = 61 s."""
        scheduler = self._scheduler(rq_queue)
        scheduler.acquire_locks()
        if scheduler.acquired_locks:
            try:
                scheduler.register_birth()
                scheduler.enqueue_scheduled_jobs()
            finally:
                scheduler.release_locks()
                scheduler.register_death()

    def _remember(self, token: str, held: _Held) -> None:
        with self._lock:
            self._held[token] = held
            self._held.move_to_end(token)
            while len(self._held) > HELD_CLAIMS:
                self._held.popitem(last=False)

    def _forget(self, token: str) -> None:
        """The horse that held ``token`` reported its outcome and exited."""
        with self._lock:
            self._held.pop(token, None)

    def _report(self, task_id: str, token: str) -> tuple[Worker, Job, Queue, Execution]:
        """The worker, job, queue and execution a report on ``token`` is made with: what the
        claiming worker holds in memory (no read), else what rq keeps in Redis."""
        job_id = self.names.job_id(task_id)
        with self._lock:
            held = self._held.get(token)
        if held is not None and held.job.id == job_id:
            return held.worker, held.job, held.queue, held.execution
        return self._kept(task_id, job_id, token)

    def _kept(self, task_id: str, job_id: str, token: str) -> tuple[Worker, Job, Queue, Execution]:
        """For a report no rq worker makes (module docstring, rule 3): the job as
        ``Job.fetch`` reads it and an ``Execution`` of ``token``, with the start and worker
        name of ``rq:execution:<job>:<token>`` while rq keeps that hash."""
        try:
            job = Job.fetch(job_id, connection=self._client)
        except NoSuchJobError:
            raise StaleClaim(
                f"task {task_id!r}: rq has no job {job_id!r} (NoSuchJobError from Job.fetch)"
            ) from None
        worker = self._worker(job.origin)
        record = self._client.hgetall(Execution(token, job_id, self._client).key)
        name = record.get(b"worker_name", b"").decode("utf-8", "replace")
        execution = Execution(token, job_id, self._client, worker_name=name)
        created = record.get(b"created_at")
        if created:
            execution.created_at = datetime.fromtimestamp(float(created), UTC)
            job.started_at = execution.created_at
            if name:
                job.worker_name = name
        elif job.started_at is None:
            job.started_at = execution.created_at
        return worker, job, worker.queues[0], execution

    # ---- producer --------------------------------------------------------------------------

    def _enqueue(self, task: NewTask) -> bool:
        """``Queue.enqueue_call`` (due now) or ``Queue.enqueue_in`` (any other delay: a
        negative one is a due time in the past, which rq's scheduler promotes at its next
        pass, oldest first) with ``unique=True``: rq refuses an id whose job hash exists
        (``DuplicateJobError``, scripts.py L12-44) -- in any queue, so the existing job's
        ``origin`` says which: ``False`` in this queue, ``IdConflict`` in another."""
        rq_queue = self.names.queue(task.queue)
        job_id = self.names.job_id(task.id)
        options: dict[str, Any] = {
            "job_id": job_id,
            "description": task.handler,
            "meta": {HEADERS_META: dict(task.headers)},
            "result_ttl": -1,
            "failure_ttl": FAILURE_TTL,
            "retry": Retry(max=RETRY_MAX),
            "unique": True,
        }
        with self._errors("enqueue"):
            queue = Queue(rq_queue, connection=self._client)
            try:
                if task.delay != timedelta(0):
                    queue.enqueue_in(
                        task.delay, task.handler, args=(task.payload,), job_timeout=-1, **options
                    )
                else:
                    queue.enqueue_call(task.handler, args=(task.payload,), timeout=-1, **options)
            except DuplicateJobError:
                origin = self._client.hget(Job.key_for(job_id), "origin")
                if origin is not None and origin.decode() != rq_queue:
                    other = self.names.rdq_queue(origin.decode()) or origin.decode()
                    raise IdConflict(
                        f"task id {task.id!r} is already used in queue {other!r}"
                    ) from None
                return False
        return True

    # ---- worker ------------------------------------------------------------------------------

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        """The scheduler's burst pass, then up to ``limit`` times what ``Worker.work()``
        does for a job before it forks: ``dequeue_job_and_maintain_ttl(None)`` (the
        worker's heartbeat; maintenance when ``maintenance_interval`` has passed; ``LMOVE``
        from the queue into its intermediate list: FIFO, no due time), ``prepare_execution``
        (an Execution, ``rq:wip`` scored ``now + heartbeat TTL``) and -- what the horse does
        first -- ``prepare_job_execution(remove_from_intermediate_queue=True)`` (status
        ``started``). ``lease`` is not rq's to take: every claim gets the worker's TTL.
        ``reclaimed`` is always False: rq's reclaim happened earlier, in maintenance, and
        left no mark on the job. Each claim's task is the ``Job`` object the worker holds
        (with its results and registry entries read): a job deleted meanwhile is still
        handed out, as rq's horse still runs it."""
        rq_queue = self.names.queue(queue)
        made: list[tuple[Job, Execution, str]] = []
        with self._errors("claim_due"):
            worker = self._worker(rq_queue)
            self._promote(rq_queue)
            for _ in range(limit):
                got = worker.dequeue_job_and_maintain_ttl(None)
                if got is None:
                    break
                job, rq_q = got
                execution = worker.prepare_execution(job)
                worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
                self._remember(execution.id, _Held(worker, job, rq_q, execution))
                made.append((job, execution, rq_q.started_job_registry.key))
            claims = []
            for job, execution, wip in made:
                task = self._task_of(job)
                score = self._client.zscore(wip, execution.composite_key)
                expires = (
                    _from_score(score)
                    if score is not None
                    else task.lease_expires_at or execution.created_at + self.lease
                )
                claims.append(Claim(task, execution.id, execution.created_at, expires))
        return claims

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        """``Worker.maintain_heartbeats``: what ``monitor_work_horse`` sends every
        ``job_monitoring_interval``. Its ``ZADD XX`` of the execution in ``rq:wip`` moves
        the lease to ``now + TTL`` when the entry is there and is silently dropped when it
        is not (reclaimed, finished): rq reports neither. Returns the entry's score, or the
        expiry the heartbeat asked for when rq kept none."""
        with self._errors("extend_lease"):
            worker, job, queue, execution = self._report(task_id, token)
            asked = current_timestamp() + worker.get_heartbeat_ttl(job)
            worker.maintain_heartbeats(job, execution)
            score = self._client.zscore(queue.started_job_registry.key, execution.composite_key)
        return _from_score(asked if score is None else score)

    def _complete(self, task_id: str, token: str) -> None:
        """``Worker._finalize_success(job, queue, execution, None)``: the job returned."""
        with self._errors("complete"):
            worker, job, queue, execution = self._report(task_id, token)
            worker._finalize_success(job, queue, execution, None)
        self._forget(token)

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        """``Worker._finalize_success`` with the job returning ``Retry(max=10**9,
        interval=ceil(delay))`` -> ``handle_job_retry``: a RETRIED result, then the job
        scheduled at ``now + interval`` (or queued at once for 0). rq's intervals are whole
        seconds (the delay is rounded up) and a RETRIED result has no error: ``error`` is
        not kept."""
        interval = math.ceil(delay.total_seconds())
        with self._errors("reschedule"):
            worker, job, queue, execution = self._report(task_id, token)
            worker._finalize_success(job, queue, execution, Retry(max=RETRY_MAX, interval=interval))
        self._forget(token)

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        """``job.retries_left = 0`` (else the enqueue's Retry would re-enqueue it), then
        ``Worker._finalize_failure`` with ``error`` as the exception the job raised
        (:func:`_raised`): rq logs it (``handle_exception``), runs the job's failure callback
        (none) and ``handle_job_failure`` (status failed, FailedJobRegistry, a FAILED result
        whose ``exc_string`` is rq's formatting of that exception, ``"<type>: <message>"``
        and the detail on the lines below). When rq fails to persist the failure it logs
        that and carries on, and so does this call. ``outcome`` has no place in rq (a FAILED
        result is a FAILED result)."""
        with self._errors("dead_letter"):
            worker, job, queue, execution = self._report(task_id, token)
            job.retries_left = 0
            worker._finalize_failure(job, queue, execution, _raised(error))
        self._forget(token)

    # ---- reading --------------------------------------------------------------------------------

    def _get(self, task_id: str) -> Task:
        with self._errors("get"):
            return self._load(self.names.job_id(task_id))

    def _load(self, job_id: str) -> Task:
        """The task of an rq job, read from the job hash, its Result stream and the
        registries (a snapshot of several reads, not one)."""
        try:
            job = Job.fetch(job_id, connection=self._client)
        except NoSuchJobError:
            task_id = self.names.task_id(job_id)
            raise NotFound(f"no task {task_id!r}") from None
        return self._task_of(job)

    def _task_of(self, job: Job) -> Task:
        rq_queue = job.origin
        status = _STATUS.get(job.get_status(refresh=False), Status.PENDING)
        scheduled = ScheduledJobRegistry(rq_queue, connection=self._client)
        pipe = self._client.pipeline(transaction=False)
        pipe.xrange(Result.get_key(job.id))
        pipe.zscore(scheduled.key, job.id)
        pipe.zrange(ExecutionRegistry(job.id, self._client).key, 0, -1)
        raw_results, scheduled_at, execution_ids = pipe.execute()
        results = [
            Result.restore(job.id, rid.decode(), payload, connection=self._client)
            for rid, payload in raw_results
        ]
        next_attempt_at = None
        if status is Status.PENDING:
            if scheduled_at is not None:
                next_attempt_at = _from_score(scheduled_at)
            else:
                next_attempt_at = job.enqueued_at or job.created_at
        lease_expires_at = None
        if status is Status.IN_FLIGHT and execution_ids:
            wip = Queue(rq_queue, connection=self._client).started_job_registry.key
            members = [f"{job.id}:{e.decode()}" for e in execution_ids]
            live = [s for s in self._client.zmscore(wip, members) if s is not None]
            if live:
                lease_expires_at = _from_score(max(live))
        attempts, attempt_count, redrive_count = _history(results, status)
        meta = job.meta or {}
        headers = meta.get(HEADERS_META) or {}
        args = job.args
        payload = bytes(args[0]) if args else b""
        task_id = self.names.task_id(job.id)
        return Task(
            id=task_id if task_id is not None else job.id,
            queue=self.names.rdq_queue(rq_queue) or rq_queue,
            handler=job.func_name or "",
            payload=payload,
            headers=dict(headers),
            status=status,
            attempt_count=attempt_count,
            redrive_count=redrive_count,
            next_attempt_at=next_attempt_at,
            lease_expires_at=lease_expires_at,
            created_at=job.created_at,
            attempts=tuple(attempts),
        )

    def _stats(self, queue: str) -> QueueStats:
        """Counts from rq's lists and registries, read without their cleanup: the queue
        (due), the scheduled registry (pending; the due part of it counts as due), the
        intermediate list (dequeued, not yet in ``rq:wip``: pending, due), ``rq:wip``
        (distinct jobs: in flight), the finished and failed registries."""
        rq_queue = self.names.queue(queue)
        with self._errors("stats"):
            q = Queue(rq_queue, connection=self._client)
            pipe = self._client.pipeline(transaction=False)
            pipe.llen(q.key)
            pipe.lrange(q.intermediate_queue_key, 0, -1)
            pipe.zcard(q.scheduled_job_registry.key)
            pipe.zcount(q.scheduled_job_registry.key, "-inf", current_timestamp())
            pipe.zrange(q.started_job_registry.key, 0, -1)
            pipe.zcard(q.finished_job_registry.key)
            pipe.zcard(q.failed_job_registry.key)
            queued, intermediate, scheduled, scheduled_due, wip, finished, failed = pipe.execute()
        running = {m.decode().split(":", 1)[0] for m in wip}
        stuck = {m.decode() for m in intermediate} - running
        return QueueStats(
            pending=int(queued) + int(scheduled) + len(stuck),
            due=int(queued) + int(scheduled_due) + len(stuck),
            in_flight=len(running),
            succeeded=int(finished),
            dead=int(failed),
        )

    def _now(self) -> datetime:
        return rq_now()

    # ---- DLQ and housekeeping ---------------------------------------------------------------

    def _dead_entries(self, rq_queue: str) -> list[tuple[int, str]]:
        """``rq:failed:<queue>`` as ``(score, job id)``, in rq's order (score, then id)."""
        key = FailedJobRegistry(rq_queue, connection=self._client).key
        return [
            (int(score), m.decode())
            for m, score in self._client.zrange(key, 0, -1, withscores=True)
        ]

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        """The FailedJobRegistry in its own order: score (the failure's
        ``current_timestamp() + failure_ttl``: whole seconds), then job id. A cursor is the
        last entry's ``(score, job id)``."""
        after = None if cursor is None else cursors.decode(queue, cursor)
        rq_queue = self.names.queue(queue)
        tasks: list[Task] = []
        last: tuple[int, str] | None = None
        more = False
        with self._errors("dlq_list"):
            for score, job_id in self._dead_entries(rq_queue):
                if after is not None and (score, job_id) <= (after.dead_at_us, after.task_id):
                    continue
                try:
                    task = self._load(job_id)
                except NotFound:
                    continue
                if filter is not None and not filter.matches(task):
                    continue
                if len(tasks) == limit:
                    more = True
                    break
                tasks.append(task)
                last = (score, job_id)
        next_cursor = None
        if more and last is not None:
            next_cursor = cursors.encode(queue, cursors.DlqPosition(last[0], last[1]))
        return DlqPage(tuple(tasks), next_cursor)

    def _selected(self, queue: str, rq_queue: str, selector: Selector) -> list[str]:
        """The job ids a selector names in this queue's FailedJobRegistry (a read)."""
        if isinstance(selector, ByIds):
            wanted = list(dict.fromkeys(self.names.job_id(t) for t in selector.ids))
            key = FailedJobRegistry(rq_queue, connection=self._client).key
            scores = self._client.zmscore(key, wanted) if wanted else []
            return [j for j, s in zip(wanted, scores, strict=True) if s is not None]
        chosen = []
        for _score, job_id in self._dead_entries(rq_queue):
            try:
                task = self._load(job_id)
            except NotFound:
                continue
            if selector.matches(task):
                chosen.append(job_id)
        return chosen

    def _redrive(self, queue: str, selector: Selector) -> int:
        """``FailedJobRegistry.requeue`` of each selected job (status queued, due now, at
        the tail of the queue); rq's ``InvalidJobOperation`` (not in this queue's
        registry) and ``NoSuchJobError`` leave an id out of the count."""
        rq_queue = self.names.queue(queue)
        registry = FailedJobRegistry(rq_queue, connection=self._client)
        done = 0
        with self._errors("redrive"):
            for job_id in self._selected(queue, rq_queue, selector):
                try:
                    registry.requeue(job_id)
                except (InvalidJobOperation, NoSuchJobError):
                    continue
                done += 1
        return done

    def _purge(self, queue: str, selector: Selector) -> int:
        """``FailedJobRegistry.remove(job_id, delete_job=True)`` (the job, its results and
        executions deleted) of each selected job. That call deletes the job even when it is
        not in the registry, so the selector is first resolved against the registry."""
        rq_queue = self.names.queue(queue)
        registry = FailedJobRegistry(rq_queue, connection=self._client)
        done = 0
        with self._errors("purge"):
            for job_id in self._selected(queue, rq_queue, selector):
                try:
                    removed = registry.remove(job_id, delete_job=True)
                except NoSuchJobError:
                    continue
                done += int(bool(removed))
        return done

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        """``FinishedJobRegistry.remove(job_id, delete_job=True)`` of each finished job of
        the registry whose ``ended_at`` is at least ``older_than`` ago. (rq's own way is
        ``result_ttl``: the job hash expires and the registry's cleanup drops the entry;
        there is no on-demand call.)"""
        rq_queue = self.names.queue(queue)
        registry = FinishedJobRegistry(rq_queue, connection=self._client)
        done = 0
        with self._errors("purge_succeeded"):
            cutoff = rq_now() - older_than
            members = [m.decode() for m in self._client.zrange(registry.key, 0, -1)]
            for start in range(0, len(members), 500):
                chunk = members[start : start + 500]
                pipe = self._client.pipeline(transaction=False)
                for job_id in chunk:
                    pipe.hmget(Job.key_for(job_id), "status", "ended_at")
                for job_id, (status, ended) in zip(chunk, pipe.execute(), strict=True):
                    if status != JobStatus.FINISHED.value.encode() or not ended:
                        continue
                    if utcparse(ended.decode()) > cutoff:
                        continue
                    try:
                        removed = registry.remove(job_id, delete_job=True)
                    except NoSuchJobError:
                        continue
                    done += int(bool(removed))
        return done

    # ---- lifecycle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            durable, why = self._durability()
            caps = Capabilities(
                multi_process=True,
                max_payload_bytes=None,
                notify=False,
                clock=(
                    "client: rq.utils.now() of the calling process (rq takes every time from "
                    "its client); registry scores -- lease ends, due times, DLQ order -- are "
                    "rq.utils.current_timestamp(), whole seconds"
                ),
                durable=durable,
                durability=why,
                lease_model="fixed",
                fixed_lease=self.lease,
            )
            if why.startswith("could not"):
                return caps
            self._capabilities = caps
        return self._capabilities

    def _durability(self) -> tuple[bool, str]:
        """rq adds nothing to Redis's persistence: durable only with ``appendonly yes`` and
        ``appendfsync always`` (the reasoning of the built-in redis backend)."""
        try:
            with self._errors("capabilities"):
                got = self._client.config_get("append*")
        except BackendUnavailable as exc:
            return False, f"could not read the server's persistence settings: {exc}"
        except redis.RedisError as exc:  # pragma: no cover - mapped above
            return False, f"could not read the server's persistence settings: {exc}"
        aof = str(got.get("appendonly", "?"))
        fsync = str(got.get("appendfsync", "?"))
        durable = aof == "yes" and fsync == "always"
        verdict = "durable" if durable else "not durable"
        return durable, (
            f"{verdict}: CONFIG GET says appendonly {aof}, appendfsync {fsync} (rq sends no "
            "WAIT or fsync of its own; durable only with appendonly yes and appendfsync always)"
        )

    def close(self) -> None:
        """Register the death of this storage's workers (as ``Worker.teardown``), give back
        any scheduler lock, close the connections; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers, self._workers = self._workers, []
            schedulers, self._schedulers = self._schedulers, []
        for worker in workers:
            with contextlib.suppress(redis.RedisError):
                worker.register_death()
        for scheduler in schedulers:
            with contextlib.suppress(redis.RedisError):
                scheduler.release_locks()
            own = scheduler._connection
            if own is not None:
                with contextlib.suppress(Exception):
                    own.close()
        with contextlib.suppress(Exception):
            self._client.close()


# ---- decoding --------------------------------------------------------------------------------


def _from_score(score: float) -> datetime:
    return datetime.fromtimestamp(float(score), UTC)


def _raised(
    error: ErrorInfo | None,
) -> tuple[type[BaseException], BaseException, TracebackType | None]:
    """``error`` as the ``exc_info`` of an exception the job raised: an exception class
    named ``error.type`` (module ``builtins``, so that rq's ``traceback.format_exception``
    writes the bare name) whose text is the message, the detail on the lines below; rq
    records it as ``"<type>: <message>\n<detail>\n"``. No error is an exception of an
    empty name and text, which rq records as ``"\n"``."""
    name = "" if error is None else error.type
    text = ""
    if error is not None:
        text = error.message if error.detail is None else f"{error.message}\n{error.detail}"
    kind = type(name, (Exception,), {"__module__": "builtins", "__qualname__": name})
    return kind, kind(text), None


def _decode_error(text: str | None) -> ErrorInfo | None:
    """An ``exc_string`` as an error: the type before the first ``": "`` of the first
    line, the message after it, the lines below as the detail; the one newline
    ``traceback.format_exception`` ends its text with is not part of it."""
    if text and text.endswith("\n"):
        text = text[:-1]
    if not text:
        return None
    first, newline, rest = text.partition("\n")
    kind, sep, message = first.partition(": ")
    if not sep:
        kind, message = first, ""
    return ErrorInfo(kind, message, rest if newline else None)


def _outcome(result: Result) -> tuple[Outcome, ErrorInfo | None]:
    kind = result.type
    if kind == Result.Type.SUCCESSFUL:
        return Outcome.SUCCESS, None
    if kind == Result.Type.RETRIED:
        return Outcome.RETRYABLE_FAILURE, None
    text = result.exc_string or ""
    if kind == Result.Type.FAILED and not result.worker_name and text.startswith(ABANDONED_PREFIX):
        # rq's abandoned-job cleanup: an execution whose heartbeat TTL ran out
        return Outcome.LEASE_EXPIRED, ErrorInfo(LEASE_EXPIRED_ERROR, text)
    return Outcome.PERMANENT_FAILURE, _decode_error(text)


def _history(results: list[Result], status: Status) -> tuple[list[Attempt], int, int]:
    """Attempts from rq's Result stream, oldest first, numbered by position; lives split
    at each terminal failure that rq later ran again (a redrive: rq keeps no count)."""
    attempts: list[Attempt] = []
    redrives = life = 0
    last = len(results) - 1
    for i, result in enumerate(results):
        outcome, error = _outcome(result)
        started = result.execution_started_at or result.created_at
        finished = result.execution_ended_at or result.created_at
        attempts.append(Attempt(i + 1, started, finished, outcome, error))
        life += 1
        if result.type in _TERMINAL_RESULTS and (i < last or status is not Status.DEAD):
            redrives += 1
            life = 0
    return attempts, life, redrives
