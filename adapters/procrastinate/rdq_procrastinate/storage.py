"""The storage SPI on procrastinate 3.10.0 (https://github.com/procrastinate-org/procrastinate),
one namespace = one PostgreSQL schema holding procrastinate's own tables and functions.

**The adapter rules** (every adapter under ``adapters/`` keeps them; what the kit finds
is then about procrastinate, not about this file):

1. Every **write** goes through procrastinate's own functions: its public
   ``JobManager`` API (``defer_job_async``, ``defer_periodic_job``, ``fetch_job``,
   ``finish_job``, ``finish_job_by_id_async``, ``retry_job(_by_id_async)``,
   ``get_stalled_jobs``, ``register_worker``,
   ``update_heartbeat``, ``prune_stalled_workers``, ``unregister_worker``,
   ``delete_old_jobs``), the calls its own ``Worker`` makes. **Reads** are plain SQL over
   its tables (``procrastinate_jobs``, ``procrastinate_events``,
   ``procrastinate_workers``), through procrastinate's connector.
2. The adapter **never checks a token or a status itself** and adds no lock, guard,
   retry, refusal or swallowed exception procrastinate lacks: procrastinate's own
   refusals of an outcome (its SQL functions' ``RAISE``: job not found or in a status
   they do not accept) are ``StaleClaim``; every other error, a ``UniqueViolation`` of
   procrastinate's queueing lock among them, is the kit's unknown outcome
   (``BackendUnavailable``, the original chained); whatever procrastinate accepts is
   reported accepted. (An error of the stalled-jobs recipe, a task in procrastinate,
   is handled as procrastinate's worker handles a task's: see "Claim" below.)
3. A claim's **token** is what identifies that claim in procrastinate: the id of the
   worker that fetched the job and the job's id, ``f"{worker_id:016x}{job_id:016x}"``
   (32 hex digits, as the SPI wants). A stale holder therefore presents exactly what a
   stale procrastinate worker holds: its worker id and the job id. procrastinate's
   finish and retry functions take the job id alone, and its heartbeat the worker id
   alone, so neither half of a token is ever checked by procrastinate: a token whose job
   is not a job of the task named (another task's, or none) names no claim of that task
   and is ``StaleClaim`` — id mapping, the adapter's business, not a guard.
4. **Stale-work recovery runs as a deployed worker runs it:** procrastinate's documented
   stalled-jobs recipe (``docs/howto/production/retry_stalled_jobs.md``: a periodic task
   doing ``for job in await app.job_manager.get_stalled_jobs(): await
   app.job_manager.retry_job(job)``), with nothing added, run as a periodic task: one run
   per period, elected through procrastinate's own ``defer_periodic_job`` (see
   "Schedule" below).

**Lease model: ``reclaimer_threshold``.** procrastinate keeps no lease per job: a worker
sends a heartbeat (``update_heartbeat``, every ``update_heartbeat_interval`` = 10 s by
default), and a job in ``doing`` is *stalled* once the worker that fetched it has not
sent one for ``seconds_since_heartbeat`` (``get_stalled_jobs``' argument, 30 s by
default), or once that worker's row is gone (``worker_id`` NULL). The adapter's stalled
threshold is ``Capabilities.fixed_lease``, 2 s unless the DSN says otherwise
(:mod:`rdq_procrastinate.dsn`). A claim's ``lease_expires_at`` is its worker's
``last_heartbeat`` + that threshold, both by the server's clock (``NOW()`` in
procrastinate's SQL): exactly when the recipe may take it.

**A storage is a worker process.** procrastinate's ``Worker.run`` prunes, once at its
start, the workers whose heartbeat is older than ``stalled_worker_timeout``
(``prune_stalled_workers``; 30 s by default, :data:`STALLED_WORKER_TIMEOUT_S`, read from
procrastinate and left at its default: longer than the stalled threshold, so a worker is
pruned only once its jobs are stalled anyway), then registers. A storage does the same,
once per process, at its first ``claim_due``.

**Claim = a worker's fetches.** ``claim_due(queue, limit, lease)``, with procrastinate's
calls:

1. at the storage's first claim in this process, ``prune_stalled_workers`` (above);
2. ``register_worker()``: the worker id of this call's claims (its first heartbeat);
3. if this period's run of the stalled-jobs recipe is due (see "Schedule"), the recipe on
   the queue: ``get_stalled_jobs(queue=queue, seconds_since_heartbeat=threshold)``, then
   ``retry_job(job)`` for each. Whatever either raises ends the run, as it ends the
   docs' task (e.g. a ``UniqueViolation`` of the queueing lock, upstream
   procrastinate-org/procrastinate#1446, or the refusal of a job that finished between
   the list and its retry), and the adapter does with it what procrastinate's worker does
   with any task that raised and has no retry strategy: it logs the error (logger
   ``rdq_procrastinate.storage``), finishes the recipe's job ``failed`` and goes on
   fetching; the jobs the run did not reach wait for the next period's run;
4. up to ``limit`` times ``fetch_job([queue], worker_id)`` with that worker's id; a
   worker whose fetches found nothing is unregistered (it stops).

Every claim of one call shares its worker, hence its heartbeat and its lease (a
heartbeat of any of them is the worker's, as in procrastinate); the next call registers
another worker, so a reclaim always presents a new token. procrastinate's fetch does not
touch the heartbeat: a claim's lease runs from its worker's last heartbeat, which
precedes the fetch.

The lease asked for is not procrastinate's to take (``Capabilities.lease_for``). A job
the recipe requeued and the same call fetched again is a claim with ``reclaimed=True``;
procrastinate records no LEASE_EXPIRED attempt (its history is status events: a stalled
retry is ``deferred_for_retry``, the same as a worker's retry).

**Schedule of the recipe.** The docs run it as a periodic task,
``@app.periodic(cron="*/10 * * * *")`` with ``@app.task(queueing_lock="retry_stalled_jobs")``:
procrastinate's periodic deferrer defers one job per period for the whole deployment
(``JobManager.defer_periodic_job``: the database refuses a second defer of the same
period), one worker fetches and runs it. The adapter keeps exactly that, at a shorter
period: each ``claim_due`` asks ``defer_periodic_job`` for the current period's recipe job
of its queue (a job of task ``retry_stalled_jobs`` in the procrastinate queue
``rdq:recipe:<queue>:<hash>``, periodic id the queue, queueing lock
``\x1fretry_stalled_jobs:<queue>:<hash>``, the period's start in whole seconds as the
deferrer gives it); the worker that gets it (or finds an earlier period's run still
waiting, which the deferrer skips as ``AlreadyEnqueued``) fetches it, runs the recipe and
finishes it; every other worker goes straight to its fetch. The period is
``procrastinate_recipe_period`` (:mod:`rdq_procrastinate.dsn`): 1 s by default, the cron
line ``* * * * * *`` (procrastinate's cron page: "as frequent as "1 per second""),
instead of the docs' 600 s (``*/10 * * * *``). The period only decides how long after the
threshold a stalled job waits (not which jobs the recipe takes: any whose worker's
heartbeat is older than the threshold when it runs); a claim in the same period as an
earlier run finds nothing requeued until the next period. The recipe is run per queue
(``get_stalled_jobs(queue=...)``; the docs: "you're free to make the periodic task
function more complex"), so that a claim on one queue never requeues another's jobs.

**SPI mapping.** enqueue: ``defer_job_async`` (``queueing_lock`` = the task id;
``AlreadyEnqueued`` -> ``False``, or ``IdConflict`` when the ``todo`` job holding the lock
is in another queue; the delay as procrastinate's ``schedule_in`` computes it:
``utils.utcnow() + delay``). extend_lease: ``update_heartbeat(worker_id)``, then a read of
``last_heartbeat`` (+ the threshold). procrastinate's heartbeat returns nothing and
refuses nothing: on a worker row that was pruned it updates nothing, and the jobs that
worker fetched have ``worker_id`` NULL, stalled whatever the threshold, so the lease
reported is the server's now (none left). complete:
``finish_job_by_id_async(job_id, succeeded)``. reschedule: ``retry_job_by_id_async(job_id,
retry_at=utcnow() + delay)`` (what ``RetryDecision(retry_in=...)`` does). dead_letter:
``finish_job_by_id_async(job_id, failed)``. redrive: ``retry_job_by_id_async(job_id,
utcnow())`` per selected failed job (the Django admin's "Retry Job" action, which
catches nothing either: an error ends the redrive). purge:
procrastinate has no call that deletes a given failed job, so nothing is deleted (0).
purge_succeeded: ``delete_old_jobs(nb_hours=older_than in hours, queue=queue)``. get,
stats, dlq_list, now: reads (:mod:`rdq_procrastinate.rows`).

**Async.** procrastinate's worker API is async only: each storage runs one event loop in
a daemon thread (:mod:`rdq_procrastinate.runner`) with a ``PsycopgConnector`` (psycopg 3,
a small pool; connections on the namespace's search path, :mod:`rdq_procrastinate.dsn`).

**Storage half.** Imports only the standard library, :mod:`rdq_core`, procrastinate,
psycopg and this package.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, TypeVar

import procrastinate
from procrastinate import exceptions as pe
from procrastinate import jobs, utils
from procrastinate.manager import JobManager
from procrastinate.worker import Worker

from rdq_core.errors import (
    BackendUnavailable,
    IdConflict,
    NotFound,
    RdqError,
    StaleClaim,
    StaleCursor,
)
from rdq_core.model import (
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
    Task,
    micros_from_utc,
    utc_from_micros,
)
from rdq_core.spi import Storage
from rdq_procrastinate import rows
from rdq_procrastinate.dsn import connection_kwargs, schema_name, split_dsn
from rdq_procrastinate.errors import is_refusal, map_error, refused
from rdq_procrastinate.runner import INHERITED, LoopThread

__all__ = ["ProcrastinateStorage", "token_of", "worker_and_job"]

T = TypeVar("T")
UTC = timezone.utc
log = logging.getLogger(__name__)

CLOCK_DESCRIPTION = (
    "postgres now() for due checks, heartbeats and the stalled threshold (procrastinate's "
    "SQL); the client's clock for scheduled_at and retry_at (procrastinate's defer and "
    "retry API: schedule_in, retry_in, retry_job's utcnow())"
)
#: Seconds a call waits for a pooled connection before ``BackendUnavailable``.
POOL_TIMEOUT_S = 5.0
#: Connections in one storage's pool (procrastinate's connector pool; calls of several
#: threads share it).
POOL_MAX_SIZE = 3
#: A procrastinate worker, once at its start, prunes the workers whose heartbeat is older
#: than this (``Worker(stalled_worker_timeout=...)``: procrastinate's default, read from it).
STALLED_WORKER_TIMEOUT_S: float = (
    inspect.signature(Worker).parameters["stalled_worker_timeout"].default
)
#: The largest id PostgreSQL's bigint holds (worker and job ids are bigint).
_BIGINT_MAX = 2**63 - 1
_CURSOR_PREFIX = "procrastinate-dlq:"

_SELECT_TASKS = f"SELECT {rows.TASK_COLUMNS} FROM {rows.TASK_FROM}"
#: The jobs a claim fetched, with the heartbeat of the worker that fetched them.
_CLAIMED = (
    f"SELECT {rows.TASK_COLUMNS}, (SELECT last_heartbeat FROM procrastinate_workers "
    f"WHERE id = %(worker_id)s) AS claim_heartbeat FROM {rows.TASK_FROM} "
    "WHERE j.id = ANY(%(ids)s::bigint[]) ORDER BY j.id"
)
#: The stalled-jobs recipe as a periodic task (docs/howto/production/retry_stalled_jobs.md):
#: its task name, and the queueing lock's prefix (a control character: no rdq task id, all
#: printable, can ever be a recipe job's queueing lock).
RECIPE_TASK = "retry_stalled_jobs"
RECIPE_LOCK_PREFIX = "\x1fretry_stalled_jobs:"
#: The task of an rdq id: its first job (a re-enqueue while the first is no longer
#: ``todo`` is a second job with the same queueing lock: procrastinate's dedupe holds
#: only while ``todo``).
_BY_TASK_ID = _SELECT_TASKS + " WHERE j.queueing_lock = %(task_id)s ORDER BY j.id LIMIT 1"
_JOB_TASK_ID = "SELECT queueing_lock FROM procrastinate_jobs WHERE id = %(job_id)s"
_HOLDER_QUEUE = """
SELECT queue_name FROM procrastinate_jobs WHERE queueing_lock = %(task_id)s
 ORDER BY (status = 'todo') DESC, id LIMIT 1
"""
#: A worker's last heartbeat (NULL once its row was pruned) and the server's clock.
_HEARTBEAT = """
SELECT (SELECT last_heartbeat FROM procrastinate_workers WHERE id = %(worker_id)s) AS beat,
       now() AS now
"""
_NOW = "SELECT now() AS now"
_STATS = """
SELECT count(*) FILTER (WHERE status = 'todo') AS pending,
       count(*) FILTER (WHERE status = 'todo'
                          AND (scheduled_at IS NULL OR scheduled_at <= now())) AS due,
       count(*) FILTER (WHERE status = 'doing') AS in_flight,
       count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'aborted')) AS dead
  FROM procrastinate_jobs WHERE queue_name = %(queue)s
"""
_DEAD_AT = """
COALESCE((SELECT max(e.at) FROM procrastinate_events e
           WHERE e.job_id = j.id
             AND e.type IN ('failed', 'succeeded', 'cancelled', 'aborted')), 'epoch')
"""
_DLQ = f"""
SELECT * FROM (
    SELECT {rows.TASK_COLUMNS}, j.queueing_lock, {_DEAD_AT} AS dead_at
      FROM {rows.TASK_FROM}
     WHERE j.queue_name = %(queue)s AND j.status IN ('failed', 'cancelled', 'aborted')
       AND (%(handler)s::varchar IS NULL OR j.task_name = %(handler)s)
) d
 WHERE (%(after_at)s::timestamptz IS NULL OR (d.dead_at, d.id) > (%(after_at)s, %(after_id)s))
 ORDER BY d.dead_at, d.id
 LIMIT %(limit)s
"""
_SELECTED_FAILED = """
SELECT j.id FROM procrastinate_jobs j
 WHERE j.queue_name = %(queue)s AND j.status = 'failed'
   AND (%(ids)s::text[] IS NULL OR j.queueing_lock = ANY(%(ids)s::text[]))
   AND (%(handler)s::varchar IS NULL OR j.task_name = %(handler)s)
 ORDER BY j.id
"""
#: The jobs ``delete_old_jobs`` would delete now (its own criterion, queries.sql L55-69).
_OLD_SUCCEEDED = """
SELECT j.id FROM procrastinate_jobs j
 WHERE j.queue_name = %(queue)s AND j.status = 'succeeded'
   AND (SELECT max(e.at) FROM procrastinate_events e WHERE e.job_id = j.id)
       < now() - (%(nb_hours)s || 'HOUR')::INTERVAL
"""
_STILL_THERE = "SELECT id FROM procrastinate_jobs WHERE id = ANY(%(ids)s::bigint[])"
_DURABILITY = """
SELECT current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('full_page_writes') AS full_page_writes,
       current_setting('fsync') AS fsync
"""


def token_of(worker_id: int, job_id: int) -> str:
    """The claim token of the job ``job_id`` fetched by worker ``worker_id``."""
    return f"{worker_id:016x}{job_id:016x}"


def worker_and_job(token: str) -> tuple[int, int]:
    """``(worker_id, job_id)`` of a token (32 hex digits, as the SPI validated)."""
    return int(token[:16], 16), int(token[16:], 16)


class ProcrastinateStorage(Storage):
    """The SPI on procrastinate's tables in schema ``namespace`` of the server at ``dsn``.

    Nothing is opened until the first call in a process (a forked child opens its own
    loop and pool). ``procrastinate_stalled_threshold`` in the DSN's query sets the
    stalled threshold (:mod:`rdq_procrastinate.dsn`).
    """

    def __init__(
        self,
        dsn: str,
        namespace: str,
        *,
        max_size: int = POOL_MAX_SIZE,
        timeout: float = POOL_TIMEOUT_S,
    ) -> None:
        base, settings = split_dsn(dsn)
        self._dsn = base
        self.namespace = schema_name(namespace)
        self.settings = settings
        self.threshold_s = settings.threshold_s
        self.threshold = timedelta(seconds=self.threshold_s)
        self.recipe_period_s = settings.recipe_period_s
        self._pool_args: dict[str, Any] = {
            "conninfo": base,
            "kwargs": connection_kwargs(base, self.namespace),
            "min_size": 0,
            "max_size": max_size,
            "timeout": timeout,
        }
        self._lock = threading.Lock()
        self._state: tuple[LoopThread, procrastinate.App] | None = None
        self._closed = False
        self._started = False
        self._durability: tuple[bool, str] | None = None

    def __repr__(self) -> str:
        return (
            f"ProcrastinateStorage(schema {self.namespace!r}, threshold {self.threshold_s}s, "
            f"recipe every {self.recipe_period_s}s)"
        )

    @property
    def _where(self) -> str:
        return f"procrastinate in schema {self.namespace!r}"

    # ---- the loop, the app, and running procrastinate's coroutines ----

    def _app(self) -> tuple[LoopThread, procrastinate.App]:
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"{self!r} is closed")
            state = self._state
            if state is not None and not state[0].inherited:
                return state
            if state is not None:  # forked: never touch the parent's loop and pool
                INHERITED.append(state)
                self._state = None
            loop = LoopThread(f"rdq-procrastinate:{self.namespace}")
            app = procrastinate.App(connector=procrastinate.PsycopgConnector(**self._pool_args))

            async def open_app() -> None:
                await app.open_async()

            try:
                loop.run(open_app())
            except BaseException as exc:
                loop.stop()
                raise map_error(exc, "open", self._where) from exc
            self._state = (loop, app)
            self._started = False  # a new process's storage is a worker not yet started
            return self._state

    def _run(self, action: str, fn: Callable[[procrastinate.App], Awaitable[T]]) -> T:
        """Run ``fn(app)`` on the loop; every driver or library error mapped."""
        loop, app = self._app()

        async def call() -> T:
            return await fn(app)

        try:
            return loop.run(call())
        except RdqError:
            raise
        except Exception as exc:
            raise map_error(exc, action, self._where) from exc

    def _read_all(self, action: str, query: str, **params: Any) -> list[dict[str, Any]]:
        return self._run(action, lambda app: app.connector.execute_query_all_async(query, **params))

    # ---- id mapping ----

    async def _job_of(self, app: procrastinate.App, task_id: str, token: str) -> tuple[int, int]:
        """``(worker_id, job_id)`` of ``token`` if its job is a job of ``task_id``; else
        ``StaleClaim`` (the token names no claim of that task: mapping, not a guard)."""
        worker_id, job_id = worker_and_job(token)
        if worker_id > _BIGINT_MAX or job_id > _BIGINT_MAX:
            raise StaleClaim(
                f"task {task_id!r}: token {token[:8]}... names no procrastinate worker and job"
            )
        found = await app.connector.execute_query_all_async(_JOB_TASK_ID, job_id=job_id)
        if not found or found[0]["queueing_lock"] != task_id:
            raise StaleClaim(
                f"task {task_id!r}: token {token[:8]}... names job {job_id}, which is "
                + ("not there" if not found else "not a job of this task")
            )
        return worker_id, job_id

    # ---- producer ----

    def _enqueue(self, task: NewTask) -> bool:
        scheduled = utils.utcnow() + task.delay if task.delay else None
        job = jobs.Job(
            id=None,
            queue=task.queue,
            task_name=task.handler,
            lock=None,
            queueing_lock=task.id,
            task_kwargs=rows.job_args(task.id, task.payload, task.headers),
            scheduled_at=scheduled,
        )

        async def defer(app: procrastinate.App) -> str | None:
            try:
                await app.job_manager.defer_job_async(job)
            except pe.AlreadyEnqueued:
                found = await app.connector.execute_query_all_async(_HOLDER_QUEUE, task_id=task.id)
                return found[0]["queue_name"] if found else task.queue
            return None

        holder = self._run("enqueue", defer)
        if holder is None:
            return True
        if holder != task.queue:
            raise IdConflict(
                f"task id {task.id!r} is held by a job of queue {holder!r} (procrastinate's "
                "queueing lock, one todo job per lock whatever the queue)"
            )
        return False

    # ---- worker ----

    async def _stalled_recipe(self, m: JobManager, queue: str, requeued: set[int]) -> None:
        """procrastinate's documented recipe on ``queue``, as the docs write it; adds to
        ``requeued`` each job it requeued. Whatever ``get_stalled_jobs`` or ``retry_job``
        raises ends the run."""
        stalled = await m.get_stalled_jobs(queue=queue, seconds_since_heartbeat=self.threshold_s)
        for job in stalled:
            await m.retry_job(job)
            assert job.id is not None
            requeued.add(job.id)

    async def _recipe_if_due(self, m: JobManager, queue: str, worker_id: int) -> set[int]:
        """Run the recipe if this period's run is this worker's (see "Schedule")."""
        period = self.recipe_period_s
        tick = int(time.time()) // period * period  # the periodic deferrer's timestamp
        recipe_queue, recipe_id = _recipe_names(queue)
        job = jobs.Job(
            id=None,
            queue=recipe_queue,
            task_name=RECIPE_TASK,
            lock=None,
            queueing_lock=RECIPE_LOCK_PREFIX + recipe_id,
            task_kwargs={"timestamp": tick},
        )
        try:
            deferred = await m.defer_periodic_job(
                job=job, periodic_id=recipe_id, defer_timestamp=tick
            )
        except pe.AlreadyEnqueued:
            deferred = -1  # an earlier period's run still waits: any worker may take it
        if deferred is None:
            return set()  # this period's run was deferred by another worker
        recipe_job = await m.fetch_job([recipe_queue], worker_id)
        if recipe_job is None:
            return set()  # another worker fetched it first
        job_id = recipe_job.id
        requeued: set[int] = set()
        status = jobs.Status.SUCCEEDED
        try:
            await self._stalled_recipe(m, queue, requeued)
        except Exception:
            # what procrastinate's worker does with a task that raised and has no retry
            # strategy: it logs the error, finishes the job failed and goes on fetching
            log.exception("the stalled-jobs recipe on queue %r failed (job %s)", queue, job_id)
            status = jobs.Status.FAILED
        await m.finish_job(recipe_job, status=status, delete_job=False)
        return requeued

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        async def claim(app: procrastinate.App) -> tuple[int, list[int], set[int], list]:
            m: JobManager = app.job_manager
            if not self._started:  # Worker.run, once: prune, then register
                await m.prune_stalled_workers(STALLED_WORKER_TIMEOUT_S)
                self._started = True
            worker_id = await m.register_worker()
            requeued = await self._recipe_if_due(m, queue, worker_id)
            fetched: list[int] = []
            for _ in range(limit):
                job = await m.fetch_job([queue], worker_id)
                if job is None:
                    break
                assert job.id is not None
                fetched.append(job.id)
            found = []
            if fetched:
                found = await app.connector.execute_query_all_async(
                    _CLAIMED, ids=fetched, worker_id=worker_id
                )
            else:
                await m.unregister_worker(worker_id)  # a worker that got nothing stops
            return worker_id, fetched, requeued, found

        worker_id, fetched, requeued, found = self._run("claim_due", claim)
        by_id = {row["id"]: row for row in found}
        claims = []
        for job_id in fetched:
            row = by_id.get(job_id)
            if row is None:  # pragma: no cover - a job we just fetched cannot be gone
                continue
            task = rows.task_of(row, self.threshold)
            claimed_at = rows.last_started(row) or task.created_at
            beat = row["claim_heartbeat"]
            claims.append(
                Claim(
                    task=task,
                    token=token_of(worker_id, job_id),
                    claimed_at=claimed_at,
                    lease_expires_at=(beat.astimezone(UTC) if beat else claimed_at)
                    + self.threshold,
                    reclaimed=job_id in requeued,
                )
            )
        return claims

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        async def beat(app: procrastinate.App) -> dict[str, Any]:
            worker_id, _ = await self._job_of(app, task_id, token)
            await app.job_manager.update_heartbeat(worker_id)
            found = await app.connector.execute_query_all_async(_HEARTBEAT, worker_id=worker_id)
            return found[0]

        row = self._run("extend_lease", beat)
        if row["beat"] is None:  # pruned: its jobs' worker_id is NULL, stalled already
            return row["now"].astimezone(UTC)
        return row["beat"].astimezone(UTC) + self.threshold

    def _finish(self, action: str, task_id: str, token: str, status: jobs.Status) -> None:
        async def finish(app: procrastinate.App) -> None:
            _, job_id = await self._job_of(app, task_id, token)
            try:
                await app.job_manager.finish_job_by_id_async(
                    job_id=job_id, status=status, delete_job=False
                )
            except pe.ConnectorException as exc:
                if is_refusal(exc):
                    raise refused(exc, f"{action} of task {task_id!r} (job {job_id})") from exc
                raise

        self._run(action, finish)

    def _complete(self, task_id: str, token: str) -> None:
        self._finish("complete", task_id, token, jobs.Status.SUCCEEDED)

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        async def retry(app: procrastinate.App) -> None:
            _, job_id = await self._job_of(app, task_id, token)
            try:
                await app.job_manager.retry_job_by_id_async(
                    job_id=job_id, retry_at=utils.utcnow() + delay
                )
            except pe.ConnectorException as exc:
                if is_refusal(exc):
                    raise refused(exc, f"reschedule of task {task_id!r} (job {job_id})") from exc
                raise

        self._run("reschedule", retry)

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        self._finish("dead_letter", task_id, token, jobs.Status.FAILED)

    # ---- reading ----

    def _get(self, task_id: str) -> Task:
        found = self._read_all("get", _BY_TASK_ID, task_id=task_id)
        if not found:
            raise NotFound(f"no task {task_id!r} (no procrastinate job with that queueing lock)")
        return rows.task_of(found[0], self.threshold, task_id)

    def _stats(self, queue: str) -> QueueStats:
        row = self._read_all("stats", _STATS, queue=queue)[0]
        return QueueStats(
            pending=int(row["pending"]),
            due=int(row["due"]),
            in_flight=int(row["in_flight"]),
            succeeded=int(row["succeeded"]),
            dead=int(row["dead"]),
        )

    def _now(self) -> datetime:
        return self._read_all("now", _NOW)[0]["now"].astimezone(UTC)

    # ---- DLQ and housekeeping ----

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after_at: datetime | None = None
        after_id = 0
        if cursor is not None:
            after_at, after_id = _parse_cursor(cursor, queue)
        if filter is not None and (filter.is_empty or filter.error_type is not None):
            # Empty selects nothing; procrastinate stores no error, so no task has one.
            return DlqPage((), None)
        handler = filter.handler if filter is not None else None
        found = self._read_all(
            "dlq_list",
            _DLQ,
            queue=queue,
            handler=handler,
            after_at=after_at,
            after_id=after_id,
            limit=limit + 1,
        )
        page = found[:limit]
        tasks = tuple(rows.task_of(row, self.threshold, row["queueing_lock"]) for row in page)
        next_cursor = None
        if len(found) > limit and page:
            last = page[-1]
            next_cursor = _make_cursor(queue, last["dead_at"], last["id"])
        return DlqPage(tasks, next_cursor)

    def _selected_failed(self, queue: str, selector: Selector) -> list[int]:
        ids: list[str] | None = None
        handler: str | None = None
        if isinstance(selector, ByIds):
            ids = list(selector.ids)
        elif selector.error_type is not None:
            return []  # no job has an error type: procrastinate stores none
        else:
            handler = selector.handler
        found = self._read_all("select", _SELECTED_FAILED, queue=queue, ids=ids, handler=handler)
        return [row["id"] for row in found]

    def _redrive(self, queue: str, selector: Selector) -> int:
        job_ids = self._selected_failed(queue, selector)

        async def redrive(app: procrastinate.App) -> int:
            done = 0
            for job_id in job_ids:  # the Django admin's "Retry Job" action, per job
                await app.job_manager.retry_job_by_id_async(job_id=job_id, retry_at=utils.utcnow())
                done += 1
            return done

        return self._run("redrive", redrive) if job_ids else 0

    def _purge(self, queue: str, selector: Selector) -> int:
        """procrastinate has no call that deletes a given failed job (``delete_old_jobs``
        deletes by age and status set only; ``finish_job``/``cancel_job_by_id`` with
        ``delete_job`` only todo/doing jobs): nothing is deleted."""
        return 0

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        hours = (
            Decimal(older_than.days * 86_400 + older_than.seconds)
            + Decimal(older_than.microseconds) / Decimal(1_000_000)
        ) / Decimal(3600)
        nb_hours = hours.quantize(Decimal("1e-12"))

        async def purge(app: procrastinate.App) -> int:
            old = await app.connector.execute_query_all_async(
                _OLD_SUCCEEDED, queue=queue, nb_hours=nb_hours
            )
            if not old:
                return 0
            ids = [row["id"] for row in old]
            await app.job_manager.delete_old_jobs(nb_hours=nb_hours, queue=queue)  # type: ignore[arg-type]
            left = await app.connector.execute_query_all_async(_STILL_THERE, ids=ids)
            return len(ids) - len(left)

        return self._run("purge_succeeded", purge)

    # ---- lifecycle ----

    def capabilities(self) -> Capabilities:
        """``durable`` from the server's settings (read once; while they cannot be read,
        not durable, and asked again next time). Never raises."""
        durable = self._durability
        if durable is None:
            try:
                row = self._read_all("capabilities", _DURABILITY)[0]
            except RdqError as exc:
                return _capabilities(
                    False, f"unknown: the settings could not be read ({exc})", self.threshold
                )
            durable = durability_of(
                str(row["synchronous_commit"]), str(row["full_page_writes"]), str(row["fsync"])
            )
            self._durability = durable
        return _capabilities(*durable, self.threshold)

    def close(self) -> None:
        """Close this process's pool and stop the loop; idempotent. Worker rows are left
        as they are (a closed storage is a worker that stopped: its claims go stale)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            state, self._state = self._state, None
        if state is None or state[0].inherited:
            return
        loop, app = state
        try:
            loop.run(app.close_async())
        except Exception:
            pass
        loop.stop()


def _capabilities(durable: bool, durability: str, threshold: timedelta) -> Capabilities:
    return Capabilities(
        multi_process=True,
        max_payload_bytes=None,
        notify=False,
        durable=durable,
        durability=durability,
        clock=CLOCK_DESCRIPTION,
        lease_model="reclaimer_threshold",
        fixed_lease=threshold,
    )


def durability_of(synchronous_commit: str, full_page_writes: str, fsync: str) -> tuple[bool, str]:
    """Whether commits survive a SIGKILL of the server with these settings, and why."""
    shown = (
        f"synchronous_commit={synchronous_commit}, full_page_writes={full_page_writes}, "
        f"fsync={fsync}"
    )
    if synchronous_commit == "off":
        return False, f"{shown}: a commit returns before its WAL is written"
    if full_page_writes == "off":
        return False, f"{shown}: a page torn by a kill cannot be repaired from the WAL"
    disk = "" if fsync == "on" else " (not flushed to the disk: an OS crash is not covered)"
    return True, f"{shown}: a commit returns after its WAL is written{disk}"


def _recipe_names(queue: str) -> tuple[str, str]:
    """The procrastinate queue of ``queue``'s recipe jobs and their periodic id (short
    enough for procrastinate's varchar(128); the ':' keeps them apart from rdq queues)."""
    digest = hashlib.sha1(queue.encode()).hexdigest()[:12]
    recipe_id = f"{queue[:64]}:{digest}"
    return f"rdq:recipe:{recipe_id}", recipe_id


def _make_cursor(queue: str, dead_at: datetime, job_id: int) -> str:
    body = json.dumps({"q": queue, "t": micros_from_utc(dead_at.astimezone(UTC)), "j": job_id})
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def _parse_cursor(cursor: str, queue: str) -> tuple[datetime, int]:
    if not cursor.startswith(_CURSOR_PREFIX):
        raise StaleCursor(f"not a DLQ cursor of this storage: {cursor[:40]!r}")
    text = cursor[len(_CURSOR_PREFIX) :]
    try:
        body = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        q, t, j = body["q"], body["t"], body["j"]
        if not isinstance(q, str) or not isinstance(t, int) or not isinstance(j, int):
            raise ValueError("bad fields")
        at = utc_from_micros(t)
    except (ValueError, KeyError, TypeError, binascii.Error, OverflowError):
        raise StaleCursor(f"malformed DLQ cursor {cursor[:40]!r}") from None
    if q != queue:
        raise StaleCursor(f"DLQ cursor of queue {q!r}, not {queue!r}")
    return at, j
