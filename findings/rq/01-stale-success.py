"""rq 3.0.0: a stalled worker's late success is accepted after rq reclaimed its job.

Real rq workers (``rq.Worker.work()``, forking a horse per job), real time, nothing faked:

(a) job ``a`` is enqueued with ``Retry(max=1)``. Worker A takes it; then A's main process
    stops sending heartbeats (here: SIGSTOP of A's main process; to Redis it looks the same
    as a network partition of A's host that heals before the job ends) while A's horse goes
    on computing. After the heartbeat TTL (61 s: ``job_monitoring_interval=1``) worker B's
    maintenance (``clean_registries`` -> ``StartedJobRegistry.cleanup``) re-enqueues the
    job and B starts it. Then A's horse finishes and reports success: rq marks the job
    FINISHED, with A's result, while B's execution is still live in the StartedJobRegistry.
(b) job ``b``, no Retry (rq's default): the cleanup moves the abandoned job to the
    FailedJobRegistry (AbandonedJobError); A's late success then makes it FINISHED while it
    stays listed as failed.

Needs rq==3.0.0 and a Redis server: ``RQ_REPRO_REDIS_URL`` (default
``redis://127.0.0.1:6379/11``). Uses names tagged with a random run id and deletes its keys
at the end (no FLUSHDB). Linux (reads /proc to stop and kill the workers' processes).
Takes about 65 s. Exit 1 when a late success was accepted, 0 when refused, 2 if the
sequence did not happen (inconclusive).
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
from rq.registry import FailedJobRegistry, StartedJobRegistry

URL = os.environ.get("RQ_REPRO_REDIS_URL", "redis://127.0.0.1:6379/11")
TAG = f"f1{secrets.token_hex(4)}"
JOBS_MODULE = f"rq_repro_jobs_{TAG}"
JOBS = '''
import os
import redis

def wait_for_release(url):
    """Runs until the reproducer releases this worker's horse (key <worker name>:release)."""
    me = os.environ["RQ_WORKER_ID"]
    r = redis.Redis.from_url(url, socket_timeout=30)
    while r.blpop(f"{me}:release", timeout=5) is None:
        pass
    return f"result of {me}"
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
    qa, qb = f"{TAG}-qa", f"{TAG}-qb"
    job_a, job_b = f"{TAG}-a", f"{TAG}-b"
    a_a, a_b, b_a, b_b = (f"{TAG}-{n}" for n in ("A-a", "A-b", "B-a", "B-b"))
    procs = []
    try:
        func = f"{JOBS_MODULE}.wait_for_release"
        Queue(qa, connection=r).enqueue(func, URL, job_id=job_a, retry=Retry(max=1), result_ttl=-1)
        Queue(qb, connection=r).enqueue(func, URL, job_id=job_b, result_ttl=-1)
        stalled = [start_worker(a_a, [qa], env), start_worker(a_b, [qb], env)]
        procs += stalled
        started = wait_for(
            "A taking both jobs",
            lambda: all(
                Job.fetch(j, connection=r).get_status() == JobStatus.STARTED for j in (job_a, job_b)
            ),
            30,
        )
        if not started:
            return 2
        for p in stalled:
            os.kill(p.pid, signal.SIGSTOP)  # A's main process: no more heartbeats
        t0 = time.monotonic()
        print(
            f"workers A took {job_a} and {job_b}; A's main processes stopped "
            "(their horses keep running)"
        )
        procs += [start_worker(b_a, [qa], env), start_worker(b_b, [qb], env)]

        # (a) rq re-enqueues the abandoned job and worker B runs it
        on_b = wait_for(
            f"B running {job_a}",
            lambda: [e for e in live_executions(r, qa, job_a) if e[0] == b_a],
            120,
        )
        # (b) rq moves the abandoned job to the FailedJobRegistry
        failed = wait_for(
            f"{job_b} in FailedJobRegistry",
            lambda: job_b in FailedJobRegistry(qb, connection=r),
            120,
        )
        if not on_b or not failed:
            return 2
        print(
            f"after {time.monotonic() - t0:.0f} s rq reclaimed both: {job_a} re-enqueued and "
            f"running on B (execution {on_b[0][1][:8]}); {job_b} in FailedJobRegistry"
        )

        r.lpush(f"{a_a}:release", 1)  # A's horses finish their jobs now
        r.lpush(f"{a_b}:release", 1)
        wait_for(
            "A's late reports",
            lambda: all(
                Job.fetch(j, connection=r).get_status() != s
                for j, s in ((job_a, JobStatus.STARTED), (job_b, JobStatus.FAILED))
            ),
            15,
        )
        time.sleep(0.5)

        ja, jb = Job.fetch(job_a, connection=r), Job.fetch(job_b, connection=r)
        b_live = [e for e in live_executions(r, qa, job_a) if e[0] == b_a]
        latest = ja.latest_result()
        print(
            f"(a) {job_a}: status {ja.get_status().value}, latest result "
            f"{latest.type.name if latest else None} by {latest.worker_name if latest else None}"
            f", B's execution still live: {bool(b_live)}"
        )
        print(
            f"(b) {job_b}: status {jb.get_status().value}, still in FailedJobRegistry: "
            f"{job_b in FailedJobRegistry(qb, connection=r)}"
        )
        bug_a = ja.get_status() == JobStatus.FINISHED and bool(b_live)
        still_failed = job_b in FailedJobRegistry(qb, connection=r)
        bug_b = jb.get_status() == JobStatus.FINISHED and still_failed
        if bug_a or bug_b:
            print(
                "BUG PRESENT: a stalled worker's success was accepted after rq had reclaimed "
                "its job"
            )
            return 1
        print("stale success refused")
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
