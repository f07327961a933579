"""What the rules look at: the run's context, and one task's claims matched with its
attempts (the per-task view).

:class:`Context` holds the history's index and the final state for the whole check.
:func:`build_view` makes a task's :class:`View`: its claims in storage order, each
matched with the attempts of the final history that started at its ``claimed_at``,
its lease end as the history proves it, its stale heartbeats, and whether it was still
live at the next claim. It is built once per task, shared by every per-task rule, then
dropped.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.index import (
    HistoryIndex,
    JournalClaim,
    TaskRecord,
    TokenRecord,
    proc_of,
)
from rdq_core.model import Outcome, Task, utc_from_micros

LE = Outcome.LEASE_EXPIRED

#: An attempt of the final history: (attempt_no, started_at µs, finished_at µs, outcome).
Att = tuple[int, int, int, Outcome]

_NONE: list[Any] = []  # shared empty list, never mutated
_EPOCH = utc_from_micros(0)
_ONE_US = timedelta(microseconds=1)


def us(dt: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact, fast)."""
    return (dt - _EPOCH) // _ONE_US


def claim_order(c: JournalClaim) -> tuple[int, int, int]:
    """Storage order of a task's claims: ``claimed_at``, then the announced number."""
    return (c.claimed_at, c.attempt_no if c.attempt_no is not None else 0, c.event)


class Context:
    """The history's index and the final state, with what several rules look up."""

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
        """The task as ``get()`` returned it, else as the DLQ lists it, else ``None``."""
        task = self.final.tasks.get(task_id)
        if task is None:
            task = self.dlq_by_id.get(task_id)
        return task

    @property
    def uniform_lease(self) -> int | None:
        """The lease every known claim of the run asked (µs), or ``None`` if they differ;
        the backend's fixed lease when its lease model gives one."""
        if self._uniform_lease is False and self.final.fixed_lease_us is not None:
            self._uniform_lease = self.final.fixed_lease_us
        if self._uniform_lease is False:
            leases = {c.lease for rec in self.ix.tasks.values() for c in rec.claims}
            self._uniform_lease = leases.pop() if len(leases) == 1 else None
        return self._uniform_lease

    @staticmethod
    def own(c: JournalClaim) -> TokenRecord | None:
        """The token's record if that token belongs to this claim alone."""
        tok = c.tok
        return tok if tok.claims == 1 else None

    def claims_of(self, task_id: str) -> list[JournalClaim]:
        """A task's known claims in storage order."""
        rec = self.ix.tasks.get(task_id)
        return [] if rec is None else sorted(rec.claims, key=claim_order)


class View:
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
            sorted(claims, key=claim_order) if len(claims) > 1 else claims
        )
        n = len(self.claims)
        self.attempts: list[Att] = _NONE
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


def build_view(ctx: Context, task_id: str, record: TaskRecord) -> View:
    """The view of one task that has claims."""
    v = View(task_id, record, ctx.final_task(task_id))
    claims = v.claims
    if v.final is None:
        for k, c in enumerate(claims):
            v.lease_end[k] = c.lease_expires_at
        return v
    atts: list[Att] = [
        (a.attempt_no, us(a.started_at), us(a.finished_at), a.outcome)
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
                    v.stale_hb[k].append((expiry, pos, proc_of(ctx.ix.events[pos])))
                elif expiry > end:
                    end = expiry
        v.lease_end[k] = end
        if nxt is not None and nxt.claimed_at < end:
            exempt = acc is not None and atts[acc][2] <= nxt.claimed_at
            # An acknowledged outcome the history lost may have preceded the next claim.
            acknowledged = acc is None and tok.out_ok > 0
            v.overlap[k] = not exempt and not acknowledged
    return v
