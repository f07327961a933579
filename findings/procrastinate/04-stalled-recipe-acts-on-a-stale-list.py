"""procrastinate 3.10.0: the documented stalled-jobs recipe is two steps (get_stalled_jobs,
then retry_job per job) and retry_job does not ask whether the job is still the stalled
one it listed. A slow-but-alive worker (paused past seconds_since_heartbeat) that finishes
its job as 'failed' between the two steps has its failed job turned back into 'todo'
(procrastinate_retry_job_v2 also accepts 'failed': the manual retry of failed jobs), and
the job runs again although its retry strategy said no more. Had the worker finished it
'succeeded' instead, retry_job raises and the recipe's run ends there.

Only procrastinate and PostgreSQL. Server: $PROCRASTINATE_REPRO_DSN (default
postgresql://postgres@127.0.0.1:5432/postgres); a schema of its own, dropped at the end.
Settings: procrastinate's defaults (get_stalled_jobs' seconds_since_heartbeat = 30 s: the
run takes about 31 s); PROCRASTINATE_REPRO_FAST=1 shortens it to 1 s (the docs: "This
duration can be configured with the `seconds_since_heartbeat` parameter of the
`get_stalled_jobs` method").
Exit 1 while the behaviour is there (the failed job is requeued), 0 once it is not.
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
        assert job.id is not None
        fetched = await m.fetch_job(["q"], await m.register_worker())
        assert fetched is not None
        await asyncio.sleep(threshold + 0.5)  # worker A is paused: no heartbeat
        # the recipe's first step (docs/howto/production/retry_stalled_jobs.md)
        listed = list(
            await m.get_stalled_jobs()
            if THRESHOLD is None
            else await m.get_stalled_jobs(seconds_since_heartbeat=THRESHOLD)
        )
        # A resumes: its task raised, its RetryStrategy says no more, its worker finishes it
        await m.finish_job(fetched, status=jobs.Status.FAILED, delete_job=False)
        said = []
        for stalled in listed:  # the recipe's second step, over its list
            try:
                await m.retry_job(stalled)
                said.append(f"retry_job({stalled.id}) accepted")
            except exceptions.ConnectorException as exc:
                said.append(f"retry_job({stalled.id}) refused: {exc.__cause__}")
        [row] = await m.list_jobs_async(id=job.id)
        events = await app.connector.execute_query_all_async(
            "SELECT type::text FROM procrastinate_events WHERE job_id = %(id)s ORDER BY id",
            id=job.id,
        )
        again = await m.fetch_job(["q"], await m.register_worker())
        resurrected = row.status == "todo"
        print(
            f"the recipe lists {[j.id for j in listed]}; A finishes job {job.id} as failed; "
            f"recipe: {'; '.join(said)}"
        )
        print(
            f"job {job.id}: status={row.status} events={[e['type'] for e in events]}: "
            f"failed job requeued = {resurrected}; worker B fetched job {again and again.id}"
        )
        return 1 if resurrected else 0


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
