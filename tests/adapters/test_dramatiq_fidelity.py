"""The dramatiq adapter adds nothing dramatiq 2.2.1 lacks (``adapters/dramatiq``): one Redis
client, the one ``RedisBroker(url=...)`` builds, carries every call; an ack or nack that
meets a connection error is tried again every 5 s until Redis answers, as dramatiq's
``ConsumerThread.post_process_message`` does, however long that takes; the delay-queue
step's errors go where ``ConsumerThread.run`` sends them.

Needs the Redis at ``RDQ_REDIS_DSN`` (default ``redis://127.0.0.1:6379/0``); every key is
under the kit's prefix of a namespace of its own (``rdq:{<namespace>``), deleted at the
end. Without a Redis these tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from rdq_dramatiq import storage as storage_module
from rdq_dramatiq.settings import parse_dsn, with_params
from rdq_dramatiq.storage import DramatiqStorage

from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask, Status
from tests._ci import missing
from tests._waiting import HANG_S

DSN = os.environ.get("RDQ_REDIS_DSN") or os.environ.get("RDQ_DSN") or "redis://127.0.0.1:6379/0"
LEASE = timedelta(seconds=30)


@pytest.fixture
def opened() -> Iterator[DramatiqStorage]:
    """A storage on a namespace of its own; its keys are deleted afterwards."""
    plain = redis.Redis.from_url(parse_dsn(DSN).url, socket_connect_timeout=HANG_S)
    try:
        plain.ping()
    except redis.RedisError as exc:
        missing(f"no Redis answers at RDQ_REDIS_DSN / default {DSN!r}: {exc}")
    namespace = f"fidelity-{uuid.uuid4().hex[:10]}"
    st = DramatiqStorage(DSN, namespace)
    try:
        yield st
    finally:
        st.close()
        for key in plain.scan_iter(match=f"rdq:{{{namespace}:*", count=1000):
            plain.delete(key)
        plain.close()


def _settings(client: redis.Redis) -> dict[str, Any]:
    """What a client's connections are built with: the pool's scalar connection arguments,
    and the retry policy a new connection of that pool gets (not connected)."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    conn = pool.connection_class(**kwargs)
    plain = {k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, bool, type(None)))}
    return {
        **plain,
        "given retry": "retry" in kwargs,
        "retries": conn.retry.get_retries(),
        "backoff": type(conn.retry._backoff).__name__,
    }


def _claim(st: DramatiqStorage) -> tuple[str, str]:
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    st.enqueue(NewTask(id=task_id, queue="q", handler="h", payload=b"x"))
    (claim,) = st.claim_due("q", 1, LEASE)
    return claim.task.id, claim.token


def test_every_call_goes_over_the_client_dramatiqs_broker_built(opened):
    """The dispatch script's MULTI, the reads and the Results middleware all use the
    client ``RedisBroker`` made from the URL, configured as ``RedisBroker(url=...)``
    configures one: nothing added to redis-py's pool (no retry policy of the adapter's)."""
    client = opened.broker.client
    assert opened._dispatch.client is client
    assert opened._reader.client is client
    assert opened.results.client is client
    url = with_params(parse_dsn(DSN).url, {"client_name": f"rdq:{opened.namespace}"})
    reference = RedisBroker(url=url).client
    try:
        assert _settings(client) == _settings(reference)
    finally:
        reference.connection_pool.disconnect()


def test_the_observed_multi_is_sent_once(opened):
    """The ack's observation reads the ack set in the MULTI that runs dramatiq's script;
    that is sound while the broker's connections retry nothing (a retried MULTI whose
    first try took effect would read that effect). redis-py 8.2.0 gives a URL-built pool
    no retry; a release that changes it fails here."""
    assert _settings(opened.broker.client)["retries"] == 0


class _Clock:
    """Stands for the ``time`` module in the adapter: ``sleep`` only moves ``now``."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_an_ack_is_retried_until_redis_answers_however_long(opened, monkeypatch):
    """20 connection errors in a row (100 s of dramatiq's 5 s waits): the ack is then
    taken and the task SUCCEEDED, as a dramatiq worker thread waits out any outage."""
    task_id, token = _claim(opened)
    clock = _Clock()
    monkeypatch.setattr(storage_module, "time", clock)
    real = opened._dispatch.run
    left = {"errors": 20}

    def down_for_a_while(command: str, *args: Any, **kwargs: Any) -> Any:
        if command == "ack" and left["errors"]:
            left["errors"] -= 1
            raise redis.ConnectionError("Connection refused")
        return real(command, *args, **kwargs)

    monkeypatch.setattr(opened._dispatch, "run", down_for_a_while)
    opened.complete(task_id, token)
    assert left["errors"] == 0 and clock.now >= 100
    assert opened.get(task_id).status is Status.SUCCEEDED


def test_closing_the_storage_ends_the_wait(opened, monkeypatch):
    """Redis never answers: the wait ends when the storage is closed (what ends a
    dramatiq worker's is the end of its process), and the ack is an unknown outcome."""
    task_id, token = _claim(opened)
    clock = _Clock()
    monkeypatch.setattr(storage_module, "time", clock)
    tries = {"n": 0}

    def never(command: str, *args: Any, **kwargs: Any) -> Any:
        tries["n"] += 1
        if tries["n"] == 3:
            opened._closed = True  # what close() sets first, from another thread
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(opened._dispatch, "run", never)
    with pytest.raises(BackendUnavailable, match="closed while Redis did not answer"):
        opened.complete(task_id, token)
    assert tries["n"] == 3


# ---- the delay-queue consumer's errors, as ConsumerThread.run takes them ----------------------


def _delayed(st: DramatiqStorage, *delays_ms: int) -> list[str]:
    """Tasks enqueued with these delays, fetched into the storage's memory (a claim_due
    that finds none of them due); their ids."""
    ids = []
    for delay in delays_ms:
        task_id = f"d-{uuid.uuid4().hex[:8]}"
        st.enqueue(NewTask(id=task_id, queue="q", handler="h", delay=timedelta(milliseconds=delay)))
        ids.append(task_id)
    assert st.claim_due("q", 10, LEASE) == []
    return ids


def _dq_state(st: DramatiqStorage) -> tuple[int, int]:
    """(ids waiting on the ``q.DQ`` list, ids in this worker's ``q.DQ`` ack set)."""
    r = st.broker.client
    prefix = st.broker.namespace
    return r.llen(f"{prefix}:q.DQ"), r.scard(f"{prefix}:__acks__.{st.broker.broker_id}.q.DQ")


def _failing(st: DramatiqStorage, monkeypatch: pytest.MonkeyPatch, when: Any, exc: Exception):
    """``st``'s dispatch script raises ``exc`` once for the call ``when(command, queue)``."""
    real = st._dispatch.run
    left = {"n": 1}

    def run(command: str, queue: str, *args: Any, **kwargs: Any) -> Any:
        if left["n"] and when(command, queue):
            left["n"] -= 1
            raise exc
        return real(command, queue, *args, **kwargs)

    monkeypatch.setattr(st._dispatch, "run", run)
    return left


def test_a_timed_out_delay_fetch_gives_the_held_messages_back(opened, monkeypatch):
    """A ``redis.TimeoutError`` of the delay-queue fetch is no ``ConnectionClosed``: the
    consumer thread closes, and its ``close`` requeues the delayed messages it held to
    the ``q.DQ`` list (they do not stay in the live worker's ack set)."""
    _delayed(opened, 3_600_000, 3_600_000)
    assert _dq_state(opened) == (0, 2)
    _failing(opened, monkeypatch, lambda c, q: c == "fetch" and q == "q.DQ", redis.TimeoutError())
    with pytest.raises(BackendUnavailable):
        opened.claim_due("q", 10, LEASE)
    assert _dq_state(opened) == (2, 0)


def test_a_connection_error_of_the_delay_fetch_drops_the_held_messages(opened, monkeypatch):
    """A ``redis.ConnectionError`` of the delay-queue fetch is the consumer's
    ``ConnectionClosed``: dramatiq drops its in-memory delay queue (W L325-327), and the
    messages stay in the live worker's ``q.DQ`` ack set."""
    _delayed(opened, 3_600_000, 3_600_000)
    _failing(
        opened, monkeypatch, lambda c, q: c == "fetch" and q == "q.DQ", redis.ConnectionError()
    )
    with pytest.raises(BackendUnavailable):
        opened.claim_due("q", 10, LEASE)
    assert _dq_state(opened) == (0, 2)
    assert opened._delayed["q"] == []


def test_a_failed_promotion_enqueue_gives_the_other_held_messages_back(opened, monkeypatch):
    """The copy's ``broker.enqueue`` raises a connection error dramatiq does not wrap: the
    consumer closes and requeues the delayed messages it still holds; the one being
    promoted stays in the ack set (popped from memory, as ``iter_queue`` pops it)."""
    _delayed(opened, 3000, 3_600_000)
    time.sleep(3.2)  # past the 3 s delay (a sleep lasts at least this long)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(opened.broker, "enqueue", refused)
    with pytest.raises(BackendUnavailable):
        opened.claim_due("q", 10, LEASE)
    assert _dq_state(opened) == (1, 1)


def test_a_timed_out_promotion_ack_is_logged_and_the_promotions_go_on(opened, monkeypatch):
    """The ack of a promoted original times out: ``post_process_message`` logs it and
    returns, so the next due message is promoted too, and both copies are claimable."""
    ids = _delayed(opened, 3000, 3000)
    time.sleep(3.2)  # past the 3 s delay (a sleep lasts at least this long)
    left = _failing(
        opened, monkeypatch, lambda c, q: c == "ack" and q == "q.DQ", redis.TimeoutError()
    )
    claims = opened.claim_due("q", 10, LEASE)
    assert left["n"] == 0
    assert sorted(c.task.id for c in claims) == sorted(ids)
