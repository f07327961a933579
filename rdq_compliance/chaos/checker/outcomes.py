"""Outcomes and heartbeats: fenced by the claim token, and never lost once acknowledged.

- ``fencing`` (bug classes ``unfenced-outcome``, ``stale-heartbeat``): an outcome or a
  heartbeat takes effect only with the current token of an IN_FLIGHT task; a reclaim
  mints a fresh token (:func:`check_fencing`);
- ``outcome-recorded``: an outcome call that was acknowledged is in the
  task's history, at its claim (:func:`check_outcomes_recorded`).
"""

from __future__ import annotations

from rdq_compliance.chaos.checker.engine import CheckerRule, History, runs
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, finding
from rdq_compliance.chaos.checker.format import att_desc, claim_desc, ops_desc, storage_time
from rdq_compliance.chaos.checker.index import JournalClaim, proc_of
from rdq_compliance.chaos.checker.view import Context, View
from rdq_compliance.rule import Need


def _fencing(ctx: Context, v: View, out: list[Finding]) -> None:
    claims, atts = v.claims, v.attempts
    by_token: dict[str, list[JournalClaim]] = {}
    for c in claims:
        if c.tok.claims > 1:
            by_token.setdefault(c.token, []).append(c)
    for same in by_token.values():
        if len(same) > 1:
            out.append(
                finding(
                    FENCING,
                    v.task_id,
                    same,
                    f"{len(same)} claims (at "
                    + ", ".join(storage_time(c.claimed_at) for c in same)
                    + ") got the same token: a reclaim must mint a fresh one, or the "
                    "expired holder's reports stay valid",
                    anchor=same[1].event,
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
            out.append(
                finding(
                    FENCING,
                    v.task_id,
                    (c,) if n is None else (c, n),
                    f"a heartbeat of {proc} for {claim_desc(c)} was acknowledged at "
                    f"{storage_time(beat_at)} (lease extended to {storage_time(expiry)}), "
                    f"{why}: a stale token extended a lease it no longer held",
                    workers=(c.proc, proc) + (() if n is None else (n.proc,)),
                    anchor=pos,
                )
            )
            break  # one per claim is enough
        if v.ambiguous[k]:
            continue
        if acc is not None and n is not None and not v.overlap[k]:
            fin = atts[acc][2]
            if fin > n.claimed_at:
                out.append(
                    finding(
                        FENCING,
                        v.task_id,
                        (c, n),
                        f"the outcome of {claim_desc(c)} ({att_desc(atts[acc])}) was "
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
            acked = tok.out_ok_events or ()
            out.append(
                finding(
                    FENCING,
                    v.task_id,
                    (c,) if n is None else (c, n),
                    f"{ops_desc(tok)} with the token of {claim_desc(c)} was acknowledged, but "
                    f"the history records that claim as {att_desc(le)}: the outcome was "
                    f"accepted after the claim had been reclaimed at {storage_time(le[2])}",
                    workers=(
                        c.proc,
                        *(proc_of(ctx.ix.events[i]) for i in acked),
                        *(() if n is None else (n.proc,)),
                    ),
                    anchor=acked[0] if acked else None,
                )
            )
        elif acc is not None and not tok.outcome_may_have_applied():
            calls = tok.out_invoke or tok.out_fail
            said = (
                f"its {calls} {ops_desc(tok)} call(s) were all refused as stale"
                if calls
                else "its holder made no outcome call"
            )
            # who could have written it: the task's other claims whose outcome call
            # may have taken effect (acknowledged, unknown, or left open)
            writers = [
                o
                for o in claims
                if o is not c and (ot := ctx.own(o)) is not None and ot.outcome_may_have_applied()
            ]
            through = (
                "; the outcome call(s) that may have written it: "
                + ", ".join(f"{ops_desc(o.tok)} with the token of {claim_desc(o)}" for o in writers)
                if writers
                else ""
            )
            out.append(
                finding(
                    FENCING,
                    v.task_id,
                    [o for o in claims if o is c or o in writers],
                    f"the history holds an outcome for {claim_desc(c)} "
                    f"({att_desc(atts[acc])}), but {said}: the outcome was written "
                    f"through another (stale) token{through}",
                    anchor=c.event,
                )
            )
    # an outcome attempt must start at a claim a worker made
    for x in v.orphans:
        out.append(
            finding(
                FENCING,
                v.task_id,
                claims[-2:],
                f"the history holds {att_desc(atts[x])}, which starts at no claim any "
                "worker made: an outcome was accepted with no current claim "
                "(a stale outcome on an ended claim)",
            )
        )


def _outcomes_recorded(ctx: Context, v: View, out: list[Finding]) -> None:
    if not v.has_history:
        return
    for k, c in enumerate(v.claims):
        tok = ctx.own(c)
        if tok is None or tok.out_ok == 0 or v.matched[k]:
            continue
        out.append(
            finding(
                OUTCOME_RECORDED,
                v.task_id,
                (c,),
                f"{ops_desc(tok)} with the token of {claim_desc(c)} was acknowledged, but the "
                "history holds no attempt started at that claim: the acknowledged outcome "
                "is lost",
                anchor=tok.out_ok_events[0] if tok.out_ok_events else None,
            )
        )


@runs(per_task=(_fencing,))
def check_fencing(events: History, final: FinalState) -> list[Violation]:
    """Outcomes and heartbeats need the current token (rule ``fencing``).

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


@runs(per_task=(_outcomes_recorded,))
def check_outcomes_recorded(events: History, final: FinalState) -> list[Violation]:
    """An acknowledged outcome is in the history (rule ``outcome-recorded``).

    An outcome call that returned ``ok`` appended an attempt started at its claim's
    ``claimed_at``; the final history must hold it (a reset or lost history fails).
    """


# ---- the rules -------------------------------------------------------------------------------

FENCING = CheckerRule(
    id="fencing",
    text="outcomes and heartbeats need the current token and IN_FLIGHT",
    checks=(check_fencing,),
    needs=Need(("complete", "reschedule", "dead_letter", "extend"), "outcome report or heartbeat"),
)
OUTCOME_RECORDED = CheckerRule(
    id="outcome-recorded",
    text="an acknowledged outcome is in the task's history, at its claim",
    checks=(check_outcomes_recorded,),
    needs=Need(("complete", "reschedule", "dead_letter"), "outcome report"),
)
