"""The names of dramatiq's Redis keys under one namespace, for the adapter's *reads*
(storage half: standard library only).

dramatiq's layout (``dramatiq/brokers/redis/dispatch.lua`` L24-43 at v2.2.1), with
``ns`` the broker's ``namespace`` argument:

- ``ns:<q>`` — list of redis message ids waiting, FIFO; ``ns:<q>.msgs`` — hash, redis
  message id -> encoded message;
- ``ns:<q>.DQ`` / ``ns:<q>.DQ.msgs`` — the same for delayed messages (a FIFO list, not
  ordered by eta);
- ``ns:<q>.XQ`` — sorted set of dead-lettered ids, scored by the dead-letter time (ms);
  ``ns:<q>.XQ.msgs`` their messages;
- ``ns:__acks__.<broker_id>.<q>`` — set of the ids one broker fetched and has not acked
  (or nacked, or requeued) on one queue;
- ``ns:__heartbeats__`` — sorted set, broker id -> its last call (ms, its own clock).

The adapter's namespace is the ``redis`` backend's key prefix ``rdq:{<namespace>``, so
every dramatiq key of a kit namespace starts ``rdq:{<namespace>:`` and the kit's
``drop_namespace`` (``SCAN MATCH rdq:{<namespace>:*``) removes them all.
"""

from __future__ import annotations

import re

__all__ = ["Keys", "broker_namespace"]

#: A broker id is ``str(uuid4())`` (``RedisBroker.__init__``).
_ACKS = re.compile(
    r"__acks__\.([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.(.+)"
)


def broker_namespace(namespace: str) -> str:
    """The ``RedisBroker(namespace=...)`` of a kit namespace: the redis backend's prefix."""
    return f"rdq:{{{namespace}"


class Keys:
    """Key names under one broker namespace."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.heartbeats = f"{prefix}:__heartbeats__"
        self.pattern = f"{prefix}:*"

    def queue(self, queue: str) -> str:
        return f"{self.prefix}:{queue}"

    def msgs(self, queue: str) -> str:
        return f"{self.prefix}:{queue}.msgs"

    def xq(self, queue: str) -> str:
        return f"{self.prefix}:{queue}.XQ"

    def xq_msgs(self, queue: str) -> str:
        return f"{self.prefix}:{queue}.XQ.msgs"

    def acks(self, broker_id: str, queue: str) -> str:
        return f"{self.prefix}:__acks__.{broker_id}.{queue}"

    def name(self, key: bytes | str) -> str | None:
        """What follows ``prefix:`` in a key of this namespace (``None`` for another's)."""
        text = key.decode() if isinstance(key, bytes) else key
        head = f"{self.prefix}:"
        return text[len(head) :] if text.startswith(head) else None

    @staticmethod
    def parse_acks(name: str) -> tuple[str, str] | None:
        """``(broker_id, queue)`` of an ack-set key name (after the prefix), else ``None``."""
        match = _ACKS.fullmatch(name)
        return (match.group(1), match.group(2)) if match else None
