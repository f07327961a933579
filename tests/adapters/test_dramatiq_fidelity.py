"""The dramatiq adapter adds nothing dramatiq 2.2.1 lacks (``adapters/dramatiq``): one Redis
client, the one ``RedisBroker(url=...)`` builds, carries every call.

Needs the Redis at ``RDQ_REDIS_DSN`` (default ``redis://127.0.0.1:6379/0``); every key is
under the kit's prefix of a namespace of its own (``rdq:{<namespace>``), deleted at the
end. Without a Redis these tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from dramatiq.brokers.redis import RedisBroker
from rdq_dramatiq.settings import parse_dsn, with_params
from rdq_dramatiq.storage import DramatiqStorage

from tests._ci import missing

DSN = os.environ.get("RDQ_REDIS_DSN") or os.environ.get("RDQ_DSN") or "redis://127.0.0.1:6379/0"


@pytest.fixture
def opened() -> Iterator[DramatiqStorage]:
    """A storage on a namespace of its own; its keys are deleted afterwards."""
    plain = redis.Redis.from_url(parse_dsn(DSN).url, socket_connect_timeout=3)
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
