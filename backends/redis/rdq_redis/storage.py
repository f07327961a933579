"""``RedisStorage``: the storage SPI on Redis 7, a single server or a Redis Cluster.

This is the *storage half* of the ``redis`` backend: it imports only :mod:`rdq_core`,
redis-py (hiredis is used when installed) and its own modules, so it is usable without
the kit. It behaves observably exactly like :class:`rdq_core.memory.MemoryStore`, and is
safe across threads, processes and hosts sharing a namespace.

Atomicity
---------
Every SPI state change is **one Lua script** run by ``EVALSHA`` (:mod:`rdq_redis.scripts`
says why scripts and not Functions), so each transition is atomic on the server. The one
operation that spans two cluster slots — enqueue, which must also claim the id for its
queue in a namespace-wide index — is two scripts with a protocol that keeps the
invariants through a crash between them (below). Reads (``get``, ``stats``,
``dlq_list``) are read-only scripts (``flags=no-writes``): each sees one consistent state.

Time
----
Only the server's: every script that needs "now" calls ``redis.call('TIME')``; leases,
delays and ages are sent as durations, never as instants. ``now()`` is ``TIME``. On a
cluster each bucket is stamped by the clock of the master that owns it (masters' clocks
are assumed to agree to well within a lease, as NTP keeps them).

Data layout (see :mod:`rdq_redis.keys`, :mod:`rdq_redis.scripts` for the encodings)
-----------------------------------------------------------------------------------
Keys ``rdq:{<ns>:<tag>}:<name>``; one prefix ``rdq:{<ns>:`` per namespace.

*Buckets.* A queue lives in bucket ``crc32(queue) mod 4096`` (tag ``{ns:bbb}``, 3 hex
digits). The bucket holds, for all its queues:

- hashes ``task`` (id → meta record: status, counts, times, token, …), ``pay`` (id →
  payload bytes), ``hdr`` (id → headers), ``hist`` (id → the attempt history, records
  appended in order);
- sorted sets whose members sort by bytes (score 0), each member starting with the
  queue's name so a queue is a contiguous range:
  ``ready`` — PENDING tasks as ``queue|due|seq|id`` (due = next_attempt_at);
  ``lease`` — IN_FLIGHT tasks as ``queue|lease_expires_at|seq|id``;
  ``done`` — SUCCEEDED tasks as ``queue|finished_at|id``;
  ``dlq`` — DEAD tasks, four index entries each: ``a|queue|dead_at|id`` (all),
  ``h|queue|handler|dead_at|id``, and, when the last attempt had an error,
  ``e|queue|error_type|dead_at|id`` and ``b|queue|handler|error_type|dead_at|id``;
- ``seq``, the enqueue counter (ties between equal due times go to the task enqueued
  first, as in the reference store), and ``rv``, revoked enqueue reservations.

Times in members are 17-digit zero-padded microseconds, so byte order is time order.

*Claim* reads the due prefix of ``ready`` and of ``lease`` (members up to
``queue|now|…``) and merges them in ``(due, seq)`` order inside the script: one claim
takes due PENDING tasks and expired leases in due order (a claimed task sits in ``lease``
scored by its expiry). ``stats`` counts ranges (``ZLEXCOUNT``, O(log n)): pending = the
queue's range of ``ready``, due = its part up to now, in_flight / succeeded / dead = the
queue's ranges of ``lease`` / ``done`` / ``dlq`` (entries ``a|…``). No scan, no counter.

*Reclaim* appends LEASE_EXPIRED numbered ``max(attempt_no) + 1`` over the stored history
records (invariant H), never from ``attempt_count``; every claim mints a fresh token.
Every fenced call (extend, complete, reschedule, dead-letter) checks, in its script,
status IN_FLIGHT and the current token, else replies "stale" having changed nothing.

*DLQ.* Listing walks one index range (``a``, ``h``, ``e`` or ``b`` by the filter) in
``(dead_at, id)`` order — the reference store's order — from the cursor's position
(:mod:`rdq_core.cursor`: queue-bound, ``StaleCursor`` otherwise): a keyset cursor, so a
task that stays DEAD is never repeated nor skipped, whatever is dead-lettered, redriven or
purged meanwhile. Every filter is O(log n + page).

*Claim tokens* are 32 lowercase hex digits: the bucket's 3 digits, 26 random digits per
claim call, and the task's 3-digit index in the batch. So ``complete(task_id, token)``
and the other fenced calls, which get no queue, find the bucket (one slot) from the token
alone; a forged or foreign token names a bucket without that claim and is stale.

*The id index* (tag ``{ns:isss}``, ``sss`` = ``crc32(id) mod 4096``): a hash id →
``queue|nonce`` per shard. ``get`` looks up the queue there, then reads the bucket;
enqueue uses it for the cross-queue ``IdConflict`` check.

Enqueue in two steps, and what a crash between them leaves
----------------------------------------------------------
1. *reserve* (index shard): if the id has no entry, write ``queue|nonce`` with a fresh
   random nonce; reply whether the entry was created, existed for this queue, or
   belongs to another queue.
2. *enqueue* (the queue's bucket): if the task exists, reply "exists" (``False``, nothing
   changed); else create it — only when step 1 *created* the entry, and only if that
   nonce was not revoked in this bucket.

The invariant: **a task exists only while the index maps its id to its queue**, so
``get`` finds every task and no id lives in two queues. Entries are removed only by a
compare-and-delete on ``queue|nonce`` after the task is gone for good:

- purge and ``purge_succeeded`` delete the task (bucket), then the entry if it still
  carries that task's nonce (shard). A re-enqueue in between makes a new entry only after
  repairing the old one (below), so the compare fails and the new entry stays;
- *repair* of an entry whose task is absent (a crash between the steps, an interrupted
  purge, an enqueue of the same id in flight): *revoke* in the entry's bucket — if the task
  exists the entry is live (``IdConflict``, or "exists"); else the nonce goes into ``rv``
  in the same script, so a late step 2 carrying it (a paused or slow client) refuses,
  even though it would otherwise see no task — then compare-and-delete the entry and
  start again with a fresh nonce.

A crash after step 1 leaves an entry without a task: ``get`` says ``NotFound`` (right:
the enqueue was never acknowledged, its caller saw ``BackendUnavailable``); the next
enqueue of that id, in any queue, repairs it and succeeds; ``purge(queue, [id])`` of
such an id repairs it too. A crash between revoke and compare-and-delete leaves a revoked
entry: the next enqueue repairs it again (both steps are idempotent). A crash after a
purge's first step leaves a stale entry, repaired the same way. No sequence of crashes
makes a task invisible to ``get`` or lets an id into two queues; the cost is an index
entry for an id never enqueued again (bounded by the crashes). Revocations are kept
:data:`rdq_redis.scripts.REVOCATION_KEEP_US` (7 days): only a client stalled that long
between its two steps could slip past one.

Scaling limits
--------------
- **The scaling unit is the bucket, so the queue**: all of a queue is one slot on one
  master; a cluster spreads *queues* (4096 buckets) over masters, never one queue.
  Several queues may share a bucket; they stay isolated by member prefix.
- Memory: a task costs its payload, headers and history plus a meta record, one
  sorted-set member (two to four DLQ index entries while DEAD) and one index entry. A
  history is one string rewritten on each attempt (O(attempts) per outcome); numbering
  walks it (O(attempts)). At most 2^48 enqueues per bucket (the 12-hex-digit ``seq``).
- A claim is O(limit · log n); an outcome O(log n + attempts); stats O(log n).
- Redrive and purge by filter, and ``purge_succeeded``, run in batches of
  :data:`BATCH` tasks, one script each (so the server is never blocked for long): each
  batch is atomic, the whole call is not (tasks dead-lettered after its start are left
  alone; by ids it is one script).
- Enqueue and ``get`` are two round trips (index shard, bucket); every other call one.

Durability
----------
``capabilities().durable`` is read from the server: only ``appendonly yes`` with
``appendfsync always`` on every master keeps every acknowledged write through a kill and
restart of the server process; ``everysec`` does not, not even for a process kill.
:mod:`rdq_redis.persistence` says exactly why.

Errors
------
Every redis-py error becomes ``BackendUnavailable`` (:mod:`rdq_redis.errors`): "nothing
was done" when the server was unreachable or refused before acting, "the outcome is
unknown" when the connection dropped or timed out after the call was sent. ``NOSCRIPT``
is handled by reloading (the script had not run); ``MOVED``/``ASK`` by the cluster client.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

import redis.exceptions as rx

from rdq_core import cursor as cursors
from rdq_core.errors import BackendUnavailable, IdConflict, NotFound, RdqError, StaleClaim
from rdq_core.model import (
    ByIds,
    Capabilities,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Task,
    micros_from_delta,
    utc_from_micros,
)
from rdq_core.spi import Storage
from rdq_redis import codec, keys, persistence
from rdq_redis.connection import CONNECT_TIMEOUT_S, SOCKET_TIMEOUT_S, ClientSource
from rdq_redis.errors import map_error
from rdq_redis.keys import Bucket, Layout
from rdq_redis.scripts import Scripts, ScriptSource

T = TypeVar("T")

CLOCK_DESCRIPTION = "redis TIME (the server's clock, read inside every script)"
#: Tasks per script in redrive/purge by filter and purge_succeeded.
BATCH = 500
#: Rounds of the enqueue protocol before giving up (only contention or repairs loop).
ENQUEUE_ROUNDS = 16

Client = Any  # redis.Redis | redis.cluster.RedisCluster


#: The ``KEYS`` of the hot scripts, by bucket key name (see :mod:`rdq_redis.scripts`).
_CLAIM_KEYS = ("task", "pay", "hdr", "hist", "ready", "lease")
_EXTEND_KEYS = ("task", "lease")
_COMPLETE_KEYS = ("task", "hist", "lease", "done")
_RESCHEDULE_KEYS = ("task", "hist", "lease", "ready")
_DEAD_LETTER_KEYS = ("task", "hist", "lease", "dlq")


def _what(action: str, subject: str | None) -> str:
    return action if subject is None else f"{action} of task {subject!r}"


def _nonce() -> str:
    return secrets.token_hex(16)


def _stale(task_id: str, token: str, why: bytes | str) -> StaleClaim:
    state = why.decode() if isinstance(why, bytes) else why
    return StaleClaim(f"task {task_id!r}: token {token[:8]}… is not the current claim ({state})")


def _dlq_prefix(queue: str, flt: DlqFilter | None) -> bytes:
    """The DLQ index range (prefix, ending with NUL) that lists what ``flt`` selects."""
    q = queue.encode()
    if flt is None or (flt.handler is None and flt.error_type is None):
        parts = [b"a", q]
    elif flt.error_type is None:
        parts = [b"h", q, flt.handler.encode()]  # type: ignore[union-attr]
    elif flt.handler is None:
        parts = [b"e", q, flt.error_type.encode()]
    else:
        parts = [b"b", q, flt.handler.encode(), flt.error_type.encode()]
    return b"\0".join(parts) + b"\0"


class RedisStorage(Storage):
    """The storage SPI on namespace ``namespace`` of the Redis server (or cluster) at
    ``dsn`` (see :mod:`rdq_redis.connection` for the DSN's options).

    Nothing is opened until the first call in a process. A namespace needs no set-up:
    its keys appear as tasks are enqueued. ``scripts`` replaces the script set
    (:data:`rdq_redis.scripts.SOURCES`, the default): a test aid, with which the kit's own
    tests run deliberately broken scripts through this very storage.
    """

    def __init__(
        self,
        dsn: str,
        namespace: str,
        *,
        client_name: str | None = None,
        socket_timeout: float = SOCKET_TIMEOUT_S,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        scripts: Mapping[str, ScriptSource] | None = None,
    ) -> None:
        self.layout = Layout(namespace)
        self._source = ClientSource(
            dsn,
            client_name or keys.client_name(self.layout.namespace),
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            sources=scripts,
        )
        self._where = f"{self._source.where} namespace {self.layout.namespace!r}"
        #: The server's persistence verdict, once read (see :meth:`capabilities`).
        self._persistence: persistence.Persistence | None = None

    def __repr__(self) -> str:
        return f"RedisStorage({self._where})"

    @property
    def namespace(self) -> str:
        return self.layout.namespace

    @property
    def client_name(self) -> str:
        return self._source.client_name

    # ---- running scripts ----

    def _scripts(self) -> tuple[Client, Scripts]:
        """The client and its scripts (the one place every call gets them from)."""
        return self._source.get()

    def _run(
        self, action: str, fn: Callable[[Client, Scripts], T], subject: str | None = None
    ) -> T:
        """Run ``fn(client, scripts)``; map every driver error to an SPI error, whose
        message names ``subject`` (the task id the call is about) when given."""
        try:
            client, scripts = self._scripts()
            return fn(client, scripts)
        except RdqError:
            raise
        except (rx.RedisError, rx.RedisClusterException) as exc:
            raise map_error(exc, _what(action, subject), self._where) from exc
        except codec.CorruptRecord as exc:
            raise self._corrupt(_what(action, subject), exc) from exc

    def _call(
        self, action: str, script: str, keys_: list[str], args: list[Any], subject: str | None
    ) -> Any:
        """:meth:`_run` for the common case, one script and its reply (the hot path of
        claim and the fenced calls: no closure, one frame less)."""
        try:
            return self._scripts()[1].run(script, keys_, args)
        except RdqError:
            raise
        except (rx.RedisError, rx.RedisClusterException) as exc:
            raise map_error(exc, _what(action, subject), self._where) from exc

    def _corrupt(self, what: str, exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(
            f"{what}: {self._where} holds a record rdq_redis cannot read ({exc}): were "
            "the namespace's keys written by something else?"
        )

    # ---- producer ----

    def _enqueue(self, task: NewTask) -> bool:
        bucket = self.layout.of_queue(task.queue)
        shard = self.layout.shard(task.id)
        headers = codec.encode_headers(task.headers)
        delay_us = micros_from_delta(task.delay)

        def run(client: Client, scripts: Scripts) -> bool:
            for _ in range(ENQUEUE_ROUNDS):
                reply = scripts.run("reserve", [shard.ids], [task.id, task.queue, _nonce()])
                code = int(reply[0])
                if code == 2:  # the id is another queue's, or an orphan entry of it
                    other, nonce = reply[1].decode(), reply[2].decode()
                    if self._revoke(scripts, other, task.id, nonce):
                        raise IdConflict(
                            f"task id {task.id!r} is already used in queue {other!r}; "
                            "ids are unique across queues"
                        )
                    scripts.run("release", [shard.ids], [task.id, f"{other}\0{nonce}"])
                    continue
                nonce = reply[1].decode()
                fresh = "1" if code == 1 else "0"
                args = [task.id, task.queue, task.handler, task.payload, headers, delay_us]
                done = scripts.run(
                    "enqueue",
                    [bucket.task, bucket.pay, bucket.hdr, bucket.ready, bucket.seq, bucket.rv],
                    [*args, nonce, fresh],
                )
                result = int(done[0])
                if result == 1:
                    return True
                if result == 0:
                    return False
                if result == -2:
                    raise IdConflict(
                        f"task id {task.id!r} is already used in queue {done[1].decode()!r}; "
                        "ids are unique across queues"
                    )
                if result == -3 and self._revoke(scripts, task.queue, task.id, nonce):
                    continue  # the task appeared meanwhile: the next round says "exists"
                # -1: our reservation was revoked; -3: the entry was an orphan, now revoked
                scripts.run("release", [shard.ids], [task.id, f"{task.queue}\0{nonce}"])
            raise BackendUnavailable(
                f"enqueue of {task.id!r} on {self._where}: {ENQUEUE_ROUNDS} rounds of "
                "concurrent enqueues of the same id; nothing was stored; retry"
            )

        return self._run("enqueue", run, task.id)

    def _revoke(self, scripts: Scripts, queue: str, task_id: str, nonce: str) -> bool:
        """Whether the task exists in ``queue``'s bucket; if not, revoke ``nonce`` there."""
        b = self.layout.of_queue(queue)
        return int(scripts.run("revoke", [b.task, b.rv], [task_id, nonce])) == 1

    # ---- worker ----

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        b = self.layout.of_queue(queue)
        prefix = b.bucket + secrets.token_hex(13)  # 3 + 26 digits; the script adds 3 more
        args = [queue, limit, micros_from_delta(lease), prefix]
        rows = self._call("claim_due", "claim", b.listed(_CLAIM_KEYS), args, None)
        try:
            return codec.decode_claims(rows)
        except codec.CorruptRecord as exc:
            raise self._corrupt("claim_due", exc) from exc

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        b = self.layout.of_token(token)
        args = [task_id, token, micros_from_delta(lease)]
        reply = self._call("extend_lease", "extend", b.listed(_EXTEND_KEYS), args, task_id)
        if int(reply[0]) != 1:
            raise _stale(task_id, token, reply[1])
        return utc_from_micros(int(reply[1]))

    def _finish(self, action: str, task_id: str, keys_: list[str], args: list[Any]) -> None:
        """Run fenced script ``action`` with ``args`` (``[task_id, token, ...]``)."""
        reply = self._call(action, action, keys_, args, task_id)
        if int(reply[0]) != 1:
            raise _stale(task_id, args[1], reply[1])

    def _complete(self, task_id: str, token: str) -> None:
        keys_ = self.layout.of_token(token).listed(_COMPLETE_KEYS)
        self._finish("complete", task_id, keys_, [task_id, token])

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        self._finish(
            "reschedule",
            task_id,
            self.layout.of_token(token).listed(_RESCHEDULE_KEYS),
            [task_id, token, micros_from_delta(delay), *codec.error_args(error)],
        )

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        self._finish(
            "dead_letter",
            task_id,
            self.layout.of_token(token).listed(_DEAD_LETTER_KEYS),
            [task_id, token, codec.OUTCOME_CODE[outcome], *codec.error_args(error)],
        )

    # ---- reading ----

    def _get(self, task_id: str) -> Task:
        shard = self.layout.shard(task_id)

        def run(client: Client, scripts: Scripts) -> Task:
            entry = client.hget(shard.ids, task_id)
            if entry is not None:
                b = self.layout.of_queue(entry.split(b"\0", 1)[0].decode())
                row = scripts.run("get", [b.task, b.pay, b.hdr, b.hist], [task_id])
                if row:
                    return codec.decode_task(task_id, row[0], row[1], row[2], row[3])
            raise NotFound(f"no task with id {task_id!r}")

        return self._run("get", run, task_id)

    def _stats(self, queue: str) -> QueueStats:
        b = self.layout.of_queue(queue)

        def run(client: Client, scripts: Scripts) -> QueueStats:
            pending, due, in_flight, succeeded, dead = (
                int(n) for n in scripts.run("stats", [b.ready, b.lease, b.done, b.dlq], [queue])
            )
            return QueueStats(pending, due, in_flight, succeeded, dead)

        return self._run("stats", run)

    def _now(self) -> datetime:
        def run(client: Client, scripts: Scripts) -> datetime:
            reply = client.time()
            if isinstance(reply, dict):  # a cluster answers per node
                reply = next(iter(reply.values()))
            seconds, micros = reply
            return utc_from_micros(int(seconds) * 1_000_000 + int(micros))

        return self._run("now", run)

    # ---- DLQ ----

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after = b""
        if cursor is not None:
            pos = cursors.decode(queue, cursor)
            after = f"{pos.dead_at_us:017d}".encode() + b"\0" + pos.task_id.encode()
        if filter is not None and filter.is_empty:
            return DlqPage((), None)
        b = self.layout.of_queue(queue)
        prefix = _dlq_prefix(queue, filter)

        def run(client: Client, scripts: Scripts) -> DlqPage:
            rows = scripts.run(
                "dlq_list", [b.task, b.pay, b.hdr, b.hist, b.dlq], [prefix, after, limit + 1]
            )
            page = rows[:limit]
            next_cursor = None
            if len(rows) > limit:
                last = page[-1]
                dead_at = codec.split_meta(last[1])[codec.DEAD]
                position = cursors.DlqPosition(int(dead_at), last[0].decode())
                next_cursor = cursors.encode(queue, position)
            return DlqPage(tuple(codec.decode_row(r) for r in page), next_cursor)

        return self._run("dlq_list", run)

    def _redrive(self, queue: str, selector: Selector) -> int:
        b = self.layout.of_queue(queue)
        return self._select_dead("redrive", queue, selector, [b.task, b.ready, b.dlq])[0]

    def _purge(self, queue: str, selector: Selector) -> int:
        b = self.layout.of_queue(queue)
        count, released = self._select_dead(
            "purge", queue, selector, [b.task, b.pay, b.hdr, b.hist, b.dlq]
        )
        self._release(released)
        if isinstance(selector, ByIds) and count < len(set(selector.ids)):
            gone = {task_id for task_id, _ in released}
            self._repair(queue, b, [i for i in dict.fromkeys(selector.ids) if i not in gone])
        return count

    def _select_dead(
        self, action: str, queue: str, selector: Selector, keys_: list[str]
    ) -> tuple[int, list[tuple[str, bytes]]]:
        """Run the redrive or purge script over what ``selector`` names; returns the count
        and, for purge, the (id, index entry) pairs to release."""

        def run(client: Client, scripts: Scripts) -> tuple[int, list[tuple[str, bytes]]]:
            if isinstance(selector, ByIds):
                reply = scripts.run(action, keys_, [queue, "ids", *dict.fromkeys(selector.ids)])
                return int(reply[0]), _pairs(reply[3:])
            prefix, bound = _dlq_prefix(queue, selector), b""
            total, released = 0, []
            while True:
                reply = scripts.run(action, keys_, [queue, "range", prefix, bound, BATCH])
                count, bound, seen = int(reply[0]), reply[1], int(reply[2])
                total += count
                released.extend(_pairs(reply[3:]))
                if seen < BATCH or count == 0:
                    return total, released

        return self._run(action, run)

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        b = self.layout.of_queue(queue)
        older_us = micros_from_delta(older_than)

        def run(client: Client, scripts: Scripts) -> tuple[int, list[tuple[str, bytes]]]:
            cutoff, total, released = b"", 0, []
            while True:
                reply = scripts.run(
                    "purge_succeeded",
                    [b.task, b.pay, b.hdr, b.hist, b.done],
                    [queue, older_us, cutoff, BATCH],
                )
                count, cutoff, seen = int(reply[0]), reply[1], int(reply[2])
                total += count
                released.extend(_pairs(reply[3:]))
                if seen < BATCH:
                    return total, released

        total, released = self._run("purge_succeeded", run)
        self._release(released)
        return total

    def _release(self, released: Iterable[tuple[str, bytes]]) -> None:
        """Second step of a purge: drop the index entries of the purged tasks (each only if
        it still names the purged task's reservation), one script per shard."""
        by_shard: dict[str, list[Any]] = {}
        for task_id, entry in released:
            by_shard.setdefault(self.layout.shard(task_id).ids, []).extend((task_id, entry))
        if not by_shard:
            return

        def run(client: Client, scripts: Scripts) -> None:
            for key, args in by_shard.items():
                scripts.run("release", [key], args)

        self._run("purge", run)

    def _repair(self, queue: str, bucket: Bucket, task_ids: list[str]) -> None:
        """Finish what an interrupted enqueue or purge left for these ids of ``queue``: an
        index entry of ``queue`` whose task does not exist is revoked and dropped."""

        def run(client: Client, scripts: Scripts) -> None:
            for task_id in task_ids:
                ids = self.layout.shard(task_id).ids
                entry = client.hget(ids, task_id)
                if entry is None:
                    continue
                entry_queue, _, nonce = entry.partition(b"\0")
                if entry_queue.decode() != queue:
                    continue
                if not self._revoke(scripts, queue, task_id, nonce.decode()):
                    scripts.run("release", [ids], [task_id, entry])

        self._run("purge", run)

    # ---- lifecycle ----

    def capabilities(self) -> Capabilities:
        """What this storage supports; ``durable`` from the server's persistence settings,
        read once (:mod:`rdq_redis.persistence`: AOF with ``appendfsync always`` on every
        master); while they cannot be read (the server does not answer, the storage is
        closed): not durable, and asked again next time. Never raises."""
        known = self._persistence
        if known is None:
            try:
                known = self._run("capabilities", lambda client, scripts: persistence.read(client))
            except RdqError as exc:  # down, or closed
                return _capabilities(False, f"unknown: the settings could not be read ({exc})")
            self._persistence = known
        return _capabilities(known.durable, known.reason)

    def close(self) -> None:
        """Close this process's connections; idempotent. Later calls raise
        ``BackendUnavailable``."""
        self._source.close()


def _capabilities(durable: bool, durability: str) -> Capabilities:
    return Capabilities(
        multi_process=True,
        max_payload_bytes=None,
        notify=False,
        durable=durable,
        durability=durability,
        clock=CLOCK_DESCRIPTION,
    )


def _pairs(flat: list[Any]) -> list[tuple[str, bytes]]:
    return [(flat[i].decode(), flat[i + 1]) for i in range(0, len(flat), 2)]
