"""pgqueuer 1.6.0: a stale worker's retry_job() brings a held ('failed') job back to life.

An entrypoint with on_failure="hold" whose handler asks for a retry on a transient
error (RetryRequested, docs/guides/retry.md) and lets any other error through (the job
is then held: status 'failed', pgqueuer's dead letters). Three workers, each a
QueueManager of its own, making the calls QueueManager makes (pgqueuer/core/qm.py):

1. worker A dequeues job 1 and freezes (a paused container: no heartbeat goes out);
2. heartbeat_timeout later, worker B's dequeue re-picks job 1; B's run fails for good:
   log_jobs 'failed' (QueueManager.log_failure with on_failure="hold"): the job is held;
3. A wakes up; its run met a transient error and raises RetryRequested: retry_job
   (job 1) updates by job id alone, so the held job is 'queued' again, attempts + 1;
4. worker C's dequeue picks job 1: the held job runs again, with no requeue.

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
        failure = ValueError("B: bad input")
        await qb.log_jobs([(b_job, "failed", tb(failure, jid, b))])  # on_failure="hold"
        held = await qa.queue_job_by_id(jid)
        retry = RetryRequested(reason="A: transient error")
        await qa.retry_job(a_job, retry.delay, tb(retry, a_job.id, a))  # A wakes up
        await asyncio.sleep(0.01)
        c_jobs = await qc.dequeue(BATCH, EPS, c, None, T)  # worker C
        cur = await ca.execute(
            "SELECT status::text FROM pgqueuer_log WHERE job_id = %s ORDER BY id", (jid,)
        )
        log = [r[0] for r in await cur.fetchall()]
        print(f"A picked job {jid} and froze; after heartbeat_timeout={T} B re-picked it")
        print(f"B's run failed, on_failure='hold': status={held.status if held else None}")
        print("A woke up: RetryRequested -> retry_job accepted (returns None)")
        print(f"C dequeue -> {[j.id for j in c_jobs]}; log table {log}")
        if c_jobs and c_jobs[0].id == jid:
            print("PRESENT: a held ('failed') job ran again without requeue_jobs()")
            return 1
        print("gone: the held job stayed held")
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
