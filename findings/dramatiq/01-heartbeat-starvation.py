"""F1: a live dramatiq worker whose two prefetch buffers are full sends no heartbeat, so
another worker's maintenance requeues the message it is still executing and hands it to a
second consumer (two executions at once).

dramatiq 2.2.1, Redis broker. Worker A is dramatiq's own ``Worker``. Its consumer of ``q``
holds its full prefetch (2 x worker_threads, worker.py L95) of long messages and its
consumer of ``q.DQ`` its full prefetch (1000 x worker_threads, worker.py L98) of scheduled
ones. ``_RedisConsumer.__next__`` talks to Redis only while it holds fewer than its
prefetch (brokers/redis.py L360-364), and a broker's heartbeat is nothing but the side
effect of its calls (dispatch.lua L58): A goes silent while its worker threads work.
Reclaimer B is a plain ``RedisBroker`` consumer of ``q`` whose fetches run maintenance
(dispatch.lua L110-124) with the broker's odds.

Settings: dramatiq's defaults, unless ``--fast``:

====================  =========  ==========  ==============================================
setting               default    ``--fast``  docs
====================  =========  ==========  ==============================================
heartbeat_timeout     60000 ms   2000 ms     RedisBroker: "The amount of time (in ms) that
(A and B)                                    has to pass without a heartbeat for a broker
                                             process to be considered offline."
                                             (brokers/redis.py L79-81)
worker_threads (A)    8          1           Worker: "The number of worker threads to
                                             spawn." (worker.py L76; ``dramatiq
                                             --threads``, default 8)
maintenance_chance    1000       1000000     RedisBroker: "How many commands out of a
(B)                                          million should trigger queue maintenance."
                                             (brokers/redis.py L76-77)
====================  =========  ==========  ==============================================

B's consumer idle timeout (``RedisBroker.consume(timeout=...)``, "The idle timeout in
milliseconds", default 5000) is 1 ms, so that it polls fast enough to win the
maintenance draw within seconds at the default odds (about 1000 polls); its prefetch is
A's queue prefetch, so that it takes every message maintenance gives back.

``--control``: no scheduled messages, so A's delay-queue consumer keeps polling, its
heartbeat stays fresh and B gets nothing (exit 0).

About 6 s with ``--fast``, 80-100 s at the defaults. Server: ``DRAMATIQ_REDIS_URL``
(default ``redis://127.0.0.1:6379/11``); every key is under a namespace of this run,
deleted at the end. Exit 1 while the behaviour is present, 2 when the scene could not be
set (no verdict), else 0.
"""

import os
import sys
import time
import uuid

import dramatiq
import redis
from dramatiq import Worker
from dramatiq.brokers.redis import DEFAULT_HEARTBEAT_TIMEOUT, RedisBroker

URL = os.environ.get("DRAMATIQ_REDIS_URL", "redis://127.0.0.1:6379/11")
NS = f"rdq-f1-{uuid.uuid4().hex[:8]}"
FAST = "--fast" in sys.argv
HB = 2000 if FAST else DEFAULT_HEARTBEAT_TIMEOUT
THREADS = 1 if FAST else 8
SLOW_S = HB / 1000 + 120  # longer than A's silence plus B's polling, with room to spare
POLLS = 3 if FAST else 10_000  # at 1 in 1000, 10 000 polls miss with odds 5e-5
r = redis.Redis.from_url(URL)

A = RedisBroker(url=URL, namespace=NS, **({"heartbeat_timeout": HB} if FAST else {}))
dramatiq.set_broker(A)
running = {}  # label -> True while A's actor executes it


@dramatiq.actor(queue_name="q", max_retries=0)
def slow(label: str) -> None:
    running[label] = True
    time.sleep(SLOW_S)
    running.pop(label, None)


@dramatiq.actor(queue_name="q")
def later(i: int) -> None:
    pass


class SetupFailed(Exception):
    """The scene could not be set (exit 2: no verdict)."""


def hb_age() -> int | None:
    score = r.zscore(f"{NS}:__heartbeats__", A.broker_id)
    return None if score is None else int(time.time() * 1000 - score)


def held(queue: str) -> int:
    return r.scard(f"{NS}:__acks__.{A.broker_id}.{queue}")


wa = None
dup = []
setup_failed = None
try:
    delayed = 0 if "--control" in sys.argv else 1000 * THREADS
    for i in range(delayed):
        later.send_with_options(args=(i,), delay=60 * 60 * 1000)
    for n in range(2 * THREADS):
        slow.send(f"job-{n + 1}")
    wa = Worker(A, worker_threads=THREADS)
    wa.start()
    t0 = time.time()
    while (held("q"), held("q.DQ")) != (2 * THREADS, delayed) and time.time() - t0 < 600:
        time.sleep(0.2)
    print(f"A holds q={held('q')} q.DQ={held('q.DQ')}, running {sorted(running)}")
    if (held("q"), held("q.DQ")) != (2 * THREADS, delayed):
        raise SetupFailed("A did not fetch every message within 600 s")
    t0 = time.time()
    while (hb_age() or 0) < HB + 500 and time.time() - t0 < HB / 1000 + 5:
        time.sleep(0.2)
    print(f"A is alive and running {sorted(running)}; its heartbeat is {hb_age()} ms old")
    fast_b = {"heartbeat_timeout": HB, "maintenance_chance": 1_000_000} if FAST else {}
    B = RedisBroker(url=URL, namespace=NS, **fast_b)
    B.declare_queue("q")
    cb = B.consume("q", prefetch=2 * THREADS, timeout=100 if FAST else 1)
    got = []
    for _ in range(POLLS):
        m = next(cb)
        if m is not None:
            got.append(m)
        elif got:
            break
    labels = [m.args[0] for m in got]
    dup = [label for label in labels if label in running]
    print(f"B fetched {labels}; A is still executing {dup}")
    for m in got:
        cb.ack(m)
except SetupFailed as exc:
    setup_failed = exc
finally:
    if wa is not None:
        wa.stop(timeout=2000)
    for key in r.scan_iter(f"{NS}:*"):
        r.delete(key)
if setup_failed is not None:
    print(f"NO VERDICT: {setup_failed}")
    sys.exit(2)
if dup:
    print("BEHAVIOUR PRESENT: a live worker's running message was handed to another consumer")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
