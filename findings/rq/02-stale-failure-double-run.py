"""rq 3.0.0: a worker frozen past its heartbeat reports its job's *failure* after rq has
collected the job as abandoned and re-enqueued it; rq's retry re-enqueues the job another
worker is running, and a third worker starts it too: two live executions of one job.

Real `rq worker` processes (rq's CLI, rq's defaults: no option but `--name` and `--path`),
real forks, real time, nothing faked. The trigger is a whole-worker freeze -- every process
of the worker, its main process and its work horse, stopped with SIGSTOP and later
continued, which is what a paused container or VM, or a host stalled by its hypervisor,
does to it.

The job is enqueued with `Retry(max=2)`. Worker A takes it and is frozen. Its execution's
heartbeat lapses in the StartedJobRegistry (`job_monitoring_interval` + 60 = 90 s at rq's
default 30). Workers B and C are started then: the first maintenance pass
(`clean_registries` -> `StartedJobRegistry.cleanup`) re-enqueues the abandoned job and one
of them (B below) starts it. A is continued and its horse's job raises:
`handle_job_failure` sees retries left on A's copy of the job and calls `job.retry()`,
which sets the status `queued` over the running execution's `started` and pushes the id
again; an idle worker -- C, or A itself, back in its loop -- takes it. The
StartedJobRegistry then holds two live executions of the job, and the job's
`retries_left` reads 1 although rq has re-enqueued it twice (A's copy counted down from
its own 2).

Every rq setting is at its default (job timeout 180 s, `job_monitoring_interval` 30 s,
`maintenance_interval` 600 s, `worker_ttl` 420 s). What the reproducer arranges is when B
and C start: right after A's heartbeat lapsed, so that a first maintenance pass -- a worker
runs one when it starts -- is the one that collects the job (with workers already running,
the next pass comes within `maintenance_interval`); A is frozen for about 95 s, so that its
job still ends within its 180 s timeout.

Needs rq==3.0.0 and a Redis server: ``RQ_REPRO_REDIS_URL`` (default
``redis://127.0.0.1:6379/12``). Uses names tagged with a random run id and deletes its keys
at the end (no FLUSHDB). Linux (reads /proc to stop, continue and kill the workers'
processes). Takes about 100 s. Exit 1 when two executions of the job are live at once, 0
otherwise, 2 if the sequence did not happen (inconclusive).
"""

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.utils import current_timestamp

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


def rq_cli() -> list[str]:
    """rq's own CLI: the ``rq`` script beside this interpreter, else ``python -m rq.cli``."""
    script = Path(sys.executable).with_name("rq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rq.cli"]


def start_worker(name: str, queue: str, path: str) -> subprocess.Popen[bytes]:
    """``rq worker --name NAME --path PATH --url URL QUEUE``, in a session of its own."""
    return subprocess.Popen(
        [*rq_cli(), "worker", "--name", name, "--path", path, "--url", URL, queue],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def session_pids(sid: int) -> list[int]:
    """Every process of session ``sid``: an rq worker's main process and its horse."""
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


def signal_worker(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    for pid in session_pids(proc.pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    print(f"INCONCLUSIVE: {what} did not happen within {timeout:.0f} s")
    return None


def live_executions(r: redis.Redis, queue: str, job_id: str) -> list[tuple[str, str, float]]:
    """(worker name, execution id, score) of each execution of the job in the
    StartedJobRegistry."""
    out = []
    key = StartedJobRegistry(queue, connection=r).key
    for member, score in r.zrange(key, 0, -1, withscores=True):
        jid, _, eid = member.decode().partition(":")
        if jid == job_id:
            name = r.hget(f"rq:execution:{jid}:{eid}", "worker_name")
            out.append(((name or b"?").decode(), eid, score))
    return out


def main() -> int:
    r = redis.Redis.from_url(URL)
    workdir = tempfile.mkdtemp(prefix="rq-repro-")
    with open(os.path.join(workdir, f"{JOBS_MODULE}.py"), "w") as f:
        f.write(JOBS)
    queue, job_id = f"{TAG}-q", f"{TAG}-job"
    a, b, c = f"{TAG}-A", f"{TAG}-B", f"{TAG}-C"
    procs = []
    try:
        Queue(queue, connection=r).enqueue(
            f"{JOBS_MODULE}.wait_then_fail", URL, job_id=job_id, retry=Retry(max=2)
        )
        frozen = start_worker(a, queue, workdir)
        procs.append(frozen)
        if not wait_for(
            "A taking the job",
            lambda: Job.fetch(job_id, connection=r).get_status() == JobStatus.STARTED,
            60,
        ):
            return 2
        mine = {e for _, e, _ in live_executions(r, queue, job_id)}  # A's execution
        signal_worker(frozen, signal.SIGSTOP)  # the whole worker: main process and horse
        t0 = time.monotonic()
        print(f"worker A took {job_id} and is frozen whole (main process and horse)")

        lapsed = wait_for(
            "A's heartbeat lapsing in the StartedJobRegistry",
            lambda: all(s < current_timestamp() for _, _, s in live_executions(r, queue, job_id)),
            150,
        )
        if not lapsed:
            return 2
        print(f"after {time.monotonic() - t0:.0f} s A's heartbeat has lapsed; B and C start")
        procs += [start_worker(b, queue, workdir), start_worker(c, queue, workdir)]

        def others() -> list[tuple[str, str]]:
            return [(w, e) for w, e, _ in live_executions(r, queue, job_id) if e not in mine]

        second = wait_for(f"another worker running {job_id}", others, 90)
        if not second:
            return 2
        print(
            f"after {time.monotonic() - t0:.0f} s rq re-enqueued it and {second[0][0]} runs it "
            f"(execution {second[0][1][:8]})"
        )

        signal_worker(frozen, signal.SIGCONT)  # the freeze ends
        r.lpush(f"{a}:release", 1)  # A's horse fails now
        two = wait_for("a second live execution", lambda: len(others()) >= 2, 30)
        live = others()
        job = Job.fetch(job_id, connection=r)
        print(
            f"A reported its failure late: status {job.get_status().value}; live executions in "
            f"the StartedJobRegistry: {[(w, e[:8]) for w, e in live]}; retries_left "
            f"{job.retries_left} of Retry(max=2) after two re-enqueues"
        )
        if two and len(live) >= 2:
            print("BUG PRESENT: one job is running on two workers at once")
            return 1
        print("no double run")
        return 0
    finally:
        for p in procs:
            signal_worker(p, signal.SIGKILL)
            p.wait()
        for key in r.scan_iter(match=f"*{TAG}*", count=1000):
            r.delete(key)
        for shared in ("rq:queues", "rq:workers"):
            for member in r.smembers(shared):
                if TAG.encode() in member:
                    r.srem(shared, member)


if __name__ == "__main__":
    sys.exit(main())
