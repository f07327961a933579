"""``MongoStorage``: the storage SPI on one MongoDB database (a namespace).

This is the *storage half* of the ``mongo`` backend: it imports only :mod:`rdq_core`,
pymongo/bson and its own modules, so it is usable without the kit. It behaves observably
exactly like :class:`rdq_core.memory.MemoryStore`, and is safe across threads, processes
and hosts sharing a namespace. Built for MongoDB 6.0+ (replica set), exercised over the
wire against SecantusDB (:mod:`rdq_mongo.flavour`).

Why one document per task, history embedded
-------------------------------------------
A task and its whole attempt history are one document (:mod:`rdq_mongo.documents`), so
every state change is a **single-document atomic write** — no multi-document
transaction, no second collection to keep in step. In particular a reclaim appends its
LEASE_EXPIRED attempt *in the same pipeline update* that takes the expired lease, and
numbers it ``max(attempts.n) + 1`` with ``$reduce`` over the stored history (invariant H,
never from ``attempt_count``), so a reclaim can never be half-written, and numbering
cannot collide: the number is computed under the document's write lock from exactly the
history it extends. (The alternative, an attempts collection with a unique
``(task_id, attempt_no)`` index written in a transaction, costs a transaction per state
change, and a ``WriteConflict`` retry loop on every contended claim.) The price is the
16 MB document limit: a task's payload, headers and history must fit in it, so the
payload limit is declared as :data:`MAX_PAYLOAD_BYTES` (12 MiB), leaving room for
thousands of attempts.

The claim
---------
1. read the server's clock ``T`` (``$$NOW``, :meth:`MongoStorage.now`);
2. find the candidates: the queue's tasks that are PENDING with ``due_us ≤ T`` or
   IN_FLIGHT with ``due_us`` (the lease's expiry) ``≤ T``, sorted by ``(due_us, seq)`` —
   one range of the ``claim`` index, a few more ids than ``limit``, looked for in a
   window that follows the queue's head (:mod:`rdq_mongo.window`: SecantusDB's finds
   cost time in proportion to what they match);
3. for each, in due order, ONE guarded atomic write (:func:`rdq_mongo.updates.claim_guard`
   — the same claimability predicate, on the document as it is now — and
   :func:`~rdq_mongo.updates.claim_update`): IN_FLIGHT, claimed at ``T`` with a lease to
   ``T + lease``, a fresh token, and for a reclaim the LEASE_EXPIRED attempt ending at
   ``T``. One instant ``T`` for the whole batch, as the reference store stamps one claim
   call; it is the server's clock read by this very call, never the client's, and no
   later than the write (``claimed_at ≥`` the lease it took over). A competitor
   that claimed the task first moved its ``due_us`` past ``T``, so the guard fails and the
   task is skipped: **the guard in the filter of a single-document write is what makes
   the claim atomic**; the find only proposes. A batch claim runs step 3 per candidate
   (another round of 1-3 if races cost it some, up to :data:`CLAIM_ROUNDS`).

The write of step 3 (``rdq_claim_write`` in the URI, :mod:`rdq_mongo.connection`):

- ``find_and_modify`` (MongoDB, the default there): ``findAndModify`` returns the claimed
  document from the same atomic step;
- ``update_then_read`` (SecantusDB, the default there, where ``findAndModify`` scans the
  whole collection whatever its filter): ``update_one`` with the same guard, then the
  claimed document is read back by ``_id`` **and the fresh token**. If the read finds
  another token the lease expired and someone reclaimed it between the two calls (only
  a process stalled longer than its lease): the claim is dropped — its token is dead
  already, exactly as if its worker had died (the LEASE_EXPIRED attempt says so).

On MongoDB the filter could compare with ``$$NOW`` itself; comparing with ``T`` instead
is as safe (``T`` ≤ the write's ``$$NOW``: never earlier than due, never before a lease
expired; a claimer stalled between reading ``T`` and writing makes a claim whose lease
ends sooner, never one that overlaps another: a competitor's claim moved ``due_us`` past
``T``), keeps the filter an index range on both servers, and SecantusDB scans the
collection for any ``$expr``. With ``limit`` candidates the claim costs 2 + limit round
trips (2 + 2·limit on SecantusDB).

Outcomes, heartbeats, DLQ
-------------------------
``complete`` / ``reschedule`` / ``dead_letter`` / ``extend_lease`` are one ``update_one``
each, fenced by ``{_id, status: IN_FLIGHT, token}`` in the filter; the attempt is appended
in the same pipeline (numbered by invariant H). ``extend_lease`` returns the new expiry
(``findAndModify``, or ``update_one`` and a read by token on SecantusDB). A fenced write
that matches nothing is ``StaleClaim`` — unless the document shows the attempt this very
call wrote (its nonce ``c``): then the driver's retry after a lost reply found the first
try applied, and the call succeeds (:mod:`rdq_mongo.errors`).

The DLQ lists a queue's DEAD tasks in ``(dead_us, _id)`` order from a keyset cursor
(:mod:`rdq_core.cursor`), one range of the ``dlq`` index. Redrive, purge and
``purge_succeeded`` are ``update_many`` / ``delete_many`` guarded by queue and status: each
document changes atomically, the call as a whole is not one step (a task dead-lettered
during a redrive by filter may or may not be included).

Clock
-----
Only the server's: ``$$NOW`` in pipelines, and ``T`` read from ``$$NOW`` for filters
(``aggregate([$documents, $$NOW])``). ``$$NOW`` has millisecond resolution, so every
stored time is a whole millisecond (kept as integer microseconds: see
:mod:`rdq_mongo.documents` for why not BSON dates). The enqueue counter's write also
returns ``$$NOW`` (one round trip for both). On a replica set the primary's clock is
used; after a failover another member's clock (NTP keeps them within a lease).

Write concern, durability, errors
---------------------------------
Every write is ``w: "majority", j: true``; reads are ``readConcern: majority`` on the
primary. So an acknowledged write is journaled (on a majority) and survives a kill and
restart of the server process, and a failover: ``capabilities().durable`` is true.
Every pymongo error becomes ``BackendUnavailable`` (:mod:`rdq_mongo.errors`): "nothing was
done" or "the outcome is unknown"; :mod:`rdq_mongo.errors` also says how retryable writes
and a lost reply interact.

Sharding
--------
Every claim filter names the queue, so a ``tasks`` collection sharded on
``{queue: 1, _id: 1}`` routes claims to one shard; outcomes are addressed by ``_id`` (the
token names no queue), which MongoDB 7 routes by broadcast. Not exercised here: on a
sharded collection ``_id`` is unique per shard only, so the cross-queue ``IdConflict``
would need an id index of its own; the enqueue counter is one hot document.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pymongo.errors as px
from pymongo import ReturnDocument

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
from rdq_mongo import documents, schema, updates
from rdq_mongo.connection import ClientSource, namespace_name
from rdq_mongo.errors import map_error
from rdq_mongo.flavour import Flavour, identify
from rdq_mongo.window import Windows

T = TypeVar("T")
Db = Any  # pymongo.database.Database

CLOCK_DESCRIPTION = "mongo $$NOW (the server's clock, millisecond resolution)"
#: The largest payload accepted: a task is one document (16 MiB), history included.
MAX_PAYLOAD_BYTES = 12 * 1024 * 1024
#: Rounds of find-then-claim a batch claim makes when races cost it candidates.
CLAIM_ROUNDS = 3
#: Rounds of the enqueue (only a purge of the id between its two writes loops).
ENQUEUE_ROUNDS = 8
FIND_AND_MODIFY = "find_and_modify"
UPDATE_THEN_READ = "update_then_read"
_NOW_PIPELINE = [{"$documents": [{}]}, {"$project": {"_id": 0, "now": {"$toLong": "$$NOW"}}}]
_COUNTER_UPDATE = [{"$set": {"n": {"$add": [{"$ifNull": ["$n", 0]}, 1]}, "now": updates.NOW_US}}]


def _slack(want: int) -> int:
    """Candidates proposed beyond ``want``, so that a claim that loses races to competing
    claimers (who read the same head of the queue) moves on without another find."""
    return min(want * 2 + 4, 1000)


def _nonce() -> str:
    return secrets.token_hex(8)


class MongoStorage(Storage):
    """The storage SPI on database ``namespace`` of the MongoDB deployment at ``uri``.

    Nothing is opened until the first call in a process (a forked child opens its own
    client); that call creates the namespace's indexes if they are missing.
    ``claim_write`` overrides the URI's ``rdq_claim_write`` (see the module docstring).
    """

    def __init__(
        self,
        uri: str,
        namespace: str,
        *,
        app_name: str | None = None,
        claim_write: str | None = None,
    ) -> None:
        self._namespace = namespace_name(namespace)
        self._source = ClientSource(uri, app_name or f"rdq:{self._namespace}")
        choice = claim_write or self._source.target.claim_write
        if choice not in ("auto", FIND_AND_MODIFY, UPDATE_THEN_READ):
            from rdq_core.errors import InvalidArgument

            raise InvalidArgument(
                f"claim_write={choice!r}: expected auto, {FIND_AND_MODIFY} or {UPDATE_THEN_READ}"
            )
        self._claim_write_choice = choice
        self._where = f"{self._source.where} database {self._namespace!r}"
        self._ready_pid: int | None = None
        self._flavour: Flavour | None = None
        self._windows = Windows()

    def __repr__(self) -> str:
        return f"MongoStorage({self._where})"

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def app_name(self) -> str:
        return self._source.app_name

    # ---- running commands ----

    def _db(self) -> Db:
        client = self._source.get()
        db = client[self._namespace]
        if self._ready_pid != os.getpid():
            schema.ensure(db)
            if self._flavour is None:
                self._flavour = identify(client)
            self._ready_pid = os.getpid()
        return db

    def _run(self, action: str, fn: Callable[[Db], T]) -> T:
        """Run ``fn(db)``; map every driver error to an SPI error."""
        try:
            return fn(self._db())
        except RdqError:
            raise
        except px.PyMongoError as exc:
            raise map_error(exc, action, self._where) from exc
        except documents.CorruptDocument as exc:
            raise BackendUnavailable(
                f"{action}: {self._where} holds a document rdq_mongo cannot read ({exc}): was "
                "the namespace written by something else?"
            ) from exc

    def flavour(self) -> Flavour:
        """The server behind the URI (asked once)."""
        return self._run("flavour", lambda db: self._flavour)  # type: ignore[return-value]

    @property
    def claim_write(self) -> str:
        """How the claim's atomic write is done here (resolves ``auto``)."""
        if self._claim_write_choice != "auto":
            return self._claim_write_choice
        return self._write_for(self.flavour())

    def _write_for(self, flavour: Flavour | None) -> str:
        """The claim write on ``flavour``; inside a call (after :meth:`_db`), without
        asking anything, so that a failure is the call's own, named by its action."""
        if self._claim_write_choice != "auto":
            return self._claim_write_choice
        return UPDATE_THEN_READ if flavour is not None and flavour.secantus else FIND_AND_MODIFY

    @staticmethod
    def _now_us(db: Db) -> int:
        for doc in db.aggregate(_NOW_PIPELINE):
            return int(doc["now"]) * 1000
        raise BackendUnavailable("the server returned no $$NOW")  # pragma: no cover

    def _stale(self, db: Db, task_id: str, token: str) -> StaleClaim:
        doc = db[schema.TASKS].find_one({"_id": task_id}, {"status": 1})
        state = "no such task" if doc is None else f"status {doc.get('status')}"
        return StaleClaim(
            f"task {task_id!r}: token {token[:8]}… is not the current claim ({state})"
        )

    # ---- producer ----

    def _enqueue(self, task: NewTask) -> bool:
        delay_us = micros_from_delta(task.delay)
        nonce = _nonce()

        def run(db: Db) -> bool:
            for _ in range(ENQUEUE_ROUNDS):
                counter = db[schema.COUNTERS].find_one_and_update(
                    {"_id": schema.SEQ_ID},
                    _COUNTER_UPDATE,
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
                doc = documents.new_document(
                    task, int(counter["n"]), int(counter["now"]), delay_us, nonce
                )
                try:
                    db[schema.TASKS].insert_one(doc)
                    return True
                except px.DuplicateKeyError:
                    pass
                existing = db[schema.TASKS].find_one({"_id": task.id}, {"queue": 1, "enq": 1})
                if existing is None:
                    continue  # purged meanwhile: insert again
                if existing.get("enq") == nonce:
                    return True  # our own insert, retried after a lost reply
                if existing["queue"] != task.queue:
                    raise IdConflict(
                        f"task id {task.id!r} is already used in queue {existing['queue']!r}; "
                        "ids are unique across queues"
                    )
                return False
            raise BackendUnavailable(f"enqueue of {task.id!r}: its id kept vanishing; retry")

        return self._run("enqueue", run)

    # ---- worker ----

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        lease_us = micros_from_delta(lease)

        def run(db: Db) -> list[Claim]:
            write = self._write_for(self._flavour)
            claims: list[Claim] = []
            now_us = self._now_us(db)  # the claim's one instant (see the module docstring)
            for _ in range(CLAIM_ROUNDS):
                want = limit - len(claims)
                asked = want + _slack(want)
                candidates = self._candidates(db, queue, now_us, asked)
                for task_id in candidates:
                    try:
                        claim = self._claim_one(db, write, task_id, queue, now_us, lease_us)
                    except px.PyMongoError:
                        if not claims:
                            raise
                        return claims  # keep what was claimed; the error comes next call
                    if claim is not None:
                        claims.append(claim)
                        if len(claims) == limit:
                            return claims
                if len(candidates) < asked:
                    break  # every task claimable at now_us was tried
            return claims

        return self._run("claim_due", run)

    def _candidates(self, db: Db, queue: str, now_us: int, want: int) -> list[str]:
        """Ids of up to ``want`` tasks claimable at ``now_us``, in due order, looked for in
        a window that follows the queue's head (:mod:`rdq_mongo.window`); proposals only:
        the guarded write decides."""
        tasks = db[schema.TASKS]

        def find(bound_us: int, n: int) -> list[tuple[str, int]]:
            cursor = tasks.find(
                updates.claim_candidates(queue, bound_us),
                {"_id": 1, "due_us": 1},
                sort=[("due_us", 1), ("seq", 1)],
                limit=n,
            )
            return [(doc["_id"], int(doc["due_us"])) for doc in cursor]

        return self._windows.candidates(queue, now_us, want, find)

    def _claim_one(
        self, db: Db, write: str, task_id: str, queue: str, now_us: int, lease_us: int
    ) -> Claim | None:
        """The guarded atomic write of one claim; ``None`` if a competitor was first.

        A write that matched nothing after pymongo retried it (its first try's reply was
        lost) may have been applied by that first try, on a server that does not
        deduplicate retries: then the task carries this call's fresh token, read back by
        it, and the claim is returned — never left held by a token nobody has."""
        tasks = db[schema.TASKS]
        token = secrets.token_hex(16)
        guard = updates.claim_guard(task_id, queue, now_us)
        update = self._claim_pipeline(token, now_us, lease_us)
        errors_before = self._source.network_errors.count()
        if write == FIND_AND_MODIFY:
            doc = tasks.find_one_and_update(guard, update, return_document=ReturnDocument.AFTER)
        elif tasks.update_one(guard, update).matched_count:
            doc = tasks.find_one({"_id": task_id, "token": token})
        else:
            doc = None
        if doc is None and self._source.network_errors.count() != errors_before:
            doc = tasks.find_one({"_id": task_id, "token": token})  # our first try applied?
        return None if doc is None else documents.claim(doc)

    def _claim_pipeline(self, token: str, now_us: int, lease_us: int) -> updates.Pipeline:
        return updates.claim_update(token, now_us, lease_us)

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        lease_us = micros_from_delta(lease)

        def run(db: Db) -> datetime:
            write = self._write_for(self._flavour)
            tasks = db[schema.TASKS]
            guard = updates.fenced(task_id, token)
            update = updates.extend_update(lease_us)
            if write == FIND_AND_MODIFY:
                doc = tasks.find_one_and_update(
                    guard, update, {"due_us": 1}, return_document=ReturnDocument.AFTER
                )
            elif tasks.update_one(guard, update).matched_count:
                doc = tasks.find_one(guard, {"due_us": 1})
            else:
                doc = None
            if doc is None:
                raise self._stale(db, task_id, token)
            return utc_from_micros(int(doc["due_us"]))

        return self._run("extend_lease", run)

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        status: str,
        delay_us: int | None = None,
    ) -> None:
        call = _nonce()
        update = updates.outcome_update(token, call, outcome, error, status, delay_us)

        def run(db: Db) -> None:
            tasks = db[schema.TASKS]
            if tasks.update_one(self._outcome_guard(task_id, token), update).matched_count:
                return
            doc = tasks.find_one({"_id": task_id}, {"attempts": 1})
            if doc is not None and doc["attempts"] and doc["attempts"][-1].get("c") == call:
                return  # this call's own write: the retry after a lost reply found it
            raise self._stale(db, task_id, token)

        self._run(action, run)

    def _outcome_guard(self, task_id: str, token: str) -> dict[str, Any]:
        return updates.fenced(task_id, token)

    def _complete(self, task_id: str, token: str) -> None:
        self._finish("complete", task_id, token, Outcome.SUCCESS, None, updates.SUCCEEDED)

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        self._finish(
            "reschedule",
            task_id,
            token,
            Outcome.RETRYABLE_FAILURE,
            error,
            updates.PENDING,
            micros_from_delta(delay),
        )

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        self._finish("dead_letter", task_id, token, outcome, error, updates.DEAD)

    # ---- reading ----

    def _get(self, task_id: str) -> Task:
        def run(db: Db) -> Task:
            doc = db[schema.TASKS].find_one({"_id": task_id})
            if doc is None:
                raise NotFound(f"no task with id {task_id!r}")
            return documents.task(doc)

        return self._run("get", run)

    def _stats(self, queue: str) -> QueueStats:
        due = {
            "$and": [{"$eq": ["$status", updates.PENDING]}, {"$lte": ["$due_us", updates.NOW_US]}]
        }
        pipeline = [
            {"$match": {"queue": queue}},
            {
                "$group": {
                    "_id": "$status",
                    "n": {"$sum": 1},
                    "due": {"$sum": {"$cond": [due, 1, 0]}},
                }
            },
        ]

        def run(db: Db) -> QueueStats:
            counts = {
                row["_id"]: (int(row["n"]), int(row["due"]))
                for row in db[schema.TASKS].aggregate(pipeline)
            }
            pending, due_now = counts.get(updates.PENDING, (0, 0))
            return QueueStats(
                pending=pending,
                due=due_now,
                in_flight=counts.get(updates.IN_FLIGHT, (0, 0))[0],
                succeeded=counts.get(updates.SUCCEEDED, (0, 0))[0],
                dead=counts.get(updates.DEAD, (0, 0))[0],
            )

        return self._run("stats", run)

    def _now(self) -> datetime:
        return self._run("now", lambda db: utc_from_micros(self._now_us(db)))

    # ---- DLQ ----

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after = None if cursor is None else cursors.decode(queue, cursor)
        query: dict[str, Any] = {"queue": queue, "status": updates.DEAD}
        if filter is not None:
            query.update(_selection(filter))
        if after is not None:
            query["$or"] = [
                {"dead_us": {"$gt": after.dead_at_us}},
                {"dead_us": after.dead_at_us, "_id": {"$gt": after.task_id}},
            ]

        def run(db: Db) -> DlqPage:
            found = list(
                db[schema.TASKS].find(query, sort=[("dead_us", 1), ("_id", 1)], limit=limit + 1)
            )
            page = found[:limit]
            next_cursor = None
            if len(found) > limit:
                last = page[-1]
                position = cursors.DlqPosition(int(last["dead_us"]), str(last["_id"]))
                next_cursor = cursors.encode(queue, position)
            return DlqPage(tuple(documents.task(d) for d in page), next_cursor)

        return self._run("dlq_list", run)

    def _redrive(self, queue: str, selector: Selector) -> int:
        query = {"queue": queue, "status": updates.DEAD, **_selection(selector)}
        return self._run(
            "redrive",
            lambda db: db[schema.TASKS].update_many(query, updates.redrive_update()).modified_count,
        )

    def _purge(self, queue: str, selector: Selector) -> int:
        query = {"queue": queue, "status": updates.DEAD, **_selection(selector)}
        return self._run("purge", lambda db: db[schema.TASKS].delete_many(query).deleted_count)

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        older_us = micros_from_delta(older_than)

        def run(db: Db) -> int:
            cutoff = self._now_us(db) - older_us
            query = {
                "queue": queue,
                "status": updates.SUCCEEDED,
                "finished_us": updates.due_by(cutoff),
            }
            return db[schema.TASKS].delete_many(query).deleted_count

        return self._run("purge_succeeded", run)

    # ---- lifecycle ----

    def capabilities(self) -> Capabilities:
        """What this storage supports; ``durable`` because every write is acknowledged
        with ``w: "majority", j: true`` (journaled before the reply). While the server
        cannot be asked what it is: not durable, and asked again next time. Never raises."""
        try:
            flavour = self.flavour()
        except RdqError as exc:
            return _capabilities(False, f"unknown: the server could not be asked ({exc})")
        return _capabilities(
            True,
            f'every write acknowledged with w:"majority", j:true (journaled before the '
            f"reply) by {flavour.label}",
        )

    def close(self) -> None:
        """Close this process's client; idempotent. Later calls raise ``BackendUnavailable``."""
        self._source.close()


def _capabilities(durable: bool, durability: str) -> Capabilities:
    return Capabilities(
        multi_process=True,
        max_payload_bytes=MAX_PAYLOAD_BYTES,
        notify=False,
        durable=durable,
        durability=durability,
        clock=CLOCK_DESCRIPTION,
    )


def _selection(selector: Selector) -> dict[str, Any]:
    """The filter fields (to AND with queue and status DEAD) selecting what ``selector``
    names; an empty selector selects nothing, never everything."""
    if isinstance(selector, ByIds):
        return {"_id": {"$in": list(dict.fromkeys(selector.ids))}}
    if selector.is_empty:
        return {"_id": {"$in": []}}
    out: dict[str, Any] = {}
    if selector.handler is not None:
        out["handler"] = selector.handler
    if selector.error_type is not None:
        out["last_error_type"] = selector.error_type
    return out
