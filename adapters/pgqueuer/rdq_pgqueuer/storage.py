"""``PgqueuerStorage``: the rdq storage SPI on pgqueuer 1.6.0, in one PostgreSQL schema.

**The adapter rules** (every adapter of ``adapters/`` keeps them):

- every **write** goes through pgqueuer's own functions — ``Queries.enqueue``,
  ``dequeue``, ``update_heartbeat``, ``log_jobs``, ``retry_job``, ``requeue_jobs``,
  ``mark_job_as_cancelled``: the public ``Queries`` API its own ``QueueManager`` calls;
  the one write of the adapter's own is its id map (see below); reads are plain SQL over
  pgqueuer's tables (``pgqueuer``, ``pgqueuer_log``) and the map;
- the adapter **never checks a token or a status itself** and adds no lock, guard or
  retry pgqueuer lacks: what pgqueuer accepts is reported accepted. pgqueuer refuses
  nothing an outcome or heartbeat asks (``log_jobs``, ``retry_job`` and
  ``update_heartbeat`` are keyed by job id alone and return ``None``: no status, no owner
  predicate — ADR-0004 "no fencing tokens"), so the only ``StaleClaim`` is a task
  pgqueuer has no job for at all (its "not found");
- a claim's token is what identifies the pick in pgqueuer: the job id and the pick's
  ``updated`` stamp (the ``NOW()`` of the dequeue, also the ``created`` of its
  ``picked`` log row), 16 hex digits each: a stale holder presents the job a stale
  pgqueuer worker holds (its ``Job``), and the adapter hands pgqueuer that job (the
  task's newest job when the token names none of the task's jobs); the pick is written
  into the outcome's ``TracebackRecord.additional_context`` (beside the reporting
  worker's ``queue_manager_id``, as pgqueuer's own worker writes it) so that the history
  can tell which claim an accepted outcome was about;
- **stale-work recovery runs as a deployed worker runs it**: pgqueuer's own, the stale
  branch of ``Queries.dequeue`` (``status = 'picked' AND heartbeat < NOW() -
  heartbeat_timeout``), inside the claim statement itself, i.e. in every ``claim_due``,
  with the heartbeat timeout the adapter deploys for all its workers (pgqueuer's docs ask
  every worker to use the same value);
- **one storage is one** ``QueueManager`` (one ``queue_manager_id``) and keeps what a
  ``QueueManager`` keeps in process, its ``job_context``: the jobs it handed out and has
  not reported. ``QueueManager.run`` skips a job its own dequeue re-picked while that job
  is in its ``job_context`` ("A late heartbeat lets our own dequeue re-pick a job still
  running here", core/qm.py), so ``claim_due`` does too: pgqueuer's dequeue has picked
  the row again, and no claim is returned for it. ``_dispatch`` releases the job before
  ``retry_job`` and ``forget_job`` once the run is over whatever its end, so
  ``reschedule`` releases it before ``retry_job``, ``complete`` and ``dead_letter``
  after ``log_jobs`` (raised or not), each only for the claim its token names (a newer
  run of the job is kept, as ``forget_job`` keeps it). The skipped re-picks go into the
  outcome's traceback (:mod:`rdq_pgqueuer.history` reads them as the run going on).

**Lease model** ``reclaimer_threshold``: a claim lives until its row's ``heartbeat`` is
older than the heartbeat timeout of the worker that dequeues next. The adapter deploys
one value, :data:`rdq_pgqueuer.dsn.DEFAULT_HEARTBEAT_TIMEOUT` (2 s) unless the DSN says
``pgqueuer_heartbeat_timeout=<seconds>`` (the plugin puts ``--rdq-option
pgqueuer_heartbeat_timeout=...`` there); pgqueuer's own default is 30 s. It is
``Capabilities.fixed_lease``; the lease a caller asks for is not used (pgqueuer keeps
nothing per claim). ``lease_expires_at`` = the row's ``heartbeat`` (PostgreSQL ``NOW()``
at the pick or the last ``update_heartbeat``) + that timeout: the server's clock, as
pgqueuer's own stale test.

**SPI mapping.** A queue is a pgqueuer entrypoint; the task id is the job's
``dedupe_key`` (pgqueuer's only idempotency: unique while the job is ``queued`` or
``picked``); the handler is kept in the map and in the job's headers (``rdq.handler``,
stripped when read); priority is always 0.

====================  ==========================================================================
``enqueue``           ``enqueue(queue, payload, 0, delay, dedupe_key=id, headers,
                      on_conflict="skip")``; skipped (a live job holds the key): ``False``, or
                      ``IdConflict`` when that job is in another entrypoint
``claim_due``         ``dequeue(limit, {queue: unlimited}, queue_manager_id, None,
                      heartbeat_timeout)``
``extend_lease``      ``update_heartbeat([job_id])``; returns the row's heartbeat + timeout
``complete``          ``log_jobs([(job, "successful", TracebackRecord)])`` (the row is
                      deleted; the record only names the claim: no exception)
``reschedule``        ``retry_job(job, delay, TracebackRecord)``
``dead_letter``       ``log_jobs([(job, "failed", TracebackRecord)])`` (``on_failure="hold"``)
``redrive``           ``requeue_jobs(job_ids)`` of the selected held jobs
``purge``             ``mark_job_as_cancelled(job_ids)`` of the selected held jobs (pgqueuer
                      has no held-only delete), then the map's rows of those tasks
``purge_succeeded``   pgqueuer deleted the rows at completion; the map's rows of the
                      succeeded tasks old enough are dropped (their ``pgqueuer_log`` rows stay:
                      pgqueuer deletes its log only per entrypoint, ``clear_queue_log``)
``get`` / ``dlq_list``  reads: the jobs' rows and ``pgqueuer_log`` (:mod:`rdq_pgqueuer.history`)
``stats`` / ``now``   reads; ``now()`` and pgqueuer's own due test ``execute_after < NOW()``
====================  ==========================================================================

**The id map** (``rdq_pgqueuer_task``, :mod:`rdq_pgqueuer.schema`): pgqueuer numbers its
jobs and deletes a job's row once it succeeds, so the adapter notes job id -> task id,
queue, handler right after ``enqueue``. Should that second statement not happen (a lost
connection), the job still carries the task id (its ``dedupe_key``) and handler (its
headers): reads find it, and a claim or a repeated enqueue writes the missing map row.

**Connections.** One ``psycopg.AsyncConnection(autocommit=True)`` (pgqueuer requires
autocommit) behind pgqueuer's ``PsycopgDriver``, driven by one asyncio loop in a daemon
thread per storage (:mod:`rdq_pgqueuer.bridge`); calls from several threads are served
one at a time. ``search_path`` is the namespace (pgqueuer's objects are unqualified),
``application_name`` ``rdq:<namespace>`` (the kit cuts a namespace's sessions by it).
No connect timeout of the adapter's own: pgqueuer sets none (its ``ConnectionSettings``
default ``connect_timeout=None``, ``PGQUEUER_CONNECT_TIMEOUT`` unset), so libpq waits as
long as the DSN's ``connect_timeout`` or ``PGCONNECT_TIMEOUT`` says, by default for good.
A connection a call found broken is replaced before the next call (the call itself
fails: pgqueuer's ``PsycopgDriver`` runs each statement on the connection it was given
and checks nothing first). In a forked child the parent's loop, connection and
``job_context`` are forgotten, never used nor closed.

**Errors.** psycopg errors and ``OSError`` become ``BackendUnavailable`` (the call may or
may not have taken effect); nothing of psycopg or pgqueuer escapes.

**Storage half**: imports the standard library, :mod:`rdq_core`, pgqueuer, psycopg and
this package only.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import psycopg
from pgqueuer.adapters.drivers.psycopg import PsycopgDriver
from pgqueuer.domain.models import Job, TracebackRecord
from pgqueuer.domain.types import JobId, QueueManagerId
from pgqueuer.ports.repository import EntrypointExecutionParameter
from pgqueuer.queries import Queries
from psycopg.conninfo import conninfo_to_dict

from rdq_core import cursor as cursors
from rdq_core.errors import BackendUnavailable, IdConflict, NotFound, RdqError, StaleClaim
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
    Status,
    Task,
    micros_from_utc,
    trusted_claim,
    utc_from_micros,
)
from rdq_core.spi import Storage
from rdq_pgqueuer import dsn as dsns
from rdq_pgqueuer.bridge import LoopThread
from rdq_pgqueuer.history import Decoded, JobRecord, LogRow, decode, traceback_context
from rdq_pgqueuer.schema import MAP_TABLE, schema_name, search_path

__all__ = ["CLOCK_DESCRIPTION", "PgqueuerStorage"]

T = TypeVar("T")

CLOCK_DESCRIPTION = (
    "postgres now() (pgqueuer's NOW() in its own statements: execute_after, heartbeat, "
    "the stale test)"
)
#: The header the adapter adds to a job: the rdq handler.
HANDLER_HEADER = "rdq.handler"
_MAYBE = "the call may or may not have taken effect"
_TOKEN_HALF = 2**64 - 1
#: How many DLQ candidates are read per round while a filter drops some.
_DLQ_CHUNK = 200

_US = "(extract(epoch FROM {}) * 1000000)::bigint"

_LOAD = f"""
WITH wanted AS (
    SELECT unnest(%(tids)s::text[]) AS task_id
    UNION
    SELECT task_id FROM {MAP_TABLE} WHERE job_id = ANY(%(jids)s::bigint[])
    UNION
    SELECT dedupe_key FROM pgqueuer
    WHERE id = ANY(%(jids)s::bigint[]) AND dedupe_key IS NOT NULL
), jobs AS (
    SELECT m.task_id, m.job_id, m.queue, m.handler, true AS mapped
    FROM {MAP_TABLE} m WHERE m.task_id IN (SELECT task_id FROM wanted)
    UNION ALL
    SELECT p.dedupe_key, p.id, p.entrypoint, coalesce(p.headers->>'{HANDLER_HEADER}', ''), false
    FROM pgqueuer p
    WHERE p.dedupe_key IN (SELECT task_id FROM wanted) AND p.status IN ('queued', 'picked')
      AND NOT EXISTS (SELECT 1 FROM {MAP_TABLE} n WHERE n.job_id = p.id)
)
SELECT j.task_id, j.job_id, j.queue, j.handler, j.mapped,
       p.status::text AS status, p.payload, p.headers,
       {_US.format("p.execute_after")} AS execute_after_us,
       {_US.format("p.heartbeat")} AS heartbeat_us,
       {_US.format("p.created")} AS created_us,
       p.id IS NOT NULL AS has_row,
       (SELECT coalesce(json_agg(json_build_array(
                    l.id, {_US.format("l.created")}, l.status, l.traceback) ORDER BY l.id),
                '[]'::json)
        FROM pgqueuer_log l WHERE l.job_id = j.job_id) AS log
FROM jobs j LEFT JOIN pgqueuer p ON p.id = j.job_id
ORDER BY j.task_id, j.job_id
"""

_JOBS_OF = f"""
SELECT job_id FROM {MAP_TABLE} WHERE task_id = %(tid)s
UNION
SELECT id FROM pgqueuer WHERE dedupe_key = %(tid)s AND status IN ('queued', 'picked')
"""

_MAP_INSERT = (
    f"INSERT INTO {MAP_TABLE} (job_id, task_id, queue, handler) "
    "VALUES (%s, %s, %s, %s) ON CONFLICT (job_id) DO NOTHING"
)

_LIVE_BY_KEY = (
    "SELECT id, entrypoint, coalesce(headers->>%s, '') FROM pgqueuer "
    "WHERE dedupe_key = %s AND status IN ('queued', 'picked')"
)

#: The newest job of every task that has a job in the queue, with its queue.
_CURRENT = f"""
cur AS (
    SELECT DISTINCT ON (task_id) task_id, job_id, queue FROM {MAP_TABLE}
    WHERE task_id IN (SELECT task_id FROM {MAP_TABLE} WHERE queue = %(q)s)
    ORDER BY task_id, job_id DESC
)"""

_STATS = f"""
WITH {_CURRENT}
SELECT
    count(*) FILTER (WHERE p.status = 'queued'),
    count(*) FILTER (WHERE p.status = 'queued' AND p.execute_after < now()),
    count(*) FILTER (WHERE p.status = 'picked'),
    count(*) FILTER (WHERE p.id IS NULL AND l.status = 'successful'),
    count(*) FILTER (WHERE p.status = 'failed' OR (p.id IS NULL AND l.status = 'exception'))
FROM cur
LEFT JOIN pgqueuer p ON p.id = cur.job_id
LEFT JOIN LATERAL (
    SELECT status FROM pgqueuer_log
    WHERE job_id = cur.job_id AND p.id IS NULL
    ORDER BY created DESC, id DESC LIMIT 1
) l ON true
WHERE cur.queue = %(q)s
"""

_PURGE_SUCCEEDED = f"""
WITH {_CURRENT},
done AS (
    SELECT cur.task_id FROM cur
    WHERE cur.queue = %(q)s
      AND NOT EXISTS (SELECT 1 FROM pgqueuer p WHERE p.id = cur.job_id)
      AND (SELECT l.status = 'successful' AND l.created <= now() - %(age)s::interval
           FROM pgqueuer_log l WHERE l.job_id = cur.job_id
           ORDER BY l.created DESC, l.id DESC LIMIT 1)
)
DELETE FROM {MAP_TABLE} WHERE task_id IN (SELECT task_id FROM done) RETURNING task_id
"""

#: Held (``failed``) jobs of a queue that are their task's newest job, in DLQ order.
_DEAD = f"""
SELECT m.task_id, {_US.format("p.updated")} AS dead_us
FROM pgqueuer p JOIN {MAP_TABLE} m ON m.job_id = p.id
WHERE p.entrypoint = %(q)s AND p.status = 'failed'
  AND NOT EXISTS (SELECT 1 FROM {MAP_TABLE} n WHERE n.task_id = m.task_id AND n.job_id > m.job_id)
  AND (%(after_us)s::bigint IS NULL
       OR ({_US.format("p.updated")}, m.task_id) > (%(after_us)s::bigint, %(after_id)s::text))
ORDER BY dead_us, m.task_id
LIMIT %(n)s
"""

_NOW = f"SELECT {_US.format('now()')}"

_HEARTBEAT = (
    f"SELECT {_US.format('p.heartbeat')}, {_US.format('now()')} "
    "FROM (SELECT 1) one LEFT JOIN pgqueuer p ON p.id = %s"
)

_DURABILITY = """
SELECT current_setting('synchronous_commit'), current_setting('full_page_writes'),
       current_setting('fsync'),
       (SELECT string_agg(n.name || '=' || coalesce(c.relpersistence::text, '?'), ', '
                          ORDER BY n.name)
        FROM unnest(%s::text[]) AS n(name)
        LEFT JOIN pg_class c ON c.oid = to_regclass(n.name))
"""


@dataclass
class _Running:
    """One entry of the storage's ``job_context``: the claim it handed out (its token) and
    the picks its own dequeue made of the job meanwhile (µs), which it skipped."""

    token: str
    repicks: list[int] = field(default_factory=list)


class PgqueuerStorage(Storage):
    """The SPI on pgqueuer in the PostgreSQL schema ``namespace`` of the server at ``dsn``
    (which may carry ``pgqueuer_heartbeat_timeout=<seconds>``, see :mod:`rdq_pgqueuer.dsn`)."""

    def __init__(self, dsn: str, namespace: str) -> None:
        clean, timeout = dsns.split(dsn)
        self._dsn = clean
        self._namespace = schema_name(namespace)
        #: The heartbeat timeout this storage deploys (its lease: ``fixed_lease``).
        self.heartbeat_timeout: timedelta = timeout or dsns.DEFAULT_HEARTBEAT_TIMEOUT
        #: One pgqueuer worker identity per storage, as one ``QueueManager`` has one.
        self.queue_manager_id = QueueManagerId(uuid.uuid4())
        self._where = f"pgqueuer at {dsns.mask(clean)}, schema {namespace}"
        self._pid = os.getpid()
        self._guard = threading.Lock()
        self._bridge: LoopThread | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._queries: Queries | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._durability: tuple[bool, str] | None = None
        self._entrypoints: dict[str, dict[str, EntrypointExecutionParameter]] = {}
        #: ``QueueManager.job_context``: job id -> the claim this storage runs it under.
        self._job_context: dict[int, _Running] = {}

    # ---- the loop, the connection, errors ---------------------------------------------------

    def _loop(self) -> LoopThread:
        with self._guard:
            if self._closed:
                raise BackendUnavailable(f"{self._where}: the storage is closed")
            if self._pid != os.getpid():  # a forked child: forget the parent's, never use it
                self._pid = os.getpid()
                self._bridge = None
                self._conn = None
                self._queries = None
                self._lock = None
                self._job_context = {}
            if self._bridge is None or not self._bridge.alive:
                self._bridge = LoopThread(f"rdq-pgqueuer-{self._namespace[-8:]}")
                self._conn = None
                self._queries = None
                self._lock = None
            return self._bridge

    def _run(
        self, action: str, body: Callable[[Queries, psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T:
        """Run ``body(queries, connection)`` on the loop, one call at a time."""
        try:
            return self._loop().run(self._session(action, body))
        except RdqError:
            raise
        except (psycopg.Error, OSError) as exc:  # pragma: no cover - mapped in _session
            raise BackendUnavailable(f"{action} ({self._where}): {_text(exc)}; {_MAYBE}") from None

    async def _session(
        self, action: str, body: Callable[[Queries, psycopg.AsyncConnection[Any]], Awaitable[T]]
    ) -> T:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            queries, conn = await self._connection(action)
            try:
                return await body(queries, conn)
            except (psycopg.Error, OSError) as exc:
                if conn.closed or conn.broken:
                    await self._forget()
                raise BackendUnavailable(
                    f"{action} ({self._where}): {_text(exc)}; {_MAYBE}"
                ) from None

    async def _connection(self, action: str) -> tuple[Queries, psycopg.AsyncConnection[Any]]:
        conn = self._conn
        if conn is not None and (conn.closed or conn.broken):
            await self._forget()
            conn = None
        if conn is None or self._queries is None:
            try:
                conn = await psycopg.AsyncConnection.connect(self._dsn, **self._connect_kwargs())
            except (psycopg.Error, OSError) as exc:
                raise BackendUnavailable(
                    f"{action}: cannot connect ({self._where}): {_text(exc)}"
                ) from None
            self._conn = conn
            self._queries = Queries(PsycopgDriver(conn))
        return self._queries, conn

    def _connect_kwargs(self) -> dict[str, Any]:
        try:
            given = conninfo_to_dict(self._dsn)
        except psycopg.ProgrammingError as exc:
            raise BackendUnavailable(f"invalid DSN {dsns.mask(self._dsn)!r}: {exc}") from None
        options = search_path(self._namespace)
        if given.get("options"):
            options = f"{given['options']} {options}"
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": f"rdq:{self._namespace}",
            "client_encoding": "utf8",
            "options": options,
        }
        return kwargs

    async def _forget(self) -> None:
        conn, self._conn, self._queries = self._conn, None, None
        if conn is not None and not conn.closed:
            try:
                await conn.close()
            except (psycopg.Error, OSError):  # pragma: no cover - closing a dead one
                pass

    def close(self) -> None:
        with self._guard:
            if self._closed:
                return
            self._closed = True
            bridge, self._bridge = self._bridge, None
            forked = self._pid != os.getpid()
        if bridge is None or forked or not bridge.alive:
            return
        try:
            bridge.run(asyncio.wait_for(self._forget(), 5.0))
        except Exception:  # pragma: no cover - closing is best effort
            pass
        finally:
            bridge.stop()

    # ---- producer -------------------------------------------------------------------------

    def _enqueue(self, task: NewTask) -> bool:
        headers = dict(task.headers)
        headers[HANDLER_HEADER] = task.handler

        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> bool:
            (job_id,) = await q.enqueue(
                task.queue,
                bytes(task.payload),
                0,
                task.delay,
                task.id,
                headers,
                on_conflict="skip",
            )
            if job_id is not None:
                await conn.execute(_MAP_INSERT, (job_id, task.id, task.queue, task.handler))
                return True
            # pgqueuer skipped it: a queued or picked job holds the dedupe key (anywhere).
            cur = await conn.execute(_LIVE_BY_KEY, (HANDLER_HEADER, task.id))
            live = await cur.fetchone()
            if live is None:
                return False  # that job ended meanwhile: pgqueuer said "duplicate"
            live_id, entrypoint, handler = live
            if entrypoint != task.queue:
                raise IdConflict(
                    f"task id {task.id!r} is the dedupe_key of pgqueuer job {live_id} in "
                    f"entrypoint {entrypoint!r}, not {task.queue!r}"
                )
            await conn.execute(_MAP_INSERT, (live_id, task.id, entrypoint, handler))
            return False

        return self._run("enqueue", body)

    # ---- worker -----------------------------------------------------------------------------

    def _entrypoint(self, queue: str) -> dict[str, EntrypointExecutionParameter]:
        found = self._entrypoints.get(queue)
        if found is None:
            found = {queue: EntrypointExecutionParameter(concurrency_limit=0)}
            self._entrypoints[queue] = found
        return found

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        timeout = self.heartbeat_timeout  # the deployed threshold; ``lease`` is not pgqueuer's

        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> list[Claim]:
            jobs = await q.dequeue(
                limit, self._entrypoint(queue), self.queue_manager_id, None, timeout
            )
            if not jobs:
                return []
            loaded = await self._load(conn, job_ids=[j.id for j in jobs])
            by_job = {job_id: tid for tid, (_, job_ids, _) in loaded.items() for job_id in job_ids}
            claims = []
            for job in jobs:
                running = self._job_context.get(job.id)
                if running is not None:
                    # QueueManager.run: "A late heartbeat lets our own dequeue re-pick a job
                    # still running here." -- skipped, the run in hand goes on.
                    running.repicks.append(micros_from_utc(_utc(job.updated)))
                    continue
                tid = by_job.get(job.id)
                if tid is None:
                    continue  # a job no rdq producer enqueued (no dedupe key, not mapped)
                decoded, _, unmapped = loaded[tid]
                if decoded is None:  # pragma: no cover - the job was just picked
                    continue
                if job.id in unmapped:
                    await conn.execute(
                        _MAP_INSERT, (job.id, tid, decoded.task.queue, decoded.task.handler)
                    )
                claimed_at = _utc(job.updated)
                token = self._token(job.id, claimed_at)
                self._job_context[job.id] = _Running(token)
                claims.append(
                    trusted_claim(
                        decoded.task,
                        token,
                        claimed_at,
                        _utc(job.heartbeat) + timeout,
                        decoded.reclaimed,
                    )
                )
            return claims

        return self._run("claim_due", body)

    @staticmethod
    def _token(job_id: int, picked_at: datetime) -> str:
        """The pick's identity in pgqueuer: the job id, then the ``updated`` the pick
        stamped (µs since the epoch), 16 hex digits each."""
        return f"{job_id:016x}{micros_from_utc(picked_at) & _TOKEN_HALF:016x}"

    async def _job_of(self, conn: psycopg.AsyncConnection[Any], task_id: str, token: str) -> int:
        """The pgqueuer job an outcome about ``task_id`` with ``token`` is about: the job
        the token names when it is one of the task's, else the task's newest job;
        ``StaleClaim`` when pgqueuer has no job for the task (its "not found")."""
        cur = await conn.execute(_JOBS_OF, {"tid": task_id})
        jobs = {int(r[0]) for r in await cur.fetchall()}
        named = int(token[:16], 16)
        if named in jobs:
            return named
        if jobs:
            return max(jobs)
        raise StaleClaim(f"task {task_id!r}: pgqueuer has no job for it")

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        timeout = self.heartbeat_timeout

        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> datetime:
            job_id = await self._job_of(conn, task_id, token)
            await q.update_heartbeat([JobId(job_id)])
            cur = await conn.execute(_HEARTBEAT, (job_id,))
            row = await cur.fetchone()
            assert row is not None
            beat = row[0] if row[0] is not None else row[1]  # gone: accepted all the same
            return utc_from_micros(int(beat)) + timeout

        return self._run("extend_lease", body)

    def _running(self, job_id: int, token: str) -> _Running | None:
        """The ``job_context`` entry of the claim ``token`` names, if this storage runs it."""
        running = self._job_context.get(job_id)
        return running if running is not None and running.token == token else None

    def _release(self, job_id: int, running: _Running | None) -> None:
        """``QueueManager.forget_job``: drop the entry if it is still the one of that run."""
        if running is not None and self._job_context.get(job_id) is running:
            del self._job_context[job_id]

    def _complete(self, task_id: str, token: str) -> None:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> None:
            job_id = await self._job_of(conn, task_id, token)
            running = self._running(job_id, token)
            try:
                record = self._traceback(job_id, token, Outcome.SUCCESS, None, running)
                await q.log_jobs([(_job(job_id), "successful", record)])
            finally:
                self._release(job_id, running)

        self._run("complete", body)

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> None:
            job_id = await self._job_of(conn, task_id, token)
            running = self._running(job_id, token)
            # _dispatch: "Release before re-queueing, or our own dequeue skips the re-picked row."
            self._release(job_id, running)
            record = self._traceback(job_id, token, Outcome.RETRYABLE_FAILURE, error, running)
            await q.retry_job(_job(job_id), delay, record)

        self._run("reschedule", body)

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> None:
            job_id = await self._job_of(conn, task_id, token)
            running = self._running(job_id, token)
            try:
                record = self._traceback(job_id, token, outcome, error, running)
                await q.log_jobs([(_job(job_id), "failed", record)])
            finally:
                self._release(job_id, running)

        self._run("dead_letter", body)

    def _traceback(
        self,
        job_id: int,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        running: _Running | None,
    ) -> TracebackRecord:
        """What pgqueuer's worker logs with a retry or a failure (``TracebackRecord``), from
        the rdq error; ``additional_context`` as the worker's (its ``queue_manager_id``),
        plus the rdq outcome, the pick the token names and the re-picks of the job this
        storage skipped while it ran that pick."""
        repicks = running.repicks if running is not None else ()
        context: dict[str, object] = {
            "queue_manager_id": str(self.queue_manager_id),
            **traceback_context(outcome, error, int(token[16:], 16), repicks),
        }
        return TracebackRecord(
            job_id=JobId(job_id),
            timestamp=datetime.now(timezone.utc),
            exception_type=error.type if error else "",
            exception_message=error.message if error else "",
            traceback=(error.detail or "") if error else "",
            additional_context=context,
        )

    # ---- reading ----------------------------------------------------------------------------

    async def _load(
        self,
        conn: psycopg.AsyncConnection[Any],
        task_ids: Sequence[str] = (),
        job_ids: Sequence[int] = (),
    ) -> dict[str, tuple[Decoded | None, list[int], set[int]]]:
        """Every task named (or owning a job named): ``task id -> (the decoded task or None
        when gone, its job ids oldest first, those the map lacks)``. One statement."""
        cur = await conn.execute(_LOAD, {"tids": list(task_ids), "jids": list(job_ids)})
        rows = await cur.fetchall()
        grouped: dict[str, list[tuple[Any, ...]]] = {}
        for r in rows:
            grouped.setdefault(r[0], []).append(r)
        out: dict[str, tuple[Decoded | None, list[int], set[int]]] = {}
        for tid, group in grouped.items():
            records = []
            for r in group:
                (_, job_id, queue, handler, _, status, payload, headers) = r[:8]
                (execute_after_us, heartbeat_us, created_us, has_row, log) = r[8:]
                row = (
                    {
                        "status": status,
                        "payload": payload,
                        "headers": headers,
                        "execute_after_us": execute_after_us,
                        "heartbeat_us": heartbeat_us,
                        "created_us": created_us,
                    }
                    if has_row
                    else None
                )
                records.append(
                    JobRecord(
                        int(job_id),
                        queue,
                        handler,
                        row,
                        tuple(LogRow(int(i), int(at), str(s), tb) for i, at, s, tb in log),
                    )
                )
            out[tid] = (
                decode(tid, records, self.heartbeat_timeout),
                [rec.job_id for rec in records],
                {int(r[1]) for r in group if not r[4]},
            )
        return out

    def _get(self, task_id: str) -> Task:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> Task:
            found = (await self._load(conn, task_ids=[task_id])).get(task_id)
            if found is None or found[0] is None:
                raise NotFound(f"no task {task_id!r}")
            return found[0].task

        return self._run("get", body)

    def _stats(self, queue: str) -> QueueStats:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> QueueStats:
            cur = await conn.execute(_STATS, {"q": queue})
            row = await cur.fetchone()
            assert row is not None
            pending, due, in_flight, succeeded, dead = (int(x) for x in row)
            return QueueStats(pending, due, in_flight, succeeded, dead)

        return self._run("stats", body)

    def _now(self) -> datetime:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> datetime:
            cur = await conn.execute(_NOW)
            row = await cur.fetchone()
            assert row is not None
            return utc_from_micros(int(row[0]))

        return self._run("now", body)

    # ---- DLQ and housekeeping ---------------------------------------------------------------

    async def _dead(
        self,
        conn: psycopg.AsyncConnection[Any],
        queue: str,
        filter: DlqFilter | None,
        after: cursors.DlqPosition | None,
        want: int | None,
    ) -> list[tuple[Task, int, int]]:
        """DEAD tasks of ``queue`` in DLQ order after ``after`` that ``filter`` selects
        (``None``: all), with their dead-letter time (µs) and held job; at most ``want``
        (None: all)."""
        out: list[tuple[Task, int, int]] = []
        while want is None or len(out) < want:
            chunk = _DLQ_CHUNK if want is None else max(want - len(out), _DLQ_CHUNK)
            cur = await conn.execute(
                _DEAD,
                {
                    "q": queue,
                    "after_us": None if after is None else after.dead_at_us,
                    "after_id": None if after is None else after.task_id,
                    "n": chunk,
                },
            )
            candidates = [(str(r[0]), int(r[1])) for r in await cur.fetchall()]
            if not candidates:
                break
            loaded = await self._load(conn, task_ids=[tid for tid, _ in candidates])
            for tid, dead_us in candidates:
                decoded, job_ids, _ = loaded.get(tid, (None, [], set()))
                if decoded is None or decoded.task.status is not Status.DEAD:
                    continue
                if filter is not None and not filter.matches(decoded.task):
                    continue
                out.append((decoded.task, dead_us, job_ids[-1]))
                if want is not None and len(out) >= want:
                    break
            after = cursors.DlqPosition(candidates[-1][1], candidates[-1][0])
            if len(candidates) < chunk:
                break
        return out

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after = None if cursor is None else cursors.decode(queue, cursor)

        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> DlqPage:
            found = await self._dead(conn, queue, filter, after, limit + 1)
            page = found[:limit]
            next_cursor = None
            if len(found) > limit and page:
                last, dead_us, _ = page[-1]
                next_cursor = cursors.encode(queue, cursors.DlqPosition(dead_us, last.id))
            return DlqPage(tuple(t for t, _, _ in page), next_cursor)

        return self._run("dlq_list", body)

    async def _selected(
        self, conn: psycopg.AsyncConnection[Any], queue: str, selector: Selector
    ) -> dict[str, int]:
        """The DEAD tasks of ``queue`` the selector names -> their newest (held) job."""
        if isinstance(selector, ByIds):
            loaded = await self._load(conn, task_ids=list(dict.fromkeys(selector.ids)))
            return {
                tid: job_ids[-1]
                for tid, (decoded, job_ids, _) in loaded.items()
                if decoded is not None
                and decoded.task.status is Status.DEAD
                and decoded.task.queue == queue
                and tid in selector.ids
            }
        return {t.id: job for t, _, job in await self._dead(conn, queue, selector, None, None)}

    def _redrive(self, queue: str, selector: Selector) -> int:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> int:
            chosen = await self._selected(conn, queue, selector)
            if chosen:
                await q.requeue_jobs([JobId(j) for j in chosen.values()])
            return len(chosen)

        return self._run("redrive", body)

    def _purge(self, queue: str, selector: Selector) -> int:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> int:
            chosen = await self._selected(conn, queue, selector)
            if chosen:
                await q.mark_job_as_cancelled([JobId(j) for j in chosen.values()])
                await conn.execute(
                    f"DELETE FROM {MAP_TABLE} WHERE task_id = ANY(%s)", (list(chosen),)
                )
            return len(chosen)

        return self._run("purge", body)

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        async def body(q: Queries, conn: psycopg.AsyncConnection[Any]) -> int:
            cur = await conn.execute(_PURGE_SUCCEEDED, {"q": queue, "age": older_than})
            return len({r[0] for r in await cur.fetchall()})

        return self._run("purge_succeeded", body)

    # ---- capabilities -----------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """What this storage supports; ``durable`` from the server's settings and the
        persistence of pgqueuer's tables (pgqueuer's ``durable`` durability, the default,
        makes them logged; ``balanced``/``volatile`` make some UNLOGGED), read once (while
        they cannot be read: not durable, and asked again next time)."""
        durable = self._durability
        if durable is None:
            try:
                durable = self._run("capabilities", _read_durability)
            except BackendUnavailable as exc:
                return self._capabilities(False, f"not read: {exc}")
            self._durability = durable
        return self._capabilities(*durable)

    def _capabilities(self, durable: bool, durability: str) -> Capabilities:
        return Capabilities(
            multi_process=True,
            max_payload_bytes=None,
            notify=False,
            clock=CLOCK_DESCRIPTION,
            durable=durable,
            durability=durability,
            lease_model="reclaimer_threshold",
            fixed_lease=self.heartbeat_timeout,
        )

    def __repr__(self) -> str:
        return f"<PgqueuerStorage {self._where} heartbeat_timeout={self.heartbeat_timeout}>"


async def _read_durability(q: Queries, conn: psycopg.AsyncConnection[Any]) -> tuple[bool, str]:
    names = q.qbq.settings
    tables = [names.queue_table, names.queue_table_log, MAP_TABLE]
    cur = await conn.execute(_DURABILITY, (tables,))
    row = await cur.fetchone()
    assert row is not None
    sync_commit, full_page_writes, fsync, persistence = (str(x) for x in row)
    said = (
        f"synchronous_commit={sync_commit}, full_page_writes={full_page_writes}, "
        f"fsync={fsync}; relpersistence {persistence}"
    )
    logged = all(part.endswith("=p") for part in persistence.split(", "))
    if not logged:
        return False, f"{said}: a pgqueuer table is not a logged table (p): not durable"
    if sync_commit == "off":
        return False, f"{said}: commits return before their WAL is written: not durable"
    if full_page_writes != "on":
        return False, f"{said}: a torn page cannot be repaired: not durable"
    return True, f"{said}: durable"


def _job(job_id: int) -> Job:
    """The ``Job`` pgqueuer's outcome calls take: they read its ``id`` only (a worker
    passes the ``Job`` it dequeued; the adapter passes one of that id)."""
    return Job.model_construct(id=JobId(job_id))


def _utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)


def _text(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
