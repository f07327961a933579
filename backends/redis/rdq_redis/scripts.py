"""The server-side Lua scripts: one per SPI state change (storage half).

**Lua ``EVALSHA``, not Redis Functions.** A script travels with the call: :class:`Scripts`
sends ``EVALSHA`` and, on ``NOSCRIPT`` (a restarted server without
persistence, ``SCRIPT FLUSH``, a failover to a node that never saw the script, a new
cluster master), loads the source and runs it again — ``NOSCRIPT`` means the script did
not run, so this retry is safe. Functions would live in the server's data set: they
must be ``FUNCTION LOAD``-ed on every master of a cluster and again after a restart
without persistence (the server this kit often runs on keeps nothing on disk); two
versions of rdq sharing a server would fight over one library name, while scripts are
named by the SHA-1 of their source, so versions coexist.

**Shebang.** Every script starts ``#!lua`` (``#!lua flags=no-writes`` for the reads), so
Redis 7 treats it as a *new-style* script: on a cluster it refuses, with an error, any
key of another slot (old-style scripts are allowed cross-slot access), and the reads may
not write.

**Declared keys.** A script touches exactly the keys it is given in ``KEYS`` (all in one
bucket or one index shard, so one hash tag; see :mod:`rdq_redis.keys`); it never builds a
key name. ``check_keys=True`` (a test aid) prepends a guard that makes every
``redis.call`` whose first argument is not in ``KEYS`` raise an error.

**Time.** Every script that needs the time calls ``redis.call('TIME')`` (allowed with
effects replication, the only mode of Redis 7); no script takes a time from ``ARGV``
(durations are relative: lease, delay, age).

**Errors.** Scripts never fail after their first write on valid input (Redis does not
roll a script back): every check happens before the first write. Expected refusals
(stale claim, conflicts) are ordinary replies, never Lua errors.

Encodings (see :mod:`rdq_redis.codec` for the Python side):

- *task meta*: 15 fields joined by NUL — queue, handler, status (``P I S D``),
  attempt_count, redrive_count, next_attempt_at, lease_expires_at, created_at, token,
  claimed_at, seq, nonce, dead_at, finished_at, last error (``''`` or ``'+' .. type``,
  set while DEAD); times are integer microseconds of the server's clock, ``''`` for none;
- *history*: records appended in order, each ``%08x`` (its length) then 8 NUL-joined
  fields: attempt_no, started_at, finished_at, outcome (``S R P L``), error flag (``0``
  none, ``1`` type and message, ``2`` with detail), type, message, detail (error texts
  never contain NUL: validation refuses it);
- *sorted-set members* (all scores 0, so ordered by bytes): ``ready``/``lease``
  ``queue NUL due(17 digits) NUL seq(12 hex) NUL id``; ``done`` ``queue NUL
  finished(17) NUL id``; ``dlq`` ``a NUL queue NUL dead(17) NUL id``, ``h NUL queue
  NUL handler NUL dead NUL id`` and, when the last attempt had an error, ``e NUL queue NUL
  type NUL dead NUL id`` and ``b NUL queue NUL handler NUL type NUL dead NUL id``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError

from rdq_core.errors import BackendUnavailable
from rdq_core.model import LEASE_EXPIRED_ERROR

#: Revoked enqueue reservations are remembered this long (µs): 7 days.
REVOCATION_KEEP_US = 7 * 86_400 * 1_000_000
LEASE_EXPIRED_MESSAGE = "lease expired before an outcome"

_CHECK_KEYS = r"""
local _redis = redis
local _declared = {}
for _, k in ipairs(KEYS) do _declared[k] = true end
local redis = setmetatable({}, {__index = _redis})
redis.call = function(cmd, ...)
  local c = string.upper(cmd)
  if c ~= 'TIME' then
    local k = select(1, ...)
    if not _declared[k] then
      error('rdq check_keys: ' .. c .. ' on undeclared key ' .. tostring(k))
    end
  end
  return _redis.call(cmd, ...)
end
"""

_PRELUDE = r"""
local SEP = '\0'
local F_QUEUE, F_HANDLER, F_STATUS, F_COUNT, F_REDRIVES = 1, 2, 3, 4, 5
local F_NEXT, F_LEASE, F_CREATED, F_TOKEN, F_CLAIMED = 6, 7, 8, 9, 10
local F_SEQ, F_NONCE, F_DEAD, F_FINISHED, F_LASTERR = 11, 12, 13, 14, 15
local NFIELDS = 15
local STATUS = {P = 'PENDING', I = 'IN_FLIGHT', S = 'SUCCEEDED', D = 'DEAD'}

local function split(s)
  local out, i = {}, 1
  while true do
    local j = string.find(s, SEP, i, true)
    if not j then
      out[#out + 1] = string.sub(s, i)
      return out
    end
    out[#out + 1] = string.sub(s, i, j - 1)
    i = j + 1
  end
end

local function join(f) return table.concat(f, SEP, 1, NFIELDS) end
local function int(n) return string.format('%d', n) end
-- fixed width, so byte order is numeric order
local function pad(n) return string.format('%017d', n) end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function due_member(f, id, at)
  return f[F_QUEUE] .. SEP .. pad(tonumber(at)) .. SEP
    .. string.format('%012x', tonumber(f[F_SEQ])) .. SEP .. id
end

local function done_member(f, id)
  return f[F_QUEUE] .. SEP .. pad(tonumber(f[F_FINISHED])) .. SEP .. id
end

local function dlq_members(f, id)
  local q, h = f[F_QUEUE], f[F_HANDLER]
  local d = pad(tonumber(f[F_DEAD])) .. SEP .. id
  local m = {'a' .. SEP .. q .. SEP .. d, 'h' .. SEP .. q .. SEP .. h .. SEP .. d}
  if f[F_LASTERR] ~= '' then
    local e = string.sub(f[F_LASTERR], 2)
    m[3] = 'e' .. SEP .. q .. SEP .. e .. SEP .. d
    m[4] = 'b' .. SEP .. q .. SEP .. h .. SEP .. e .. SEP .. d
  end
  return m
end

-- Invariant H: max(attempt_no) + 1 over the persisted records, never attempt_count.
local function next_attempt_no(hist)
  local i, n, top = 1, #hist, 0
  while i <= n do
    local len = tonumber(string.sub(hist, i, i + 7), 16)
    local no = tonumber(string.match(hist, '^(%d+)', i + 8))
    if no > top then top = no end
    i = i + 8 + len
  end
  return top + 1
end

local function attempt(no, started, finished, outcome, flag, etype, emsg, edetail)
  local body = table.concat(
    {int(no), int(started), int(finished), outcome, flag, etype, emsg, edetail}, SEP)
  return string.format('%08x', #body) .. body
end

-- The task if `token` is its current claim, else nil and why.
local function fenced(key, id, token)
  local m = redis.call('HGET', key, id)
  if not m then return nil, 'no such task in the bucket the token names' end
  local f = split(m)
  if f[F_STATUS] ~= 'I' then return nil, 'status ' .. STATUS[f[F_STATUS]] end
  if f[F_TOKEN] ~= token then return nil, 'status IN_FLIGHT under another claim' end
  return f
end

-- Append the outcome attempt of the current claim and clear the claim.
-- KEYS[1] task, KEYS[2] hist, KEYS[3] lease.
local function finish(f, id, now, outcome, flag, etype, emsg, edetail)
  local hist = redis.call('HGET', KEYS[2], id) or ''
  redis.call('ZREM', KEYS[3], due_member(f, id, f[F_LEASE]))
  redis.call('HSET', KEYS[2], id, hist .. attempt(
    next_attempt_no(hist), f[F_CLAIMED], now, outcome, flag, etype, emsg, edetail))
  f[F_COUNT] = int(tonumber(f[F_COUNT]) + 1)
  f[F_NEXT], f[F_LEASE], f[F_TOKEN], f[F_CLAIMED] = '', '', '', ''
end
"""

# ---- the id index (KEYS[1] = the shard's ``ids`` hash) -----------------------------------

RESERVE = r"""
-- Step 1 of enqueue. ARGV: id, queue, fresh nonce.
-- {1, nonce}: entry created; {0, nonce}: entry of this queue existed;
-- {2, queue, nonce}: entry of another queue.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. SEP .. ARGV[3])
  return {1, ARGV[3]}
end
local f = split(v)
if f[1] == ARGV[2] then return {0, f[2]} end
return {2, f[1], f[2]}
"""

RELEASE = r"""
-- Compare-and-delete. ARGV: id, 'queue NUL nonce', id, value, ...
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
"""

# ---- producer ---------------------------------------------------------------------------

ENQUEUE = r"""
-- Step 2 of enqueue. KEYS: task, pay, hdr, ready, seq, rv.
-- ARGV: id, queue, handler, payload, headers, delay_us, nonce, fresh ('1' if step 1
-- created the index entry). {1} stored; {0} exists in this queue; {-1} the nonce was
-- revoked; {-2, queue} the id exists in another queue of this bucket; {-3} the entry
-- existed but the task does not (orphan or in-flight enqueue: the caller repairs).
local id, q = ARGV[1], ARGV[2]
local m = redis.call('HGET', KEYS[1], id)
if m then
  local f = split(m)
  if f[F_QUEUE] ~= q then return {-2, f[F_QUEUE]} end
  return {0}
end
if ARGV[8] ~= '1' then return {-3} end
if redis.call('ZSCORE', KEYS[6], ARGV[7]) then return {-1} end
local now = now_us()
local seq = redis.call('INCR', KEYS[5])
local at = now + tonumber(ARGV[6])
local f = {q, ARGV[3], 'P', '0', '0', int(at), '', int(now), '', '', int(seq), ARGV[7],
  '', '', ''}
redis.call('HSET', KEYS[1], id, join(f))
redis.call('HSET', KEYS[2], id, ARGV[4])
redis.call('HSET', KEYS[3], id, ARGV[5])
redis.call('ZADD', KEYS[4], 0, due_member(f, id, at))
return {1}
"""

REVOKE = r"""
-- KEYS: task, rv. ARGV: id, nonce. 1 if the task exists (nothing done); else the
-- reservation `nonce` is revoked for good (a later step 2 with it refuses) and 0.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 1 end
local now = now_us()
redis.call('ZADD', KEYS[2], int(now), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. int(now - {keep}))
return 0
""".replace("{keep}", str(REVOCATION_KEEP_US))

# ---- worker -----------------------------------------------------------------------------

CLAIM = r"""
-- KEYS: task, pay, hdr, hist, ready, lease. ARGV: queue, limit, lease_us, token prefix.
-- Takes due PENDING tasks (ready) and expired claims (lease) together, in (due, seq)
-- order; returns {id, meta, payload, headers, history, reclaimed} per task.
local q, limit, lease_us, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local now = now_us()
local lo, hi = '[' .. q .. SEP, '(' .. q .. SEP .. pad(now) .. '\1'
local ready = redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', 0, limit)
local leases = redis.call('ZRANGEBYLEX', KEYS[6], lo, hi, 'LIMIT', 0, limit)
local qn = #q
local function order(m)
  return tonumber(string.sub(m, qn + 2, qn + 18)), tonumber(string.sub(m, qn + 20, qn + 31), 16)
end
local out, i, j = {}, 1, 1
while #out < limit and (i <= #ready or j <= #leases) do
  local from_ready
  if i > #ready then
    from_ready = false
  elseif j > #leases then
    from_ready = true
  else
    local d1, s1 = order(ready[i])
    local d2, s2 = order(leases[j])
    from_ready = d1 < d2 or (d1 == d2 and s1 < s2)
  end
  local m
  if from_ready then
    m = ready[i]
    i = i + 1
  else
    m = leases[j]
    j = j + 1
  end
  local id = string.sub(m, qn + 33)
  local meta = redis.call('HGET', KEYS[1], id)
  redis.call('ZREM', from_ready and KEYS[5] or KEYS[6], m)
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
      redis.call('HGET', KEYS[3], id) or '', hist, reclaimed}
  end
end
return out
""".replace("{lease_type}", LEASE_EXPIRED_ERROR).replace("{lease_message}", LEASE_EXPIRED_MESSAGE)

EXTEND = r"""
-- KEYS: task, lease. ARGV: id, token, lease_us. {1, lease_expires_at} or {0, why}.
local id = ARGV[1]
local f, why = fenced(KEYS[1], id, ARGV[2])
if not f then return {0, why} end
local now = now_us()
redis.call('ZREM', KEYS[2], due_member(f, id, f[F_LEASE]))
f[F_LEASE] = int(now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], id, join(f))
redis.call('ZADD', KEYS[2], 0, due_member(f, id, f[F_LEASE]))
return {1, f[F_LEASE]}
"""

COMPLETE = r"""
-- KEYS: task, hist, lease, done. ARGV: id, token. {1} or {0, why}.
local id = ARGV[1]
local f, why = fenced(KEYS[1], id, ARGV[2])
if not f then return {0, why} end
local now = now_us()
finish(f, id, now, 'S', '0', '', '', '')
f[F_STATUS], f[F_FINISHED] = 'S', int(now)
redis.call('HSET', KEYS[1], id, join(f))
redis.call('ZADD', KEYS[4], 0, done_member(f, id))
return {1}
"""

RESCHEDULE = r"""
-- KEYS: task, hist, lease, ready. ARGV: id, token, delay_us, error flag, type, message,
-- detail. {1} or {0, why}.
local id = ARGV[1]
local f, why = fenced(KEYS[1], id, ARGV[2])
if not f then return {0, why} end
local now = now_us()
finish(f, id, now, 'R', ARGV[4], ARGV[5], ARGV[6], ARGV[7])
local at = now + tonumber(ARGV[3])
f[F_STATUS], f[F_NEXT] = 'P', int(at)
redis.call('HSET', KEYS[1], id, join(f))
redis.call('ZADD', KEYS[4], 0, due_member(f, id, at))
return {1}
"""

DEAD_LETTER = r"""
-- KEYS: task, hist, lease, dlq. ARGV: id, token, outcome (R or P), error flag, type,
-- message, detail. {1} or {0, why}.
local id = ARGV[1]
local f, why = fenced(KEYS[1], id, ARGV[2])
if not f then return {0, why} end
local now = now_us()
finish(f, id, now, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
f[F_STATUS], f[F_DEAD] = 'D', int(now)
if ARGV[4] == '0' then f[F_LASTERR] = '' else f[F_LASTERR] = '+' .. ARGV[5] end
redis.call('HSET', KEYS[1], id, join(f))
for _, m in ipairs(dlq_members(f, id)) do redis.call('ZADD', KEYS[4], 0, m) end
return {1}
"""

# ---- reading ----------------------------------------------------------------------------

GET = r"""
-- KEYS: task, pay, hdr, hist. ARGV: id. {meta, payload, headers, history} or {}.
local m = redis.call('HGET', KEYS[1], ARGV[1])
if not m then return {} end
return {m, redis.call('HGET', KEYS[2], ARGV[1]) or '', redis.call('HGET', KEYS[3], ARGV[1]) or '',
  redis.call('HGET', KEYS[4], ARGV[1]) or ''}
"""

STATS = r"""
-- KEYS: ready, lease, done, dlq. ARGV: queue. {pending, due, in_flight, succeeded, dead}.
local q = ARGV[1]
local lo, hi = '[' .. q .. SEP, '(' .. q .. '\1'
local now = now_us()
return {
  redis.call('ZLEXCOUNT', KEYS[1], lo, hi),
  redis.call('ZLEXCOUNT', KEYS[1], lo, '(' .. q .. SEP .. pad(now) .. '\1'),
  redis.call('ZLEXCOUNT', KEYS[2], lo, hi),
  redis.call('ZLEXCOUNT', KEYS[3], lo, hi),
  redis.call('ZLEXCOUNT', KEYS[4], '[a' .. SEP .. q .. SEP, '(a' .. SEP .. q .. '\1'),
}
"""

DLQ_LIST = r"""
-- KEYS: task, pay, hdr, hist, dlq. ARGV: index prefix (ends with NUL), position to start
-- after ('' for the start: 'dead(17) NUL id'), how many.
-- {id, meta, payload, headers, history} per task, in dead-letter order.
local P, after, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lo = '[' .. P
if after ~= '' then lo = '(' .. P .. after end
local hi = '(' .. string.sub(P, 1, -2) .. '\1'
local out = {}
for _, m in ipairs(redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', 0, n)) do
  local id = string.sub(m, #P + 19)
  local meta = redis.call('HGET', KEYS[1], id)
  if meta then
    out[#out + 1] = {id, meta, redis.call('HGET', KEYS[2], id) or '',
      redis.call('HGET', KEYS[3], id) or '', redis.call('HGET', KEYS[4], id) or ''}
  end
end
return out
"""

# ---- DLQ and housekeeping -----------------------------------------------------------------

_SELECT_DEAD = r"""
-- The DEAD tasks of queue ARGV[1] selected by ARGV[2..]: 'ids', id...; or 'range', index
-- prefix, bound ('' = now: dead at or before it), batch size. Also returns the bound and
-- how many index entries were looked at (a full batch means: call again).
-- KEYS[1] is task; `dlq` the DLQ index key.
local function select_dead(dlq, now)
  local q, picked, bound, seen = ARGV[1], {}, '', 0
  local function consider(id)
    local m = redis.call('HGET', KEYS[1], id)
    if not m then return false end
    local f = split(m)
    if f[F_QUEUE] == q and f[F_STATUS] == 'D' then picked[#picked + 1] = {id, f} end
    return true
  end
  if ARGV[2] == 'ids' then
    for i = 3, #ARGV do consider(ARGV[i]) end
  else
    local P = ARGV[3]
    bound = ARGV[4]
    if bound == '' then bound = pad(now) end
    local found = redis.call('ZRANGEBYLEX', dlq, '[' .. P, '(' .. P .. bound .. '\1',
      'LIMIT', 0, tonumber(ARGV[5]))
    seen = #found
    for _, m in ipairs(found) do
      if not consider(string.sub(m, #P + 19)) then redis.call('ZREM', dlq, m) end
    end
  end
  return picked, bound, seen
end
"""

REDRIVE = (
    _SELECT_DEAD
    + r"""
-- KEYS: task, ready, dlq. {redriven, bound, seen}.
local now = now_us()
local picked, bound, seen = select_dead(KEYS[3], now)
for _, p in ipairs(picked) do
  local id, f = p[1], p[2]
  for _, m in ipairs(dlq_members(f, id)) do redis.call('ZREM', KEYS[3], m) end
  f[F_STATUS], f[F_COUNT] = 'P', '0'
  f[F_REDRIVES] = int(tonumber(f[F_REDRIVES]) + 1)
  f[F_NEXT], f[F_DEAD], f[F_LASTERR] = int(now), '', ''
  redis.call('HSET', KEYS[1], id, join(f))
  redis.call('ZADD', KEYS[2], 0, due_member(f, id, now))
end
return {#picked, bound, seen}
"""
)

PURGE = (
    _SELECT_DEAD
    + r"""
-- KEYS: task, pay, hdr, hist, dlq. {purged, bound, seen, id, 'queue NUL nonce', ...}.
local now = now_us()
local picked, bound, seen = select_dead(KEYS[5], now)
local out = {#picked, bound, seen}
for _, p in ipairs(picked) do
  local id, f = p[1], p[2]
  for _, m in ipairs(dlq_members(f, id)) do redis.call('ZREM', KEYS[5], m) end
  for k = 1, 4 do redis.call('HDEL', KEYS[k], id) end
  out[#out + 1] = id
  out[#out + 1] = f[F_QUEUE] .. SEP .. f[F_NONCE]
end
return out
"""
)

PURGE_SUCCEEDED = r"""
-- KEYS: task, pay, hdr, hist, done. ARGV: queue, older_than_us, cutoff ('' = now minus
-- older_than), batch. {purged, cutoff, seen, id, 'queue NUL nonce', ...}.
local q = ARGV[1]
local cutoff = ARGV[3]
if cutoff == '' then cutoff = pad(now_us() - tonumber(ARGV[2])) end
local found = redis.call('ZRANGEBYLEX', KEYS[5], '[' .. q .. SEP,
  '(' .. q .. SEP .. cutoff .. '\1', 'LIMIT', 0, tonumber(ARGV[4]))
local out = {0, cutoff, #found}
for _, m in ipairs(found) do
  local id = string.sub(m, #q + 20)
  redis.call('ZREM', KEYS[5], m)
  local meta = redis.call('HGET', KEYS[1], id)
  if meta then
    local f = split(meta)
    if f[F_QUEUE] == q and f[F_STATUS] == 'S' then
      for k = 1, 4 do redis.call('HDEL', KEYS[k], id) end
      out[1] = out[1] + 1
      out[#out + 1] = id
      out[#out + 1] = f[F_QUEUE] .. SEP .. f[F_NONCE]
    end
  end
end
return out
"""


@dataclass(frozen=True)
class ScriptSource:
    name: str
    body: str
    readonly: bool = False

    prelude: str = _PRELUDE

    def source(self, *, check_keys: bool = False) -> str:
        shebang = "#!lua flags=no-writes" if self.readonly else "#!lua"
        guard = _CHECK_KEYS if check_keys else ""
        return f"{shebang}\n{guard}{self.prelude}{self.body}"


#: Every script, by name.
SOURCES: dict[str, ScriptSource] = {
    s.name: s
    for s in (
        ScriptSource("reserve", RESERVE),
        ScriptSource("release", RELEASE),
        ScriptSource("enqueue", ENQUEUE),
        ScriptSource("revoke", REVOKE),
        ScriptSource("claim", CLAIM),
        ScriptSource("extend", EXTEND),
        ScriptSource("complete", COMPLETE),
        ScriptSource("reschedule", RESCHEDULE),
        ScriptSource("dead_letter", DEAD_LETTER),
        ScriptSource("get", GET, readonly=True),
        ScriptSource("stats", STATS, readonly=True),
        ScriptSource("dlq_list", DLQ_LIST, readonly=True),
        ScriptSource("redrive", REDRIVE),
        ScriptSource("purge", PURGE),
        ScriptSource("purge_succeeded", PURGE_SUCCEEDED),
    )
}


class Scripts:
    """The scripts of one client, run by ``EVALSHA`` and loaded again on ``NOSCRIPT``.

    ``sources`` is the script set (default :data:`SOURCES`); the kit's own proof runs
    deliberately broken script variants through the real storage by passing another one.

    A call is one ``EVALSHA`` of the script's SHA-1 (computed once); on ``NOSCRIPT`` (the
    script did not run) its source is ``SCRIPT LOAD``-ed — on a cluster, on every master
    — and the call sent once more: what redis-py's ``Script`` objects do, without their
    per-call work (argument tuples, an import and a pipeline check on every call).

    ``wait=(replicas, timeout_ms)`` (the DSN's ``rdq_wait``, see
    :mod:`rdq_redis.connection`) sends every *write* script together with
    ``WAIT replicas timeout_ms`` in one pipeline (one connection, as ``WAIT`` requires)
    and raises :class:`ReplicasDidNotConfirm` when fewer replicas confirmed the write.
    """

    def __init__(
        self,
        client: Any,
        *,
        check_keys: bool = False,
        sources: Mapping[str, ScriptSource] | None = None,
        wait: tuple[int, int] | None = None,
    ) -> None:
        self.check_keys = check_keys
        self.wait = wait
        self._client = client
        chosen = SOURCES if sources is None else sources
        self._writes = frozenset(name for name, src in chosen.items() if not src.readonly)
        self._texts: dict[str, bytes] = {
            name: src.source(check_keys=check_keys).encode()
            for name, src in (SOURCES if sources is None else sources).items()
        }
        self._shas = {name: hashlib.sha1(text).hexdigest() for name, text in self._texts.items()}

    def sha(self, name: str) -> str:
        """The SHA-1 ``EVALSHA`` names script ``name`` by."""
        return self._shas[name]

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script ``name``; raw redis-py exceptions propagate (callers map them)."""
        if self.wait is not None and name in self._writes:
            return self._run_and_wait(name, keys, args, self.wait)
        try:
            return self._client.evalsha(self._shas[name], len(keys), *keys, *args)
        except NoScriptError:
            self._client.script_load(self._texts[name])
            return self._client.evalsha(self._shas[name], len(keys), *keys, *args)

    def _run_and_wait(
        self, name: str, keys: list[str], args: list[Any], wait: tuple[int, int]
    ) -> Any:
        replicas, timeout_ms = wait
        for attempt in (1, 2):
            pipe = self._client.pipeline(transaction=False)
            pipe.evalsha(self._shas[name], len(keys), *keys, *args)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            try:
                reply, confirmed = pipe.execute()
            except NoScriptError:
                if attempt == 2:
                    raise
                self._client.script_load(self._texts[name])
                continue
            finally:
                pipe.reset()
            if int(confirmed) < replicas:
                raise ReplicasDidNotConfirm(name, int(confirmed), replicas, timeout_ms)
            return reply
        raise AssertionError("unreachable")


class ReplicasDidNotConfirm(BackendUnavailable):
    """A write script ran on the primary, but ``WAIT`` saw fewer replicas confirm it in
    time: it may be lost at a failover, so its outcome is unknown (not acknowledged)."""

    def __init__(self, script: str, confirmed: int, replicas: int, timeout_ms: int) -> None:
        super().__init__(
            f"script {script!r} ran on the primary but only {confirmed} of {replicas} "
            f"replica(s) confirmed it within {timeout_ms} ms (rdq_wait): its outcome is "
            "unknown; retry with the same token, or check the replicas' link to the primary"
        )
