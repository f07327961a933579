"""F3: a scheduled (delayed) message runs twice after a worker pause. Known upstream:
Bogdanp/dramatiq#431 (open).

dramatiq 2.2.1, Redis broker. Worker A (dramatiq's own ``Worker``, a child process)
fetches a delayed message from ``q.DQ`` and keeps it in memory until its eta
(worker.py L346-362). A is paused (SIGSTOP) for longer than ``heartbeat_timeout``. A
fetch of another broker on ``q.DQ`` runs maintenance, which requeues A's unacked ``q.DQ``
messages (dispatch.lua L110-124), and worker B fetches the same delayed message. A
resumes. At the eta both workers promote it: ``broker.enqueue`` of a copy into ``q``,
whatever the worker still holds, then the ack of the ``q.DQ`` original (only B's takes
effect). Two copies reach ``q``; the actor runs twice.

Settings: dramatiq's defaults, unless ``--fast``:

====================  =========  ==========  ==============================================
setting               default    ``--fast``  docs
====================  =========  ==========  ==============================================
heartbeat_timeout     60000 ms   2000 ms     RedisBroker: "The amount of time (in ms) that
                                             has to pass without a heartbeat for a broker
                                             process to be considered offline."
                                             (brokers/redis.py L79-81)
worker_threads        8          1           Worker: "The number of worker threads to
                                             spawn." (worker.py L76)
maintenance_chance    1000       1000000     RedisBroker: "How many commands out of a
(B's broker)                                 million should trigger queue maintenance."
                                             (brokers/redis.py L76-77)
====================  =========  ==========  ==============================================

With ``--fast`` B's own delay-queue fetch runs maintenance and takes the message. At the
defaults B's worker polls ``q.DQ`` once a second (``worker_timeout`` 1000 ms) and wins
the 1-in-1000 draw after about 17 minutes on average; so C, a plain ``RedisBroker``
consumer of ``q.DQ`` at the defaults with a 1 ms idle timeout
(``RedisBroker.consume(timeout=...)``, default 5000 ms), polls until its fetch runs
maintenance and takes the message, then gives it back with ``Consumer.requeue`` (what a
worker does with the messages it holds when it shuts down), and B's worker fetches it.

About 14 s with ``--fast``, 100-110 s at the defaults. Server: ``DRAMATIQ_REDIS_URL``
(default ``redis://127.0.0.1:6379/11``); every key is under a namespace of this run,
deleted at the end. Exit 1 while the behaviour is present (more than one execution), 2
when the scene could not be set (no verdict), else 0.
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
from dramatiq.brokers.redis import DEFAULT_HEARTBEAT_TIMEOUT, RedisBroker

URL = os.environ.get("DRAMATIQ_REDIS_URL", "redis://127.0.0.1:6379/11")
FAST = "--fast" in sys.argv
HB = 2000 if FAST else DEFAULT_HEARTBEAT_TIMEOUT
THREADS = {"worker_threads": 1} if FAST else {}
DELAY_MS = 6000 if FAST else HB + 30_000  # the eta falls after A resumed
IS_A = len(sys.argv) > 2 and sys.argv[1] == "--worker"
NS = sys.argv[2] if IS_A else f"rdq-f3-{uuid.uuid4().hex[:8]}"
rr = redis.Redis.from_url(URL)
settings = {"heartbeat_timeout": HB} if FAST else {}
if FAST and not IS_A:
    settings["maintenance_chance"] = 1_000_000
broker = RedisBroker(url=URL, namespace=NS, **settings)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="q")
def scheduled(label: str) -> None:
    rr.rpush(f"{NS}:runs", f"{label} ran on {'A' if IS_A else 'B'}")


if IS_A:
    Worker(broker, **THREADS).start()
    time.sleep(DELAY_MS / 1000 + 900)  # the parent ends it sooner
    sys.exit(0)


def take_over_at_defaults() -> None:
    """C's fetches until one runs maintenance and takes the message; C requeues it."""
    c = RedisBroker(url=URL, namespace=NS)
    consumer = c.consume("q.DQ", prefetch=1, timeout=1)
    for _ in range(10_000):  # at 1 in 1000, 10 000 polls miss with odds 5e-5
        message = next(consumer)
        if message is not None:
            consumer.requeue([message])
            print("C's fetch ran maintenance and took it; C requeued it to q.DQ")
            return
    print("C's fetches never ran maintenance")


class SetupFailed(Exception):
    """The scene could not be set (exit 2: no verdict)."""


def a_holds_it() -> bool:
    return any(rr.scard(k) for k in rr.scan_iter(f"{NS}:__acks__.*.q.DQ"))


args = ["--worker", NS, *(["--fast"] if FAST else [])]
child = subprocess.Popen(
    [sys.executable, __file__, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
wb, runs, setup_failed = None, [], None
try:
    time.sleep(1.5)  # A boots and polls
    sent = time.time()
    scheduled.send_with_options(args=("job-d",), delay=DELAY_MS)
    while time.time() - sent < 600 and not a_holds_it():
        time.sleep(0.05)
    if not a_holds_it():
        raise SetupFailed("A did not fetch the delayed message within 600 s")
    os.kill(child.pid, signal.SIGSTOP)
    print("A holds the delayed message in memory; A paused (SIGSTOP)")
    time.sleep(HB / 1000 + 1)
    if not FAST:
        take_over_at_defaults()
    wb = Worker(broker, **THREADS)
    wb.start()  # B's q.DQ fetch takes the delayed message (with --fast, reclaiming it)
    time.sleep(1)
    os.kill(child.pid, signal.SIGCONT)
    print("A resumed; waiting past the eta")
    while time.time() < sent + DELAY_MS / 1000 + 300 and rr.llen(f"{NS}:runs") < 2:
        time.sleep(0.5)
    time.sleep(1)  # a third run, if any
    runs = [x.decode() for x in rr.lrange(f"{NS}:runs", 0, -1)]
    print(f"executions of the one scheduled message: {runs}")
except SetupFailed as exc:
    setup_failed = exc
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
if setup_failed is not None:
    print(f"NO VERDICT: {setup_failed}")
    sys.exit(2)
if len(runs) > 1:
    print("BEHAVIOUR PRESENT: one scheduled message was executed more than once")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
