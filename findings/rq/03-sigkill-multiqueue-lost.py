"""rq 3.0.0: a worker listening on more than one queue that is SIGKILLed after it took a
job off the queue but before the job is STARTED loses the job for good: it is in no queue,
no intermediate list and no registry, its status stays 'queued', and rq's maintenance
(``clean_registries``, ``IntermediateQueue.cleanup``, ``StartedJobRegistry.cleanup``)
never finds it.

Real rq workers, real SIGKILLs, real time. Four doomed workers run ``Worker.work()``; each
is a ``rq.Worker`` subclass that SIGKILLs itself at one point of the loop:

- ``dequeued``: when ``execute_job`` is entered, right after
  ``dequeue_job_and_maintain_ttl`` returned the job;
- ``prepared``: when ``fork_work_horse`` is entered, right after ``prepare_execution``
  registered the execution in the StartedJobRegistry -- the moment ``rq.Worker`` forks its
  horse (the job becomes STARTED in the horse).

Each kill point runs once with a worker on one queue (rq dequeues with LMOVE into an
intermediate list) and once with a worker on two queues (rq dequeues with LPOP/BLPOP: no
intermediate list). A rescuer worker on every queue then runs rq's maintenance every
second (``maintenance_interval=1``) for 63 s: past the doomed executions' heartbeat TTL
(61 s, ``job_monitoring_interval=1``) and past the intermediate list's 60 s.

Needs rq==3.0.0 and a Redis server: ``RQ_REPRO_REDIS_URL`` (default
``redis://127.0.0.1:6379/13``). Names are tagged with a random run id; its keys are deleted
at the end (no FLUSHDB). Takes about 65 s. Exit 1 when a job is lost, 0 otherwise.
"""

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time

import redis
from rq import Queue
from rq.job import Job

URL = os.environ.get("RQ_REPRO_REDIS_URL", "redis://127.0.0.1:6379/13")
TAG = f"f3{secrets.token_hex(4)}"
WAIT_S = 63
DOOMED = textwrap.dedent(
    """
    import os, signal, sys, redis
    from rq import Worker

    class KilledAfterDequeue(Worker):
        def execute_job(self, job, queue):
            os.kill(os.getpid(), signal.SIGKILL)

    class KilledAfterPrepare(Worker):
        def fork_work_horse(self, job, queue):
            os.kill(os.getpid(), signal.SIGKILL)

    point, name, url, *queues = sys.argv[1:]
    cls = KilledAfterDequeue if point == "dequeued" else KilledAfterPrepare
    cls(queues, name=name, connection=redis.Redis.from_url(url), job_monitoring_interval=1,
        maintenance_interval=1, worker_ttl=16).work(burst=True, logging_level="WARNING")
    """
)
RESCUER = textwrap.dedent(
    """
    import sys, redis
    from rq import Worker
    name, url, *queues = sys.argv[1:]
    Worker(queues, name=name, connection=redis.Redis.from_url(url), job_monitoring_interval=1,
           maintenance_interval=1, worker_ttl=16).work(logging_level="WARNING")
    """
)


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


def main() -> int:
    r = redis.Redis.from_url(URL)
    cases = []
    for point in ("dequeued", "prepared"):
        for width in (1, 2):
            queues = [f"{TAG}-{point}-{width}q-{i}" for i in range(width)]
            cases.append((point, width, queues, f"{TAG}-{point}-{width}q-job"))
    procs = []
    try:
        for point, width, queues, job_id in cases:
            Queue(queues[0], connection=r).enqueue("os.getpid", job_id=job_id)
            doomed = subprocess.Popen(
                [sys.executable, "-c", DOOMED, point, f"{job_id}-doomed", URL, *queues],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            doomed.wait(30)
            print(f"worker on {width} queue(s) SIGKILLed after {point} (exit {doomed.returncode})")
        every = [q for _, _, queues, _ in cases for q in queues]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RESCUER, f"{TAG}-rescuer", URL, *every],
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        print(f"a rescuer worker runs rq's maintenance on every queue for {WAIT_S} s ...")
        time.sleep(WAIT_S)
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
            print("BUG PRESENT: a job taken by a multi-queue worker that was SIGKILLed is lost")
            return 1
        print("no job lost")
        return 0
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
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
