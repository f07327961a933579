"""Namespace administration on a server or a cluster: create, drop, find and cut a
namespace's connections (storage half: redis-py and ``rdq_core`` only, usable without
the kit).

- **create** writes the namespace's record ``rdq:{ns:meta}`` (layout version, bucket
  count, creation time from the server's ``TIME``, and the kit's owner record when
  given); storages need nothing else.
- **find** lists, on every master, the namespaces made here (their records), with the
  owner each record names (the kit's sweep of dead runs' namespaces).
- **drop** deletes every key matching ``rdq:{ns:*`` on every master, found with
  ``SCAN`` in batches and deleted with ``UNLINK`` one key per command (pipelined), so no
  multi-key command ever spans two slots: never ``KEYS *``, never ``FLUSHALL``/``FLUSHDB``.
- **cut** kills, on every master, the client connections named ``rdq:<ns>`` (what every
  storage of the namespace sets with ``CLIENT SETNAME``), by ``CLIENT KILL ID``.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import redis

from rdq_redis import keys
from rdq_redis.connection import primaries

#: Keys asked for per SCAN step and deleted per pipeline.
SCAN_COUNT = 1000


def new_namespace_name() -> str:
    return f"ns{secrets.token_hex(10)}"


def create_namespace(client: Any, namespace: str, owner: str | None = None) -> None:
    """Write ``namespace``'s marker key, with ``owner`` (the kit's owner record) in it."""
    namespace = keys.namespace_name(namespace)
    seconds, micros = _time(client)
    mapping: dict[str, Any] = {
        "layout": keys.LAYOUT_VERSION,
        "buckets": keys.BUCKETS,
        "id_shards": keys.ID_SHARDS,
        "created_us": int(seconds) * 1_000_000 + int(micros),
    }
    if owner is not None:
        mapping["owner"] = owner
    client.hset(keys.meta_key(namespace), mapping=mapping)


#: The marker key of a namespace named as :func:`new_namespace_name` names them.
_MADE_META_RE = re.compile(rb"rdq:\{(ns[0-9a-f]{20}):meta\}")


def made_namespaces(client: Any) -> dict[str, str | None]:
    """Every namespace named as :func:`new_namespace_name` names them (its marker key, on
    every master), with the ``owner`` field of that key."""
    found: dict[str, str | None] = {}
    for node in primaries(client):
        for key in node.scan_iter(match="rdq:{ns*:meta}", count=SCAN_COUNT):
            m = _MADE_META_RE.fullmatch(key if isinstance(key, bytes) else key.encode())
            if m is None:
                continue
            owner = node.hget(key, "owner")
            found[m.group(1).decode()] = owner.decode() if isinstance(owner, bytes) else owner
    return found


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
