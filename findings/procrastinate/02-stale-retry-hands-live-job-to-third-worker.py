"""procrastinate 3.10.0: a stalled worker's late retry_job (its task raised an error its
RetryStrategy retries) is accepted after the documented stalled-jobs recipe requeued its
job and worker B fetched it: B's running job goes back to 'todo' and worker C fetches it
while B, which never stalled and keeps heartbeating, still runs it -- two live workers on
one job.

Worker A fetches the job and stops heartbeating (a container pause, a frozen VM); the
recipe requeues it once A's heartbeat is older than seconds_since_heartbeat; B fetches
it; A resumes, its task raises, and A's worker calls retry_job (what
Worker._persist_job_status does with a RetryDecision).

Only procrastinate and PostgreSQL. Server: $PROCRASTINATE_REPRO_DSN (default
postgresql://postgres@127.0.0.1:5432/postgres); a schema of its own, dropped at the end.
Settings: procrastinate's defaults (get_stalled_jobs' seconds_since_heartbeat = 30 s: the
run takes about 31 s); PROCRASTINATE_REPRO_FAST=1 shortens it to 1 s (the docs: "This
duration can be configured with the `seconds_since_heartbeat` parameter of the
`get_stalled_jobs` method").
Exit 1 while the behaviour is there (C fetches B's live job), 0 once A's retry is refused.
"""

import asyncio
import inspect
import logging
import os
import sys
import uuid

import procrastinate
import psycopg
from procrastinate import exceptions, jobs
from procrastinate.manager import JobManager

DSN = os.environ.get("PROCRASTINATE_REPRO_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "repro_" + uuid.uuid4().hex[:12]
logging.getLogger("procrastinate").setLevel(logging.ERROR)  # its "app in __main__" note
DEFAULT = inspect.signature(JobManager.get_stalled_jobs).parameters["seconds_since_heartbeat"]
FAST = os.environ.get("PROCRASTINATE_REPRO_FAST") == "1"
#: get_stalled_jobs(seconds_since_heartbeat=...): None is the recipe's call, its default
THRESHOLD = 1.0 if FAST else None


async def stalled(m: JobManager) -> list[jobs.Job]:
    if THRESHOLD is None:
        return list(await m.get_stalled_jobs())
    return list(await m.get_stalled_jobs(seconds_since_heartbeat=THRESHOLD))


async def main() -> int:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=DSN, kwargs={"options": f"-c search_path={SCHEMA}"}
        )
    )
    threshold = DEFAULT.default if THRESHOLD is None else THRESHOLD
    print(
        f"procrastinate {procrastinate.__version__}; seconds_since_heartbeat={threshold} "
        f"({'shortened; ' if FAST else ''}default {DEFAULT.default})"
    )
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        m = app.job_manager
        job = await m.defer_job_async(
            jobs.Job(id=None, queue="q", task_name="t", lock=None, queueing_lock=None)
        )
        worker_a = await m.register_worker()
        job_a = await m.fetch_job(["q"], worker_a)
        await asyncio.sleep(threshold + 0.5)  # A stops heartbeating (paused)
        for listed in await stalled(m):
            await m.retry_job(listed)  # the documented recipe
        worker_b = await m.register_worker()
        job_b = await m.fetch_job(["q"], worker_b)
        print(
            f"A ({worker_a}) fetched job {job_a.id}, stalled; the recipe requeued it; "
            f"B ({worker_b}) fetched job {job_b.id}"
        )
        await m.update_heartbeat(worker_b)  # B is alive and heartbeating
        try:
            # what A's Worker._persist_job_status does when the task raises a retryable error
            await m.retry_job(job_a, retry_at=None)
            stale_accepted = True
        except exceptions.ConnectorException:
            stale_accepted = False
        print(f"A resumes, its retry_job accepted: {stale_accepted}")
        stalled_now = [j.id for j in await stalled(m)]
        worker_c = await m.register_worker()
        job_c = await m.fetch_job(["q"], worker_c)
        double = job_c is not None and job_c.id == job_b.id
        print(
            f"B's heartbeat is fresh (stalled now: {stalled_now}); C ({worker_c}) fetched "
            f"job {job_c and job_c.id} while B runs it: two live workers = {double}"
        )
        events = await app.connector.execute_query_all_async(
            "SELECT type::text FROM procrastinate_events WHERE job_id = %(id)s ORDER BY id",
            id=job.id,
        )
        print(f"events: {[e['type'] for e in events]}")
        return 1 if double else 0


def run() -> int:
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    try:
        return asyncio.run(main())
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


if __name__ == "__main__":
    sys.exit(run())
