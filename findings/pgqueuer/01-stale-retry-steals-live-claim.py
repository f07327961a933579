"""pgqueuer 1.6.0: a stale worker's retry_job() takes a live, heartbeating job away.

Three workers, each a QueueManager of its own (its own queue_manager_id), making the
calls QueueManager makes (pgqueuer/core/qm.py): fetch_jobs -> Queries.dequeue, the
heartbeat buffer -> Queries.update_heartbeat, _dispatch -> Queries.retry_job on
RetryRequested, the job status log buffer -> Queries.log_jobs.

1. worker A dequeues job 1 (status 'picked') and freezes (a paused container: no
   heartbeat goes out);
2. heartbeat_timeout later, worker B's dequeue re-picks job 1 (its stale branch) and B
   runs it, heartbeating;
3. A wakes up; its handler raises RetryRequested; A releases the job from its
   job_context and calls retry_job(job 1): the row goes back to 'queued' (retry_job
   updates by job id alone), although B holds it and its heartbeat is fresh;
4. worker C's dequeue picks job 1: B and C now run it at once. (B's own dequeue would
   skip it, job 1 being in B's job_context; any other worker's, A's included, runs it.)
5. B finishes first: log_jobs 'successful' deletes the row; C's run then fails, and its
   log_jobs 'exception' writes nothing: the log table keeps no trace of C's run.

Exits 1 while step 4 happens, 0 once it does not, 2 on any other error. Needs only
pgqueuer (with psycopg) and a PostgreSQL server: PGDSN (default
postgresql://postgres@127.0.0.1:5432/postgres); works in a schema of its own, dropped at
the end.

Settings: heartbeat_timeout is pgqueuer's default, 30 s (QueueManager.run,
`pgq run --heartbeat-timeout`); HEARTBEAT_TIMEOUT=<seconds> shortens it (the sequence
is the same, only A's freeze is shorter). batch_size 10 (the default of both).
"""

import asyncio
import os
import sys
import traceback
import uuid
from datetime import timedelta

import psycopg
from pgqueuer.errors import RetryRequested
from pgqueuer.models import TracebackRecord
from pgqueuer.queries import EntrypointExecutionParameter, Queries

DSN = os.environ.get("PGDSN", "postgresql://postgres@127.0.0.1:5432/postgres")
T = timedelta(seconds=float(os.environ.get("HEARTBEAT_TIMEOUT", "30")))
BATCH = 10
SCHEMA = f"pgq_repro_{uuid.uuid4().hex[:12]}"
EPS = {"job": EntrypointExecutionParameter(concurrency_limit=0)}


async def worker() -> tuple[psycopg.AsyncConnection, Queries, uuid.UUID]:
    conn = await psycopg.AsyncConnection.connect(
        DSN, autocommit=True, options=f"-c search_path={SCHEMA}"
    )
    return conn, Queries.from_psycopg_connection(conn), uuid.uuid4()


def tb(exc: Exception, job_id: int, qm: uuid.UUID) -> TracebackRecord:
    """The traceback record QueueManager writes (its additional_context)."""
    return TracebackRecord.from_exception(
        exc=exc, job_id=job_id, additional_context={"entrypoint": "job", "queue_manager_id": qm}
    )


async def log_of(conn: psycopg.AsyncConnection, job_id: int) -> list[str]:
    """The job's rows in the log table (pgqueuer_log), oldest first."""
    cur = await conn.execute(
        "SELECT status::text FROM pgqueuer_log WHERE job_id = %s ORDER BY id", (job_id,)
    )
    return [r[0] for r in await cur.fetchall()]


async def main() -> int:
    admin = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
    await admin.execute(f"CREATE SCHEMA {SCHEMA}")
    conns = []
    try:
        (ca, qa, a), (cb, qb, b), (cc, qc, c) = [await worker() for _ in range(3)]
        conns = [ca, cb, cc]
        await qa.install()  # what `pgq install` runs
        [jid] = await qa.enqueue("job", b"payload")
        await asyncio.sleep(0.01)
        (a_job,) = await qa.dequeue(BATCH, EPS, a, None, T)  # A picks it, then freezes
        await asyncio.sleep(T.total_seconds() + 0.5)
        (b_job,) = await qb.dequeue(BATCH, EPS, b, None, T)  # B's stale branch re-picks it
        await qb.update_heartbeat([b_job.id])  # B runs it and heartbeats
        retry = RetryRequested(reason="A: transient error")
        await qa.retry_job(a_job, retry.delay, tb(retry, a_job.id, a))  # A wakes up
        await asyncio.sleep(0.01)
        c_jobs = await qc.dequeue(BATCH, EPS, c, None, T)  # worker C
        row = await qa.queue_job_by_id(jid)
        print(f"A picked job {jid} and froze; after heartbeat_timeout={T} B re-picked it")
        print("A woke up: RetryRequested -> retry_job accepted (returns None)")
        print(f"C dequeue -> {[j.id for j in c_jobs]}; row: {row.status if row else None}")
        present = bool(c_jobs) and c_jobs[0].id == jid
        if present:
            await qb.log_jobs([(b_job, "successful", None)])  # B finishes first
            failure = RuntimeError("C: handler failed")
            await qc.log_jobs([(c_jobs[0], "exception", tb(failure, jid, c))])
            print(f"B logged successful, C logged exception: log table {await log_of(ca, jid)}")
            print("PRESENT: C held the job B was still running and heartbeating")
            return 1
        print("gone: the live job was not handed out again")
        return 0
    finally:
        for conn in conns:
            await conn.close()
        await admin.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
        await admin.close()


try:
    code = asyncio.run(main())
except Exception:
    traceback.print_exc()
    code = 2
sys.exit(code)
