"""procrastinate 3.10.0: the documented stalled-jobs recipe is two steps (get_stalled_jobs,
then retry_job per job) and retry_job does not ask whether the job is still the stalled
one it listed. Between the two steps:

(a) the slow-but-alive worker finishes the job as 'failed': procrastinate_retry_job_v2 also
    accepts 'failed' (the manual-retry feature), so the recipe turns the failed job back
    into 'todo' and it runs again;
(b) another run of the recipe (runs overlap when one outlasts its period) requeues the job
    and worker B fetches it: the first run's retry_job then takes B's live job back to
    'todo', and worker C runs it while B, heartbeating, still does.

Only procrastinate and PostgreSQL. Server: $PROCRASTINATE_REPRO_DSN (default
postgresql://postgres@127.0.0.1:5432/postgres); a schema of its own, dropped at the end.
Exit 1 while either behaviour is there, 0 once neither is.
"""

import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Iterable

import procrastinate
import psycopg
from procrastinate import exceptions, jobs
from procrastinate.manager import JobManager

DSN = os.environ.get("PROCRASTINATE_REPRO_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "repro_" + uuid.uuid4().hex[:12]
logging.getLogger("procrastinate").setLevel(logging.ERROR)  # its "app in __main__" note
THRESHOLD = 1.0  # get_stalled_jobs(seconds_since_heartbeat=...); procrastinate's default is 30


async def retry_all(m: JobManager, listed: Iterable[jobs.Job]) -> str:
    """The recipe's second step, over the list its first step returned."""
    said = []
    for job in listed:
        try:
            await m.retry_job(job)
            said.append(f"retry_job({job.id}) accepted")
        except exceptions.ConnectorException as exc:
            said.append(f"retry_job({job.id}) refused: {str(exc.__cause__).splitlines()[0]}")
    return "; ".join(said)


async def stalled_job(m: JobManager, queue: str) -> tuple[int, jobs.Job]:
    """A job in ``queue`` fetched by a worker that then stops heartbeating."""
    job = await m.defer_job_async(
        jobs.Job(id=None, queue=queue, task_name="t", lock=None, queueing_lock=None)
    )
    fetched = await m.fetch_job([queue], await m.register_worker())
    assert job.id is not None and fetched is not None
    return job.id, fetched


async def status_and_events(app: procrastinate.App, job_id: int) -> tuple[str, list[str]]:
    [row] = await app.job_manager.list_jobs_async(id=job_id)
    events = await app.connector.execute_query_all_async(
        "SELECT type::text FROM procrastinate_events WHERE job_id = %(id)s ORDER BY id",
        id=job_id,
    )
    return row.status, [e["type"] for e in events]


async def main() -> int:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=DSN, kwargs={"options": f"-c search_path={SCHEMA}"}
        )
    )
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        m = app.job_manager

        # (a) the listed job fails for good before the recipe retries it
        job_a, fetched_a = await stalled_job(m, "qa")
        await asyncio.sleep(THRESHOLD + 0.5)  # A is slow: no heartbeat for a while
        listed = await m.get_stalled_jobs(queue="qa", seconds_since_heartbeat=THRESHOLD)
        await m.finish_job(fetched_a, status=jobs.Status.FAILED, delete_job=False)
        said = await retry_all(m, listed)
        status, events = await status_and_events(app, job_a)
        resurrected = status == "todo"
        print(
            f"(a) recipe lists {[j.id for j in listed]}; A finishes job {job_a} as failed; "
            f"recipe: {said}"
        )
        print(
            f"    job {job_a}: status={status} events={events}: failed job requeued = {resurrected}"
        )

        # (b) two runs of the recipe overlap
        await stalled_job(m, "qb")
        await asyncio.sleep(THRESHOLD + 0.5)
        first = await m.get_stalled_jobs(queue="qb", seconds_since_heartbeat=THRESHOLD)
        second = await m.get_stalled_jobs(queue="qb", seconds_since_heartbeat=THRESHOLD)
        await retry_all(m, second)  # the second run is quicker
        worker_b = await m.register_worker()
        fetched_b = await m.fetch_job(["qb"], worker_b)
        await m.update_heartbeat(worker_b)  # B is alive
        said = await retry_all(m, first)  # the first run goes on with its list
        worker_c = await m.register_worker()
        fetched_c = await m.fetch_job(["qb"], worker_c)
        double = fetched_c is not None and fetched_b is not None and fetched_c.id == fetched_b.id
        print(
            f"(b) two recipe runs list {[j.id for j in first]}; the second requeues it and B "
            f"fetches it; the first: {said}; C fetched job {fetched_c and fetched_c.id} "
            f"while B runs it: two live workers = {double}"
        )
        return 1 if resurrected or double else 0


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
