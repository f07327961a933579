"""The chaos checker: pure functions over a history and the backend's final state.

A chaos run leaves a **history** (the events of :mod:`rdq_compliance.chaos.events`,
every journal concatenated) and, after its drain, a **final state** (every task read
back with ``get()``, and the whole DLQ listing). :func:`check` proves or refutes the
rules of SPEC §3 on them and returns the violations, each naming the rule broken, the
task, the workers, the claim tokens and a timeline excerpt of that task.

Everything is decided from the storage's own times (integer microseconds, read from
the storage's clock and reported in claim and heartbeat events, or kept in the
attempt history), never from the wall clock of a process, and only from what the
history proves: an operation left unknown (``info``, or an invoke whose process died)
is never assumed to have failed, nor to have succeeded. A correct backend gives no
violation, whatever the faults.

Facts of the contract (SPEC §2, the SPI) the checker relies on:

- a claim stamps ``claimed_at`` and ``lease_expires_at`` on the storage's clock; a
  reclaim (``reclaimed=True``) takes an IN_FLIGHT task whose lease expired and appends
  a LEASE_EXPIRED attempt that **starts at the expired claim's** ``claimed_at`` and
  **ends at the reclaim**;
- an accepted outcome appends one attempt that starts at its claim's ``claimed_at``
  (that is how a claim's outcome is found in the history, as the worker does);
- ``extend_lease`` sets ``lease_expires_at = now + lease`` with the lease the claim
  asked for (the reference worker asks one lease for both), so a heartbeat's storage
  time is its returned expiry minus the claim's lease;
- a worker journals a storage call's ``invoke`` before making it, and learns a token
  only from a claim it journals; so an unknown claim (claim ``info``) never reports.

The rules (one public function each; :func:`check` runs them all):

==================================  =================================================
:func:`check_mutual_exclusion`      ``one-claim``, ``lease-respected`` (SPEC §3)
:func:`check_reclaim_after_expiry`  ``lease-respected``, ``reclaim-expired``
:func:`check_lease_expired_recorded` ``lease-expired-recorded``
:func:`check_history_numbering`     ``history-numbering`` (invariant H)
:func:`check_execution_count`       ``execution-count``
:func:`check_fencing`               ``fencing`` (stale heartbeats and outcomes)
:func:`check_outcomes_recorded`     ``outcome-recorded``
:func:`check_no_loss`               ``no-loss``
:func:`check_drained`               ``drain-complete``, ``drain-timeout``
:func:`check_dlq`                   ``dlq-complete``
:func:`check_terminal_final`        ``terminal-final``
:func:`check_final_status`          ``transition``
==================================  =================================================

One assumption goes beyond the contract, and only where the history cannot say more:
a LEASE_EXPIRED attempt of a claim whose reply was lost (its lease is unknown) is
judged against the lease every known claim of the run asked, if they all asked the
same one (the fleet's workers do); if leases differ, that check is skipped.

Cost: one pass to index the history (:func:`~rdq_compliance.chaos.checker.index.index_history`),
then one task at a time: a sort of its claims, its view built, every rule run on it,
the view dropped; a second pass over the events only to cut the timeline excerpts of
violated tasks. Memory is proportional to claims and tokens. The cyclic garbage
collector is paused while checking (nothing here makes cycles; rescanning a history of
a million dicts would cost more than the check).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from rdq_compliance.chaos.checker.index import (
    CLAIM,
    DEAD_LETTER,
    ENQUEUE,
    REDRIVE,
    HistoryIndex,
    JournalClaim,
    TaskRecord,
    TokenRecord,
    event_tasks,
    index_history,
)
from rdq_compliance.chaos.events import Event
from rdq_compliance.rules import RULES as _ALL_RULE_TEXTS
from rdq_compliance.rules import message
from rdq_core.errors import NotFound
from rdq_core.model import UTC, Outcome, Status, Task, micros_from_utc, utc_from_micros
from rdq_core.spi import Storage

__all__ = [
    "RULES",
    "FinalState",
    "Violation",
    "check",
    "check_dlq",
    "check_drained",
    "check_execution_count",
    "check_fencing",
    "check_final_status",
    "check_history_numbering",
    "check_lease_expired_recorded",
    "check_mutual_exclusion",
    "check_no_loss",
    "check_outcomes_recorded",
    "check_reclaim_after_expiry",
    "check_terminal_final",
    "read_final_state",
]

ONE_CLAIM = "one-claim"
LEASE_RESPECTED = "lease-respected"
RECLAIM_EXPIRED = "reclaim-expired"
LEASE_EXPIRED_RECORDED = "lease-expired-recorded"
HISTORY_NUMBERING = "history-numbering"
EXECUTION_COUNT = "execution-count"
FENCING = "fencing"
OUTCOME_RECORDED = "outcome-recorded"
NO_LOSS = "no-loss"
DRAIN_COMPLETE = "drain-complete"
DRAIN_TIMEOUT = "drain-timeout"
DLQ_COMPLETE = "dlq-complete"
TERMINAL_FINAL = "terminal-final"
TRANSITION = "transition"

#: The rules this checker decides, by id, with what each says (from ``rdq_compliance.rules``).
RULES: dict[str, str] = {
    rule: _ALL_RULE_TEXTS[rule]
    for rule in (
        ONE_CLAIM,
        LEASE_RESPECTED,
        RECLAIM_EXPIRED,
        LEASE_EXPIRED_RECORDED,
        HISTORY_NUMBERING,
        EXECUTION_COUNT,
        FENCING,
        OUTCOME_RECORDED,
        NO_LOSS,
        DRAIN_COMPLETE,
        DRAIN_TIMEOUT,
        DLQ_COMPLETE,
        TERMINAL_FINAL,
        TRANSITION,
    )
}

#: The most events an excerpt shows.
EXCERPT_EVENTS = 14

LE = Outcome.LEASE_EXPIRED

# ---- public data -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinalState:
    """The backend's state read back after the run's drain.

    - ``tasks``: every task that still exists, by id (``get()`` after the drain);
    - ``dlq``: the whole DLQ listing of the queue, every page, in order;
    - ``enqueued``: the ids the harness enqueued (also read from enqueue events);
    - ``drained``: the drain finished (no PENDING/IN_FLIGHT task left) before its deadline.

    ``tasks`` may also be given as a sequence of tasks, ``enqueued`` as any iterable.
    """

    tasks: dict[str, Task]
    dlq: list[Task]
    enqueued: frozenset[str] = frozenset()
    drained: bool = True

    def __post_init__(self) -> None:
        # Accept any collection: tasks as a mapping by id or a sequence of tasks.
        tasks = self.tasks
        if not isinstance(tasks, dict):
            tasks = (
                dict(tasks.items())
                if isinstance(tasks, Mapping)
                else {t.id: t for t in tasks}
            )
            object.__setattr__(self, "tasks", tasks)
        if not isinstance(self.dlq, list):
            object.__setattr__(self, "dlq", list(self.dlq))
        if not isinstance(self.enqueued, frozenset):
            object.__setattr__(self, "enqueued", frozenset(self.enqueued))


@dataclass(frozen=True)
class Violation:
    """One broken rule: the rule id (see :mod:`rdq_compliance.rules`), the task, the
    workers (process names) and claim tokens involved, the message (``[rule] what the
    rule says: what was seen``) and the events of that task around it."""

    rule: str
    task: str | None
    workers: tuple[str, ...]
    tokens: tuple[str, ...]
    message: str
    excerpt: tuple[dict[str, Any], ...] = ()

    def __str__(self) -> str:
        lines = [self.message]
        if self.excerpt:
            lines.append(f"  timeline of task {self.task!r} (wall time, process, type, op):")
            lines.extend("    " + format_event(ev) for ev in self.excerpt)
        return "\n".join(lines)


def read_final_state(
    storage: Storage,
    queue: str,
    ids: Iterable[str],
    *,
    drained: bool,
    page: int = 500,
) -> FinalState:
    """Read the final state of ``ids`` (``get()`` each) and the whole DLQ of ``queue``."""
    enqueued = frozenset(ids)
    tasks: dict[str, Task] = {}
    for task_id in sorted(enqueued):
        try:
            tasks[task_id] = storage.get(task_id)
        except NotFound:
            pass
    dlq: list[Task] = []
    cursor: str | None = None
    while True:
        got = storage.dlq_list(queue, None, cursor, page)
        dlq.extend(got.tasks)
        cursor = got.next_cursor
        if cursor is None:
            break
    return FinalState(tasks=tasks, dlq=dlq, enqueued=enqueued, drained=drained)


# ---- formatting --------------------------------------------------------------------------------


def storage_time(us: int) -> str:
    """A storage time (µs since the epoch) as ``HH:MM:SS.ffffff`` UTC."""
    return utc_from_micros(us).strftime("%H:%M:%S.%f")


def _wall(t: object) -> str:
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        try:
            return datetime.fromtimestamp(float(t), UTC).strftime("%H:%M:%S.%f")
        except (OverflowError, OSError, ValueError):
            pass
    return "?" * 15


def _short(token: object) -> str:
    return token[:12] if isinstance(token, str) else repr(token)


_STORAGE_FIELDS = frozenset({"claimed_at", "lease_expires_at"})
_HIDDEN = frozenset({"seq", "proc", "pid", "t", "type", "op", "task", "token", "claims"})


def format_event(ev: dict[str, Any]) -> str:
    """One timeline line: wall time, process, type, op, then the interesting fields
    (tokens shortened, storage times as ``HH:MM:SS.ffffff``)."""
    head = f"{_wall(ev.get('t'))}  {ev.get('proc', '?')!s:<8} {ev.get('type', '?')!s:<6} "
    head += f"{ev.get('op', '?')!s:<11}"
    parts: list[str] = []
    if "token" in ev:
        parts.append(f"token={_short(ev['token'])}")
    for entry in ev.get("claims") or ():
        if not isinstance(entry, dict):
            continue
        bits = [f"token={_short(entry.get('token'))}"]
        for key in ("claimed_at", "lease_expires_at"):
            value = entry.get(key)
            if isinstance(value, int):
                bits.append(f"{key}={storage_time(value)}")
        for key in ("reclaimed", "attempt_no", "attempt_count"):
            if key in entry:
                bits.append(f"{key}={entry[key]}")
        parts.append(" ".join(bits))
    for key, value in ev.items():
        if key in _HIDDEN:
            continue
        if key in _STORAGE_FIELDS and isinstance(value, int):
            parts.append(f"{key}={storage_time(value)}")
        else:
            parts.append(f"{key}={value}")
    return (head + " " + "; ".join(parts)).rstrip()


def _ms(us: int) -> str:
    return f"{us / 1000:.3f} ms"


# ---- the per-task view -------------------------------------------------------------------------

# An attempt of the final history: (attempt_no, started_at µs, finished_at µs, outcome).
_Att = tuple[int, int, int, Outcome]


def _claim_order(c: JournalClaim) -> tuple[int, int, int]:
    return (c.claimed_at, c.attempt_no if c.attempt_no is not None else 0, c.event)


_NONE: list[Any] = []  # shared empty list, never mutated
_EPOCH = utc_from_micros(0)
_ONE_US = timedelta(microseconds=1)


class _View:
    """One task's claims in storage order, each matched with its attempts.

    Per claim *k* (lists indexed like ``claims``): ``matched`` the attempts started at
    its ``claimed_at`` (numbered for it when several started then), ``accepted`` its
    outcome attempt, ``expired`` its LEASE_EXPIRED attempts, ``others`` attempts of the
    same instant numbered for another claim, ``lease_end`` its lease end as the
    history proves it, ``stale_hb`` heartbeats acknowledged after the claim ended,
    ``overlap`` whether it was still live when claim *k+1* was made.
    """

    __slots__ = (
        "accepted",
        "ambiguous",
        "attempts",
        "claims",
        "expired",
        "final",
        "has_history",
        "has_le",
        "lease_end",
        "matched",
        "orphans",
        "others",
        "overlap",
        "record",
        "shared_starts",
        "stale_hb",
        "task_id",
    )

    def __init__(self, task_id: str, record: TaskRecord, final: Task | None) -> None:
        self.task_id = task_id
        self.record = record
        self.final = final
        self.has_history = final is not None
        claims = record.claims
        self.claims: list[JournalClaim] = (
            sorted(claims, key=_claim_order) if len(claims) > 1 else claims
        )
        n = len(self.claims)
        self.attempts: list[_Att] = _NONE
        self.matched: list[list[int]] = [_NONE] * n
        self.others: list[list[int]] = [_NONE] * n
        self.accepted: list[int | None] = [None] * n
        self.expired: list[list[int]] = [_NONE] * n
        self.ambiguous: list[bool] = [False] * n
        self.lease_end: list[int] = [0] * n
        self.stale_hb: list[list[tuple[int, int, str]]] = [_NONE] * n
        self.overlap: list[bool] = [False] * n
        self.has_le = False  # the history holds a LEASE_EXPIRED attempt
        self.shared_starts = False  # two attempts of the history start at one instant
        self.orphans: list[int] = _NONE  # outcome attempts starting at no known claim


def _us(dt: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact, fast)."""
    return (dt - _EPOCH) // _ONE_US


def _build_view(ctx: _Context, task_id: str, record: TaskRecord) -> _View:
    v = _View(task_id, record, ctx.final_task(task_id))
    claims = v.claims
    if v.final is None:
        for k, c in enumerate(claims):
            v.lease_end[k] = c.lease_expires_at
        return v
    atts: list[_Att] = [
        (a.attempt_no, _us(a.started_at), _us(a.finished_at), a.outcome)
        for a in v.final.attempts
    ]
    v.attempts = atts
    by_start: dict[int, list[int]] = {}
    for idx, a in enumerate(atts):
        if a[3] is LE:
            v.has_le = True
        lst = by_start.get(a[1])
        if lst is None:
            by_start[a[1]] = [idx]
        else:
            lst.append(idx)
    v.shared_starts = len(by_start) < len(atts)
    if len(claims) == 1:
        starts_of_claims: Collection[int] = (claims[0].claimed_at,)
    else:
        starts_of_claims = {c.claimed_at for c in claims}
    for start, idxs in by_start.items():
        if start not in starts_of_claims:
            orphans = [x for x in idxs if atts[x][3] is not LE]
            if orphans:
                v.orphans = orphans if v.orphans is _NONE else v.orphans + orphans
    last = len(claims) - 1
    for k, c in enumerate(claims):
        cands = by_start.get(c.claimed_at, _NONE)
        # Several attempts, or several claims, at one instant (a clock standing still):
        # the claim's announced number tells which attempt is its own.
        shared = (k > 0 and claims[k - 1].claimed_at == c.claimed_at) or (
            k < last and claims[k + 1].claimed_at == c.claimed_at
        )
        if len(cands) > 1 or (shared and cands):
            if c.attempt_no is not None:
                v.others[k] = [x for x in cands if atts[x][0] != c.attempt_no]
                cands = [x for x in cands if atts[x][0] == c.attempt_no]
            else:
                v.ambiguous[k] = True
        v.matched[k] = cands
        for x in cands:
            if atts[x][3] is LE:
                if v.expired[k] is _NONE:
                    v.expired[k] = [x]
                else:
                    v.expired[k].append(x)
            elif v.accepted[k] is None:
                v.accepted[k] = x
    for k, c in enumerate(claims):
        nxt = claims[k + 1] if k < last else None
        acc = v.accepted[k]
        # The claim surely ended by: the next claim, its own outcome, its expiry record.
        limit: int | None = None if nxt is None else nxt.claimed_at
        if acc is not None and (limit is None or atts[acc][2] < limit):
            limit = atts[acc][2]
        expired = v.expired[k]
        if len(expired) == 1 and not v.ambiguous[k]:
            fin = atts[expired[0]][2]
            if limit is None or fin < limit:
                limit = fin
        tok = c.tok
        end = c.lease_expires_at
        if tok.claims == 1 and tok.hb_expiries is not None:
            lease = c.lease
            for expiry, pos in tok.heartbeats():
                beat_at = expiry - lease  # the storage time of that heartbeat
                if limit is not None and beat_at > limit:
                    if v.stale_hb[k] is _NONE:
                        v.stale_hb[k] = []
                    v.stale_hb[k].append((expiry, pos, _proc_of(ctx.ix.events[pos])))
                elif expiry > end:
                    end = expiry
        v.lease_end[k] = end
        if nxt is not None and nxt.claimed_at < end:
            exempt = acc is not None and atts[acc][2] <= nxt.claimed_at
            # An acknowledged outcome the history lost may have preceded the next claim.
            acknowledged = acc is None and tok.out_ok > 0
            v.overlap[k] = not exempt and not acknowledged
    return v


def _proc_of(ev: Event) -> str:
    proc = ev.get("proc")
    return proc if isinstance(proc, str) else "?"


# ---- the context and findings ------------------------------------------------------------------


@dataclass
class _Finding:
    rule: str
    task: str | None
    workers: tuple[str, ...]
    tokens: tuple[str, ...]
    detail: str
    focus: frozenset[str] = field(default_factory=frozenset)  # tokens whose events to show
    anchor: int | None = None  # the event the violation is about


class _Context:
    def __init__(self, ix: HistoryIndex, final: FinalState) -> None:
        self.ix = ix
        self.final = final
        self._dlq_by_id: dict[str, Task] | None = None
        self._uniform_lease: int | bool | None = False  # False: not computed yet

    @property
    def dlq_by_id(self) -> dict[str, Task]:
        if self._dlq_by_id is None:
            self._dlq_by_id = {t.id: t for t in self.final.dlq}
        return self._dlq_by_id

    def final_task(self, task_id: str) -> Task | None:
        task = self.final.tasks.get(task_id)
        if task is None:
            task = self.dlq_by_id.get(task_id)
        return task

    @property
    def uniform_lease(self) -> int | None:
        """The lease every known claim of the run asked (µs), or ``None`` if they differ."""
        if self._uniform_lease is False:
            leases = {c.lease for rec in self.ix.tasks.values() for c in rec.claims}
            self._uniform_lease = leases.pop() if len(leases) == 1 else None
        return self._uniform_lease

    @staticmethod
    def token(c: JournalClaim) -> TokenRecord:
        return c.tok

    @staticmethod
    def own(c: JournalClaim) -> TokenRecord | None:
        """The token's record if that token belongs to this claim alone."""
        tok = c.tok
        return tok if tok.claims == 1 else None

    def report(self, findings: list[_Finding]) -> list[Violation]:
        excerpts = _excerpts(self.ix, findings)
        out = []
        for f, excerpt in zip(findings, excerpts, strict=True):
            head = f"task {f.task!r}" if f.task is not None else "the run"
            if f.workers:
                head += f"; workers {', '.join(f.workers)}"
            if f.tokens:
                head += f"; tokens {', '.join(f.tokens)}"
            out.append(
                Violation(
                    rule=f.rule,
                    task=f.task,
                    workers=f.workers,
                    tokens=f.tokens,
                    message=message(f.rule, f"{head}: {f.detail}"),
                    excerpt=excerpt,
                )
            )
        return out


def _uniq(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _claim_desc(c: JournalClaim) -> str:
    return f"the claim of {c.proc} (token {c.token}, claimed at {storage_time(c.claimed_at)})"


def _att_desc(a: _Att) -> str:
    return (
        f"attempt {a[0]} {a[3].value} "
        f"[{storage_time(a[1])} .. {storage_time(a[2])}]"
    )


def _pair(rule: str, v: _View, c: JournalClaim, n: JournalClaim, detail: str) -> _Finding:
    return _Finding(
        rule,
        v.task_id,
        _uniq((c.proc, n.proc)),
        _uniq((c.token, n.token)),
        detail,
        frozenset((c.token, n.token)),
        n.event,
    )


def _one(rule: str, v: _View, c: JournalClaim, detail: str, anchor: int | None = None) -> _Finding:
    return _Finding(
        rule,
        v.task_id,
        (c.proc,),
        (c.token,),
        detail,
        frozenset((c.token,)),
        c.event if anchor is None else anchor,
    )


def _ops(tok: TokenRecord | None) -> str:
    if tok is None or not tok.out_ops:
        return "outcome"
    return "/".join(sorted(tok.out_ops))


# ---- the rules ---------------------------------------------------------------------------------


def _mutual_exclusion(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    if not v.has_history:
        return
    claims, atts = v.claims, v.attempts
    for k in range(len(claims) - 1):
        if not v.overlap[k]:
            continue
        c, n = claims[k], claims[k + 1]
        rule = LEASE_RESPECTED if n.reclaimed else ONE_CLAIM
        end = v.lease_end[k]
        what = "reclaimed" if n.reclaimed else "claimed"
        extended = " (extended by heartbeats)" if end > c.lease_expires_at else ""
        detail = (
            f"{n.proc} {what} it at {storage_time(n.claimed_at)} (token {n.token}) while "
            f"{_claim_desc(c)} was live: its lease ran until {storage_time(end)}"
            f"{extended}, {_ms(end - n.claimed_at)} later, and it had no accepted outcome"
        )
        acc = v.accepted[k]
        if acc is not None:
            detail += f"; its outcome was accepted only at {storage_time(atts[acc][2])}"
        out.append(_pair(rule, v, c, n, detail))
    # at most one accepted outcome per claim token ...
    for c in claims:
        tok = c.tok
        if tok.out_ok > 1 and tok.claims == 1:
            anchor = tok.out_ok_events[1] if tok.out_ok_events else None
            out.append(
                _one(
                    ONE_CLAIM,
                    v,
                    c,
                    f"{tok.out_ok} outcome calls ({_ops(tok)}) with this one token were "
                    "acknowledged; at most one outcome per claim is accepted",
                    anchor,
                )
            )
    # ... and at most one outcome attempt per claim in the history.
    if not v.shared_starts:
        return
    outcomes = Counter(a[1] for a in atts if a[3] is not LE)
    if outcomes and any(n > 1 for n in outcomes.values()):
        known = Counter(c.claimed_at for c in claims)
        for start, count in outcomes.items():
            if count > 1 and count > known.get(start, 0):
                at = [c for c in claims if c.claimed_at == start]
                recorded = ", ".join(_att_desc(a) for a in atts if a[1] == start)
                out.append(
                    _Finding(
                        ONE_CLAIM,
                        v.task_id,
                        _uniq(c.proc for c in at),
                        _uniq(c.token for c in at),
                        f"the history holds {count} outcomes for the claim made at "
                        f"{storage_time(start)}: {recorded}",
                        frozenset(c.token for c in at),
                        at[0].event if at else None,
                    )
                )


def _reclaim_after_expiry(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    if not v.has_history:
        return
    claims, atts = v.claims, v.attempts
    hidden: set[int] = set()  # claims already reported as unrecorded reclaims
    for k, c in enumerate(claims):
        n = claims[k + 1] if k + 1 < len(claims) else None
        acc = v.accepted[k]
        tok = ctx.own(c)
        # A claim that took the task from a claim without an outcome is a reclaim.
        if (
            n is not None
            and not v.overlap[k]
            and not n.reclaimed
            and acc is None
            and not v.ambiguous[k]
            and (tok is None or tok.out_ok == 0)
        ):
            hidden.add(k + 1)
            out.append(
                _pair(
                    RECLAIM_EXPIRED,
                    v,
                    c,
                    n,
                    f"{n.proc} claimed it at {storage_time(n.claimed_at)} (token {n.token}) "
                    f"with reclaimed=False, but {_claim_desc(c)} had no outcome: its lease "
                    f"(until {storage_time(v.lease_end[k])}) was taken over without being "
                    "recorded as a reclaim",
                )
            )
        # The storage's own record of the reclaim: the LEASE_EXPIRED attempt ends at it.
        if len(v.expired[k]) != 1 or v.ambiguous[k]:
            continue
        fin = atts[v.expired[k][0]][2]
        if n is not None and fin == n.claimed_at and v.overlap[k]:
            continue  # that reclaim is the next claim, already reported
        end = c.lease_expires_at
        if tok is not None:
            lease = c.lease
            for expiry, _pos in tok.heartbeats():
                if expiry - lease <= fin and expiry > end:
                    end = expiry
        if fin < end:
            out.append(
                _one(
                    LEASE_RESPECTED,
                    v,
                    c,
                    f"the history records {_claim_desc(c)} as "
                    f"{_att_desc(atts[v.expired[k][0]])}: reclaimed at {storage_time(fin)}, "
                    f"{_ms(end - fin)} before its lease ended at {storage_time(end)}",
                )
            )
    if not v.has_le:
        return
    # A LEASE_EXPIRED attempt ends at the reclaim that wrote it: a claim at that
    # instant that says it reclaimed nothing hides it (unless another known claim of
    # that instant is the reclaim).
    expiry_ends = {a[2] for a in atts if a[3] is LE}
    if expiry_ends:
        reclaims_at = {c.claimed_at for c in claims if c.reclaimed}
        for k, c in enumerate(claims):
            if (
                c.reclaimed
                or k in hidden
                or c.claimed_at not in expiry_ends
                or c.claimed_at in reclaims_at
            ):
                continue
            le = next(a for a in atts if a[3] is LE and a[2] == c.claimed_at)
            out.append(
                _one(
                    RECLAIM_EXPIRED,
                    v,
                    c,
                    f"{c.proc} claimed it at {storage_time(c.claimed_at)} (token {c.token}) "
                    f"with reclaimed=False, but the history records {_att_desc(le)}, "
                    "ending at that claim: it was a reclaim",
                )
            )
    # A LEASE_EXPIRED attempt of a claim the history does not know (its reply was
    # lost): when every known claim asked the same lease, that one did too, and its
    # holder never learnt its token, so never extended it.
    lease = ctx.uniform_lease
    if lease is None:
        return
    known = {c.claimed_at: c for c in claims}
    for a in atts:
        if a[3] is not LE or a[1] in known or a[2] - a[1] >= lease:
            continue
        thief = known.get(a[2])
        detail = (
            f"the history holds {_att_desc(a)} for a claim no worker learnt of (its reply "
            f"was lost): reclaimed after {_ms(a[2] - a[1])}, but every claim of the run "
            f"asked a lease of {_ms(lease)}"
        )
        if thief is not None:
            out.append(_one(LEASE_RESPECTED, v, thief, detail))
        else:
            out.append(_Finding(LEASE_RESPECTED, v.task_id, (), (), detail))


def _lease_expired_recorded(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    if not v.has_history or v.final is None:
        return
    claims, atts = v.claims, v.attempts
    status = v.final.status
    reported: set[int] = set()  # reclaims already named as ending a claim without LE
    for k, c in enumerate(claims):
        if v.ambiguous[k]:
            continue
        n = claims[k + 1] if k + 1 < len(claims) else None
        acc = v.accepted[k]
        expired = v.expired[k]
        if acc is not None and expired:
            out.append(
                _one(
                    LEASE_EXPIRED_RECORDED,
                    v,
                    c,
                    f"{_claim_desc(c)} got an outcome ({_att_desc(atts[acc])}) and yet a "
                    f"LEASE_EXPIRED attempt ({_att_desc(atts[expired[0]])})",
                )
            )
        elif acc is not None and atts[acc][2] > c.claimed_at and any(
            atts[x][3] is LE and atts[x][2] > c.claimed_at for x in v.others[k]
        ):
            # Another claim made at this same instant would have come before this one
            # (and its LEASE_EXPIRED ended here) or after this outcome (later instant).
            le = next(
                x for x in v.others[k] if atts[x][3] is LE and atts[x][2] > c.claimed_at
            )
            out.append(
                _one(
                    LEASE_EXPIRED_RECORDED,
                    v,
                    c,
                    f"{_claim_desc(c)} got an outcome ({_att_desc(atts[acc])}) and yet a "
                    f"LEASE_EXPIRED attempt started at its claimed_at ({_att_desc(atts[le])})",
                )
            )
        elif len(expired) > 1:
            recorded = ", ".join(_att_desc(atts[x]) for x in expired)
            out.append(
                _one(
                    LEASE_EXPIRED_RECORDED,
                    v,
                    c,
                    f"{_claim_desc(c)} expired {len(expired)} times: {recorded}",
                )
            )
        elif not v.matched[k]:
            tok = ctx.token(c)
            if tok is not None and tok.out_ok > 0:
                continue  # an acknowledged outcome is missing: outcome-recorded says so
            if n is not None:
                ended = f"{n.proc} claimed it next at {storage_time(n.claimed_at)}"
            elif status is not Status.IN_FLIGHT:
                ended = f"the task is {status.value} now"
            else:
                continue  # the claim may still be the current one
            detail = (
                f"{_claim_desc(c)} ended without an accepted outcome ({ended}), but the "
                "history holds no attempt started at its claimed_at: its LEASE_EXPIRED "
                "attempt is missing"
            )
            if tok is not None and tok.outcome_may_have_applied():
                detail += f" (or its {_ops(tok)} call, left unknown, took effect and was lost)"
            if n is not None:
                out.append(_pair(LEASE_EXPIRED_RECORDED, v, c, n, detail))
                reported.add(k + 1)
            else:
                out.append(_one(LEASE_EXPIRED_RECORDED, v, c, detail))
    # Every reclaim appended a LEASE_EXPIRED attempt ending at it (whichever claim it
    # took over, even one the history does not know).
    expiries: set[int] | None = None
    for k, c in enumerate(claims):
        if not c.reclaimed or k in reported:
            continue
        if expiries is None:
            expiries = {a[2] for a in atts if a[3] is LE}
        if c.claimed_at in expiries:
            continue
        detail = (
            f"{c.proc} reclaimed it at {storage_time(c.claimed_at)} (token {c.token}), "
            "but the history holds no LEASE_EXPIRED attempt ending at that reclaim"
        )
        if k > 0:
            out.append(_pair(LEASE_EXPIRED_RECORDED, v, claims[k - 1], c, detail))
        else:
            out.append(_one(LEASE_EXPIRED_RECORDED, v, c, detail))


def _numbering_of_histories(ctx: _Context) -> list[_Finding]:
    out: list[_Finding] = []
    seen: set[str] = set()
    finals: list[Task] = list(ctx.final.tasks.values())
    finals.extend(t for t in ctx.final.dlq if t.id not in ctx.final.tasks)
    for task in finals:
        if task.id in seen:
            continue
        seen.add(task.id)
        prev = None
        for a in task.attempts:
            if prev is not None and a.attempt_no <= prev.attempt_no:
                starts = (_us(a.started_at), _us(prev.started_at))
                involved = [c for c in _claims_of(ctx, task.id) if c.claimed_at in starts]
                kind = "a duplicate" if a.attempt_no == prev.attempt_no else "not increasing"
                out.append(
                    _Finding(
                        HISTORY_NUMBERING,
                        task.id,
                        _uniq(c.proc for c in involved),
                        _uniq(c.token for c in involved),
                        f"attempt_no {a.attempt_no} ({a.outcome.value}, started "
                        f"{storage_time(starts[0])}) follows attempt_no "
                        f"{prev.attempt_no} ({prev.outcome.value}) in the history: {kind} "
                        f"number (history: {[x.attempt_no for x in task.attempts]})",
                        frozenset(c.token for c in involved),
                        involved[-1].event if involved else None,
                    )
                )
                break
            prev = a
    return out


def _numbering_of_claims(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    claims, atts = v.claims, v.attempts
    last = len(claims) - 1
    for k, c in enumerate(claims):
        if c.attempt_no is None:
            continue
        n = claims[k + 1] if k < last else None
        if (
            n is not None
            and n.attempt_no is not None
            and n.attempt_no <= c.attempt_no
            and not v.overlap[k]
        ):
            out.append(
                _pair(
                    HISTORY_NUMBERING,
                    v,
                    c,
                    n,
                    f"the claim of {n.proc} at {storage_time(n.claimed_at)} announced "
                    f"attempt_no {n.attempt_no}, after {_claim_desc(c)} announced "
                    f"{c.attempt_no}: the numbering restarted (history reset or numbered "
                    "from attempt_count)",
                )
            )
        matched = v.matched[k]
        if len(matched) == 1 and atts[matched[0]][0] < c.attempt_no:
            out.append(
                _one(
                    HISTORY_NUMBERING,
                    v,
                    c,
                    f"{_claim_desc(c)} announced attempt_no {c.attempt_no} "
                    f"(max + 1 of the history it returned), but its attempt is recorded "
                    f"as {_att_desc(atts[matched[0]])}: a number the history had already used",
                )
            )


def _execution_count(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    ran: list[JournalClaim] = []
    for c in v.claims:
        tok = ctx.own(c)
        if tok is None or tok.runs == 0:
            continue
        ran.append(c)
        if tok.runs > 1:
            anchor = tok.run_events[1] if tok.run_events and len(tok.run_events) > 1 else None
            out.append(
                _one(
                    EXECUTION_COUNT,
                    v,
                    c,
                    f"the handler ran {tok.runs} times under {_claim_desc(c)}; a claim runs "
                    "it at most once",
                    anchor,
                )
            )
    final = v.final
    if final is None:
        return
    runs = v.record.runs
    open_claims = 1 if final.status is Status.IN_FLIGHT else 0
    if runs > len(final.attempts) + open_claims:
        out.append(
            _Finding(
                EXECUTION_COUNT,
                v.task_id,
                _uniq(c.proc for c in ran),
                _uniq(c.token for c in ran),
                f"the handler ran {runs} times, but the history records "
                f"{len(final.attempts)} attempts"
                + (" and one open claim" if open_claims else "")
                + f" (task {final.status.value})",
                frozenset(c.token for c in ran),
                ran[-1].event if ran else None,
            )
        )


def _fencing(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    claims, atts = v.claims, v.attempts
    by_token: dict[str, list[JournalClaim]] = {}
    for c in claims:
        tok = ctx.token(c)
        if tok is not None and tok.claims > 1:
            by_token.setdefault(c.token, []).append(c)
    for token, same in by_token.items():
        if len(same) > 1:
            out.append(
                _Finding(
                    FENCING,
                    v.task_id,
                    _uniq(c.proc for c in same),
                    (token,),
                    f"{len(same)} claims (at "
                    + ", ".join(storage_time(c.claimed_at) for c in same)
                    + ") got the same token: a reclaim must mint a fresh one, or the "
                    "expired holder's reports stay valid",
                    frozenset((token,)),
                    same[1].event,
                )
            )
    if not v.has_history:
        return
    for k, c in enumerate(claims):
        n = claims[k + 1] if k + 1 < len(claims) else None
        acc = v.accepted[k]
        for expiry, pos, proc in v.stale_hb[k]:
            beat_at = expiry - c.lease
            if n is not None and beat_at > n.claimed_at:
                why = f"after {n.proc} claimed it at {storage_time(n.claimed_at)}"
            elif acc is not None and beat_at > atts[acc][2]:
                why = f"after its own outcome was recorded at {storage_time(atts[acc][2])}"
            else:
                why = "after the storage recorded its lease as expired"
            workers = _uniq((c.proc, proc) + ((n.proc,) if n is not None else ()))
            tokens = _uniq((c.token,) + ((n.token,) if n is not None else ()))
            out.append(
                _Finding(
                    FENCING,
                    v.task_id,
                    workers,
                    tokens,
                    f"a heartbeat of {proc} for {_claim_desc(c)} was acknowledged at "
                    f"{storage_time(beat_at)} (lease extended to {storage_time(expiry)}), "
                    f"{why}: a stale token extended a lease it no longer held",
                    frozenset(tokens),
                    pos,
                )
            )
            break  # one per claim is enough
        if v.ambiguous[k]:
            continue
        if acc is not None and n is not None and not v.overlap[k]:
            fin = atts[acc][2]
            if fin > n.claimed_at:
                out.append(
                    _pair(
                        FENCING,
                        v,
                        c,
                        n,
                        f"the outcome of {_claim_desc(c)} ({_att_desc(atts[acc])}) was "
                        f"accepted at {storage_time(fin)}, after {n.proc} had claimed the "
                        f"task at {storage_time(n.claimed_at)}: a stale outcome accepted",
                    )
                )
                continue
        tok = ctx.own(c)
        if tok is None:
            continue
        if tok.out_ok > 0 and acc is None and v.expired[k]:
            le = atts[v.expired[k][0]]
            anchor = tok.out_ok_events[0] if tok.out_ok_events else None
            workers = _uniq(
                (c.proc, *(_proc_of(ctx.ix.events[i]) for i in tok.out_ok_events or ()))
            )
            out.append(
                _Finding(
                    FENCING,
                    v.task_id,
                    workers + ((n.proc,) if n is not None and n.proc not in workers else ()),
                    (c.token,) + ((n.token,) if n is not None else ()),
                    f"{_ops(tok)} with the token of {_claim_desc(c)} was acknowledged, but "
                    f"the history records that claim as {_att_desc(le)}: the outcome was "
                    f"accepted after the claim had been reclaimed at {storage_time(le[2])}",
                    frozenset((c.token,) + ((n.token,) if n is not None else ())),
                    anchor,
                )
            )
        elif acc is not None and not tok.outcome_may_have_applied():
            calls = tok.out_invoke or tok.out_fail
            said = (
                f"its {calls} {_ops(tok)} call(s) were all refused as stale"
                if calls
                else "its holder made no outcome call"
            )
            out.append(
                _one(
                    FENCING,
                    v,
                    c,
                    f"the history holds an outcome for {_claim_desc(c)} "
                    f"({_att_desc(atts[acc])}), but {said}: the outcome was written "
                    "through another (stale) token",
                )
            )
    # an outcome attempt must start at a claim a worker made
    for x in v.orphans:
        last = claims[-2:]
        out.append(
            _Finding(
                FENCING,
                v.task_id,
                _uniq(c.proc for c in last),
                _uniq(c.token for c in last),
                f"the history holds {_att_desc(atts[x])}, which starts at no claim any "
                "worker made: an outcome was accepted with no current claim "
                "(a stale outcome on an ended claim)",
                frozenset(c.token for c in last),
                claims[-1].event,
            )
        )


def _outcomes_recorded(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    if not v.has_history:
        return
    for k, c in enumerate(v.claims):
        tok = ctx.own(c)
        if tok is None or tok.out_ok == 0 or v.matched[k]:
            continue
        anchor = tok.out_ok_events[0] if tok.out_ok_events else None
        out.append(
            _one(
                OUTCOME_RECORDED,
                v,
                c,
                f"{_ops(tok)} with the token of {_claim_desc(c)} was acknowledged, but the "
                "history holds no attempt started at that claim: the acknowledged outcome "
                "is lost",
                anchor,
            )
        )


def _live(ctx: _Context) -> list[str]:
    ids = set(ctx.final.enqueued) | ctx.ix.enqueued
    return sorted(ids | set(ctx.final.tasks))


def _claims_of(ctx: _Context, task_id: str) -> list[JournalClaim]:
    rec = ctx.ix.tasks.get(task_id)
    return [] if rec is None else sorted(rec.claims, key=_claim_order)


def _task_finding(ctx: _Context, rule: str, task_id: str, detail: str) -> _Finding:
    claims = _claims_of(ctx, task_id)[-2:]
    return _Finding(
        rule,
        task_id,
        _uniq(c.proc for c in claims),
        _uniq(c.token for c in claims),
        detail,
        frozenset(),
        claims[-1].event if claims else None,
    )


def _no_loss(ctx: _Context) -> list[_Finding]:
    out: list[_Finding] = []
    ids = set(ctx.final.enqueued) | ctx.ix.enqueued
    for task_id in sorted(ids):
        if task_id in ctx.final.tasks:
            continue
        where = " (the DLQ still lists it)" if task_id in ctx.dlq_by_id else ""
        rec = ctx.ix.tasks.get(task_id)
        n = 0 if rec is None else len(rec.claims)
        out.append(
            _task_finding(
                ctx,
                NO_LOSS,
                task_id,
                f"enqueued, never purged, and get() no longer finds it{where}; it was claimed "
                f"{n} time(s)",
            )
        )
    return out


def _drained(ctx: _Context) -> list[_Finding]:
    out: list[_Finding] = []
    for task_id in _live(ctx):
        task = ctx.final.tasks.get(task_id)
        if task is None or task.status.terminal:
            continue
        if ctx.final.drained:
            detail = (
                f"still {task.status.value} after the drain finished (not drained); "
                f"{len(task.attempts)} attempt(s)"
            )
            rule = DRAIN_COMPLETE
        else:
            detail = (
                f"still live after drain timeout: {task.status.value}, "
                f"{len(task.attempts)} attempt(s)"
            )
            rule = DRAIN_TIMEOUT
        if task.status is Status.IN_FLIGHT and task.lease_expires_at is not None:
            detail += f", lease until {storage_time(micros_from_utc(task.lease_expires_at))}"
        if task.status is Status.PENDING and task.next_attempt_at is not None:
            detail += f", due at {storage_time(micros_from_utc(task.next_attempt_at))}"
        out.append(_task_finding(ctx, rule, task_id, detail))
    return out


def _dlq(ctx: _Context) -> list[_Finding]:
    out: list[_Finding] = []
    listed = Counter(t.id for t in ctx.final.dlq)
    reported: set[str] = set()
    for t in ctx.final.dlq:
        if t.id in reported:
            continue
        if listed[t.id] > 1:
            reported.add(t.id)
            out.append(
                _task_finding(ctx, DLQ_COMPLETE, t.id, f"the DLQ lists it {listed[t.id]} times")
            )
            continue
        got = ctx.final.tasks.get(t.id)
        if got is None:
            continue  # get() does not find it: no-loss (or a foreign task) says so
        if got.status is not Status.DEAD or t.status is not Status.DEAD:
            out.append(
                _task_finding(
                    ctx,
                    DLQ_COMPLETE,
                    t.id,
                    f"the DLQ lists it as {t.status.value} but get() says {got.status.value}: "
                    "the DLQ holds exactly the DEAD tasks",
                )
            )
        elif t.attempts != got.attempts:
            out.append(
                _task_finding(
                    ctx,
                    DLQ_COMPLETE,
                    t.id,
                    f"the DLQ shows {len(t.attempts)} attempt(s) "
                    f"{[a.attempt_no for a in t.attempts]} but get() {len(got.attempts)} "
                    f"{[a.attempt_no for a in got.attempts]}: the DLQ must show the whole history",
                )
            )
    for task_id, task in ctx.final.tasks.items():
        if task.status is Status.DEAD and task_id not in listed:
            last = task.attempts[-1] if task.attempts else None
            why = "" if last is None else f" (last attempt {last.outcome.value})"
            out.append(
                _task_finding(
                    ctx, DLQ_COMPLETE, task_id, f"DEAD{why} but missing from the DLQ listing"
                )
            )
    return out


def _terminal_final(ctx: _Context, v: _View, out: list[_Finding]) -> None:
    if not v.has_history:
        return
    claims, atts = v.claims, v.attempts
    dead_then_claimed = 0
    for k in range(len(claims) - 1):
        c, n = claims[k], claims[k + 1]
        acc = v.accepted[k]
        if acc is None or v.ambiguous[k] or atts[acc][2] > n.claimed_at:
            continue
        if atts[acc][3] is Outcome.SUCCESS:
            out.append(
                _pair(
                    TERMINAL_FINAL,
                    v,
                    c,
                    n,
                    f"{n.proc} claimed it at {storage_time(n.claimed_at)} after "
                    f"{_claim_desc(c)} completed it ({_att_desc(atts[acc])}): a SUCCEEDED "
                    "task was claimed again",
                )
            )
            continue
        tok = ctx.own(c)
        if tok is None or tok.out_ops != {DEAD_LETTER} or ctx.ix.redrive_unknown:
            continue
        dead_then_claimed += 1
        if dead_then_claimed > v.record.redrives:
            out.append(
                _pair(
                    TERMINAL_FINAL,
                    v,
                    c,
                    n,
                    f"{n.proc} claimed it at {storage_time(n.claimed_at)} after "
                    f"{_claim_desc(c)} dead-lettered it ({_att_desc(atts[acc])}), and the "
                    f"history holds {v.record.redrives} redrive(s) of it for "
                    f"{dead_then_claimed} return(s) from DEAD",
                )
            )


def _final_status(ctx: _Context) -> list[_Finding]:
    out: list[_Finding] = []
    for task_id, task in ctx.final.tasks.items():
        last = task.attempts[-1] if task.attempts else None
        if task.status is Status.SUCCEEDED:
            if last is None or last.outcome is not Outcome.SUCCESS:
                seen = "no attempt" if last is None else f"last attempt {last.outcome.value}"
                out.append(
                    _task_finding(
                        ctx,
                        TRANSITION,
                        task_id,
                        f"SUCCEEDED with {seen}: complete appends a SUCCESS attempt",
                    )
                )
        elif task.status is Status.DEAD and (
            last is None or last.outcome in (Outcome.SUCCESS, Outcome.LEASE_EXPIRED)
        ):
            seen = "no attempt" if last is None else f"last attempt {last.outcome.value}"
            out.append(
                _task_finding(
                    ctx,
                    TRANSITION,
                    task_id,
                    f"DEAD with {seen}: dead_letter appends the failed attempt",
                )
            )
    return out


# ---- excerpts ----------------------------------------------------------------------------------


def _trimmed(ev: Event, task: str) -> dict[str, Any]:
    out = dict(ev)
    if isinstance(ev.get("claims"), list):
        out["claims"] = [e for e in ev["claims"] if isinstance(e, dict) and e.get("task") == task]
    if isinstance(ev.get("tasks"), list):
        out["tasks"] = [t for t in ev["tasks"] if t == task]
    return out


def _tokens_of(ev: Event, task: str) -> set[str]:
    toks: set[str] = set()
    token = ev.get("token")
    if isinstance(token, str):
        toks.add(token)
    if ev.get("op") == CLAIM:
        for entry in ev.get("claims") or ():
            if isinstance(entry, dict) and entry.get("task") == task:
                t = entry.get("token")
                if isinstance(t, str):
                    toks.add(t)
    return toks


def _sort_key(events: Sequence[Event]) -> Callable[[int], tuple[float, str, int]]:
    def key(i: int) -> tuple[float, str, int]:
        ev = events[i]
        t = ev.get("t")
        seq = ev.get("seq")
        return (
            float(t) if isinstance(t, (int, float)) else 0.0,
            str(ev.get("proc", "")),
            seq if isinstance(seq, int) else i,
        )

    return key


def _excerpts(ix: HistoryIndex, findings: list[_Finding]) -> list[tuple[dict[str, Any], ...]]:
    wanted = {f.task for f in findings if f.task is not None}
    if not wanted:
        return [() for _ in findings]
    events = ix.events
    per_task: dict[str, list[int]] = {t: [] for t in wanted}
    for i, ev in enumerate(events):
        for t in event_tasks(ev):
            lst = per_task.get(t)
            if lst is not None and (not lst or lst[-1] != i):
                lst.append(i)
    key = _sort_key(events)
    out: list[tuple[dict[str, Any], ...]] = []
    for f in findings:
        if f.task is None:
            out.append(())
            continue
        task = f.task
        chosen = [
            i
            for i in per_task[task]
            if not f.focus
            or events[i].get("op") in (ENQUEUE, REDRIVE)
            or _tokens_of(events[i], task) & f.focus
        ]
        chosen.sort(key=key)
        if chosen and f.workers:
            lo, hi = key(chosen[0])[0], key(chosen[-1])[0]
            targets = set(f.workers)
            for i in ix.faults:
                ev = events[i]
                if (ev.get("target") in targets or ev.get("proc") in targets) and (
                    lo <= key(i)[0] <= hi
                ):
                    chosen.append(i)
            chosen.sort(key=key)
        if len(chosen) > EXCERPT_EVENTS:
            if f.anchor is not None and f.anchor in chosen:
                at = chosen.index(f.anchor)
                start = max(0, min(at - EXCERPT_EVENTS // 2, len(chosen) - EXCERPT_EVENTS))
            else:
                start = len(chosen) - EXCERPT_EVENTS
            chosen = chosen[start : start + EXCERPT_EVENTS]
        out.append(tuple(_trimmed(events[i], task) for i in chosen))
    return out


# ---- public entry points -----------------------------------------------------------------------

_PerTask = Callable[[_Context, _View, list[_Finding]], None]
_Whole = Callable[[_Context], list[_Finding]]


@dataclass(frozen=True)
class _Rule:
    """A rule's checks: per task (on its view, built once for all rules) and/or whole-run."""

    per_task: tuple[_PerTask, ...] = ()
    whole: tuple[_Whole, ...] = ()


def _context(events: Sequence[Event] | HistoryIndex, final: FinalState) -> _Context:
    ix = events if isinstance(events, HistoryIndex) else index_history(events)
    return _Context(ix, final)


def _run(events: Sequence[Event] | HistoryIndex, final: FinalState, *rules: _Rule) -> list[
    Violation
]:
    # The checker makes no reference cycles, but allocates many small objects next to a
    # history of a million dicts: the cyclic collector would rescan that history again
    # and again (several times the checker's own cost). It is off while checking.
    enabled = gc.isenabled()
    gc.disable()
    try:
        ctx = _context(events, final)
        found: list[list[_Finding]] = [[] for _ in rules]
        per_task = [(fn, found[i]) for i, r in enumerate(rules) for fn in r.per_task]
        if per_task:
            # One task at a time: its view is built, checked by every rule, and dropped.
            for task_id, record in ctx.ix.tasks.items():
                if record.claims:
                    view = _build_view(ctx, task_id, record)
                    for fn, out in per_task:
                        fn(ctx, view, out)
        for i, r in enumerate(rules):
            for whole in r.whole:
                found[i].extend(whole(ctx))
        return ctx.report([f for out in found for f in out])
    finally:
        if enabled:
            gc.enable()


def check_mutual_exclusion(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """No two workers hold a live claim on one task; one outcome per claim (SPEC §3).

    Per task, the successful claims are ordered by ``claimed_at`` (storage time). Claim
    *i*'s lease end is ``max(lease_expires_at at the claim, lease_expires_at of every
    acknowledged heartbeat of its token made before the next claim)``; unknown
    heartbeats are not assumed to have extended it. The next claim *j* must not be made
    before that lease end, unless *i*'s outcome was accepted by then: the history holds
    a non-LEASE_EXPIRED attempt started at ``claimed_at_i`` with ``finished_at <=
    claimed_at_j``. A violation is ``one-claim``, or ``lease-respected`` when *j* says
    it reclaimed an expired lease (it stole a live one). Also ``one-claim``: more than
    one acknowledged outcome call for a token, or more outcome attempts started at one
    instant than claims made then.
    """
    return _run(events, final, _R_MUTUAL_EXCLUSION)


def check_reclaim_after_expiry(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """A claim is taken over only after its lease expired, and as a reclaim (SPEC §2).

    - ``lease-respected``: the LEASE_EXPIRED attempt of a claim ends (at the reclaim,
      by the storage's record) before that claim's lease end. This catches a stolen
      lease whose thief's claim is unknown to the history; a known reclaim made too
      early is reported by :func:`check_mutual_exclusion`.
    - ``reclaim-expired``: the claim after a claim that has no outcome (none accepted,
      none acknowledged) says ``reclaimed=False``, or a claim says ``reclaimed=False``
      while a LEASE_EXPIRED attempt ends at its ``claimed_at`` (and no other claim of
      that instant is a reclaim): the backend took over a lease without saying so.
    """
    return _run(events, final, _R_RECLAIM_AFTER_EXPIRY)


def check_lease_expired_recorded(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """A LEASE_EXPIRED attempt for every claim that ended without an outcome (SPEC §2-3).

    A claim with no outcome (none in the history, none acknowledged) that was followed
    by another claim, or whose task is no longer IN_FLIGHT, has a LEASE_EXPIRED attempt
    started at its ``claimed_at``; a claim that got an outcome has none; no claim
    expires twice. Rule ``lease-expired-recorded``.
    """
    return _run(events, final, _R_LEASE_EXPIRED_RECORDED)


def check_history_numbering(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """Invariant H: ``attempt_no`` unique and strictly increasing, redrives included.

    Every final history (``get()`` and DLQ) is strictly increasing (gaps allowed).
    Along the claims of a task (that did not overlap), the ``attempt_no`` each claim
    announced (max + 1 of the history it returned) strictly increases, so a redrive
    that restarts the numbering shows; and the attempt recorded for a claim bears the
    number that claim announced. Rule ``history-numbering``.
    """
    return _run(events, final, _R_NUMBERING)


def check_execution_count(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """No task ran more often than its history records (rule ``execution-count``).

    A handler runs at most once per claim token, and the ``run`` invokes of a task are
    at most its attempts in the final history plus one open claim (if IN_FLIGHT): every
    execution ends in an attempt (its outcome, or LEASE_EXPIRED when reclaimed).
    """
    return _run(events, final, _R_EXECUTIONS)


def check_fencing(events: Sequence[Event] | HistoryIndex, final: FinalState) -> list[Violation]:
    """Outcomes and heartbeats need the current token (rule ``fencing``, SPEC §2).

    Flagged only when the storage's times prove it:

    - a heartbeat acknowledged after the next claim of the task, after its own claim's
      outcome, or after the storage recorded its claim as expired (its storage time is
      the returned expiry minus the claim's lease);
    - an outcome accepted (its attempt's ``finished_at``) after the next claim was made;
    - an acknowledged outcome call for a claim the history records as LEASE_EXPIRED;
    - an outcome in the history for a claim none of whose outcome calls can have taken
      effect (all refused as stale, or none made), or one that starts at no claim: it
      was written through a stale token;
    - one token minted for two claims.
    """
    return _run(events, final, _R_FENCING)


def check_outcomes_recorded(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """An acknowledged outcome is in the history (rule ``outcome-recorded``).

    An outcome call that returned ``ok`` appended an attempt started at its claim's
    ``claimed_at``; the final history must hold it (a reset or lost history fails).
    """
    return _run(events, final, _R_OUTCOMES)


def check_no_loss(events: Sequence[Event] | HistoryIndex, final: FinalState) -> list[Violation]:
    """No task vanishes (rule ``no-loss``, SPEC §3, §5.7).

    Every id the harness enqueued (``final.enqueued`` and enqueue ``ok`` events) still
    exists: the harness never purges.
    """
    return _run(events, final, _R_NO_LOSS)


def check_drained(events: Sequence[Event] | HistoryIndex, final: FinalState) -> list[Violation]:
    """After the drain every task is SUCCEEDED or DEAD (SPEC §3).

    A task still PENDING or IN_FLIGHT is ``drain-complete`` when the harness saw the
    drain finish (the backend's view disagrees with itself), and ``drain-timeout``
    ("still live after drain timeout") when the drain ran out of time: a run must
    drain, so this too is a violation.
    """
    return _run(events, final, _R_DRAINED)


def check_dlq(events: Sequence[Event] | HistoryIndex, final: FinalState) -> list[Violation]:
    """The DLQ lists exactly the DEAD tasks, once each, with the whole history
    (rule ``dlq-complete``): every DEAD task is listed, every listed task is DEAD, and
    its attempts are those ``get()`` returns."""
    return _run(events, final, _R_DLQ)


def check_terminal_final(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """SUCCEEDED is final and DEAD only comes back by redrive (rule ``terminal-final``).

    A claim made after the previous claim's SUCCESS attempt was accepted is a violation;
    so is a task claimed again after dead-lettered more often than the history redrove it.
    """
    return _run(events, final, _R_TERMINAL)


def check_final_status(
    events: Sequence[Event] | HistoryIndex, final: FinalState
) -> list[Violation]:
    """A terminal task's history ends with the attempt that made it so (``transition``):
    SUCCEEDED ends with SUCCESS; DEAD with a failed attempt (RETRYABLE/PERMANENT)."""
    return _run(events, final, _R_FINAL_STATUS)


_R_MUTUAL_EXCLUSION = _Rule(per_task=(_mutual_exclusion,))
_R_RECLAIM_AFTER_EXPIRY = _Rule(per_task=(_reclaim_after_expiry,))
_R_LEASE_EXPIRED_RECORDED = _Rule(per_task=(_lease_expired_recorded,))
_R_NUMBERING = _Rule(per_task=(_numbering_of_claims,), whole=(_numbering_of_histories,))
_R_EXECUTIONS = _Rule(per_task=(_execution_count,))
_R_FENCING = _Rule(per_task=(_fencing,))
_R_OUTCOMES = _Rule(per_task=(_outcomes_recorded,))
_R_NO_LOSS = _Rule(whole=(_no_loss,))
_R_DRAINED = _Rule(whole=(_drained,))
_R_DLQ = _Rule(whole=(_dlq,))
_R_TERMINAL = _Rule(per_task=(_terminal_final,))
_R_FINAL_STATUS = _Rule(whole=(_final_status,))

_ALL: tuple[_Rule, ...] = (
    _R_MUTUAL_EXCLUSION,
    _R_RECLAIM_AFTER_EXPIRY,
    _R_LEASE_EXPIRED_RECORDED,
    _R_NUMBERING,
    _R_EXECUTIONS,
    _R_FENCING,
    _R_OUTCOMES,
    _R_NO_LOSS,
    _R_DRAINED,
    _R_DLQ,
    _R_TERMINAL,
    _R_FINAL_STATUS,
)


def check(events: Sequence[Event] | HistoryIndex, final: FinalState) -> list[Violation]:
    """Run every rule over a history and the final state; ``[]`` means the run passed.

    ``events`` is the whole history (all journals, e.g. from
    :func:`~rdq_compliance.chaos.events.read_history`) or its index. Linear in the
    number of events (plus a per-task sort of its claims).
    """
    return _run(events, final, *_ALL)

