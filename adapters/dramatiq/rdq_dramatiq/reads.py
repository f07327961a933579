"""Plain Redis reads of dramatiq's keys: where a message is, and what that makes it in
rdq's terms (storage half). Nothing here writes.

dramatiq keeps no index by ``message_id`` (its keys are by ``redis_message_id``), so a
task is found by reading the namespace's message hashes (``<q>.msgs``, ``<q>.DQ.msgs``,
``<q>.XQ.msgs``) and matching the encoded ``"message_id"``; its place then decides its
status, read in one MULTI so that it is one instant's:

======================================  ====================================================
the message is in                       rdq status
======================================  ====================================================
``<q>.msgs`` and a broker's ack set     IN_FLIGHT, ``lease_expires_at`` = that broker's last
                                        heartbeat + ``heartbeat_timeout`` (when maintenance
                                        may requeue it)
``<q>.msgs`` and the list ``<q>``       PENDING and due (``next_attempt_at``: the message's
                                        ``message_timestamp``; a promoted or retried copy no
                                        longer carries its eta, worker.py L356-358)
``<q>.DQ.msgs`` (list or a worker's     PENDING, due at its ``eta`` option
memory)
``<q>.XQ.msgs``                         DEAD
nowhere (acked), and the Results         SUCCEEDED: an ack deletes the message (dispatch.lua
middleware stored a result for it        L191-196); what is left is the result the Results
                                         middleware stored before the ack, for its
                                         ``result_ttl`` (10 minutes by default)
nowhere else                             ``NotFound``
======================================  ====================================================

Several copies of one ``message_id`` can exist (every ``enqueue`` stores a new one, and so
do retries and promotions); ``get`` shows the liveliest (IN_FLIGHT, then PENDING due,
then PENDING delayed, then DEAD, then SUCCEEDED).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dramatiq import Message

from rdq_core import cursor as cursors
from rdq_core.model import DlqFilter, DlqPage, QueueStats, Status, Task
from rdq_dramatiq.codec import task_of, utc_ms
from rdq_dramatiq.keys import Keys

__all__ = ["Copy", "Reader"]

SCAN_COUNT = 1000
_RANK = {Status.IN_FLIGHT: 0, Status.PENDING: 1, Status.DEAD: 3}


@dataclass(frozen=True)
class Copy:
    """One stored message of a task and what it is in rdq's terms."""

    rid: str
    task: Task
    delayed: bool = False

    @property
    def rank(self) -> int:
        return _RANK[self.task.status] + (1 if self.delayed else 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _glob_escape(text: str) -> str:
    """``text`` matched literally by Redis's glob (``SCAN MATCH``)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class Reader:
    """Reads of one namespace (``keys``) over ``client``."""

    def __init__(
        self, client: Any, keys: Keys, heartbeat_timeout_ms: int, results_namespace: str
    ) -> None:
        self.client = client
        self.keys = keys
        self.timeout_ms = heartbeat_timeout_ms
        self.results = results_namespace

    # ---- the Results middleware's records --------------------------------------------------

    def result_owners(self, task_id: str) -> list[tuple[str, str]]:
        """``(queue, actor)`` of every result the Results middleware stored for a message
        with this id (its keys are ``<namespace>:<queue>:<actor>:<message_id>`` with
        ``use_namespace_prefix_keys``; queue and actor names hold no ``:``)."""
        pattern = f"{self.results}:*:*:{_glob_escape(task_id)}"
        out = []
        for key in self.client.scan_iter(match=pattern, count=SCAN_COUNT):
            rest = _text(key)[len(self.results) + 1 :]
            queue, actor, message_id = [*rest.split(":", 2), "", "", ""][:3]
            if message_id == task_id:
                out.append((queue, actor))
        return sorted(out)

    def succeeded(self, queue: str) -> int:
        """How many messages of ``queue`` have a success result stored (not an exception)."""
        keys = list(self.client.scan_iter(match=f"{self.results}:{queue}:*", count=SCAN_COUNT))
        if not keys:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.lindex(key, 0)
        n = 0
        for data in pipe.execute():
            if data is None:
                continue
            value = json.loads(data)
            if not (isinstance(value, dict) and "__t" in value):
                n += 1
        return n

    # ---- what keys the namespace has -----------------------------------------------------

    def names(self) -> list[str]:
        """Every key of the namespace, as the name after its prefix."""
        out = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=SCAN_COUNT):
            name = self.keys.name(key)
            if name is not None:
                out.append(name)
        return out

    def holders(self, names: Iterable[str]) -> dict[str, list[str]]:
        """queue -> the broker ids with an ack set on it."""
        out: dict[str, list[str]] = {}
        for name in names:
            parsed = Keys.parse_acks(name)
            if parsed is not None:
                out.setdefault(parsed[1], []).append(parsed[0])
        return out

    # ---- one task ------------------------------------------------------------------------------

    def copies(self, task_id: str) -> list[Copy]:
        """Every stored message of ``task_id``, liveliest first."""
        for _ in range(5):
            got = self._copies(task_id)
            if got is not None:
                return sorted(got, key=lambda c: c.rank)
        raise RuntimeError(f"task {task_id!r} kept moving while it was read")

    def _copies(self, task_id: str) -> list[Copy] | None:
        names = self.names()
        hashes = [n for n in names if n.endswith(".msgs") and not n.startswith("__acks__.")]
        if not hashes:
            return []
        pipe = self.client.pipeline(transaction=False)
        for name in hashes:
            pipe.hgetall(f"{self.keys.prefix}:{name}")
        needle = b'"message_id":' + json.dumps(task_id).encode()
        found: list[tuple[str, str, Message]] = []
        for name, content in zip(hashes, pipe.execute(), strict=True):
            for rid, data in content.items():
                if needle in data:
                    message = Message.decode(data)
                    if message.message_id == task_id:
                        found.append((name, _text(rid), message))
        if not found:
            return []
        holders = self.holders(names)
        out = []
        for name, rid, message in found:
            copy = self._settle(name, rid, message, holders)
            if copy is None:
                return None  # moved between the reads: read again
            out.append(copy)
        return out

    def _settle(
        self, name: str, rid: str, message: Message, holders: dict[str, list[str]]
    ) -> Copy | None:
        if name.endswith(".XQ.msgs"):
            queue = name[: -len(".XQ.msgs")]
            return Copy(rid, task_of(message, queue, Status.DEAD))
        if name.endswith(".DQ.msgs"):
            queue = name[: -len(".DQ.msgs")]
            eta = message.options.get("eta")
            due = utc_ms(eta) if isinstance(eta, (int, float)) else None
            return Copy(rid, task_of(message, queue, Status.PENDING, next_attempt_at=due), True)
        queue = name[: -len(".msgs")]
        brokers = holders.get(queue, [])
        pipe = self.client.pipeline(transaction=True)
        pipe.hexists(self.keys.msgs(queue), rid)
        pipe.lpos(self.keys.queue(queue), rid)
        for broker in brokers:
            pipe.sismember(self.keys.acks(broker, queue), rid)
        if brokers:
            pipe.zmscore(self.keys.heartbeats, brokers)
        replies = pipe.execute()
        if not replies[0]:
            return None
        for i in range(len(brokers)):
            if replies[2 + i]:
                beat = replies[-1][i]
                lease = None if beat is None else utc_ms(int(beat) + self.timeout_ms)
                return Copy(rid, task_of(message, queue, Status.IN_FLIGHT, lease_expires_at=lease))
        if replies[1] is not None:
            return Copy(
                rid,
                task_of(
                    message,
                    queue,
                    Status.PENDING,
                    next_attempt_at=utc_ms(message.message_timestamp),
                ),
            )
        return None  # in neither the list nor a known ack set: a new broker's, read again

    # ---- a queue -------------------------------------------------------------------------------

    def stats(self, queue: str, now_ms: int) -> QueueStats:
        brokers = self.holders(self.names()).get(queue, [])
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(self.keys.queue(queue))
        pipe.hvals(self.keys.msgs(f"{queue}.DQ"))
        for broker in brokers:
            pipe.scard(self.keys.acks(broker, queue))
        pipe.zcard(self.keys.xq(queue))
        replies = pipe.execute()
        waiting, delayed = int(replies[0]), replies[1]
        in_flight = sum(int(n) for n in replies[2:-1])
        due_delayed = 0
        for data in delayed:
            eta = json.loads(data).get("options", {}).get("eta")
            if not isinstance(eta, (int, float)) or eta <= now_ms:
                due_delayed += 1
        return QueueStats(
            pending=waiting + len(delayed),
            due=waiting + due_delayed,
            in_flight=in_flight,
            dead=int(replies[-1]),
            succeeded=self.succeeded(queue),
        )

    def dlq_page(
        self, queue: str, chosen: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        """A page of ``<q>.XQ``, oldest dead-letter first (its score, ms), ties by task id
        (the zset itself breaks them by the random redis message id)."""
        after = None if cursor is None else cursors.decode(queue, cursor)
        entries = self.client.zrange(self.keys.xq(queue), 0, -1, withscores=True)
        items: list[tuple[tuple[int, str, str], Task]] = []
        for start in range(0, len(entries), 1000):
            chunk = entries[start : start + 1000]
            datas = self.client.hmget(self.keys.xq_msgs(queue), [m for m, _ in chunk])
            for (member, score), data in zip(chunk, datas, strict=True):
                if data is None:
                    continue  # dropped by maintenance (dead_message_ttl) meanwhile
                task = task_of(Message.decode(data), queue, Status.DEAD)
                items.append(((int(score) * 1000, task.id, _text(member)), task))
        items.sort(key=lambda item: item[0])
        out = []
        for pos, task in items:
            if after is not None and pos[:2] <= (after.dead_at_us, after.task_id):
                continue
            if chosen is None or chosen.matches(task):
                out.append((pos, task))
                if len(out) > limit:
                    break
        page = out[:limit]
        next_cursor = None
        if len(out) > limit and page:
            (dead_at_us, task_id, _), _ = page[-1]
            next_cursor = cursors.encode(queue, cursors.DlqPosition(dead_at_us, task_id))
        return DlqPage(tuple(t for _, t in page), next_cursor)
