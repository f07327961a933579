"""Where every task ends: nothing lost, everything drained, the DLQ exact, terminal
states final and reached by the attempt that made them so.

- ``no-loss`` (bug class ``lost-task``): every enqueued task still exists
  (:func:`check_no_loss`);
- ``drain-complete`` / ``drain-timeout``: after the drain every task is
  SUCCEEDED or DEAD (:func:`check_drained`);
- ``dlq-complete``: the DLQ lists exactly the DEAD tasks, once each, with their whole
  history (:func:`check_dlq`);
- ``terminal-final`` (bug class ``unclaimable-claimed``): SUCCEEDED and DEAD tasks are
  never claimed again, but for a redrive of a DEAD one (:func:`check_terminal_final`);
- ``transition`` (``contract.md#statuses-and-their-changes``): a terminal task's history
  ends with the attempt that made it so (:func:`check_final_status`).
"""

from __future__ import annotations

from collections import Counter

from rdq_compliance.chaos.checker.engine import CheckerRule, History, runs
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, finding
from rdq_compliance.chaos.checker.format import att_desc, claim_desc, storage_time
from rdq_compliance.chaos.checker.index import DEAD_LETTER
from rdq_compliance.chaos.checker.view import Context, View
from rdq_compliance.rule import Need, NoNeed, Rule
from rdq_core.model import Outcome, Status, micros_from_utc


def _about(ctx: Context, rule: Rule, task_id: str, detail: str) -> Finding:
    """A finding about a task's final state: its last two claims named, and every
    event of the task shown."""
    return finding(rule, task_id, ctx.claims_of(task_id)[-2:], detail, whole_timeline=True)


def _no_loss(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    ids = set(ctx.final.enqueued) | ctx.ix.enqueued
    for task_id in sorted(ids):
        if task_id in ctx.final.tasks:
            continue
        where = " (the DLQ still lists it)" if task_id in ctx.dlq_by_id else ""
        rec = ctx.ix.tasks.get(task_id)
        n = 0 if rec is None else len(rec.claims)
        out.append(
            _about(
                ctx,
                NO_LOSS,
                task_id,
                f"enqueued, never purged, and get() no longer finds it{where}; it was claimed "
                f"{n} time(s)",
            )
        )
    return out


def _drained(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for task_id in sorted(set(ctx.final.enqueued) | ctx.ix.enqueued | set(ctx.final.tasks)):
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
                f"still live when the drain ended (timed out or stalled): {task.status.value}, "
                f"{len(task.attempts)} attempt(s)"
            )
            rule = DRAIN_TIMEOUT
        if task.status is Status.IN_FLIGHT and task.lease_expires_at is not None:
            detail += f", lease until {storage_time(micros_from_utc(task.lease_expires_at))}"
        if task.status is Status.PENDING and task.next_attempt_at is not None:
            detail += f", due at {storage_time(micros_from_utc(task.next_attempt_at))}"
        out.append(_about(ctx, rule, task_id, detail))
    return out


def _dlq(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    listed = Counter(t.id for t in ctx.final.dlq)
    reported: set[str] = set()
    for t in ctx.final.dlq:
        if t.id in reported:
            continue
        if listed[t.id] > 1:
            reported.add(t.id)
            out.append(_about(ctx, DLQ_COMPLETE, t.id, f"the DLQ lists it {listed[t.id]} times"))
            continue
        got = ctx.final.tasks.get(t.id)
        if got is None:
            continue  # get() does not find it: no-loss (or a foreign task) says so
        if got.status is not Status.DEAD or t.status is not Status.DEAD:
            out.append(
                _about(
                    ctx,
                    DLQ_COMPLETE,
                    t.id,
                    f"the DLQ lists it as {t.status.value} but get() says {got.status.value}: "
                    "the DLQ holds exactly the DEAD tasks",
                )
            )
        elif t.attempts != got.attempts:
            out.append(
                _about(
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
                _about(ctx, DLQ_COMPLETE, task_id, f"DEAD{why} but missing from the DLQ listing")
            )
    return out


def _terminal_final(ctx: Context, v: View, out: list[Finding]) -> None:
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
                finding(
                    TERMINAL_FINAL,
                    v.task_id,
                    (c, n),
                    f"{n.proc} claimed it at {storage_time(n.claimed_at)} after "
                    f"{claim_desc(c)} completed it ({att_desc(atts[acc])}): a SUCCEEDED "
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
                finding(
                    TERMINAL_FINAL,
                    v.task_id,
                    (c, n),
                    f"{n.proc} claimed it at {storage_time(n.claimed_at)} after "
                    f"{claim_desc(c)} dead-lettered it ({att_desc(atts[acc])}), and the "
                    f"history holds {v.record.redrives} redrive(s) of it for "
                    f"{dead_then_claimed} return(s) from DEAD",
                )
            )


def _final_status(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    for task_id, task in ctx.final.tasks.items():
        last = task.attempts[-1] if task.attempts else None
        if task.status is Status.SUCCEEDED:
            if last is None or last.outcome is not Outcome.SUCCESS:
                seen = "no attempt" if last is None else f"last attempt {last.outcome.value}"
                out.append(
                    _about(
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
                _about(
                    ctx,
                    TRANSITION,
                    task_id,
                    f"DEAD with {seen}: dead_letter appends the failed attempt",
                )
            )
    return out


@runs(whole=(_no_loss,))
def check_no_loss(events: History, final: FinalState) -> list[Violation]:
    """No task vanishes (rule ``no-loss``, bug class ``lost-task``).

    Every id the harness enqueued (``final.enqueued`` and enqueue ``ok`` events) still
    exists: the harness never purges.
    """


@runs(whole=(_drained,))
def check_drained(events: History, final: FinalState) -> list[Violation]:
    """After the drain every task is SUCCEEDED or DEAD.

    A task still PENDING or IN_FLIGHT is ``drain-complete`` when the harness saw the
    drain finish (the backend's view disagrees with itself), and ``drain-timeout``
    ("still live when the drain ended") when the drain ran out of time or stalled: a run must
    drain, so this too is a violation.
    """


@runs(whole=(_dlq,))
def check_dlq(events: History, final: FinalState) -> list[Violation]:
    """The DLQ lists exactly the DEAD tasks, once each, with the whole history
    (rule ``dlq-complete``): every DEAD task is listed, every listed task is DEAD, and
    its attempts are those ``get()`` returns."""


@runs(per_task=(_terminal_final,))
def check_terminal_final(events: History, final: FinalState) -> list[Violation]:
    """SUCCEEDED is final and DEAD only comes back by redrive (rule ``terminal-final``).

    A claim made after the previous claim's SUCCESS attempt was accepted is a violation;
    so is a task claimed again after dead-lettered more often than the history redrove it.
    """


@runs(whole=(_final_status,))
def check_final_status(events: History, final: FinalState) -> list[Violation]:
    """A terminal task's history ends with the attempt that made it so (``transition``):
    SUCCEEDED ends with SUCCESS; DEAD with a failed attempt (RETRYABLE/PERMANENT)."""


# ---- the rules -------------------------------------------------------------------------------

NO_LOSS = CheckerRule(
    id="no-loss",
    text="no task vanishes: every task ends SUCCEEDED or DEAD or is visibly live",
    checks=(check_no_loss,),
    needs=Need(("enqueue",), "enqueue"),
)
DRAIN_COMPLETE = CheckerRule(
    id="drain-complete",
    text="after the drain every enqueued task is SUCCEEDED or DEAD",
    checks=(check_drained,),
    needs=Need(("enqueue",), "enqueue"),
)
DRAIN_TIMEOUT = CheckerRule(
    id="drain-timeout",
    text=(
        "the run drains: no task still PENDING/IN_FLIGHT when the drain ends "
        "(at its deadline, or stalled)"
    ),
    checks=(check_drained,),
    needs=NoNeed("judged on the drain every campaign ends with, whatever calls it made"),
)
DLQ_COMPLETE = CheckerRule(
    id="dlq-complete",
    text="the DLQ lists exactly the DEAD tasks, once each, with their whole history",
    checks=(check_dlq,),
    needs=Need(("dead_letter",), "dead-letter"),
)
TERMINAL_FINAL = CheckerRule(
    id="terminal-final",
    text="SUCCEEDED and DEAD tasks are never claimed again",
    checks=(check_terminal_final,),
    needs=Need(("complete", "dead_letter"), "complete or dead-letter"),
)
TRANSITION = CheckerRule(
    id="transition",
    text="complete/reschedule/dead_letter make the documented state change",
    checks=(check_final_status,),
    needs=NoNeed("judged on every task's final state and history, whatever calls it made"),
)
