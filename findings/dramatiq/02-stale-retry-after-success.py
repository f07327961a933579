"""F2: a paused dramatiq worker's failure schedules a retry of a message another worker
already completed: the message runs again after its success.

dramatiq 2.2.1, Redis broker. Worker A is dramatiq's own ``Worker`` (a child process; its
defaults but ``worker_threads=1`` and ``heartbeat_timeout=2000`` ms). A starts the message
and is paused (SIGSTOP) for longer than the heartbeat timeout. Worker B (a RedisBroker
consumer with ``maintenance_chance=1_000_000``, documented) requeues it, fetches it and acks
it: success. A resumes and its actor raises. The Retries middleware then enqueues a retry
copy (middleware/retries.py L148), unconditionally, before the worker's ack of the original
(worker.py L415-419), which dramatiq refuses in silence: A no longer holds the message
(dispatch.lua L191-196). Only that ack is fenced; the retry is not.

Server: ``DRAMATIQ_REDIS_URL`` (default ``redis://127.0.0.1:6379/11``); every key is under a
namespace of this run, deleted at the end. Exit 1 while the behaviour is present, else 0.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import redis

URL = os.environ.get("DRAMATIQ_REDIS_URL", "redis://127.0.0.1:6379/11")
HB = 2000

if len(sys.argv) > 2 and sys.argv[1] == "--worker":  # worker A, in the child process
    import dramatiq
    from dramatiq import Worker
    from dramatiq.brokers.redis import RedisBroker

    NS = sys.argv[2]
    dramatiq.set_broker(RedisBroker(url=URL, namespace=NS, heartbeat_timeout=HB))
    rr = redis.Redis.from_url(URL)

    @dramatiq.actor(queue_name="q")
    def flaky(label: str) -> None:
        rr.rpush(f"{NS}:started", label)
        time.sleep(1.5)  # the parent pauses A in here
        raise RuntimeError("failed after resuming")

    Worker(dramatiq.get_broker(), worker_threads=1).start()
    time.sleep(30)
    sys.exit(0)

from dramatiq import Message  # noqa: E402
from dramatiq.brokers.redis import RedisBroker  # noqa: E402

NS = f"rdq-f2-{uuid.uuid4().hex[:8]}"
r = redis.Redis.from_url(URL)
producer = RedisBroker(url=URL, namespace=NS)
sent = producer.enqueue(
    Message(queue_name="q", actor_name="flaky", args=("job-x",), kwargs={}, options={})
)
child = subprocess.Popen(
    [sys.executable, __file__, "--worker", NS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
done, copies = None, []
try:
    t0 = time.time()
    while not r.lrange(f"{NS}:started", 0, -1) and time.time() - t0 < 20:
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGSTOP)
    print("A started the message and was paused (SIGSTOP)")
    time.sleep(HB / 1000 + 1)
    B = RedisBroker(url=URL, namespace=NS, heartbeat_timeout=HB, maintenance_chance=1_000_000)
    B.declare_queue("q")
    cb = B.consume("q", prefetch=1, timeout=100)
    done = next(cb) or next(cb)
    if done is not None:
        cb.ack(done)
        print(f"B reclaimed it and acked it (success): {NS}:q.msgs holds {r.hlen(f'{NS}:q.msgs')}")
    os.kill(child.pid, signal.SIGCONT)
    print("A resumed: its actor raises, Retries enqueues a retry, A's ack is refused")
    time.sleep(3)
    from dramatiq.message import Message as M

    for key in (f"{NS}:q.DQ.msgs", f"{NS}:q.msgs"):
        for data in r.hvals(key):
            m = M.decode(data)
            if m.message_id == sent.message_id:
                copies.append((key.split(":", 1)[1], m.options.get("retries")))
    print(f"copies of the completed message still queued: {copies}")
finally:
    os.kill(child.pid, signal.SIGCONT)
    child.terminate()
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        child.kill()
    for key in r.scan_iter(f"{NS}:*"):
        r.delete(key)
if done is not None and copies:
    print("BEHAVIOUR PRESENT: a stale worker's retry re-scheduled a message that had succeeded")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
