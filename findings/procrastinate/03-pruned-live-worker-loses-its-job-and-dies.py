"""procrastinate 3.10.0: a worker that was only paused past stalled_worker_timeout is
pruned by the next worker that starts; when it resumes, its heartbeats silently do
nothing, the documented stalled-jobs recipe with its *default* 30 s threshold takes the
job it is running (worker_id was set NULL by the prune) and another worker runs it too,
and the resumed worker dies with a ForeignKeyViolation at its next fetch.

Only procrastinate and PostgreSQL. Server: $PROCRASTINATE_REPRO_DSN (default
postgresql://postgres@127.0.0.1:5432/postgres); a schema of its own, dropped at the end.
Exit 1 while the behaviour is there (the default recipe takes the running job of a
worker that is heartbeating again), 0 once it does not.
"""

import asyncio
import logging
import os
import sys
import threading
import time
import uuid

import procrastinate
import psycopg

DSN = os.environ.get("PROCRASTINATE_REPRO_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SCHEMA = "repro_" + uuid.uuid4().hex[:12]
logging.getLogger("procrastinate").setLevel(logging.CRITICAL)  # the worker logs its crash
PAUSE = 2.5  # seconds worker A's event loop is blocked (a sync call in an async task, a GC
#             pause, SIGSTOP, a frozen VM): longer than stalled_worker_timeout below
TIMEOUT = 1.0  # Worker(stalled_worker_timeout=...) of every worker (default 30)
seen: dict[str, object] = {}


def make_app() -> procrastinate.App:
    return procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=DSN, kwargs={"options": f"-c search_path={SCHEMA}"}
        )
    )


app = make_app()


@app.task(queue="q")
async def work() -> None:
    time.sleep(PAUSE)  # worker A is paused: no heartbeat
    seen["a_resumed"] = time.monotonic()
    await asyncio.sleep(2.0)  # A runs on, heartbeating every 0.2 s
    seen["a_finished"] = True


def other_workers(started: float) -> None:
    """Another process of the deployment: a worker starting (Worker.run prunes first), then
    the documented recipe with its defaults, then a worker fetching."""

    async def go() -> None:
        other = make_app()
        async with other.open_async():
            m = other.job_manager
            await asyncio.sleep(started + 1.5 - time.monotonic())
            seen["pruned"] = await m.prune_stalled_workers(TIMEOUT)  # Worker.run's first call
            while "a_resumed" not in seen:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # A has sent ~5 heartbeats since it resumed
            stalled = await m.get_stalled_jobs()  # the recipe, default 30 s threshold
            seen["stalled"] = [j.id for j in stalled]
            for job in stalled:
                await m.retry_job(job)
            worker_c = await m.register_worker()
            job_c = await m.fetch_job(["q"], worker_c)
            seen["c_fetched"] = job_c.id if job_c else None
            seen["a_running_then"] = "a_finished" not in seen
            await other.configure_task("work", queue="q").defer_async()  # more work arrives

    asyncio.run(go())


async def main() -> int:
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        job_id = await work.defer_async()
        started = time.monotonic()
        helper = threading.Thread(target=other_workers, args=(started,), daemon=True)
        helper.start()
        try:
            await asyncio.wait_for(
                app.run_worker_async(
                    queues=["q"],
                    concurrency=1,
                    wait=True,
                    listen_notify=False,
                    install_signal_handlers=False,
                    update_heartbeat_interval=0.2,
                    stalled_worker_timeout=TIMEOUT,
                    fetch_job_polling_interval=0.2,
                ),
                timeout=10,
            )
            ended = "ran until the timeout"
        except asyncio.TimeoutError:
            ended = "still running at the timeout"
        except Exception as exc:
            ended = f"died: {type(exc).__name__} ({type(exc.__cause__).__name__})"
        helper.join(timeout=10)
        print(
            f"worker A fetched job {job_id}; paused {PAUSE} s; another worker starting "
            f"pruned workers {seen.get('pruned')}"
        )
        print(
            f"A resumed and heartbeats again; get_stalled_jobs() (default 30 s) returned "
            f"{seen.get('stalled')}; worker C fetched job {seen.get('c_fetched')} while A "
            f"was still running it: {seen.get('a_running_then')}"
        )
        print(f"worker A {ended}")
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
