"""F3: a scheduled (delayed) message runs twice after a worker pause.

dramatiq 2.2.1, Redis broker. Worker A (dramatiq's own ``Worker``, a child process)
fetches a delayed message from ``q.DQ`` and keeps it in memory until its eta
(worker.py L346-362). A is paused (SIGSTOP) for longer than ``heartbeat_timeout``; worker B
starts, and its delay-queue fetch runs maintenance, which requeues A's unacked ``q.DQ``
messages (dispatch.lua L106-124), and fetches the same delayed message. A resumes. At the
eta both workers promote it: ``broker.enqueue`` of a copy into ``q``, unfenced, and then the
ack of the ``q.DQ`` original (only B's counts). Two copies reach ``q``; the actor runs twice.
Known upstream: Bogdanp/dramatiq#431 (open).

Both workers: ``heartbeat_timeout=2000`` ms; B also ``maintenance_chance=1_000_000`` (both
documented RedisBroker settings). Server: ``DRAMATIQ_REDIS_URL`` (default
``redis://127.0.0.1:6379/11``); every key is under a namespace of this run, deleted at the
end. Exit 1 while the behaviour is present (more than one execution), else 0.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import dramatiq
import redis
from dramatiq import Worker
from dramatiq.brokers.redis import RedisBroker

URL = os.environ.get("DRAMATIQ_REDIS_URL", "redis://127.0.0.1:6379/11")
HB = 2000
IS_A = len(sys.argv) > 2 and sys.argv[1] == "--worker"
NS = sys.argv[2] if IS_A else f"rdq-f3-{uuid.uuid4().hex[:8]}"
rr = redis.Redis.from_url(URL)
broker = RedisBroker(
    url=URL,
    namespace=NS,
    heartbeat_timeout=HB,
    **({} if IS_A else {"maintenance_chance": 1_000_000}),
)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="q")
def scheduled(label: str) -> None:
    rr.rpush(f"{NS}:runs", f"{label} ran on {'A' if IS_A else 'B'}")


if IS_A:
    Worker(broker, worker_threads=1).start()
    time.sleep(40)
    sys.exit(0)

child = subprocess.Popen(
    [sys.executable, __file__, "--worker", NS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
wb, runs = None, []
try:
    time.sleep(1.5)  # A boots and polls
    scheduled.send_with_options(args=("job-d",), delay=6000)
    t0 = time.time()
    while time.time() - t0 < 10 and not any(
        rr.scard(k) for k in rr.scan_iter(f"{NS}:__acks__.*.q.DQ")
    ):
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGSTOP)
    print("A holds the delayed message in memory; A paused (SIGSTOP)")
    time.sleep(HB / 1000 + 1)
    wb = Worker(broker, worker_threads=1)
    wb.start()  # B's q.DQ fetch reclaims A's delayed message and takes it
    time.sleep(1)
    os.kill(child.pid, signal.SIGCONT)
    print("A resumed; waiting past the eta")
    time.sleep(6)
    runs = [x.decode() for x in rr.lrange(f"{NS}:runs", 0, -1)]
    print(f"executions of the one scheduled message: {runs}")
finally:
    os.kill(child.pid, signal.SIGCONT)
    child.terminate()
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        child.kill()
    if wb is not None:
        wb.stop(timeout=2000)
    for key in rr.scan_iter(f"{NS}:*"):
        rr.delete(key)
if len(runs) > 1:
    print("BEHAVIOUR PRESENT: one scheduled message was executed more than once")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
