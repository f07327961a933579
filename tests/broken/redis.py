"""Broken Redis backends: the kit's proof that it fails them.

Each variant is the real :class:`rdq_redis.storage.RedisStorage` with one piece done the
way a Redis queue could get it wrong: a changed script (given to the storage through its
``scripts=`` test aid) or one storage method redone. Each is exposed as a backend object,
so the conformance suite runs against it unchanged::

    pytest --pyargs rdq_compliance.suite.test_lease \\
        --rdq-backend=tests.broken.redis:outcome_ignores_token --rdq-dsn=redis://127.0.0.1:6379/0

(with the checkout root on ``PYTHONPATH``). ``control`` is the same plumbing with nothing
changed: it must pass, so a variant's failure is its one change.

Every variant records its **victims**: the id of each task on which its broken code path
actually did something the real backend would not (the task claimed although another
worker had just taken it, the outcome accepted under a foreign token, ...). The suite runs
in another process, so they are appended to the file named by ``RDQ_REDIS_VICTIMS``
(``variant TAB task id`` per line; nothing is recorded without it). The check
(``test_redis_variants.py``) asserts that a failure report names the rule *and* a victim.

A variant's scripts must differ from the real ones: every edit below asserts that the text
it replaces is there, so a change to :mod:`rdq_redis.scripts` cannot silently turn a
variant back into the real backend.

Two more, at the end, are not script variants but clients that take an unanswered call as
applied (:mod:`tests.broken._unanswered`): ``acks_timed_out_reports``, which only a frozen
server exposes, and ``hb_timeout_taken_as_extended``, which only a network partition
exposes. They record their victims in ``$RDQ_FREEZE_VICTIMS`` / ``$RDQ_PARTITION_VICTIMS``.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any, ClassVar

import redis
from rdq_redis import codec
from rdq_redis.plugin import RedisBackend
from rdq_redis.scripts import SOURCES, Scripts, ScriptSource
from rdq_redis.storage import RedisStorage, _stale

from rdq_core.errors import BackendUnavailable, IdConflict
from rdq_core.model import Claim, NewTask, micros_from_delta
from tests.broken._unanswered import ACK_TIMEOUT, FREEZE_VICTIMS_ENV, TimeoutTakenAsExtended, victim

VICTIMS_ENV = "RDQ_REDIS_VICTIMS"


def _edit(text: str, old: str, new: str, *, regex: bool = False) -> str:
    """``text`` with ``old`` replaced by ``new`` exactly once (an error if it is missing)."""
    if regex:
        out, count = re.subn(old, new, text, count=1, flags=re.DOTALL)
    else:
        count, out = text.count(old), text.replace(old, new, 1)
    if count < 1:
        raise AssertionError(f"variant edit found nothing to replace: {old[:60]!r}")
    return out


def _with(**changed: ScriptSource) -> dict[str, ScriptSource]:
    return {**SOURCES, **changed}


# ---- the plumbing every variant shares -----------------------------------------------------


class _Observed:
    """The storage's scripts, every call passing through its storage's :meth:`call`."""

    def __init__(self, scripts: Scripts, storage: VariantStorage) -> None:
        self._scripts = scripts
        self._storage = storage

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self._storage.call(self._scripts, name, keys, args)


class VariantStorage(RedisStorage):
    """``RedisStorage`` with a variant's scripts, its script calls observed (victims).

    As it is here, with :data:`rdq_redis.scripts.SOURCES` and no observation, it is the
    control: the real storage through the variants' plumbing."""

    variant: ClassVar[str] = "control"
    sources: ClassVar[Mapping[str, ScriptSource]] = SOURCES

    def __init__(self, dsn: str, namespace: str, **kwargs: Any) -> None:
        super().__init__(dsn, namespace, scripts=self.sources, **kwargs)

    def _scripts(self) -> tuple[Any, Scripts]:
        client, scripts = super()._scripts()
        return client, _Observed(scripts, self)  # type: ignore[return-value]

    def call(self, scripts: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run one script; a variant adds to its arguments or reads its reply here."""
        reply = scripts.run(name, keys, args)
        self.observe(name, args, reply)
        return reply

    def observe(self, name: str, args: list[Any], reply: Any) -> None:
        """Record the victims a script's reply shows (the control records none)."""

    def victim(self, task_id: str | bytes) -> None:
        path = os.environ.get(VICTIMS_ENV)
        if not path:
            return
        tid = task_id.decode() if isinstance(task_id, bytes) else task_id
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"{self.variant}\t{tid}\n")


class VariantBackend(RedisBackend):
    """The ``redis`` backend (same rungs, same options) opening a variant's storage."""

    def __init__(self, storage: type[VariantStorage]) -> None:
        self.storage = storage

    def open(self, dsn: str, namespace: str) -> RedisStorage:
        return self.storage(dsn, namespace)


# ---- double-claim: a claim split into two round trips ----------------------------------------

#: Round trip 1: the due prefix of ``ready`` and ``lease``, merged in (due, seq) order —
#: the real claim's selection, but only read ('r' or 'l' before each member).
_PICK = _edit(
    _edit(
        SOURCES["claim"].body,
        r"  local id = string.sub\(m, qn \+ 33\)\n.*\nreturn out\n",
        "  out[#out + 1] = (from_ready and 'r' or 'l') .. m\nend\nreturn out\n",
        regex=True,
    ),
    "local q, limit, lease_us, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]",
    "local q, limit = ARGV[1], tonumber(ARGV[2])",
)
_PICK = _edit(
    _PICK,
    r"-- KEYS: .*?per task\.\n",
    "-- KEYS: task, pay, hdr, hist, ready, lease (only ready and lease are read). ARGV:\n"
    "-- queue, limit. The due members, 'r' or 'l' (ready or lease) before each.\n",
    regex=True,
)

#: Round trip 2: stamp what round trip 1 saw — without asking whether it is still there
#: (ZREM's reply is only reported, for the victims list).
_TAKE = r"""
-- KEYS: task, pay, hdr, hist, ready, lease. ARGV: lease_us, token prefix, members...
local lease_us, prefix = tonumber(ARGV[1]), ARGV[2]
local now = now_us()
local out = {}
for k = 3, #ARGV do
  local from_ready = string.sub(ARGV[k], 1, 1) == 'r'
  local m = string.sub(ARGV[k], 2)
  local qn = string.find(m, SEP, 1, true) - 1
  local id = string.sub(m, qn + 33)
  local removed = redis.call('ZREM', from_ready and KEYS[5] or KEYS[6], m)
  local meta = redis.call('HGET', KEYS[1], id)
  if meta then
    local f = split(meta)
    local hist = redis.call('HGET', KEYS[4], id) or ''
    local reclaimed = 0
    if not from_ready then
      hist = hist .. attempt(next_attempt_no(hist), f[F_CLAIMED], now, 'L', '1',
        '{lease_type}', '{lease_message}', '')
      redis.call('HSET', KEYS[4], id, hist)
      f[F_COUNT] = int(tonumber(f[F_COUNT]) + 1)
      reclaimed = 1
    end
    f[F_STATUS], f[F_NEXT] = 'I', ''
    f[F_LEASE] = int(now + lease_us)
    f[F_TOKEN] = prefix .. string.format('%03x', #out)
    f[F_CLAIMED] = int(now)
    local joined = join(f)
    redis.call('HSET', KEYS[1], id, joined)
    redis.call('ZADD', KEYS[6], 0, due_member(f, id, f[F_LEASE]))
    out[#out + 1] = {id, joined, redis.call('HGET', KEYS[2], id) or '',
      redis.call('HGET', KEYS[3], id) or '', hist, reclaimed, removed}
  end
end
return out
"""
_LEASE_TEXT = re.search(r"'L', '1',\s*'([^']*)', '([^']*)'", SOURCES["claim"].body)
assert _LEASE_TEXT is not None
_TAKE = _TAKE.replace("{lease_type}", _LEASE_TEXT[1]).replace("{lease_message}", _LEASE_TEXT[2])


class CheckThenActClaim(VariantStorage):
    """Bug class ``double-claim``: the claim is two scripts, two round trips — *pick* reads the due
    range, *take* stamps the picked tasks IN_FLIGHT under fresh tokens. Each script is atomic; the
    claim is not: two workers that pick the same task both take it (the second overwrites the
    first's token), so two workers hold one task. Victims: tasks taken although round trip 1's
    member was gone by round trip 2 (another worker had taken them)."""

    variant = "check_then_act_claim"
    sources = _with(
        claim_pick=ScriptSource("claim_pick", _PICK, readonly=True),
        claim_take=ScriptSource("claim_take", _TAKE),
    )

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        b = self.layout.of_queue(queue)
        prefix = b.bucket + secrets.token_hex(13)
        lease_us = micros_from_delta(lease)

        def run(client: Any, scripts: Scripts) -> list[Claim]:
            keys_ = [b.task, b.pay, b.hdr, b.hist, b.ready, b.lease]
            picked = scripts.run("claim_pick", keys_, [queue, limit])
            if not picked:
                return []
            rows = scripts.run("claim_take", keys_, [lease_us, prefix, *picked])
            return [codec.decode_claim(row[:6]) for row in rows]

        return self._run("claim_due", run)

    def observe(self, name: str, args: list[Any], reply: Any) -> None:
        if name == "claim_take":
            for row in reply:
                if int(row[6]) == 0:
                    self.victim(row[0])


# ---- unfenced-outcome: a reclaim that saves the row it read, unguarded -------------------------

#: Round trip 1 of the reclaim: :data:`_PICK`, each due member with the task's meta record
#: as read now (``''`` if there is none): ``{'r' or 'l' .. member, meta}`` per task.
_PICK_READ = _edit(
    _PICK,
    "  out[#out + 1] = (from_ready and 'r' or 'l') .. m\n",
    "  out[#out + 1] = {(from_ready and 'r' or 'l') .. m,\n"
    "    redis.call('HGET', KEYS[1], string.sub(m, qn + 33)) or ''}\n",
)
_PICK_READ = _edit(
    _PICK_READ,
    "-- queue, limit. The due members, 'r' or 'l' (ready or lease) before each.\n",
    "-- queue, limit. {'r' or 'l' (ready or lease) .. member, the task's meta} per due task.\n",
)

#: Round trip 2: the claim's writes, made on the meta record round trip 1 read — no
#: re-check of status or token (a task gone since is skipped: ``UPDATE ... WHERE id``
#: matches no row). The history is the one stored now, so a LEASE_EXPIRED attempt lands
#: after whatever was appended in between. The last field of each row says whether the
#: stored meta had changed since it was read (for the victims list).
_SAVE = r"""
-- KEYS: task, pay, hdr, hist, ready, lease. ARGV: lease_us, token prefix, then a member
-- ('r' or 'l' before it) and the meta read with it, per task.
local lease_us, prefix = tonumber(ARGV[1]), ARGV[2]
local now = now_us()
local out = {}
for k = 3, #ARGV, 2 do
  local from_ready = string.sub(ARGV[k], 1, 1) == 'r'
  local m = string.sub(ARGV[k], 2)
  local qn = string.find(m, SEP, 1, true) - 1
  local id = string.sub(m, qn + 33)
  local read = ARGV[k + 1]
  local meta = redis.call('HGET', KEYS[1], id)
  if meta and read ~= '' then
    local changed = (meta ~= read) and 1 or 0
    redis.call('ZREM', from_ready and KEYS[5] or KEYS[6], m)
    local f = split(read)
    local hist = redis.call('HGET', KEYS[4], id) or ''
    local reclaimed = 0
    if not from_ready then
      hist = hist .. attempt(next_attempt_no(hist), f[F_CLAIMED], now, 'L', '1',
        '{lease_type}', '{lease_message}', '')
      redis.call('HSET', KEYS[4], id, hist)
      f[F_COUNT] = int(tonumber(f[F_COUNT]) + 1)
      reclaimed = 1
    end
    f[F_STATUS], f[F_NEXT] = 'I', ''
    f[F_LEASE] = int(now + lease_us)
    f[F_TOKEN] = prefix .. string.format('%03x', #out)
    f[F_CLAIMED] = int(now)
    local joined = join(f)
    redis.call('HSET', KEYS[1], id, joined)
    redis.call('ZADD', KEYS[6], 0, due_member(f, id, f[F_LEASE]))
    out[#out + 1] = {id, joined, redis.call('HGET', KEYS[2], id) or '',
      redis.call('HGET', KEYS[3], id) or '', hist, reclaimed, changed}
  end
end
return out
"""
_SAVE = _SAVE.replace("{lease_type}", _LEASE_TEXT[1]).replace("{lease_message}", _LEASE_TEXT[2])

#: Compare-and-delete of the claim lock (only its holder frees it).
_UNLOCK = r"""
-- KEYS: the claim lock. ARGV: the holder's value. 1 if it was freed, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: How long a claim lock is held at most (a claimer that died frees it after this).
CLAIM_LOCK_PX = 10_000
#: How long a claim waits for the lock before giving up.
CLAIM_LOCK_WAIT_S = 30.0


class ReclaimOverwritesLateOutcome(VariantStorage):
    """Bug class ``unfenced-outcome`` — a reclaim that reads without a guard and saves unguarded: a
    late outcome acknowledged in between is overwritten.

    Claims are serialised by a lock of their own, a key per bucket (``...:claims``) taken
    client-side with ``SET NX PX`` (spinning while it is held) and freed by a
    compare-and-delete; no outcome takes it, so no two claims ever meet and every race of
    claims passes. Under it the claim is two scripts, two round trips: *pick* reads the
    due members of ``ready`` and ``lease`` (expired leases included) with each task's meta
    record, *save* stamps the records it was handed IN_FLIGHT under fresh tokens — the
    records as read, with no re-check of status or token — and, for an expired lease,
    appends a LEASE_EXPIRED attempt to the history as it is now. A late ``complete``,
    ``reschedule``, ``dead_letter`` or heartbeat of the expired holder that lands between
    the two round trips is acknowledged (its fenced script still sees the old claim), then
    the save makes the task IN_FLIGHT again with a LEASE_EXPIRED attempt after the
    accepted one (the index entries the outcome wrote, in ``done``, ``dlq`` or ``ready``,
    are left behind). ``gap`` (seconds, default 0) widens the window between the round
    trips; none is needed.

    Victims: tasks whose stored meta record had changed between the pick and the save.
    Incident: a PostgreSQL storage written from outside the project (claims by advisory
    lock, then a re-read without ``FOR UPDATE``) passed the whole kit while a 400-task
    script overwrote acknowledged results in 2 runs of 3.
    """

    variant = "reclaim_overwrites_late_outcome"
    sources = _with(
        claim_pick_read=ScriptSource("claim_pick_read", _PICK_READ, readonly=True),
        claim_save=ScriptSource("claim_save", _SAVE),
        claim_unlock=ScriptSource("claim_unlock", _UNLOCK),
    )
    gap: ClassVar[float] = 0.0

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        b = self.layout.of_queue(queue)
        prefix = b.bucket + secrets.token_hex(13)
        lease_us = micros_from_delta(lease)
        lock, holder = b.key("claims"), secrets.token_hex(8)

        def run(client: Any, scripts: Scripts) -> list[Claim]:
            keys_ = [b.task, b.pay, b.hdr, b.hist, b.ready, b.lease]
            give_up = time.monotonic() + CLAIM_LOCK_WAIT_S
            while not client.set(lock, holder, nx=True, px=CLAIM_LOCK_PX):
                if time.monotonic() > give_up:
                    raise BackendUnavailable(f"claim_due: the claim lock {lock!r} stayed held")
                time.sleep(0.001)
            try:
                picked = scripts.run("claim_pick_read", keys_, [queue, limit])
                if not picked:
                    return []
                time.sleep(self.gap)
                read = [part for pair in picked for part in pair]
                rows = scripts.run("claim_save", keys_, [lease_us, prefix, *read])
            finally:
                scripts.run("claim_unlock", [lock], [holder])
            return [codec.decode_claim(row[:6]) for row in rows]

        return self._run("claim_due", run)

    def observe(self, name: str, args: list[Any], reply: Any) -> None:
        if name == "claim_save":
            for row in reply:
                if int(row[6]) == 1:
                    self.victim(row[0])


# ---- undeclared-keys: a script that touches a key it did not declare -------------------------

#: Enqueue in one script, id index included: atomic on one server, but the index shard's
#: key comes in ARGV, not KEYS — on a cluster it is another slot, and Redis refuses it.
_ENQUEUE_ONE = r"""
-- KEYS: task, pay, hdr, ready, seq. ARGV: the id-index shard key (NOT in KEYS), id,
-- queue, handler, payload, headers, delay_us, nonce. {1} stored; {0} exists in this
-- queue; {-2, queue} the id is another queue's.
local ids, id, q = ARGV[1], ARGV[2], ARGV[3]
local entry = redis.call('HGET', ids, id)
if entry then
  local owner = split(entry)[1]
  if owner ~= q then return {-2, owner} end
  return {0}
end
local now = now_us()
local seq = redis.call('INCR', KEYS[5])
local at = now + tonumber(ARGV[7])
local f = {q, ARGV[4], 'P', '0', '0', int(at), '', int(now), '', '', int(seq), ARGV[8],
  '', '', ''}
redis.call('HSET', ids, id, q .. SEP .. ARGV[8])
redis.call('HSET', KEYS[1], id, join(f))
redis.call('HSET', KEYS[2], id, ARGV[5])
redis.call('HSET', KEYS[3], id, ARGV[6])
redis.call('ZADD', KEYS[4], 0, due_member(f, id, at))
return {1}
"""


class UndeclaredKeyEnqueue(VariantStorage):
    """Bug class ``undeclared-keys``: enqueue as one script that also writes the id index — whose
    key it is handed in ``ARGV`` instead of ``KEYS``. On a single server it is atomic and correct;
    on a Redis Cluster the index shard is another slot and every enqueue is refused ("Script
    attempted to access keys that do not hash to the same slot"). Victims: every task enqueued
    through it (the undeclared key is touched on every call)."""

    variant = "undeclared_key_enqueue"
    sources = _with(enqueue_one=ScriptSource("enqueue_one", _ENQUEUE_ONE))

    def _enqueue(self, task: NewTask) -> bool:
        b = self.layout.of_queue(task.queue)
        args = [
            self.layout.shard(task.id).ids, task.id, task.queue, task.handler, task.payload,
            codec.encode_headers(task.headers), micros_from_delta(task.delay),
            secrets.token_hex(16),
        ]  # fmt: skip

        def run(client: Any, scripts: Scripts) -> bool:
            self.victim(task.id)
            reply = scripts.run("enqueue_one", [b.task, b.pay, b.hdr, b.ready, b.seq], args)
            if int(reply[0]) == -2:
                raise IdConflict(
                    f"task id {task.id!r} is already used in queue {reply[1].decode()!r}; "
                    "ids are unique across queues"
                )
            return int(reply[0]) == 1

        return self._run("enqueue", run, task.id)


# ---- unfenced-outcome: outcomes fenced by task id and status, not by token --------------------

_FENCED = "  if f[F_TOKEN] ~= token then return nil, 'status IN_FLIGHT under another claim' end\n"
_PRELUDE_BY_ID = _edit(
    SOURCES["complete"].prelude,
    _FENCED,
    "  if f[F_TOKEN] ~= token then foreign = 'foreign-token' end\n",
)
_PRELUDE_BY_ID = "local foreign = 'own-token'\n" + _PRELUDE_BY_ID


def _by_id(name: str) -> ScriptSource:
    src = SOURCES[name]
    return replace(
        src, prelude=_PRELUDE_BY_ID, body=_edit(src.body, "return {1}\n", "return {1, foreign}\n")
    )


class OutcomeIgnoresToken(VariantStorage):
    """Bug class ``unfenced-outcome`` — complete, reschedule and dead_letter check that the task
    exists and is IN_FLIGHT, not that the token is its current claim: a worker whose task was
    reclaimed still overwrites the new holder's outcome (extend_lease stays fenced). Victims: tasks
    whose outcome was accepted under a token that was not the current one."""

    variant = "outcome_ignores_token"
    sources = _with(**{n: _by_id(n) for n in ("complete", "reschedule", "dead_letter")})

    def observe(self, name: str, args: list[Any], reply: Any) -> None:
        if name in ("complete", "reschedule", "dead_letter") and reply[1:] == [b"foreign-token"]:
            self.victim(args[0])


# ---- numbering-from-counter: a reclaim that re-scores without recording LEASE_EXPIRED ---------

_CLAIM_NO_EXPIRY = _edit(
    SOURCES["claim"].body,
    r"    if not from_ready then\n.*?\n    end\n",
    "    if not from_ready then reclaimed = 1 end\n",
    regex=True,
)


class ReclaimWithoutLeaseExpiredAttempt(VariantStorage):
    """Bug class ``numbering-from-counter`` (invariant H): an expired lease is taken over —
    re-scored in ``lease``, a fresh token — but no LEASE_EXPIRED attempt is appended and
    ``attempt_count`` stays: the lost execution vanishes from the history. Victims: every task
    reclaimed so."""

    variant = "reclaim_without_lease_expired_attempt"
    sources = _with(claim=replace(SOURCES["claim"], body=_CLAIM_NO_EXPIRY))

    def observe(self, name: str, args: list[Any], reply: Any) -> None:
        if name == "claim":
            for row in reply:
                if int(row[5]) == 1:
                    self.victim(row[0])


# ---- worker-clock: "now" sent by the client ---------------------------------------------------

_PRELUDE_CLIENT_NOW = _edit(
    SOURCES["claim"].prelude,
    "local function now_us()\n  local t = redis.call('TIME')\n"
    "  return tonumber(t[1]) * 1000000 + tonumber(t[2])\nend\n",
    "local function now_us() return CLIENT_NOW end\n",
)
_PRELUDE_CLIENT_NOW = "local CLIENT_NOW = tonumber(table.remove(ARGV))\n" + _PRELUDE_CLIENT_NOW


class ClientClock(VariantStorage):
    """Bug class ``worker-clock`` — every script takes "now" from its last ``ARGV``, the client's
    clock, instead of ``TIME``. On one host the two clocks agree, so nothing the kit does today
    tells them apart; only a skewed worker clock (the clock-skew fault) would. Victims: tasks
    claimed on the client's clock."""

    variant = "client_clock"
    sources = _with(**{n: replace(s, prelude=_PRELUDE_CLIENT_NOW) for n, s in SOURCES.items()})

    def call(self, scripts: Scripts, name: str, keys: list[str], args: list[Any]) -> Any:
        return super().call(scripts, name, keys, [*args, time.time_ns() // 1000])

    def observe(self, name: str, args: list[Any], reply: Any) -> None:
        if name == "claim":
            for row in reply:
                self.victim(row[0])


# ---- only a fault exposes them: an unanswered call taken as applied ----------------------------


class AcksTimedOutReports(RedisStorage):
    """A ``complete`` (in ``MULTI``/``EXEC``) unanswered within ``ACK_TIMEOUT`` (a frozen
    server) is taken as applied: the connection dropped, no error raised
    (:mod:`tests.broken._unanswered`)."""

    def _finish(self, action: str, task_id: str, keys_: list[str], args: list[Any]) -> None:
        if action != "complete":
            return super()._finish(action, task_id, keys_, args)
        client, scripts = self._scripts()
        kw = client.connection_pool.connection_kwargs
        conn = redis.Connection(
            host=kw.get("host", "127.0.0.1"),
            port=kw.get("port", 6379),
            db=kw.get("db", 0),
            socket_timeout=ACK_TIMEOUT,
        )
        try:
            conn.send_command("MULTI")
            conn.read_response()
            conn.send_command("EVALSHA", scripts.sha("complete"), len(keys_), *keys_, *args)
            conn.read_response()
            conn.send_command("EXEC")
            (reply,) = conn.read_response()
        except redis.TimeoutError:
            victim(FREEZE_VICTIMS_ENV, task_id)
            return  # the bug: no answer, so the connection is dropped and "it went through"
        finally:
            conn.disconnect()
        if isinstance(reply, Exception):  # e.g. NOSCRIPT: the plain path loads the script
            return super()._finish(action, task_id, keys_, args)
        if int(reply[0]) != 1:
            raise _stale(task_id, args[1], reply[1])


class HbTimeoutTakenAsExtended(TimeoutTakenAsExtended, RedisStorage):
    """A heartbeat unanswered within ``HB_TIMEOUT`` (a partition) is taken as applied
    while the lease had more than half its length left (:mod:`tests.broken._unanswered`)."""


class AcksTimedOutReportsBackend(RedisBackend):
    def open(self, dsn: str, namespace: str) -> RedisStorage:
        return AcksTimedOutReports(dsn, namespace)


class HbTimeoutTakenAsExtendedBackend(RedisBackend):
    def open(self, dsn: str, namespace: str) -> RedisStorage:
        return HbTimeoutTakenAsExtended(dsn, namespace)


# ---- the backend objects ----------------------------------------------------------------------

control = VariantBackend(VariantStorage)
check_then_act_claim = VariantBackend(CheckThenActClaim)
reclaim_overwrites_late_outcome = VariantBackend(ReclaimOverwritesLateOutcome)
undeclared_key_enqueue = VariantBackend(UndeclaredKeyEnqueue)
outcome_ignores_token = VariantBackend(OutcomeIgnoresToken)
reclaim_without_lease_expired_attempt = VariantBackend(ReclaimWithoutLeaseExpiredAttempt)
client_clock = VariantBackend(ClientClock)
acks_timed_out_reports = AcksTimedOutReportsBackend()
hb_timeout_taken_as_extended = HbTimeoutTakenAsExtendedBackend()
