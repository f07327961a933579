"""procrastinate 3.10.0: a stalled worker's late finish_job is accepted after the
documented stalled-jobs recipe requeued its job and another worker fetched it; the live
worker's own outcome is then refused.

Worker A fetches the job and stops heartbeating (a container pause, a frozen VM); the
recipe (get_stalled_jobs, then retry_job) requeues it once A's heartbeat is older than
seconds_since_heartbeat; worker B fetches it; A resumes and finishes it: accepted. B's
finish: refused.

Only procrastinate and PostgreSQL. Server: $PROCRASTINATE_REPRO_DSN (default
postgresql://postgres@127.0.0.1:5432/postgres); a schema of its own, dropped at the end.
Settings: procrastinate's defaults (get_stalled_jobs' seconds_since_heartbeat = 30 s: the
run takes about 31 s); PROCRASTINATE_REPRO_FAST=1 shortens it to 1 s (the docs: "This
duration can be configured with the `seconds_since_heartbeat` parameter of the
`get_stalled_jobs` method").
Exit 1 while the behaviour is there (A's stale finish accepted), 0 once it is refused.
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


async def recipe(m: JobManager) -> None:
    """The documented stalled-jobs recipe (docs/howto/production/retry_stalled_jobs.md)."""
    stalled = await (
        m.get_stalled_jobs()
        if THRESHOLD is None
        else m.get_stalled_jobs(seconds_since_heartbeat=THRESHOLD)
    )
    for job in stalled:
        await m.retry_job(job)


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
        print(f"worker A ({worker_a}) fetched job {job_a.id}; A stops heartbeating (paused)")
        await asyncio.sleep(threshold + 0.5)
        await recipe(m)
        worker_b = await m.register_worker()
        job_b = await m.fetch_job(["q"], worker_b)
        print(f"recipe retried it; worker B ({worker_b}) fetched job {job_b and job_b.id}")
        try:
            await m.finish_job(job_a, status=jobs.Status.SUCCEEDED, delete_job=False)
            stale_accepted = True
        except exceptions.ConnectorException:
            stale_accepted = False
        print(f"A resumes, finish_job(succeeded) accepted: {stale_accepted}")
        try:
            await m.finish_job(job_b, status=jobs.Status.FAILED, delete_job=False)
            print("B's finish_job(failed) accepted")
        except exceptions.ConnectorException as exc:
            print(f"B's finish_job(failed) refused: {str(exc.__cause__).splitlines()[0]}")
        [row] = await m.list_jobs_async(id=job.id)
        events = await app.connector.execute_query_all_async(
            "SELECT type::text FROM procrastinate_events WHERE job_id = %(id)s ORDER BY id",
            id=job.id,
        )
        print(
            f"job {job.id}: status={row.status} worker_id={row.worker_id} "
            f"events={[e['type'] for e in events]}"
        )
        return 1 if stale_accepted else 0


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
