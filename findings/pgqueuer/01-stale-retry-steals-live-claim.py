"""pgqueuer 1.6.0: a stale worker's retry_job() takes a live, heartbeating claim away.

Worker A picks a job and stalls past heartbeat_timeout; worker B re-picks it (the stale
branch of Queries.dequeue) and keeps heartbeating. A wakes up and asks for a retry
(RetryRequested -> Queries.retry_job, what QueueManager._dispatch calls): retry_job
updates the row by job id alone, so the job B is running goes back to 'queued' and a
third worker C picks it while B's heartbeat is fresh. Two workers run the job at once
although "a dequeue can re-pick a live job only once its stored heartbeat is older than
heartbeat_timeout" (docs/guides/heartbeat.md).

Exits 1 while this happens, 0 once it does not. Needs only pgqueuer and a PostgreSQL
server: PGDSN (default postgresql://postgres@127.0.0.1:5432/postgres); works in a schema
of its own, dropped at the end.
"""

import asyncio
import os
import sys
import uuid
from datetime import timedelta

import psycopg
from pgqueuer.models import TracebackRecord
from pgqueuer.queries import EntrypointExecutionParameter, Queries

DSN = os.environ.get("PGDSN", "postgresql://postgres@127.0.0.1:5432/postgres")
T = timedelta(seconds=1)  # heartbeat_timeout, as QueueManager.run(heartbeat_timeout=T) uses it
SCHEMA = f"pgq_repro_{uuid.uuid4().hex[:12]}"


async def worker() -> tuple[psycopg.AsyncConnection, Queries]:
    conn = await psycopg.AsyncConnection.connect(
        DSN, autocommit=True, options=f"-c search_path={SCHEMA}"
    )
    return conn, Queries.from_psycopg_connection(conn)


async def main() -> int:
    admin = await psycopg.AsyncConnection.connect(DSN, autocommit=True)
    await admin.execute(f"CREATE SCHEMA {SCHEMA}")
    conns = []
    try:
        (ca, qa), (cb, qb), (cc, qc) = [await worker() for _ in range(3)]
        conns = [ca, cb, cc]
        await qa.install()  # what `pgq install` runs
        eps = {"job": EntrypointExecutionParameter(concurrency_limit=0)}
        [jid] = await qa.enqueue("job", b"payload")
        await asyncio.sleep(0.01)
        (a_job,) = await qa.dequeue(1, eps, uuid.uuid4(), None, T)  # A picks, then stalls
        await asyncio.sleep(T.total_seconds() + 0.3)
        (b_job,) = await qb.dequeue(1, eps, uuid.uuid4(), None, T)  # B re-picks the stale job
        await qb.update_heartbeat([b_job.id])  # B is alive and heartbeating
        tb = TracebackRecord.from_exception(RuntimeError("A: RetryRequested"), a_job.id)
        await qa.retry_job(a_job, timedelta(0), tb)  # A wakes up and asks for a retry
        await asyncio.sleep(0.01)
        c_jobs = await qc.dequeue(1, eps, uuid.uuid4(), None, T)  # worker C
        row = await qa.queue_job_by_id(jid)
        print(f"A picked job {jid}; B re-picked it after {T} and heartbeats")
        print("A's late retry_job accepted")
        print(f"C dequeue -> {[j.id for j in c_jobs]}; row: {row.status if row else None}")
        if c_jobs and c_jobs[0].id == jid:
            print("PRESENT: C holds the job B is still running and heartbeating")
            return 1
        print("gone: the live claim was not handed out again")
        return 0
    finally:
        for c in conns:
            await c.close()
        await admin.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
        await admin.close()


sys.exit(asyncio.run(main()))
