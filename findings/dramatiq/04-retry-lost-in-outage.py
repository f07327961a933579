"""F4: a failed message with retries left is acked and LOST when Redis is down while the
actor fails. Known upstream: Bogdanp/dramatiq PR #545 (open), whose thread describes it.

dramatiq 2.2.1, Redis broker, dramatiq's own ``Worker`` with every setting at its default
(``RedisBroker(port=...)``, 8 worker threads, the default middleware). The actor fails
while Redis is down (SIGKILL of a private ``redis-server`` with AOF and ``appendfsync
always``, so Redis itself loses nothing). The Retries middleware's ``broker.enqueue`` of
the retry raises (middleware/retries.py L148); ``Broker.emit_after`` logs and swallows it
(broker.py L123-129); the message was never ``fail()``-ed, so ``post_process_message``
acks it (worker.py L415-419), retrying the ack every 5 s until Redis answers (L429-440).
Net: no retry, no dead letter, the message is gone.

``RedisBroker(port=...)`` builds ``redis.Redis(port=...)``, whose client retries a
command 10 times with a backoff capped at 1 s (redis-py 8's default): an outage shorter
than that (about 4 s) hides the behaviour, so Redis stays down 9 s. A broker built with
``RedisBroker(url=...)`` gets redis-py's ``ConnectionPool.from_url``, whose connections
retry nothing (redis-py 8.2.0): there any outage at the moment of the retry's enqueue is
enough.

Needs ``redis-server`` (``DRAMATIQ_REDIS_SERVER``, default ``redis-server`` on PATH); it
runs on a free loopback port with its data in a temporary folder, removed at the end.
About 19 s. Exit 1 while the behaviour is present (the message is nowhere afterwards),
else 0.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import redis

BIN = os.environ.get("DRAMATIQ_REDIS_SERVER", "redis-server")
DOWN = 9  # seconds: longer than redis-py 8's client retries (10 tries, backoff capped at 1 s)
NS = "rdq-f4"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = free_port()
DATA = tempfile.mkdtemp(prefix="rdq-f4-")


def start_redis(port: int = PORT, data: str = DATA) -> subprocess.Popen:
    p = subprocess.Popen(
        [
            BIN,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            data,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return p
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("the private redis-server did not start")


srv = start_redis()
import dramatiq  # noqa: E402
from dramatiq import Worker  # noqa: E402
from dramatiq.brokers.redis import RedisBroker  # noqa: E402

r = redis.Redis(port=PORT)
broker = RedisBroker(port=PORT, namespace=NS)
dramatiq.set_broker(broker)
state = {}


@dramatiq.actor(queue_name="q", max_retries=20)
def fails(label: str) -> None:
    state["started"] = time.time()
    time.sleep(1.5)
    raise RuntimeError("transient failure: should be retried")


worker, where = None, ["?"]
try:
    msg = fails.send("job-r")
    worker = Worker(broker)
    worker.start()
    while "started" not in state:
        time.sleep(0.05)
    srv.send_signal(signal.SIGKILL)
    srv.wait()
    print(f"the actor runs; Redis crashed (SIGKILL), down for {DOWN} s")
    started_down = time.monotonic()
    # What Redis kept: its AOF, read by a second private redis-server on a copy of the data
    # folder (the worker cannot reach it, so its ack cannot land before the count).
    copy = tempfile.mkdtemp(prefix="rdq-f4-copy-")
    shutil.copytree(DATA, copy, dirs_exist_ok=True)
    probe_port = free_port()
    probe = start_redis(probe_port, copy)
    pr = redis.Redis(port=probe_port)
    print(
        f"Redis's AOF on disk: the message is still stored, {pr.hlen(f'{NS}:q.msgs')} in q.msgs, "
        f"{sum(pr.scard(k) for k in pr.scan_iter(f'{NS}:__acks__.*'))} in the worker's ack set"
    )
    probe.terminate()
    probe.wait()
    shutil.rmtree(copy, ignore_errors=True)
    time.sleep(max(0.0, DOWN - (time.monotonic() - started_down)))
    srv = start_redis()
    print("Redis back, from the same AOF")
    time.sleep(6.5)  # the ack is retried every 5 s
    from dramatiq.message import Message

    where = []
    for key in (f"{NS}:q.msgs", f"{NS}:q.DQ.msgs", f"{NS}:q.XQ.msgs"):
        for _, data in r.hgetall(key).items():
            if Message.decode(data).message_id == msg.message_id:
                where.append(key.split(":", 1)[1])
    print(f"the message is now in: {where or 'nowhere'} (no retry, no dead letter)")
finally:
    if worker is not None:
        worker.stop(timeout=3000)
    srv.terminate()
    srv.wait()
    shutil.rmtree(DATA, ignore_errors=True)
if not where:
    print("BEHAVIOUR PRESENT: a failed message with retries left was acked and lost")
    sys.exit(1)
print("behaviour absent")
sys.exit(0)
