"""F2: a paused dramatiq worker's failure schedules a retry of a message another worker
already completed: the message runs again after its success (within dramatiq's
at-least-once delivery: a gap, see README.md).

dramatiq 2.2.1, Redis broker. Worker A is dramatiq's own ``Worker`` (a child process). A
starts the message and is paused (SIGSTOP) for longer than ``heartbeat_timeout``. B (a
plain ``RedisBroker`` consumer) runs maintenance in one of its fetches, which requeues A's
unacked message, fetches it and acks it: success. A resumes and its actor raises. The
Retries middleware then enqueues a retry copy (middleware/retries.py L148), whatever A
still holds, before the worker's ack of the original (worker.py L415-419), which the
dispatch script ignores: A no longer holds the message (dispatch.lua L194-196). Only that
ack depends on A holding the message; the retry does not.

Settings: dramatiq's defaults, unless ``--fast``:

====================  =========  ==========  ==============================================
setting               default    ``--fast``  docs
====================  =========  ==========  ==============================================
heartbeat_timeout     60000 ms   2000 ms     RedisBroker: "The amount of time (in ms) that
(A and B)                                    has to pass without a heartbeat for a broker
                                             process to be considered offline."
                                             (brokers/redis.py L79-81)
worker_threads (A)    8          1           Worker: "The number of worker threads to
                                             spawn." (worker.py L76)
maintenance_chance    1000       1000000     RedisBroker: "How many commands out of a
(B)                                          million should trigger queue maintenance."
                                             (brokers/redis.py L76-77)
====================  =========  ==========  ==============================================

B's consumer idle timeout (``RedisBroker.consume(timeout=...)``, default 5000 ms) is 1 ms
at the defaults, so that it wins the maintenance draw within seconds (about 1000 polls).

About 8 s with ``--fast``, 65-75 s at the defaults. Server: ``DRAMATIQ_REDIS_URL``
(default ``redis://127.0.0.1:6379/11``); every key is under a namespace of this run,
deleted at the end. Exit 1 while the behaviour is present, 2 when the scene could not be
set (no verdict), else 0.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import redis
from dramatiq.brokers.redis import DEFAULT_HEARTBEAT_TIMEOUT

URL = os.environ.get("DRAMATIQ_REDIS_URL", "redis://127.0.0.1:6379/11")
FAST = "--fast" in sys.argv
HB = 2000 if FAST else DEFAULT_HEARTBEAT_TIMEOUT
A_BROKER = {"heartbeat_timeout": HB} if FAST else {}
A_WORKER = {"worker_threads": 1} if FAST else {}

if len(sys.argv) > 2 and sys.argv[1] == "--worker":  # worker A, in the child process
    import dramatiq
    from dramatiq import Worker
    from dramatiq.brokers.redis import RedisBroker

    NS = sys.argv[2]
    dramatiq.set_broker(RedisBroker(url=URL, namespace=NS, **A_BROKER))
    rr = redis.Redis.from_url(URL)

    @dramatiq.actor(queue_name="q")
    def flaky(label: str) -> None:
        rr.rpush(f"{NS}:started", label)
        time.sleep(3)  # the parent pauses A in here
        raise RuntimeError("failed after resuming")

    Worker(dramatiq.get_broker(), **A_WORKER).start()
    time.sleep(HB / 1000 + 900)  # the parent ends it sooner
    sys.exit(0)

from dramatiq import Message  # noqa: E402
from dramatiq.brokers.redis import RedisBroker  # noqa: E402


class SetupFailed(Exception):
    """The scene could not be set (exit 2: no verdict)."""


NS = f"rdq-f2-{uuid.uuid4().hex[:8]}"
r = redis.Redis.from_url(URL)
producer = RedisBroker(url=URL, namespace=NS)
sent = producer.enqueue(
    Message(queue_name="q", actor_name="flaky", args=("job-x",), kwargs={}, options={})
)
child = subprocess.Popen(
    [sys.executable, __file__, "--worker", NS, *(["--fast"] if FAST else [])],
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
)
done, copies, setup_failed = None, [], None
try:
    t0 = time.time()
    while not r.lrange(f"{NS}:started", 0, -1) and time.time() - t0 < 600:
        time.sleep(0.05)
    if not r.lrange(f"{NS}:started", 0, -1):
        raise SetupFailed("A did not start the message within 600 s")
    os.kill(child.pid, signal.SIGSTOP)
    print("A started the message and was paused (SIGSTOP)")
    time.sleep(HB / 1000 + 1)
    fast_b = {"heartbeat_timeout": HB, "maintenance_chance": 1_000_000} if FAST else {}
    B = RedisBroker(url=URL, namespace=NS, **fast_b)
    B.declare_queue("q")
    cb = B.consume("q", prefetch=1, timeout=100 if FAST else 1)
    for _ in range(2 if FAST else 10_000):
        done = next(cb)
        if done is not None:
            break
    if done is not None:
        cb.ack(done)
        print(f"B reclaimed it and acked it (success): {NS}:q.msgs holds {r.hlen(f'{NS}:q.msgs')}")
    os.kill(child.pid, signal.SIGCONT)
    print("A resumed: its actor raises, Retries enqueues a retry, A's ack is ignored")
    from dramatiq.message import Message as M

    t0 = time.time()
    while not copies and time.time() - t0 < 300:  # a starved machine can delay A for long
        time.sleep(0.5)
        for key in (f"{NS}:q.DQ.msgs", f"{NS}:q.msgs"):
            for data in r.hvals(key):
                m = M.decode(data)
                if m.message_id == sent.message_id:
                    copies.append((key.split(":", 1)[1], m.options.get("retries")))
    print(f"copies of the completed message still queued: {copies}")
except SetupFailed as exc:
    setup_failed = exc
finally:
    os.kill(child.pid, signal.SIGCONT)
    child.terminate()
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        child.kill()
    for key in r.scan_iter(f"{NS}:*"):
        r.delete(key)
if setup_failed is not None:
    print(f"NO VERDICT: {setup_failed}")
    sys.exit(2)
if done is not None and copies:
    print("BEHAVIOUR PRESENT: a stale worker's retry re-scheduled a message that had succeeded")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
