"""rq 3.0.0: a work horse whose worker stopped heartbeating reports its job's success
after rq has collected the job as abandoned -- the job reads `finished` while another
worker runs it, or while it sits in the FailedJobRegistry.

Real `rq worker` processes (rq's CLI, rq's defaults: no option but `--name` and `--path`),
real forks, real time, nothing faked. Two triggers:

- a whole-worker freeze (cases a and b) -- every process of the worker, its main process
  and its work horse, stopped with SIGSTOP and later continued, which is what a paused
  container or VM, or a host stalled by its hypervisor, does to it;
- the worker's main process gone while its horse runs (case c) -- SIGKILL of the main
  process only, as the OOM killer or a supervisor killing that pid does, and as rq's own
  exit of `Worker.work()` on a Redis timeout ("Redis connection timeout, quitting...")
  leaves it: the horse runs in a process group of its own (`os.setpgrp`) and carries on.

(a) job `a`, enqueued with `Retry(max=1)`. Worker A takes it and is frozen. Its execution's
    heartbeat lapses in the StartedJobRegistry (`job_monitoring_interval` + 60 = 90 s at rq's
    default 30). Worker B is started then: its first maintenance pass
    (`clean_registries` -> `StartedJobRegistry.cleanup`) re-enqueues the abandoned job and
    B starts it. A is continued and its horse finishes: `handle_job_success` marks the job
    `finished`, with A's SUCCESSFUL result, while B's execution is still live in the
    StartedJobRegistry.
(b) job `b`, no Retry (rq's default): the cleanup moves it to the FailedJobRegistry
    (AbandonedJobError); A's late success then makes it `finished` while it stays listed
    in the FailedJobRegistry.
(c) job `c`, enqueued with `Retry(max=1)`. Worker A's main process is killed while its
    horse runs `c`; as in (a), B collects the job and starts it; the orphaned horse
    finishes and marks the job `finished` while B's execution is live.

Every rq setting is at its default (job timeout 180 s, `job_monitoring_interval` 30 s,
`maintenance_interval` 600 s, `worker_ttl` 420 s, `result_ttl` 500 s). What the
reproducer arranges is when B starts: right after A's heartbeat lapsed, so that B's first
maintenance pass -- a worker runs one when it starts -- is the one that collects the job
(with workers already running, the next pass comes within `maintenance_interval`); A's
jobs end about 95 s after they started, within their 180 s timeout.

Needs rq==3.0.0 and a Redis server: ``RQ_REPRO_REDIS_URL`` (default
``redis://127.0.0.1:6379/11``). Uses names tagged with a random run id and deletes its keys
at the end (no FLUSHDB). Linux (reads /proc to stop, continue and kill the workers'
processes). Takes about 100 s. Exit 1 when a late success was accepted, 0 when refused, 2
if the sequence did not happen (inconclusive).
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
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.results import Result
from rq.utils import current_timestamp

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
    cases = "abc"
    queue = {c: f"{TAG}-q{c}" for c in cases}
    job = {c: f"{TAG}-{c}" for c in cases}
    a = {c: f"{TAG}-A-{c}" for c in cases}  # the worker that takes the job
    b = {c: f"{TAG}-B-{c}" for c in cases}  # the worker that collects it
    procs = []
    try:
        func = f"{JOBS_MODULE}.wait_for_release"
        for c in cases:
            retry = None if c == "b" else Retry(max=1)  # (b): rq's default, no Retry
            Queue(queue[c], connection=r).enqueue(func, URL, job_id=job[c], retry=retry)
        takers = {c: start_worker(a[c], queue[c], workdir) for c in cases}
        procs += takers.values()
        started = wait_for(
            "A taking the three jobs",
            lambda: all(
                Job.fetch(job[c], connection=r).get_status() == JobStatus.STARTED for c in cases
            ),
            60,
        )
        if not started:
            return 2
        signal_worker(takers["a"], signal.SIGSTOP)  # the whole worker: main process and horse
        signal_worker(takers["b"], signal.SIGSTOP)
        os.kill(takers["c"].pid, signal.SIGKILL)  # the main process only; its horse runs on
        t0 = time.monotonic()
        print(
            f"workers A took {', '.join(job.values())}; A-a and A-b frozen whole (main process "
            "and horse), A-c's main process killed (its horse runs on)"
        )

        lapsed = wait_for(
            "A's heartbeats lapsing in the StartedJobRegistry",
            lambda: all(
                e and max(s for _, _, s in e) < current_timestamp()
                for e in (live_executions(r, queue[c], job[c]) for c in cases)
            ),
            150,
        )
        if not lapsed:
            return 2
        print(f"after {time.monotonic() - t0:.0f} s A's heartbeats have lapsed; B starts")
        procs += [start_worker(b[c], queue[c], workdir) for c in cases]

        def on_b(c: str) -> list[tuple[str, str, float]]:
            return [e for e in live_executions(r, queue[c], job[c]) if e[0] == b[c]]

        # (a), (c): rq re-enqueues the abandoned job and worker B runs it
        rerun = wait_for("B running a and c", lambda: on_b("a") and on_b("c"), 90)
        # (b): rq moves the abandoned job to the FailedJobRegistry
        failed = wait_for(
            f"{job['b']} in FailedJobRegistry",
            lambda: job["b"] in FailedJobRegistry(queue["b"], connection=r),
            90,
        )
        if not rerun or not failed:
            return 2
        print(
            f"after {time.monotonic() - t0:.0f} s rq has collected all three: {job['a']} and "
            f"{job['c']} re-enqueued and running on B; {job['b']} in FailedJobRegistry"
        )

        signal_worker(takers["a"], signal.SIGCONT)  # the freeze ends
        signal_worker(takers["b"], signal.SIGCONT)
        for c in cases:
            r.lpush(f"{a[c]}:release", 1)  # A's horses finish their jobs now
        wait_for(
            "A's late reports",
            lambda: all(
                Job.fetch(job[c], connection=r).get_status()
                != (JobStatus.FAILED if c == "b" else JobStatus.STARTED)
                for c in cases
            ),
            60,
        )
        time.sleep(0.5)

        bugs = []
        for c in cases:
            got = Job.fetch(job[c], connection=r)
            latest = got.latest_result()
            by = latest.worker_name if latest else None
            kind = latest.type.name if latest else None
            if c == "b":
                still = job[c] in FailedJobRegistry(queue[c], connection=r)
                print(
                    f"({c}) {job[c]}: status {got.get_status().value}, latest result {kind} "
                    f"by {by}, still in FailedJobRegistry: {still}"
                )
                bug = still
            else:
                still = bool(on_b(c))
                print(
                    f"({c}) {job[c]}: status {got.get_status().value}, latest result {kind} "
                    f"by {by}, B's execution still live: {still}"
                )
                bug = still
            if latest is None or latest.type != Result.Type.SUCCESSFUL or by != a[c]:
                print(f"INCONCLUSIVE: ({c}) did not end in A's success (past its 180 s timeout?)")
                return 2
            bugs.append(bug and got.get_status() == JobStatus.FINISHED)
        if any(bugs):
            print(
                "BUG PRESENT: a late success was accepted after rq had collected its job as "
                "abandoned"
            )
            return 1
        print("late success refused")
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
