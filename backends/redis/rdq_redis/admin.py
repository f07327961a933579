"""Namespace administration on a server or a cluster: create, drop, find and cut a
namespace's connections (storage half: redis-py and ``rdq_core`` only, usable without
the kit).

- **create** writes the namespace's record ``rdq:{ns:meta}`` (layout version, bucket
  count, creation time from the server's ``TIME``); storages need nothing else.
- **drop** deletes every key matching ``rdq:{ns:*`` on every master, found with
  ``SCAN`` in batches and deleted with ``UNLINK`` one key per command (pipelined), so no
  multi-key command ever spans two slots: never ``KEYS *``, never ``FLUSHALL``/``FLUSHDB``.
- **cut** kills, on every master, the client connections named ``rdq:<ns>`` (what every
  storage of the namespace sets with ``CLIENT SETNAME``), by ``CLIENT KILL ID``.
"""

from __future__ import annotations

import secrets
from typing import Any

import redis

from rdq_redis import keys
from rdq_redis.connection import primaries

#: Keys asked for per SCAN step and deleted per pipeline.
SCAN_COUNT = 1000


def new_namespace_name() -> str:
    return f"ns{secrets.token_hex(10)}"


def create_namespace(client: Any, namespace: str) -> None:
    namespace = keys.namespace_name(namespace)
    seconds, micros = _time(client)
    client.hset(
        keys.meta_key(namespace),
        mapping={
            "layout": keys.LAYOUT_VERSION,
            "buckets": keys.BUCKETS,
            "id_shards": keys.ID_SHARDS,
            "created_us": int(seconds) * 1_000_000 + int(micros),
        },
    )


def _time(client: Any) -> tuple[int, int]:
    reply = client.time()
    if isinstance(reply, dict):
        reply = next(iter(reply.values()))
    return int(reply[0]), int(reply[1])


def namespace_keys(node: redis.Redis, namespace: str) -> list[bytes]:
    """Every key of ``namespace`` on one node (``SCAN``)."""
    pattern = keys.scan_pattern(keys.namespace_name(namespace))
    return list(node.scan_iter(match=pattern, count=SCAN_COUNT))


def drop_namespace(client: Any, namespace: str) -> int:
    """Delete every key of ``namespace`` on every master; returns how many. Idempotent."""
    pattern = keys.scan_pattern(keys.namespace_name(namespace))
    deleted = 0
    for node in primaries(client):
        batch: list[bytes] = []
        for key in node.scan_iter(match=pattern, count=SCAN_COUNT):
            batch.append(key)
            if len(batch) >= SCAN_COUNT:
                deleted += _unlink(node, batch)
                batch = []
        if batch:
            deleted += _unlink(node, batch)
    return deleted


def _unlink(node: redis.Redis, batch: list[bytes]) -> int:
    pipe = node.pipeline(transaction=False)
    for key in batch:
        pipe.unlink(key)
    return sum(int(n) for n in pipe.execute())


def namespace_client_ids(node: redis.Redis, namespace: str) -> list[int]:
    name = keys.client_name(keys.namespace_name(namespace))
    return [int(c["id"]) for c in node.client_list(_type="normal") if c.get("name") == name]


def cut_connections(client: Any, namespace: str) -> int:
    """Kill every connection of ``namespace``'s storages on every master; returns how many."""
    killed = 0
    for node in primaries(client):
        for client_id in namespace_client_ids(node, namespace):
            try:
                killed += int(node.client_kill_filter(_id=client_id))
            except redis.ResponseError:  # gone meanwhile
                continue
    return killed
