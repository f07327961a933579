"""rdq's storage SPI on dramatiq 2.2.1's Redis broker: the *storage half* of the adapter
(imports only the standard library, ``rdq_core``, dramatiq, redis-py and itself).

**The adapter rules**, which every line below keeps:

1. every **write** goes through dramatiq's own functions: ``RedisBroker.enqueue`` (its
   public API), its middleware (Retries, Results) through ``Broker.emit_after`` as the
   worker calls them, and, where dramatiq's own worker calls it, the broker's dispatch
   script (``fetch``, ``ack``, ``nack``, ``requeue``); reads are plain Redis reads of
   dramatiq's keys (:mod:`rdq_dramatiq.reads`);
2. the adapter **never checks a token or a status itself** and adds no lock, guard or
   retry dramatiq lacks: dramatiq refuses a stale ack or nack by itself (its ``SREM`` of
   the worker's ack set finds nothing, dispatch.lua L191-212) and says nothing about it;
   the adapter *observes* that refusal with a read in the same MULTI as the script
   (:mod:`rdq_dramatiq.observed`) and maps it to ``StaleClaim``. Whatever dramatiq
   accepts is reported accepted: a heartbeat is never refused, a Retries re-enqueue is
   never refused. The only retry is the worker's own: an ack or nack that meets a
   connection error is tried again every 5 s until Redis answers (W L400-440);
3. a claim's **token** is what identifies that delivery in dramatiq: the worker process
   that fetched it (its ``broker_id``: the ack set holding it) and the
   ``redis_message_id`` ``RedisBroker.enqueue`` minted for that copy (R L163-170),
   digested to 32 hex digits (:func:`rdq_dramatiq.codec.token_of`). A storage is one
   dramatiq worker process (one ``RedisBroker``). It keeps the ``MessageProxy`` of every
   delivery it fetched until it has reported on it, as dramatiq's worker thread holds
   its message until ``post_process_message`` (once per delivery, W L607); a token it
   does not hold (never fetched here, already reported, another task's) names no message
   it could ack: ``StaleClaim``, an id mapping and not a check (dramatiq's ack takes a
   message, not a task id and a token);
4. **stale-work recovery runs as a deployed worker runs it**: dramatiq's maintenance
   (the requeue of dead brokers' unacked messages, dispatch.lua L106-141) runs inside the
   broker's own script calls, with the documented ``maintenance_chance`` set to its scale
   (1 000 000: every fetch and enqueue, :mod:`rdq_dramatiq.settings`), so every
   ``claim_due`` first reclaims, in the same script, what brokers silent for longer than
   ``heartbeat_timeout`` held on that queue (and, on its delay-queue fetch, on the delay
   queue).

**The SPI, call by call** (R = ``dramatiq/brokers/redis.py``, W = ``dramatiq/worker.py``):

=====================  ==================================================================
``enqueue``            ``RedisBroker.enqueue(Message(...), delay=ms)`` (R L150-186):
                       always stored (a new ``redis_message_id`` every time), so always
                       ``True``; a delay goes to ``<q>.DQ`` with an ``eta``
``claim_due``          what a worker's two consumer threads of the queue do (W L301-365):
                       the ``<q>.DQ`` consumer's fetch (up to the delay prefetch minus
                       what this worker already holds) and ``handle_delayed_messages``
                       (each due message enqueued again without its ``eta``, then the
                       delayed original acked: two calls), then the ``<q>`` consumer's
                       fetch of ``limit`` messages (what ``_RedisConsumer.__next__``
                       sends through ``do_fetch``: dramatiq's ``fetch`` script with the
                       arguments ``_dispatch`` builds, run by ``observed.Dispatcher``),
                       maintenance first in each script
``extend_lease``       the worker's heartbeat is the side effect of any call of its broker
                       (dispatch.lua L56-58): a ``fetch`` of 0 messages on the claim's
                       queue, what a polling consumer sends; never refused
``complete``           ``emit_after("process_message", result=None)`` (the Results
                       middleware stores the result) then ``post_process_message``: the
                       consumer's ack (W L405-419, R L306-315), observed
``reschedule``         the Retries middleware's path for a failure (W L583-600,
                       retries.py L97-148): ``dramatiq.Retry(delay=ms)`` raised and passed
                       to ``emit_after("process_message", exception=...)``, so Retries
                       enqueues the retry copy (``retries`` + 1, ``eta``), then the ack
                       of the original, observed (a refused ack comes after the copy was
                       written: finding F2)
``dead_letter``        ``MessageProxy.fail()`` then the consumer's nack (R L317-324),
                       observed: the message moves to ``<q>.XQ`` (Results stores the
                       exception, results/middleware.py ``after_nack``)
``get`` / ``stats``    reads (:mod:`rdq_dramatiq.reads`); ``dlq_list`` pages ``<q>.XQ``
``redrive``,           no dramatiq function does them (guide "Dead Letters": "manually
``purge``,             inspect the message and decide whether or not it should be put
``purge_succeeded``    back on the queue"; ``flush`` drops a whole queue; a result only
                       expires): refused with :class:`Unsupported`, naming the rule
``now``                the client clock dramatiq uses everywhere, ``current_millis()``
=====================  ==================================================================

**Lease model ``fixed``.** Every claim lives until its worker's last call plus the
``heartbeat_timeout`` of whichever broker runs maintenance; the adapter gives every broker
the same one (``dramatiq_heartbeat_timeout``, default 2 s here; dramatiq's default 60 s),
so that is every claim's lease, whatever the kit asks. A claim's ``lease_expires_at`` is
the claim's script timestamp + that timeout; a heartbeat returns its own timestamp + it;
``get`` shows the holder's last heartbeat + it.

**Clock.** dramatiq never asks Redis for the time: every timestamp (the heartbeat score,
the dead-broker threshold, ``eta``, ``message_timestamp``, the dead-letter score) is
``dramatiq.common.current_millis()`` of the process that calls (common.py L75-77). The
storage clock the adapter reports is that one: ``current_millis()`` of this process.

**The deployment.** ``RedisBroker(url=<the server's URL, connections named
rdq:<namespace>>, namespace=<the kit's key prefix>, heartbeat_timeout, maintenance_chance,
middleware=[Retries(max_retries=None)])`` plus ``Results(store_results=True)`` over the
broker's own client: Retries without a limit ("``None`` means the message should be
retried indefinitely", guide "Message Retries": rdq's worker decides when to give up and
calls dead_letter), and the Results middleware, dramatiq's documented way to learn that a
message was processed (an ack deletes the message: the stored result is all that shows a
success). One Redis client carries every call, the one ``RedisBroker`` built from the URL;
the adapter sets nothing on it. Each setting changed from dramatiq's defaults is listed
with its default and docs line in :mod:`rdq_dramatiq.settings`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

import redis
from dramatiq import Message, Retry
from dramatiq.actor import Actor
from dramatiq.broker import MessageProxy
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis, dq_name, q_name
from dramatiq.errors import BrokerConnectionError
from dramatiq.middleware import Retries
from dramatiq.results import ResultFailure, ResultMissing, Results
from dramatiq.results.backends import RedisBackend as RedisResults
from dramatiq.worker import POST_PROCESS_MESSAGE_RETRY_DELAY_SECS

from rdq_core.errors import BackendUnavailable, NotFound, RdqError, StaleClaim
from rdq_core.model import (
    Capabilities,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Status,
    Task,
    trusted_claim,
)
from rdq_core.spi import Storage
from rdq_dramatiq import codec
from rdq_dramatiq.keys import Keys, broker_namespace
from rdq_dramatiq.observed import Dispatcher
from rdq_dramatiq.reads import Reader
from rdq_dramatiq.settings import Settings, parse_dsn, with_params

__all__ = ["DRAMATIQ_VERSION", "DramatiqStorage", "Unsupported"]

log = logging.getLogger(__name__)
#: Every promotion of a delayed message, before and after its two calls, at INFO whatever
#: the process logs (a chaos worker logs warnings only): what tells a duplicate of the
#: crash window (a promoter killed between them) from finding F3 (an ack refused).
promotions = logging.getLogger(f"{__name__}.promotions")
promotions.setLevel(logging.INFO)

DRAMATIQ_VERSION = "2.2.1"
_DOCS = f"https://github.com/Bogdanp/dramatiq/blob/v{DRAMATIQ_VERSION}"
#: The Results backend's namespace, under the broker's.
RESULTS_NAMESPACE = "dramatiq-results"
#: How many messages a storage remembers having sent or fetched (for ``get`` of a
#: succeeded one: the message a caller keeps for ``message.get_result()``).
SEEN_MESSAGES = 1_000_000
#: How many deliveries a storage holds at most (a worker's messages in flight).
HELD_DELIVERIES = 100_000
#: The connection errors dramatiq's worker waits out: ``BrokerConnectionError``, which
#: the consumer makes of redis-py's ``ConnectionError`` alone (R L312-313, L321-322). A
#: ``redis.TimeoutError`` is not one: the worker gives up on it (W L445-452), and so does
#: the adapter (``BackendUnavailable``, outcome unknown).
_CONNECTION_ERRORS = (redis.ConnectionError, BrokerConnectionError)

_T = TypeVar("_T")


class Unsupported(RdqError):
    """dramatiq has no function for this (redrive, purge by id, purge of SUCCEEDED)."""


@dataclass
class _Held:
    """A delivery this worker fetched and has not reported on: the queue it came from,
    dramatiq's proxy, and whether the worker thread's ``process_message`` hooks already
    ran for it (a report retried after a connection error only retries the ack)."""

    queue: str
    proxy: MessageProxy
    processed: bool = False


@dataclass(order=True)
class _Delayed:
    """A delayed message in this worker's memory (W L346-362's delay_queue item)."""

    eta: int
    seq: int
    proxy: MessageProxy = field(compare=False)


def _never_called(*args: object, **kwargs: object) -> None:  # pragma: no cover
    raise RuntimeError("rdq runs the handlers; dramatiq's actor function is never called")


class DramatiqStorage(Storage):
    """One dramatiq worker process on one kit namespace: one ``RedisBroker``."""

    def __init__(self, dsn: str, namespace: str) -> None:
        self.namespace = namespace
        self.settings: Settings = parse_dsn(dsn)
        s = self.settings
        prefix = broker_namespace(namespace)
        # dramatiq's RedisBroker builds its one client from the URL (redis-py's
        # ConnectionPool.from_url, whatever retry policy that gives); the connections are
        # named rdq:<namespace> (a URL parameter redis-py reads) so that the redis
        # backend's connection cut finds them.
        self.broker = RedisBroker(
            url=with_params(s.url, {"client_name": f"rdq:{namespace}"}),
            namespace=prefix,
            middleware=[Retries(max_retries=None)],
            heartbeat_timeout=s.heartbeat_timeout_ms,
            maintenance_chance=s.maintenance_chance,
        )
        self._client: redis.Redis = self.broker.client
        # Results keys <namespace>:<queue>:<actor>:<message_id> (use_namespace_prefix_keys),
        # under the broker's prefix, so the kit's namespace drop removes them too; stored
        # over the broker's own client.
        self.results = RedisResults(
            client=self._client,
            namespace=f"{prefix}:{RESULTS_NAMESPACE}",
            use_namespace_prefix_keys=True,
        )
        self.broker.add_middleware(Results(backend=self.results, store_results=True))
        self.keys = Keys(self.broker.namespace)
        self._dispatch = Dispatcher(self.broker, self._client)
        self._reader = Reader(
            self._client, self.keys, s.heartbeat_timeout_ms, self.results.namespace
        )
        # The last copy of each message this process sent or fetched: what a dramatiq
        # caller keeps to ask message.get_result() later (queue, actor, id), and what get()
        # shows of a succeeded task (dramatiq deleted the message itself).
        self._seen: OrderedDict[str, Message] = OrderedDict()
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._held_lock = threading.Lock()
        self._delayed: dict[str, list[_Delayed]] = {}
        self._queue_locks: dict[str, threading.Lock] = {}
        self._actor_lock = threading.Lock()
        self._seq = itertools.count()
        self._closed = False
        self._capabilities: Capabilities | None = None

    # ---- plumbing -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _driver(self, action: str) -> Iterator[None]:
        """Driver errors become BackendUnavailable (never escape)."""
        try:
            yield
        except RdqError:
            raise
        except (redis.RedisError, BrokerConnectionError, OSError) as exc:
            raise BackendUnavailable(
                f"dramatiq adapter, {action}: {type(exc).__name__}: "
                f"{str(exc).strip() or 'no message'}"
            ) from None

    def _queue_lock(self, queue: str) -> threading.Lock:
        lock = self._queue_locks.get(queue)
        if lock is None:
            lock = self._queue_locks.setdefault(queue, threading.Lock())
        return lock

    def _declare_actor(self, actor_name: str, queue: str) -> None:
        """Retries and Results look the message's actor up (retries.py L101,
        results/middleware.py ``_lookup_options``); a worker process declares its actors
        at import, the adapter when it first meets one."""
        if actor_name in self.broker.actors:
            return
        with self._actor_lock:
            if actor_name not in self.broker.actors:
                Actor(
                    _never_called,
                    broker=self.broker,
                    actor_name=actor_name,
                    queue_name=queue,
                    priority=0,
                    options={},
                )

    def _saw(self, message: Message) -> None:
        with self._held_lock:
            self._seen[message.message_id] = message
            self._seen.move_to_end(message.message_id)
            while len(self._seen) > SEEN_MESSAGES:
                self._seen.popitem(last=False)

    def _hold(self, queue: str, proxy: MessageProxy) -> str:
        token = codec.token_of(self.broker.broker_id, proxy.options["redis_message_id"])
        with self._held_lock:
            self._held[token] = _Held(queue, proxy)
            self._held.move_to_end(token)
            while len(self._held) > HELD_DELIVERIES:
                self._held.popitem(last=False)
        return token

    def _reported(self, token: str) -> None:
        """The worker thread has reported on this delivery (``post_process_message``
        returned, whatever dramatiq made of it): it drops the message, as dramatiq's worker
        does once per delivery."""
        with self._held_lock:
            self._held.pop(token, None)

    def _delivery(self, task_id: str, token: str) -> _Held:
        """The delivery ``(task_id, token)`` names among those this worker holds."""
        with self._held_lock:
            held = self._held.get(token)
        if held is None or held.proxy.message_id != task_id:
            raise StaleClaim(
                f"task {task_id!r}: this worker (dramatiq broker {self.broker.broker_id}) "
                f"holds no message of it under token {token[:8]}...: it never fetched "
                "one, or already reported on it (a dramatiq worker acks only the messages "
                "it fetched, once)"
            )
        return held

    def _until_redis_answers(self, what: str, call: Callable[[], _T]) -> tuple[_T, bool]:
        """``call()`` retried every 5 s on connection errors until Redis answers, as
        ``ConsumerThread.post_process_message`` does (W L407-440); ``(result, whether a
        try was lost)``. Only closing the storage ends the wait (``BackendUnavailable``),
        as only the end of its process ends a dramatiq worker thread's."""
        lost = False
        while True:
            try:
                return call(), lost
            except _CONNECTION_ERRORS as exc:
                lost = True
                if self._closed:
                    raise BackendUnavailable(
                        f"dramatiq adapter, {what}: the storage was closed while Redis did "
                        f"not answer ({type(exc).__name__}: {exc})"
                    ) from None
                log.warning(
                    "rdq-dramatiq: %s failed (%s); retried in %s s, as dramatiq's worker does",
                    what,
                    exc,
                    POST_PROCESS_MESSAGE_RETRY_DELAY_SECS,
                )
                time.sleep(POST_PROCESS_MESSAGE_RETRY_DELAY_SECS)

    def _observed_ack(
        self, queue: str, proxy: MessageProxy, command: str, *, strict: bool = True
    ) -> bool:
        """The consumer's ack or nack of ``proxy`` (R L306-324) with the reads that say
        whether the script's ``SREM`` found it in this worker's ack set: did dramatiq take
        it? Retried like the worker's ``post_process_message``; a refusal after a lost try
        is an unknown outcome (the lost try may have been the one that took effect)."""
        rid = proxy.options["redis_message_id"]
        acks = self.keys.acks(self.broker.broker_id, queue)
        msgs = self.keys.msgs(queue)

        def call() -> bool:
            got = self._dispatch.run(
                command,
                queue,
                rid,
                before=(lambda p: p.sismember(acks, rid), lambda p: p.hexists(msgs, rid)),
            )
            member, stored = got.before
            return bool(member) and (command != "nack" or bool(stored))

        applied, lost = self._until_redis_answers(f"{command} of {rid} on {queue!r}", call)
        if lost and not applied and strict:
            raise BackendUnavailable(
                f"dramatiq adapter: the {command} of {rid} met a connection error, and its "
                "retry found the message no longer held: whether the lost try took it is "
                "unknown"
            )
        return applied

    def _post_process(self, queue: str, proxy: MessageProxy) -> bool:
        """``ConsumerThread.post_process_message`` (W L400-421): nack a failed message,
        ack any other, with the middleware hooks around; did dramatiq take it?"""
        command = "nack" if proxy.failed else "ack"
        self.broker.emit_before(command, proxy)
        applied = self._observed_ack(queue, proxy, command)
        self.broker.emit_after(command, proxy)
        return applied

    def _fetch(self, queue: str, n: int) -> tuple[int, list[MessageProxy]]:
        """``broker.do_fetch(queue, n)`` as the consumer calls it (R L360-364), with the
        timestamp the script used; maintenance runs first, in the same script."""
        got = self._dispatch.run("fetch", queue, n)
        proxies = []
        for data in got.reply or ():
            if data is None:  # R L343-349: a message body missing (dramatiq #266)
                log.warning("rdq-dramatiq: a fetch on %r returned a missing message", queue)
                continue
            proxies.append(MessageProxy(Message.decode(data)))
        return got.timestamp_ms, proxies

    def _promote_due(self, queue: str) -> None:
        """The delay-queue consumer thread of ``queue``: fetch delayed messages into this
        worker's memory up to the prefetch, then ``handle_delayed_messages`` (W L346-362):
        each message whose eta passed is enqueued again without its eta, then its
        delayed original is acked (two separate calls, as in dramatiq).

        Errors go where ``ConsumerThread.run`` sends them (W L325-340): a connection error
        of the fetch is the consumer's ``ConnectionClosed`` and drops the delayed messages
        held in memory (W L325-327; they stay in this worker's ack set of the delay
        queue); any other error (a timeout, or a connection error of the copy's
        ``enqueue``, which dramatiq does not wrap) closes the consumer, whose ``close``
        gives the messages still held back to the delay queue with ``requeue``
        (W L329-333, L482-489). An ack that times out is logged and the promotion goes
        on, as ``post_process_message`` does (W L445-452)."""
        dq = dq_name(queue)
        held = self._delayed.setdefault(queue, [])
        try:
            room = self.settings.delay_prefetch - len(held)
            if room > 0:
                try:
                    _, proxies = self._fetch(dq, room)
                except redis.ConnectionError:
                    held.clear()
                    raise
                for proxy in proxies:
                    eta = proxy.options.get("eta")
                    if not isinstance(eta, (int, float)):
                        eta = current_millis()
                    heapq.heappush(held, _Delayed(int(eta), next(self._seq), proxy))
            while held and held[0].eta <= current_millis():
                self._promote(queue, dq, heapq.heappop(held).proxy)
        except (redis.RedisError, OSError):
            self._give_back(dq, held)
            raise

    def _promote(self, queue: str, dq: str, message: MessageProxy) -> None:
        """One message of ``handle_delayed_messages`` (W L356-361)."""
        fresh = message.copy(queue_name=queue)
        del fresh.options["eta"]
        rid = message.options.get("redis_message_id")
        # Logged before the two calls and after them: a worker killed between the enqueue
        # and the ack leaves the first line without the second (the original is then
        # requeued by maintenance and promoted again: dramatiq's at-least-once crash
        # window, which the whole-kit test tells apart).
        promotions.info(
            "rdq-dramatiq: promoting delayed message %s (message_id %r)", rid, message.message_id
        )
        self.broker.enqueue(fresh)
        self.broker.emit_before("ack", message)
        try:
            took: bool | None = self._observed_ack(dq, message, "ack", strict=False)
        except redis.TimeoutError:
            took = None
            log.exception(
                "rdq-dramatiq: unhandled error during post_process_message(%s), as "
                "dramatiq's worker logs it; the promotion goes on",
                message,
            )
        else:
            self.broker.emit_after("ack", message)
        words = {True: "taken", False: "refused", None: "unknown (timed out)"}
        promotions.info(
            "rdq-dramatiq: promoted delayed message %s (message_id %r), ack %s",
            rid,
            message.message_id,
            words[took],
        )
        if took is False:
            # F3 (upstream Bogdanp/dramatiq#431): the copy is enqueued although this worker
            # no longer held the delayed message (another worker's maintenance gave it to
            # a worker that promotes it too).
            log.warning(
                "rdq-dramatiq: F3: promoted delayed message %s (message_id %r) "
                "that this worker no longer held: its ack on %r was refused",
                rid,
                message.message_id,
                dq,
            )

    def _give_back(self, dq: str, held: list[_Delayed]) -> None:
        """``ConsumerThread.close`` after an unexpected error: ``requeue`` of the delayed
        messages the consumer still holds (W L482-489). A Redis error of that requeue
        escapes (dramatiq's ``close`` catches only ``BrokerConnectionError``, which the
        broker never raises here); the messages are dropped from memory either way."""
        proxies = [item.proxy for item in held]
        held.clear()
        if proxies:
            self.broker.consume(dq).requeue(proxies)

    def _lease_end(self, timestamp_ms: int) -> datetime:
        return codec.utc_ms(timestamp_ms + self.settings.heartbeat_timeout_ms)

    # ---- producer -----------------------------------------------------------------------------

    def _enqueue(self, task: NewTask) -> bool:
        with self._driver("enqueue"):
            sent = self.broker.enqueue(codec.message_of(task), delay=codec.delay_ms(task.delay))
        self._saw(sent)
        return True

    # ---- worker --------------------------------------------------------------------------------

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        with self._driver("claim_due"), self._queue_lock(queue):
            self._promote_due(queue)
            timestamp, proxies = self._fetch(queue, limit)
        claimed_at = codec.utc_ms(timestamp)
        until = self._lease_end(timestamp)
        out = []
        for proxy in proxies:
            self._declare_actor(proxy.actor_name, queue)
            token = self._hold(queue, proxy)
            self._saw(proxy._message)
            task = codec.task_of(proxy, queue, Status.IN_FLIGHT, lease_expires_at=until)
            out.append(trusted_claim(task, token, claimed_at, until, False))
        return out

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        held = self._delivery(task_id, token)
        with self._driver("extend_lease"):
            got = self._dispatch.run("fetch", held.queue, 0)
        return self._lease_end(got.timestamp_ms)

    def _complete(self, task_id: str, token: str) -> None:
        held = self._delivery(task_id, token)
        proxy = held.proxy
        with self._driver("complete"):
            if not held.processed:  # W L573: the actor returned
                held.processed = True
                self.broker.emit_after("process_message", proxy, result=None)
            applied = self._post_process(held.queue, proxy)
        self._reported(token)
        if not applied:
            raise StaleClaim(self._refused(task_id, proxy, "ack"))

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        held = self._delivery(task_id, token)
        proxy = held.proxy
        text = "retry" if error is None else f"{error.type}: {error.message}"
        with self._driver("reschedule"):
            if not held.processed:
                held.processed = True
                try:
                    raise Retry(text, delay=codec.delay_ms(delay) or 0)
                except Retry as exc:  # as in WorkerThread.process_message (W L583-600)
                    proxy.stuff_exception(exc)
                    self.broker.emit_after("process_message", proxy, exception=exc)
            try:
                applied = self._post_process(held.queue, proxy)
            finally:
                proxy.clear_exception()
        self._reported(token)
        if not applied:
            log.warning(
                "rdq-dramatiq: F2: the Retries middleware enqueued a retry of %r before "
                "the ack of %s, which dramatiq refused: this worker no longer held it",
                task_id,
                proxy.options.get("redis_message_id"),
            )
            raise StaleClaim(self._refused(task_id, proxy, "nack" if proxy.failed else "ack"))

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        held = self._delivery(task_id, token)
        proxy = held.proxy
        text = "dead-lettered" if error is None else f"{error.type}: {error.message}"
        with self._driver("dead_letter"):
            proxy.fail()
            proxy.stuff_exception(RuntimeError(text))
            try:
                applied = self._post_process(held.queue, proxy)
            finally:
                proxy.clear_exception()
        self._reported(token)
        if not applied:
            raise StaleClaim(self._refused(task_id, proxy, "nack"))

    def _refused(self, task_id: str, proxy: MessageProxy, command: str) -> str:
        return (
            f"task {task_id!r}: dramatiq did not take the {command} of redis message "
            f"{proxy.options['redis_message_id']}: it is no longer in the ack set of this "
            f"worker (broker {self.broker.broker_id}); another worker's maintenance "
            "requeued it (dispatch.lua L106-124, L191-212)"
        )

    # ---- reading --------------------------------------------------------------------------------

    def _get(self, task_id: str) -> Task:
        with self._driver("get"):
            copies = self._reader.copies(task_id)
            if copies:
                return copies[0].task
            finished = self._finished(task_id)
        if finished is None:
            raise NotFound(
                f"no dramatiq message has message_id {task_id!r} in namespace "
                f"{self.namespace!r}, and no result of one is stored"
            )
        return finished

    def _finished(self, task_id: str) -> Task | None:
        """What the Results middleware says of a message no longer stored:
        ``backend.get_result(message)`` (results/backend.py) with the message this process
        kept, else with each (queue, actor) a stored result names. A result is SUCCEEDED
        (stored after the actor returned, before the ack); an exception (stored after the
        nack of a failed message, results/middleware.py ``after_nack``) is DEAD."""
        with self._held_lock:
            known = self._seen.get(task_id)
        if known is not None:
            owners = [(q_name(known.queue_name), known.actor_name)]
        else:
            owners = self._reader.result_owners(task_id)
        for queue, actor in owners:
            probe = Message(
                queue_name=queue,
                actor_name=actor,
                args=(),
                kwargs={},
                options={},
                message_id=task_id,
                message_timestamp=0,
            )
            shown = known if known is not None else probe
            try:
                self.results.get_result(probe)
            except ResultMissing:
                continue
            except ResultFailure:
                return codec.task_of(shown, queue, Status.DEAD)
            return codec.task_of(shown, queue, Status.SUCCEEDED)
        return None

    def _stats(self, queue: str) -> QueueStats:
        with self._driver("stats"):
            return self._reader.stats(queue, current_millis())

    def _now(self) -> datetime:
        return codec.utc_ms(current_millis())

    # ---- DLQ and housekeeping -----------------------------------------------------------------

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        with self._driver("dlq_list"):
            return self._reader.dlq_page(queue, filter, cursor, limit)

    def _redrive(self, queue: str, selector: Selector) -> int:
        raise Unsupported(
            "dramatiq has no redrive: its guide ('Dead Letters') says to 'manually inspect "
            "the message and decide whether or not it should be put back on the queue' "
            f"({_DOCS}/docs/source/guide.rst)",
            rule="redrive",
        )

    def _purge(self, queue: str, selector: Selector) -> int:
        raise Unsupported(
            "dramatiq purges only whole queues (RedisBroker.flush drops a queue with its "
            f"delay and dead-letter queues: {_DOCS}/dramatiq/brokers/redis.py#L197-L204), "
            "never chosen dead messages",
            rule="purge",
        )

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        raise Unsupported(
            "dramatiq keeps no succeeded message to purge: an ack deletes it "
            f"({_DOCS}/dramatiq/brokers/redis/dispatch.lua#L191-L196), and a stored result "
            "only expires (result_ttl)",
            rule="purge-succeeded",
        )

    # ---- lifecycle ----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            durable, how = self._durability()
            self._capabilities = Capabilities(
                multi_process=True,
                max_payload_bytes=None,
                notify=False,
                clock=(
                    "client clock: dramatiq.common.current_millis() (time.time() in ms) of "
                    "each worker process; dramatiq never reads Redis TIME, and a reclaimer "
                    "compares its own clock with the holder's last heartbeat"
                ),
                durable=durable,
                durability=how,
                lease_model="fixed",
                fixed_lease=timedelta(milliseconds=self.settings.heartbeat_timeout_ms),
            )
        return self._capabilities

    def _durability(self) -> tuple[bool, str]:
        """dramatiq configures nothing on the server: durable iff Redis itself is set to
        AOF with ``appendfsync always`` (read with ``CONFIG GET``)."""
        try:
            aof = self._client.config_get("appendonly").get("appendonly")
            fsync = self._client.config_get("appendfsync").get("appendfsync")
        except redis.RedisError as exc:
            return False, f"the server's persistence could not be read ({type(exc).__name__})"
        durable = aof == "yes" and fsync == "always"
        return durable, (
            f"dramatiq sets no persistence; the Redis server has appendonly={aof}, "
            f"appendfsync={fsync}"
        )

    def close(self) -> None:
        """Give back the delayed messages held in memory (``ConsumerThread.close``, W
        L482-489: ``consumer.requeue``) and close the connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            for queue, held in self._delayed.items():
                if held:
                    consumer = self.broker.consume(dq_name(queue))
                    consumer.requeue([item.proxy for item in held])
                held.clear()
        except (redis.RedisError, BrokerConnectionError, OSError):
            pass  # as ConsumerThread.close: the delayed messages wait for maintenance
        finally:
            self.broker.close()
            # RedisBroker.close does nothing (a worker process ends instead): the kit opens
            # many storages in one process, so the pool's sockets are closed here.
            with contextlib.suppress(Exception):
                self._client.connection_pool.disconnect()
