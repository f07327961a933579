"""F1: a live dramatiq worker whose prefetch buffers are full sends no heartbeat, so another
worker's maintenance requeues the message it is still executing and hands it to a second
consumer (two executions at once).

dramatiq 2.2.1, Redis broker. Worker A is dramatiq's own ``Worker`` with its defaults but
``worker_threads=1`` (``dramatiq --threads 1``) and ``heartbeat_timeout=2000`` ms (the
documented RedisBroker setting, shortened from 60000 so that the run is short). A's consumer
of ``q`` holds its full prefetch (2 x threads: worker.py L95) of long messages, and its
consumer of ``q.DQ`` its full prefetch (1000 x threads: worker.py L98) of scheduled ones;
``_RedisConsumer.__next__`` talks to Redis only while it holds fewer than its prefetch
(brokers/redis.py L360-364), and a broker's heartbeat is nothing but the side effect of its
calls (dispatch.lua L56-58): A goes silent while it works. Reclaimer B is a plain
RedisBroker consumer with ``maintenance_chance=1_000_000`` (documented; dramatiq's default
1000 does the same maintenance on one command in a thousand).

``--control``: no scheduled messages, so A's delay-queue consumer keeps polling, its
heartbeat stays fresh and B gets nothing (exit 0).

Server: ``DRAMATIQ_REDIS_URL`` (default ``redis://127.0.0.1:6379/11``); every key is under a
namespace of this run, deleted at the end. Exit 1 while the behaviour is present, else 0.
"""

import os
import sys
import time
import uuid

import dramatiq
import redis
from dramatiq import Worker
from dramatiq.brokers.redis import RedisBroker

URL = os.environ.get("DRAMATIQ_REDIS_URL", "redis://127.0.0.1:6379/11")
NS = f"rdq-f1-{uuid.uuid4().hex[:8]}"
HB = 2000
r = redis.Redis.from_url(URL)

A = RedisBroker(url=URL, namespace=NS, heartbeat_timeout=HB)
dramatiq.set_broker(A)
running = {}  # label -> True while A's actor executes it


@dramatiq.actor(queue_name="q", max_retries=0)
def slow(label: str) -> None:
    running[label] = True
    time.sleep(6)
    running.pop(label, None)


@dramatiq.actor(queue_name="q")
def later(i: int) -> None:
    pass


def hb_age() -> int | None:
    score = r.zscore(f"{NS}:__heartbeats__", A.broker_id)
    return None if score is None else int(time.time() * 1000 - score)


wa = None
dup = []
try:
    for i in range(0 if "--control" in sys.argv else 1000):
        later.send_with_options(args=(i,), delay=10 * 60 * 1000)
    slow.send("job-1")
    slow.send("job-2")
    wa = Worker(A, worker_threads=1)
    wa.start()
    time.sleep(0.5)
    print(
        f"A holds q={r.scard(f'{NS}:__acks__.{A.broker_id}.q')} "
        f"q.DQ={r.scard(f'{NS}:__acks__.{A.broker_id}.q.DQ')}, running {sorted(running)}"
    )
    t0 = time.time()
    while (hb_age() or 0) < HB + 500 and time.time() - t0 < 5:
        time.sleep(0.2)
    print(f"A is alive and running {sorted(running)}; its heartbeat is {hb_age()} ms old")
    B = RedisBroker(url=URL, namespace=NS, heartbeat_timeout=HB, maintenance_chance=1_000_000)
    B.declare_queue("q")
    cb = B.consume("q", prefetch=2, timeout=100)
    got = [m for m in (next(cb) for _ in range(3)) if m is not None]
    labels = [m.args[0] for m in got]
    dup = [label for label in labels if label in running]
    print(f"B fetched {labels}; A is still executing {dup}")
    for m in got:
        cb.ack(m)
finally:
    if wa is not None:
        wa.stop(timeout=2000)
    for key in r.scan_iter(f"{NS}:*"):
        r.delete(key)
if dup:
    print("BEHAVIOUR PRESENT: a live worker's running message was handed to another consumer")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
