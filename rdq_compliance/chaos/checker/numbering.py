"""What a task's attempt history must record: its numbering and its executions.

- ``history-numbering`` (invariant H, ``contract.md#attempts-and-their-numbering``; bug
  class ``numbering-from-counter``): ``attempt_no`` values are unique
  and strictly increasing over the task's whole existence, redrives included; each
  claim's number is ``max + 1`` of what is persisted (:func:`check_history_numbering`);
- ``execution-count``: no task runs more often than its history records
  attempts, and a claim runs its handler at most once (:func:`check_execution_count`).
"""

from __future__ import annotations

from rdq_compliance.chaos.checker.engine import CheckerRule, History, runs
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, finding
from rdq_compliance.chaos.checker.format import att_desc, claim_desc, storage_time
from rdq_compliance.chaos.checker.index import JournalClaim
from rdq_compliance.chaos.checker.view import Context, View, us
from rdq_compliance.rule import Need
from rdq_core.model import Status, Task


def _numbering_of_histories(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
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
                starts = (us(a.started_at), us(prev.started_at))
                involved = [c for c in ctx.claims_of(task.id) if c.claimed_at in starts]
                kind = "a duplicate" if a.attempt_no == prev.attempt_no else "not increasing"
                out.append(
                    finding(
                        HISTORY_NUMBERING,
                        task.id,
                        involved,
                        f"attempt_no {a.attempt_no} ({a.outcome.value}, started "
                        f"{storage_time(starts[0])}) follows attempt_no "
                        f"{prev.attempt_no} ({prev.outcome.value}) in the history: {kind} "
                        f"number (history: {[x.attempt_no for x in task.attempts]})",
                    )
                )
                break
            prev = a
    return out


def _numbering_of_claims(ctx: Context, v: View, out: list[Finding]) -> None:
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
                finding(
                    HISTORY_NUMBERING,
                    v.task_id,
                    (c, n),
                    f"the claim of {n.proc} at {storage_time(n.claimed_at)} announced "
                    f"attempt_no {n.attempt_no}, after {claim_desc(c)} announced "
                    f"{c.attempt_no}: the numbering restarted (history reset or numbered "
                    "from attempt_count)",
                )
            )
        matched = v.matched[k]
        if len(matched) == 1 and atts[matched[0]][0] < c.attempt_no:
            out.append(
                finding(
                    HISTORY_NUMBERING,
                    v.task_id,
                    (c,),
                    f"{claim_desc(c)} announced attempt_no {c.attempt_no} "
                    f"(max + 1 of the history it returned), but its attempt is recorded "
                    f"as {att_desc(atts[matched[0]])}: a number the history had already used",
                )
            )


def _execution_count(ctx: Context, v: View, out: list[Finding]) -> None:
    ran: list[JournalClaim] = []
    for c in v.claims:
        tok = ctx.own(c)
        if tok is None or tok.runs == 0:
            continue
        ran.append(c)
        if tok.runs > 1:
            out.append(
                finding(
                    EXECUTION_COUNT,
                    v.task_id,
                    (c,),
                    f"the handler ran {tok.runs} times under {claim_desc(c)}; a claim runs "
                    "it at most once",
                    anchor=(
                        tok.run_events[1]
                        if tok.run_events and len(tok.run_events) > 1
                        else None
                    ),
                )
            )
    final = v.final
    if final is None:
        return
    runs = v.record.runs
    open_claims = 1 if final.status is Status.IN_FLIGHT else 0
    if runs > len(final.attempts) + open_claims:
        out.append(
            finding(
                EXECUTION_COUNT,
                v.task_id,
                ran,
                f"the handler ran {runs} times, but the history records "
                f"{len(final.attempts)} attempts"
                + (" and one open claim" if open_claims else "")
                + f" (task {final.status.value})",
            )
        )


@runs(per_task=(_numbering_of_claims,), whole=(_numbering_of_histories,))
def check_history_numbering(events: History, final: FinalState) -> list[Violation]:
    """Invariant H: ``attempt_no`` unique and strictly increasing, redrives included.

    Every final history (``get()`` and DLQ) is strictly increasing (gaps allowed).
    Along the claims of a task (that did not overlap), the ``attempt_no`` each claim
    announced (max + 1 of the history it returned) strictly increases, so a redrive
    that restarts the numbering shows; and the attempt recorded for a claim bears the
    number that claim announced. Rule ``history-numbering``.
    """


@runs(per_task=(_execution_count,))
def check_execution_count(events: History, final: FinalState) -> list[Violation]:
    """No task ran more often than its history records (rule ``execution-count``).

    A handler runs at most once per claim token, and the ``run`` invokes of a task are
    at most its attempts in the final history plus one open claim (if IN_FLIGHT): every
    execution ends in an attempt (its outcome, or LEASE_EXPIRED when reclaimed).
    """


# ---- the rules -------------------------------------------------------------------------------

HISTORY_NUMBERING = CheckerRule(
    id="history-numbering",
    text="attempt_no unique, increasing, max+1 across redrives",
    checks=(check_history_numbering,),
    needs=Need(("reclaim", "reschedule", "dead_letter"), "new-attempt"),
)
EXECUTION_COUNT = CheckerRule(
    id="execution-count",
    text="no task runs more often than its history records attempts",
    checks=(check_execution_count,),
    needs=Need(("claim",), "claim"),
)
