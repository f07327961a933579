"""procrastinate 3.10.0: a worker that was only paused past stalled_worker_timeout is
pruned by the next worker that starts; when it resumes, its heartbeats silently do
nothing, the documented stalled-jobs recipe (with its default 30 s threshold) takes the
job it is running (the prune set the job's worker_id to NULL) and another worker runs it
too, and the resumed worker dies with a ForeignKeyViolation at its next fetch.

Worker A (procrastinate's own Worker, run_worker_async) runs a task whose event loop is
blocked for longer than stalled_worker_timeout (a sync call in an async task; equally a
container pause or a frozen VM: no heartbeat); another worker starts meanwhile (a deploy,
a restart after a crash, an autoscaler), and Worker.run's first call prunes A.

Only procrastinate and PostgreSQL. Server: $PROCRASTINATE_REPRO_DSN (default
postgresql://postgres@127.0.0.1:5432/postgres); a schema of its own, dropped at the end.
Settings: procrastinate's defaults (Worker: update_heartbeat_interval 10 s,
stalled_worker_timeout 30 s, fetch_job_polling_interval 5 s, listen_notify on;
get_stalled_jobs: seconds_since_heartbeat 30 s): A pauses 31.5 s (and until the other
worker has started), the run takes about 50 s. PROCRASTINATE_REPRO_FAST=1 shortens the
worker's update_heartbeat_interval to 0.2 s, stalled_worker_timeout to 1 s and
fetch_job_polling_interval to 0.2 s, and A's pause to 2.5 s (the docs: "If you change
the `seconds_since_heartbeat` parameter, make sure to also check the
`update_heartbeat_interval` and `stalled_worker_timeout` parameters of the worker and
adjust them accordingly"); the recipe keeps its default threshold in both.
Exit 1 while the behaviour is there (the default recipe takes the running job of a
worker that is heartbeating again), 0 once it does not.
"""

import asyncio
import inspect
import logging
import os
import sys
import threading
import time
import uuid

import procrastinate
import psycopg
from procrastinate.worker import Worker

DSN = os.environ.get("PROCRASTINATE_REPRO_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "repro_" + uuid.uuid4().hex[:12]
logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # the worker logs its crash
DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(Worker).parameters.items()
    if name in ("update_heartbeat_interval", "stalled_worker_timeout", "fetch_job_polling_interval")
}
FAST = os.environ.get("PROCRASTINATE_REPRO_FAST") == "1"
#: The worker's settings that differ from procrastinate's defaults (none unless FAST).
SHORTENED = (
    {
        "update_heartbeat_interval": 0.2,
        "stalled_worker_timeout": 1.0,
        "fetch_job_polling_interval": 0.2,
    }
    if FAST
    else {}
)
SETTINGS = {**DEFAULTS, **SHORTENED}
TIMEOUT = SETTINGS["stalled_worker_timeout"]  # every worker's
#: A's event loop is blocked this long at least (and until another worker has started):
#: longer than stalled_worker_timeout
PAUSE = TIMEOUT + 1.5
AFTER = max(5.0, SETTINGS["update_heartbeat_interval"] + 1.0)  # A runs on, heartbeating
seen: dict[str, object] = {}
helper_done = threading.Event()


def make_app() -> procrastinate.App:
    return procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=DSN, kwargs={"options": f"-c search_path={SCHEMA}"}
        )
    )


app = make_app()


#: A's heartbeat is an UPDATE of its row, committed once its coroutine runs again: a pause
#: that starts while one is in flight keeps the row locked, and a starting worker's prune
#: then waits for it. A pause starts between two heartbeats (as one mostly does at the
#: default 10 s interval): A waits until no heartbeat of its own holds the row.
_ROW_FREE = "SELECT id FROM procrastinate_workers WHERE id = %(id)s FOR UPDATE SKIP LOCKED"


@app.task(queue="q", pass_context=True)
async def work(context: procrastinate.JobContext) -> None:
    while not await app.connector.execute_query_all_async(_ROW_FREE, id=context.job.worker_id):
        await asyncio.sleep(0.01)
    paused = time.monotonic()
    while time.monotonic() - paused < PAUSE or not ("pruned" in seen or helper_done.is_set()):
        time.sleep(0.05)  # worker A is paused: its event loop sends no heartbeat
        if time.monotonic() - paused > PAUSE + 120:
            break  # the other workers never started: give up
    seen["a_resumed"] = time.monotonic()
    await asyncio.sleep(AFTER)  # A runs on; its heartbeat task runs again
    seen["a_finished"] = True


def other_workers(job_id: int) -> None:
    """Another process of the deployment: a worker starting (Worker.run prunes first) once
    A has been silent for stalled_worker_timeout, then the documented recipe with its
    defaults, then a worker fetching."""

    async def go() -> None:
        other = make_app()
        async with other.open_async():
            m = other.job_manager
            while [j.status for j in await m.list_jobs_async(id=job_id)] != ["doing"]:
                await asyncio.sleep(0.05)  # A fetched the job and runs it
            await asyncio.sleep(TIMEOUT + 0.5)
            seen["pruned"] = await m.prune_stalled_workers(TIMEOUT)  # Worker.run's first call
            while "a_resumed" not in seen:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # A's heartbeat task has run since it resumed
            stalled = await m.get_stalled_jobs()  # the recipe, default 30 s threshold
            seen["stalled"] = [j.id for j in stalled]
            for job in stalled:
                await m.retry_job(job)
            worker_c = await m.register_worker()
            job_c = await m.fetch_job(["q"], worker_c)
            seen["c_fetched"] = job_c.id if job_c else None
            seen["a_running_then"] = "a_finished" not in seen
            await other.configure_task("work", queue="q").defer_async()  # more work arrives

    try:
        asyncio.run(go())
    except Exception as exc:
        seen["helper_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        helper_done.set()


async def main() -> int:
    shown = ", ".join(
        f"{k}={v}" + (f" (shortened; default {DEFAULTS[k]})" if k in SHORTENED else "")
        for k, v in SETTINGS.items()
    )
    print(f"procrastinate {procrastinate.__version__}; worker {shown}; A pauses {PAUSE} s")
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        job_id = await work.defer_async()
        helper = threading.Thread(target=other_workers, args=(job_id,), daemon=True)
        helper.start()
        worker = asyncio.ensure_future(app.run_worker_async(queues=["q"], **SHORTENED))
        while helper.is_alive() and not worker.done():
            await asyncio.sleep(0.1)
        # A finishes its job, then fetches the new one (at once, or at its next poll)
        grace = AFTER + SETTINGS["fetch_job_polling_interval"] + 10
        try:
            await asyncio.wait_for(worker, timeout=grace)
            ended = "stopped"
        except asyncio.TimeoutError:
            ended = "still running at the timeout"
        except Exception as exc:
            ended = f"died: {type(exc).__name__} ({type(exc.__cause__).__name__})"
        helper.join(timeout=10)
        print(
            f"worker A fetched job {job_id}; paused {PAUSE} s or more; another worker starting "
            f"pruned workers {seen.get('pruned')}"
        )
        print(
            f"A resumed and heartbeats again; get_stalled_jobs() (default 30 s) returned "
            f"{seen.get('stalled')}; worker C fetched job {seen.get('c_fetched')} while A "
            f"was still running it: {seen.get('a_running_then')}"
        )
        print(f"worker A {ended}")
        if "helper_error" in seen:
            print(f"the other workers stopped: {seen['helper_error']}")
        return 1 if job_id in (seen.get("stalled") or []) else 0


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
