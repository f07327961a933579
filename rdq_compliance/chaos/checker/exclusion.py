"""Mutual exclusion and lease expiry: the one rule of the contract
(``contract.md#1-the-one-rule-and-what-the-kit-is-for``), and what a reclaim must do.

- ``one-claim``: no two workers hold a live claim on one task, and a claim gets at most
  one outcome (:func:`check_mutual_exclusion`);
- ``lease-respected``: a live lease is never taken over; a task is reclaimed only after
  its lease expired (:func:`check_mutual_exclusion`, :func:`check_reclaim_after_expiry`);
- ``reclaim-expired``: a claim that takes over an expired lease says so
  (``reclaimed=True``) and is recorded as such (:func:`check_reclaim_after_expiry`);
- ``lease-expired-recorded``: a claim that ended without an outcome leaves a
  LEASE_EXPIRED attempt, and only such a claim (:func:`check_lease_expired_recorded`).
"""

from __future__ import annotations

from collections import Counter

from rdq_compliance.chaos.checker.engine import CheckerRule, History, runs
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, finding
from rdq_compliance.chaos.checker.format import att_desc, claim_desc, ms, ops_desc, storage_time
from rdq_compliance.chaos.checker.view import LE, Context, View
from rdq_compliance.rule import Need
from rdq_core.model import Status


def _mutual_exclusion(ctx: Context, v: View, out: list[Finding]) -> None:
    if not v.has_history:
        return
    claims, atts = v.claims, v.attempts
    for k in range(len(claims) - 1):
        if not v.overlap[k]:
            continue
        c, n = claims[k], claims[k + 1]
        rule = LEASE_HONOURED if n.reclaimed else ONE_CLAIM
        end = v.lease_end[k]
        what = "reclaimed" if n.reclaimed else "claimed"
        extended = " (extended by heartbeats)" if end > c.lease_expires_at else ""
        detail = (
            f"{n.proc} {what} it at {storage_time(n.claimed_at)} (token {n.token}) while "
            f"{claim_desc(c)} was live: its lease ran until {storage_time(end)}"
            f"{extended}, {ms(end - n.claimed_at)} later, and it had no accepted outcome"
        )
        acc = v.accepted[k]
        if acc is not None:
            detail += f"; its outcome was accepted only at {storage_time(atts[acc][2])}"
        out.append(finding(rule, v.task_id, (c, n), detail))
    # at most one accepted outcome per claim token ...
    for c in claims:
        tok = c.tok
        if tok.out_ok > 1 and tok.claims == 1:
            out.append(
                finding(
                    ONE_CLAIM,
                    v.task_id,
                    (c,),
                    f"{tok.out_ok} outcome calls ({ops_desc(tok)}) with this one token were "
                    "acknowledged; at most one outcome per claim is accepted",
                    anchor=tok.out_ok_events[1] if tok.out_ok_events else None,
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
                recorded = ", ".join(att_desc(a) for a in atts if a[1] == start)
                out.append(
                    finding(
                        ONE_CLAIM,
                        v.task_id,
                        at,
                        f"the history holds {count} outcomes for the claim made at "
                        f"{storage_time(start)}: {recorded}",
                        anchor=at[0].event if at else None,
                    )
                )


def _reclaim_after_expiry(ctx: Context, v: View, out: list[Finding]) -> None:
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
                finding(
                    RECLAIM_EXPIRED,
                    v.task_id,
                    (c, n),
                    f"{n.proc} claimed it at {storage_time(n.claimed_at)} (token {n.token}) "
                    f"with reclaimed=False, but {claim_desc(c)} had no outcome: its lease "
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
                finding(
                    LEASE_HONOURED,
                    v.task_id,
                    (c,),
                    f"the history records {claim_desc(c)} as "
                    f"{att_desc(atts[v.expired[k][0]])}: reclaimed at {storage_time(fin)}, "
                    f"{ms(end - fin)} before its lease ended at {storage_time(end)}",
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
                finding(
                    RECLAIM_EXPIRED,
                    v.task_id,
                    (c,),
                    f"{c.proc} claimed it at {storage_time(c.claimed_at)} (token {c.token}) "
                    f"with reclaimed=False, but the history records {att_desc(le)}, "
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
            f"the history holds {att_desc(a)} for a claim no worker learnt of (its reply "
            f"was lost): reclaimed after {ms(a[2] - a[1])}, but every claim of the run "
            f"asked a lease of {ms(lease)}"
        )
        out.append(finding(LEASE_HONOURED, v.task_id, () if thief is None else (thief,), detail))


def _lease_expired_recorded(ctx: Context, v: View, out: list[Finding]) -> None:
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
                finding(
                    LEASE_EXPIRED_RECORDED,
                    v.task_id,
                    (c,),
                    f"{claim_desc(c)} got an outcome ({att_desc(atts[acc])}) and yet a "
                    f"LEASE_EXPIRED attempt ({att_desc(atts[expired[0]])})",
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
                finding(
                    LEASE_EXPIRED_RECORDED,
                    v.task_id,
                    (c,),
                    f"{claim_desc(c)} got an outcome ({att_desc(atts[acc])}) and yet a "
                    f"LEASE_EXPIRED attempt started at its claimed_at ({att_desc(atts[le])})",
                )
            )
        elif len(expired) > 1:
            recorded = ", ".join(att_desc(atts[x]) for x in expired)
            out.append(
                finding(
                    LEASE_EXPIRED_RECORDED,
                    v.task_id,
                    (c,),
                    f"{claim_desc(c)} expired {len(expired)} times: {recorded}",
                )
            )
        elif not v.matched[k]:
            tok = c.tok
            if tok.out_ok > 0:
                continue  # an acknowledged outcome is missing: outcome-recorded says so
            if n is not None:
                ended = f"{n.proc} claimed it next at {storage_time(n.claimed_at)}"
            elif status is not Status.IN_FLIGHT:
                ended = f"the task is {status.value} now"
            else:
                continue  # the claim may still be the current one
            detail = (
                f"{claim_desc(c)} ended without an accepted outcome ({ended}), but the "
                "history holds no attempt started at its claimed_at: its LEASE_EXPIRED "
                "attempt is missing"
            )
            if tok.outcome_may_have_applied():
                detail += f" (or its {ops_desc(tok)} call, left unknown, took effect and was lost)"
            if n is not None:
                out.append(finding(LEASE_EXPIRED_RECORDED, v.task_id, (c, n), detail))
                reported.add(k + 1)
            else:
                out.append(finding(LEASE_EXPIRED_RECORDED, v.task_id, (c,), detail))
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
        pair = (claims[k - 1], c) if k > 0 else (c,)
        out.append(finding(LEASE_EXPIRED_RECORDED, v.task_id, pair, detail))


@runs(per_task=(_mutual_exclusion,))
def check_mutual_exclusion(events: History, final: FinalState) -> list[Violation]:
    """No two workers hold a live claim on one task; one outcome per claim (the one rule).

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


@runs(per_task=(_reclaim_after_expiry,))
def check_reclaim_after_expiry(events: History, final: FinalState) -> list[Violation]:
    """A claim is taken over only after its lease expired, and as a reclaim
    (``contract.md#claims-leases-and-tokens``).

    - ``lease-respected``: the LEASE_EXPIRED attempt of a claim ends (at the reclaim,
      by the storage's record) before that claim's lease end. This catches a stolen
      lease whose thief's claim is unknown to the history; a known reclaim made too
      early is reported by :func:`check_mutual_exclusion`.
    - ``reclaim-expired``: the claim after a claim that has no outcome (none accepted,
      none acknowledged) says ``reclaimed=False``, or a claim says ``reclaimed=False``
      while a LEASE_EXPIRED attempt ends at its ``claimed_at`` (and no other claim of
      that instant is a reclaim): the backend took over a lease without saying so.
    """


@runs(per_task=(_lease_expired_recorded,))
def check_lease_expired_recorded(events: History, final: FinalState) -> list[Violation]:
    """A LEASE_EXPIRED attempt for every claim that ended without an outcome
    (rule ``lease-expired-recorded``).

    A claim with no outcome (none in the history, none acknowledged) that was followed
    by another claim, or whose task is no longer IN_FLIGHT, has a LEASE_EXPIRED attempt
    started at its ``claimed_at``; a claim that got an outcome has none; no claim
    expires twice; every reclaim appended a LEASE_EXPIRED attempt ending at it. Rule
    ``lease-expired-recorded``.
    """


# ---- the rules -------------------------------------------------------------------------------

ONE_CLAIM = CheckerRule(
    id="one-claim",
    text="no two workers hold a live claim on the same task",
    checks=(check_mutual_exclusion,),
    needs=Need(("claim",), "claim"),
)
LEASE_HONOURED = CheckerRule(
    id="lease-respected",
    text="a live lease is never taken over; reclaim only after expiry",
    checks=(check_mutual_exclusion, check_reclaim_after_expiry),
    needs=Need(("reclaim",), "reclaim"),
)
RECLAIM_EXPIRED = CheckerRule(
    id="reclaim-expired",
    text="an expired lease is reclaimed, with a LEASE_EXPIRED attempt",
    checks=(check_reclaim_after_expiry,),
    needs=Need(("reclaim",), "reclaim"),
)
LEASE_EXPIRED_RECORDED = CheckerRule(
    id="lease-expired-recorded",
    text=(
        "a claim that ended without an outcome leaves a LEASE_EXPIRED attempt, and only "
        "such a claim"
    ),
    checks=(check_lease_expired_recorded,),
    needs=Need(("reclaim",), "reclaim"),
)
