"""rq 3.0.0: a worker listening on more than one queue that is killed after it took a job
off the queue but before the job is `started` loses the job for good: it is in no queue,
no intermediate list and no registry, its status stays `queued`, and rq's maintenance
(`clean_registries`: `StartedJobRegistry.cleanup`, `IntermediateQueue.cleanup`) never
finds it. Known upstream: rq/rq#1716 (also rq/rq#2236, rq/rq#381).

Real `rq worker` processes (rq's CLI, rq's defaults), real SIGKILLs, real time. Four doomed
workers run `rq worker --burst --worker-class <a Worker subclass>`; each subclass SIGKILLs
its own process at one point of rq's loop -- a crash (the OOM killer, a node lost) at that
moment:

- `dequeued`: when `execute_job` is entered, right after `dequeue_job_and_maintain_ttl`
  returned the job;
- `prepared`: when `fork_work_horse` is entered, right after `prepare_execution`
  registered the execution in the StartedJobRegistry -- the moment `rq.Worker` forks its
  horse (the horse sets the job `started`).

Each kill point runs once with a worker on one queue (rq dequeues with LMOVE into an
intermediate list) and once with a worker on two queues (rq dequeues with LPOP/BLPOP: no
intermediate list). Then two rescuer workers on every queue run rq's maintenance, each
when it starts: the first once the doomed executions' heartbeats have lapsed
(`job_monitoring_interval` + 60 = 90 s at rq's default 30), the second 62 s later (an
intermediate list entry is failed by the second pass that sees it, more than 60 s after the
first). Every rq setting is at its default; what the reproducer arranges is when the
rescuers start, so that their first passes are the ones that matter (with workers already
running, the next pass comes within `maintenance_interval`, 600 s by default).

Needs rq==3.0.0 and a Redis server: ``RQ_REPRO_REDIS_URL`` (default
``redis://127.0.0.1:6379/13``). Names are tagged with a random run id; its keys are deleted
at the end (no FLUSHDB). Linux (reads /proc to kill the workers' processes). Takes about
165 s. Exit 1 when a job is lost, 0 otherwise, 2 if the sequence did not happen.
"""

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from rq import Queue
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.utils import current_timestamp

URL = os.environ.get("RQ_REPRO_REDIS_URL", "redis://127.0.0.1:6379/13")
TAG = f"f3{secrets.token_hex(4)}"
DOOMED_MODULE = f"rq_repro_doomed_{TAG}"
DOOMED = """
import os, signal
from rq import Worker

class KilledAfterDequeue(Worker):
    def execute_job(self, job, queue):
        os.kill(os.getpid(), signal.SIGKILL)

class KilledAfterPrepare(Worker):
    def fork_work_horse(self, job, queue):
        os.kill(os.getpid(), signal.SIGKILL)
"""
CLASSES = {"dequeued": "KilledAfterDequeue", "prepared": "KilledAfterPrepare"}
#: How long after the first rescuer the second one starts.
SECOND_PASS_S = 62


def rq_cli() -> list[str]:
    """rq's own CLI: the ``rq`` script beside this interpreter, else ``python -m rq.cli``."""
    script = Path(sys.executable).with_name("rq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rq.cli"]


def start_worker(name: str, queues: list[str], *options: str) -> subprocess.Popen[bytes]:
    """``rq worker --name NAME [options] --url URL QUEUE...``, in a session of its own."""
    return subprocess.Popen(
        [*rq_cli(), "worker", "--name", name, *options, "--url", URL, *queues],
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


def where(r: redis.Redis, queues: list[str], job_id: str) -> list[str]:
    """Every list and registry of ``queues`` that holds ``job_id``."""
    found = []
    for name in queues:
        q = Queue(name, connection=r)
        if job_id.encode() in r.lrange(q.key, 0, -1):
            found.append(f"queue {name}")
        if job_id.encode() in r.lrange(q.intermediate_queue_key, 0, -1):
            found.append(f"intermediate list of {name}")
        for reg in (
            q.started_job_registry,
            q.failed_job_registry,
            q.finished_job_registry,
            q.scheduled_job_registry,
            q.deferred_job_registry,
        ):
            if job_id in reg.get_job_ids(cleanup=False):
                found.append(f"{type(reg).__name__} of {name}")
    return found


def lapsed(r: redis.Redis, queues: list[str]) -> bool:
    """Whether every execution in these queues' StartedJobRegistry has lapsed."""
    now = current_timestamp()
    for name in queues:
        key = StartedJobRegistry(name, connection=r).key
        if any(score >= now for _, score in r.zrange(key, 0, -1, withscores=True)):
            return False
    return True


def main() -> int:
    r = redis.Redis.from_url(URL)
    workdir = tempfile.mkdtemp(prefix="rq-repro-")
    with open(os.path.join(workdir, f"{DOOMED_MODULE}.py"), "w") as f:
        f.write(DOOMED)
    cases = []
    for point in ("dequeued", "prepared"):
        for width in (1, 2):
            queues = [f"{TAG}-{point}-{width}q-{i}" for i in range(width)]
            cases.append((point, width, queues, f"{TAG}-{point}-{width}q-job"))
    every = [q for _, _, queues, _ in cases for q in queues]
    procs = []
    try:
        for point, width, queues, job_id in cases:
            Queue(queues[0], connection=r).enqueue("os.getpid", job_id=job_id)
            doomed = start_worker(
                f"{job_id}-doomed", queues, "--burst", "--path", workdir,
                "--worker-class", f"{DOOMED_MODULE}.{CLASSES[point]}",
            )  # fmt: skip
            procs.append(doomed)
            doomed.wait(120)
            print(f"worker on {width} queue(s) killed after {point} (exit {doomed.returncode})")
            if doomed.returncode != -signal.SIGKILL:
                print("INCONCLUSIVE: the doomed worker did not die by SIGKILL")
                return 2
        deadline = time.monotonic() + 150
        while not lapsed(r, every) and time.monotonic() < deadline:
            time.sleep(0.5)
        print("the doomed executions' heartbeats have lapsed; a rescuer worker starts")
        procs.append(start_worker(f"{TAG}-rescuer-1", every))
        time.sleep(SECOND_PASS_S)
        print(f"{SECOND_PASS_S} s later a second rescuer worker starts")
        procs.append(start_worker(f"{TAG}-rescuer-2", every))
        time.sleep(5)
        lost = False
        for point, width, queues, job_id in cases:
            status = Job.fetch(job_id, connection=r).get_status().value
            found = where(r, queues, job_id)
            gone = not found
            lost |= gone and width > 1
            print(
                f"  {width} queue(s), killed after {point}: status {status}, "
                f"in {', '.join(found) if found else 'NOTHING (lost)'}"
            )
        if lost:
            print("BUG PRESENT: a job taken by a multi-queue worker that was killed is lost")
            return 1
        print("no job lost")
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
