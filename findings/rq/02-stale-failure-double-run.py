"""rq 3.0.0: a stalled worker's late *failure* re-enqueues a job that another worker is
already running, and a third worker starts it too: two live executions of one job.

Real rq workers (``rq.Worker.work()``, forking a horse per job), real time, nothing faked.
The job is enqueued with ``Retry(max=2)``. Worker A takes it; A's main process stops
sending heartbeats (SIGSTOP of A's main process: to Redis the same as a partition of A's
host that heals before the job ends) while A's horse goes on. After the heartbeat TTL
(61 s: ``job_monitoring_interval=1``) another worker's maintenance (``clean_registries``
-> ``StartedJobRegistry.cleanup``) re-enqueues the job and that worker (B) starts it.
Then A's horse fails: ``handle_job_failure`` sees retries left on A's copy of the job and
calls ``job.retry()``, which re-enqueues the job B is running; the third worker (C) takes
it. The StartedJobRegistry then holds two live executions of the job, B's and C's.

Needs rq==3.0.0 and a Redis server: ``RQ_REPRO_REDIS_URL`` (default
``redis://127.0.0.1:6379/12``). Uses names tagged with a random run id and deletes its keys
at the end (no FLUSHDB). Linux (reads /proc to stop and kill the workers' processes).
Takes about 65 s. Exit 1 when two executions of the job are live at once, 0 otherwise, 2
if the sequence did not happen (inconclusive).
"""

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from typing import Any

import redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry

URL = os.environ.get("RQ_REPRO_REDIS_URL", "redis://127.0.0.1:6379/12")
TAG = f"f2{secrets.token_hex(4)}"
JOBS_MODULE = f"rq_repro_jobs_{TAG}"
JOBS = '''
import os
import redis

def wait_then_fail(url):
    """Runs until the reproducer releases this worker's horse, then raises."""
    me = os.environ["RQ_WORKER_ID"]
    r = redis.Redis.from_url(url, socket_timeout=30)
    while r.blpop(f"{me}:release", timeout=5) is None:
        pass
    raise RuntimeError(f"failure on {me}")
'''
WORKER = textwrap.dedent(
    """
    import sys, redis
    from rq import Worker
    name, url, *queues = sys.argv[1:]
    Worker(queues, name=name, connection=redis.Redis.from_url(url), job_monitoring_interval=1,
           maintenance_interval=1, worker_ttl=16).work(logging_level="WARNING")
    """
)


def start_worker(name: str, queues: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, name, URL, *queues],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # field 6 of stat: the session id
                pids.append(int(entry))
    return pids


def wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    print(f"INCONCLUSIVE: {what} did not happen within {timeout:.0f} s")
    return None


def live_executions(r: redis.Redis, queue: str, job_id: str) -> list[tuple[str, str]]:
    """(worker name, execution id) of every execution of the job in the StartedJobRegistry."""
    out = []
    for member in r.zrange(StartedJobRegistry(queue, connection=r).key, 0, -1):
        jid, _, eid = member.decode().partition(":")
        if jid == job_id:
            name = r.hget(f"rq:execution:{jid}:{eid}", "worker_name")
            out.append(((name or b"?").decode(), eid))
    return out


def main() -> int:
    r = redis.Redis.from_url(URL)
    workdir = tempfile.mkdtemp(prefix="rq-repro-")
    with open(os.path.join(workdir, f"{JOBS_MODULE}.py"), "w") as f:
        f.write(JOBS)
    env = dict(os.environ, PYTHONPATH=workdir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    queue, job_id = f"{TAG}-q", f"{TAG}-job"
    a, b, c = f"{TAG}-A", f"{TAG}-B", f"{TAG}-C"
    procs = []
    try:
        Queue(queue, connection=r).enqueue(
            f"{JOBS_MODULE}.wait_then_fail", URL, job_id=job_id, retry=Retry(max=2)
        )
        stalled = start_worker(a, [queue], env)
        procs.append(stalled)
        if not wait_for(
            "A taking the job",
            lambda: Job.fetch(job_id, connection=r).get_status() == JobStatus.STARTED,
            30,
        ):
            return 2
        mine = {e for _, e in live_executions(r, queue, job_id)}  # A's execution
        os.kill(stalled.pid, signal.SIGSTOP)  # A's main process: no more heartbeats
        t0 = time.monotonic()
        print(f"worker A took {job_id}; A's main process stopped (its horse keeps running)")
        procs += [start_worker(b, [queue], env), start_worker(c, [queue], env)]

        def others() -> list[tuple[str, str]]:
            return [e for e in live_executions(r, queue, job_id) if e[1] not in mine]

        second = wait_for(f"another worker running {job_id}", others, 120)
        if not second:
            return 2
        print(
            f"after {time.monotonic() - t0:.0f} s rq re-enqueued it and {second[0][0]} runs it "
            f"(execution {second[0][1][:8]})"
        )

        r.lpush(f"{a}:release", 1)  # A's horse fails now
        two = wait_for("a second live execution", lambda: len(others()) >= 2, 15)
        live = others()
        job = Job.fetch(job_id, connection=r)
        print(
            f"A reported its failure late: status {job.get_status().value}; live executions in "
            f"the StartedJobRegistry: {[(w, e[:8]) for w, e in live]}"
        )
        if two and len(live) >= 2:
            print("BUG PRESENT: one job is running on two workers at once")
            return 1
        print("no double run")
        return 0
    finally:
        for p in procs:
            for pid in session_pids(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
        for key in r.scan_iter(match=f"*{TAG}*", count=1000):
            r.delete(key)
        for shared in ("rq:queues", "rq:workers"):
            for member in r.smembers(shared):
                if TAG.encode() in member:
                    r.srem(shared, member)


if __name__ == "__main__":
    sys.exit(main())
