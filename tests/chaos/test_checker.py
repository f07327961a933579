"""The chaos checker (rdq_compliance.chaos.checker) on crafted and simulated histories.

For every rule: a crafted history the checker rejects, with the rule id, the task, the
workers and the tokens named, and the matching clean history it accepts. Then random
runs of a small simulated queue (the reference store on a manual clock, with lost
replies, kills mid-operation, pauses and redrives) that the checker must all accept,
the same runs mutated (a LEASE_EXPIRED attempt dropped, a reclaim moved earlier, ...)
that it must reject, and the deliberately broken stores of SPEC §5 driven through the
same simulator.
"""

from __future__ import annotations

import copy
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rdq_compliance.chaos import checker
from rdq_compliance.chaos.checker import FinalState, Violation, check
from rdq_compliance.chaos.events import Journal, read_history
from rdq_compliance.rules import RULES
from rdq_core.model import (
    Attempt,
    Outcome,
    Status,
    Task,
    micros_from_utc,
    utc_from_micros,
)
from tests.broken import memory as broken
from tests.chaos.checker_sim import LEASE_US, Sim, run

# ---- a small builder for crafted histories ----------------------------------------------------

T0 = 1_700_000_000_000_000
SEC = 1_000_000
LEASE = 10  # seconds

SUCCESS = Outcome.SUCCESS
RETRY = Outcome.RETRYABLE_FAILURE
PERM = Outcome.PERMANENT_FAILURE
EXPIRED = Outcome.LEASE_EXPIRED

A, B, C = "a" * 32, "b" * 32, "c" * 32  # claim tokens


def at(s: float) -> int:
    """Storage time ``s`` seconds into the run (integer µs)."""
    return T0 + round(s * SEC)


class H:
    """A history under construction: events as the fleet writes them (times in seconds)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.seq: Counter[str] = Counter()
        self.ran: set[str] = set()

    def ev(self, s: float, proc: str, type_: str, op: str, **fields: Any) -> dict[str, Any]:
        e = {"seq": self.seq[proc], "proc": proc, "pid": 100, "t": at(s) / SEC}
        e.update(type=type_, op=op, **fields)
        self.seq[proc] += 1
        self.events.append(e)
        return e

    def enqueue(self, *tasks: str) -> H:
        for t in tasks:
            self.ev(0, "harness", "ok", "enqueue", task=t, handler="h", created=True)
        return self

    def claim(
        self,
        s: float,
        proc: str,
        task: str,
        token: str,
        *,
        reclaimed: bool = False,
        no: int = 1,
        count: int = 0,
        lease: float = LEASE,
    ) -> H:
        self.ev(s, proc, "invoke", "claim", limit=1)
        entry = {
            "task": task,
            "token": token,
            "claimed_at": at(s),
            "lease_expires_at": at(s + lease),
            "reclaimed": reclaimed,
            "attempt_count": count,
            "attempt_no": no,
        }
        self.ev(s, proc, "ok", "claim", claims=[entry])
        return self

    def lost_claim(self, s: float, proc: str) -> H:
        """A claim whose reply was lost: it may have happened, token unknown."""
        self.ev(s, proc, "invoke", "claim", limit=1)
        self.ev(s, proc, "info", "claim", error="BackendUnavailable: connection lost")
        return self

    def run(
        self,
        s: float,
        proc: str,
        task: str,
        token: str,
        *,
        end: float | None = None,
        again: bool = False,
    ) -> H:
        """The handler starts (once per token unless ``again``) and, with ``end``, returns."""
        if again or token not in self.ran:
            self.ran.add(token)
            self.ev(s, proc, "invoke", "run", task=task, token=token, attempt_no=1, handler="h")
        if end is not None:
            self.ev(end, proc, "ok", "run", task=task, token=token)
        return self

    def beat(
        self, s: float, proc: str, task: str, token: str, type_: str = "ok", lease: float = LEASE
    ) -> H:
        self.ev(s, proc, "invoke", "heartbeat", task=task, token=token)
        if type_ == "ok":
            self.ev(s, proc, "ok", "heartbeat", task=task, token=token,
                    lease_expires_at=at(s + lease))
        elif type_ == "fail":
            self.ev(s, proc, "fail", "heartbeat", task=task, token=token, error="stale")
        else:
            self.ev(s, proc, "info", "heartbeat", task=task, token=token, error="unavailable")
        return self

    def report(
        self, s: float, proc: str, task: str, token: str, op: str = "complete", type_: str = "ok"
    ) -> H:
        self.ev(s, proc, "invoke", op, task=task, token=token)
        if type_ != "open":
            extra = {"error": "stale"} if type_ == "fail" else {}
            self.ev(s, proc, type_, op, task=task, token=token, **extra)
        if type_ == "fail":
            self.ev(s, proc, "info", "lease_lost", task=task, token=token)
        return self

    def redrive(self, s: float, *tasks: str) -> H:
        self.ev(s, "harness", "invoke", "redrive", tasks=list(tasks))
        self.ev(s, "harness", "ok", "redrive", tasks=list(tasks), count=len(tasks))
        return self

    def kill(self, s: float, proc: str) -> H:
        self.ev(s, "harness", "info", "fault", kind="kill", target=proc)
        return self


def att(no: int, start: float, fin: float, outcome: Outcome) -> Attempt:
    return Attempt(no, utc_from_micros(at(start)), utc_from_micros(at(fin)), outcome)


def task(
    task_id: str, status: Status, *attempts: Attempt, redrives: int = 0, count: int | None = None
) -> Task:
    return Task(
        id=task_id,
        queue="q",
        handler="h",
        payload=b"",
        headers={},
        status=status,
        attempt_count=len(attempts) if count is None else count,
        redrive_count=redrives,
        next_attempt_at=None,
        lease_expires_at=None,
        created_at=utc_from_micros(T0),
        attempts=attempts,
    )


def final(
    *tasks: Task,
    dlq: list[Task] | None = None,
    enqueued: tuple[str, ...] = (),
    drained: bool = True,
) -> FinalState:
    dead = [t for t in tasks if t.status is Status.DEAD]
    return FinalState(
        tasks={t.id: t for t in tasks},
        dlq=dead if dlq is None else dlq,
        enqueued=frozenset(enqueued or [t.id for t in tasks]),
        drained=drained,
    )


def of(violations: list[Violation], rule: str) -> list[Violation]:
    assert rule in RULES
    return [v for v in violations if v.rule == rule]


def assert_names(
    v: Violation, task_id: str, workers: tuple[str, ...] = (), tokens: tuple[str, ...] = ()
) -> None:
    """The violation and its message name the task, workers and tokens."""
    assert v.task == task_id
    assert v.message.startswith(f"[{v.rule}] ")
    assert repr(task_id) in v.message
    for w in workers:
        assert w in v.workers, (w, v.workers)
        assert w in v.message
    for tok in tokens:
        assert tok in v.tokens, (tok, v.tokens)
        assert tok in v.message
    text = str(v)
    assert text.startswith(v.message)
    if v.excerpt:
        assert "timeline of task" in text


def clean(events: list[dict[str, Any]], state: FinalState) -> None:
    got = check(events, state)
    assert got == [], "\n\n".join(map(str, got))


# ---- a correct run --------------------------------------------------------------------------


def test_a_plain_correct_run_passes() -> None:
    h = H().enqueue("t1", "t2")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).beat(3, "w0", "t1", A)
    h.run(0, "w0", "t1", A, end=5).report(5, "w0", "t1", A)
    h.claim(1, "w1", "t2", B).run(1, "w1", "t2", B, end=2)
    h.report(2, "w1", "t2", B, "dead_letter")
    state = final(
        task("t1", Status.SUCCEEDED, att(1, 0, 5, SUCCESS)),
        task("t2", Status.DEAD, att(1, 1, 2, PERM)),
    )
    clean(h.events, state)


def test_every_rule_id_is_declared() -> None:
    assert set(checker.RULES) <= set(RULES)
    for rule in ("lease-expired-recorded", "execution-count", "dlq-complete", "drain-timeout"):
        assert rule in checker.RULES


# ---- rule 1: mutual exclusion ---------------------------------------------------------------


def overlapping(second_at: float, *, first_outcome_at: float | None = None) -> tuple[H, FinalState]:
    """w0 claims t1 at 0 (lease 10 s); w1 claims it again (not as a reclaim) at ``second_at``."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    attempts = []
    if first_outcome_at is not None:
        h.report(first_outcome_at, "w0", "t1", A, "reschedule")
        attempts.append(att(1, 0, first_outcome_at, RETRY))
    h.claim(second_at, "w1", "t1", B, no=len(attempts) + 1, count=len(attempts))
    h.run(second_at, "w1", "t1", B, end=second_at + 1).report(second_at + 1, "w1", "t1", B)
    attempts.append(att(len(attempts) + 1, second_at, second_at + 1, SUCCESS))
    return h, final(task("t1", Status.SUCCEEDED, *attempts))


def test_overlapping_claims_are_rejected() -> None:
    h, state = overlapping(4)
    got = of(check(h.events, state), "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))
    assert "was live" in got[0].message


def test_two_workers_given_one_task_at_one_instant_are_rejected() -> None:
    """Check-then-act: both claims read the task PENDING and stamp the same instant."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).claim(0, "w1", "t1", B)
    h.run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "complete", "fail")
    h.run(0, "w1", "t1", B, end=1).report(1, "w1", "t1", B)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
             "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))


def test_a_claim_after_the_outcome_is_accepted() -> None:
    h, state = overlapping(4, first_outcome_at=3)
    clean(h.events, state)


def test_a_claim_in_the_same_microsecond_as_the_outcome_is_accepted() -> None:
    h, state = overlapping(3, first_outcome_at=3)  # a clock that stood still
    clean(h.events, state)


def test_two_acknowledged_outcomes_for_one_token_are_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A).report(2, "w0", "t1", A)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
             "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0",), (A,))
    assert "2 outcome calls" in got[0].message


def test_two_outcome_attempts_for_one_claim_are_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS), att(2, 0, 2, SUCCESS)))
    got = of(check(h.events, state), "one-claim")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0",), (A,))


# ---- rule 3: reclaim only after the lease expired --------------------------------------------


def reclaimed_at(s: float, *, beat: str | None = None, beat_at: float = 8) -> tuple[H, FinalState]:
    """w0 claims t1 at 0 and may heartbeat at ``beat_at``; w1 reclaims it at ``s``."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    if beat is not None:
        h.beat(beat_at, "w0", "t1", A, beat)
    h.kill(s - 0.5, "w0")
    h.claim(s, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(s, "w1", "t1", B, end=s + 1).report(s + 1, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, s, EXPIRED), att(2, s, s + 1, SUCCESS)))
    return h, state


def test_a_reclaim_of_a_live_lease_is_rejected() -> None:
    h, state = reclaimed_at(6)
    got = check(h.events, state)
    stolen = of(got, "lease-respected")
    assert len(stolen) == 1, got
    assert_names(stolen[0], "t1", ("w0", "w1"), (A, B))
    assert not of(got, "one-claim")
    # the excerpt shows both claims and the kill of w0
    ops = [(e["proc"], e["op"]) for e in stolen[0].excerpt]
    assert ("w0", "claim") in ops and ("w1", "claim") in ops and ("harness", "fault") in ops


def test_a_reclaim_of_a_lease_extended_by_a_heartbeat_is_rejected() -> None:
    h, state = reclaimed_at(12, beat="ok")  # the heartbeat at 8 s extended the lease to 18 s
    stolen = of(check(h.events, state), "lease-respected")
    assert len(stolen) == 1
    assert_names(stolen[0], "t1", ("w0", "w1"), (A, B))
    assert "extended by heartbeats" in stolen[0].message


@pytest.mark.parametrize("beat", [None, "info", "fail"])
def test_a_reclaim_after_expiry_is_accepted(beat: str | None) -> None:
    # without a heartbeat the lease ends at 10 s; an unknown or refused heartbeat is not
    # assumed to have extended it
    h, state = reclaimed_at(12 if beat else 10, beat=beat)
    clean(h.events, state)


def test_a_reclaim_after_the_extended_lease_is_accepted() -> None:
    h, state = reclaimed_at(18, beat="ok")
    clean(h.events, state)


def unknown_victim(reclaim_at: float) -> tuple[H, FinalState]:
    """w0's claim reply is lost at 0 (the claim happened); w1 reclaims at ``reclaim_at``."""
    h = H().enqueue("t1")
    h.claim(-20, "w2", "t0", C).report(-19, "w2", "t0", C)  # shows the run's lease: 10 s
    h.lost_claim(0, "w0").kill(1, "w0")
    h.claim(reclaim_at, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(reclaim_at, "w1", "t1", B, end=reclaim_at + 1).report(reclaim_at + 1, "w1", "t1", B)
    state = final(
        task("t0", Status.SUCCEEDED, att(1, -20, -19, SUCCESS)),
        task(
            "t1", Status.SUCCEEDED,
            att(1, 0, reclaim_at, EXPIRED), att(2, reclaim_at, reclaim_at + 1, SUCCESS),
        ),
    )
    return h, state


def test_a_stolen_lease_of_a_claim_whose_reply_was_lost_is_rejected() -> None:
    h, state = unknown_victim(3)
    stolen = of(check(h.events, state), "lease-respected")
    assert len(stolen) == 1
    assert_names(stolen[0], "t1", ("w1",), (B,))
    assert "no worker learnt of" in stolen[0].message


def test_a_reclaim_of_a_claim_whose_reply_was_lost_is_accepted() -> None:
    h, state = unknown_victim(10)
    clean(h.events, state)


def test_a_reclaim_not_reported_as_such_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(5, "w0")
    h.claim(12, "w1", "t1", B).run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 12, 13, SUCCESS))))
    hidden = of(got, "reclaim-expired")
    assert len(hidden) == 1
    assert_names(hidden[0], "t1", ("w0", "w1"), (A, B))
    assert "reclaimed=False" in hidden[0].message
    missing = of(got, "lease-expired-recorded")  # ... and it wrote no LEASE_EXPIRED either
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w0", "w1"), (A, B))


# ---- rule 4: LEASE_EXPIRED recorded ----------------------------------------------------------


def test_a_missing_lease_expired_attempt_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(5, "w0")
    h.claim(12, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, att(2, 12, 13, SUCCESS))))
    missing = of(got, "lease-expired-recorded")
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w0", "w1"), (A, B))
    assert "LEASE_EXPIRED attempt is missing" in missing[0].message


def test_a_missing_lease_expired_attempt_of_an_unknown_claim_is_rejected() -> None:
    h = H().enqueue("t1")
    h.lost_claim(0, "w0").kill(1, "w0")
    h.claim(12, "w1", "t1", B, reclaimed=True, no=1, count=0)
    h.run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 12, 13, SUCCESS))))
    missing = of(got, "lease-expired-recorded")
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w1",), (B,))
    assert "ending at that reclaim" in missing[0].message


def test_a_lease_expired_attempt_for_a_claim_with_an_outcome_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "reschedule")
    h.claim(12, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(12, "w1", "t1", B, end=13).report(13, "w1", "t1", B)
    state = final(task(
        "t1", Status.SUCCEEDED,
        att(1, 0, 1, RETRY), att(2, 0, 12, EXPIRED), att(3, 12, 13, SUCCESS),
    ))
    got = of(check(h.events, state), "lease-expired-recorded")
    assert got and got[0].task == "t1"
    assert_names(got[0], "t1", ("w0",), (A,))


def test_a_worker_killed_mid_run_costs_one_lease_and_is_accepted() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).beat(3, "w0", "t1", A).kill(4, "w0")
    h.claim(13, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(13, "w1", "t1", B, end=14).report(14, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 13, EXPIRED), att(2, 13, 14, SUCCESS)))
    clean(h.events, state)


@pytest.mark.parametrize("applied", [True, False])
def test_a_worker_killed_mid_report_is_accepted_either_way(applied: bool) -> None:
    """The complete invoke is left open (the process died): it may or may not have acted."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A, "complete", "open").kill(1, "w0")
    if applied:
        state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))
    else:
        h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
        h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
        state = final(
            task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS))
        )
    clean(h.events, state)


def test_a_worker_killed_mid_claim_is_accepted() -> None:
    """The claim invoke is left open; the claim happened and was later reclaimed."""
    h = H().enqueue("t1")
    h.ev(0, "w0", "invoke", "claim", limit=1)
    h.kill(0.5, "w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS)))
    clean(h.events, state)


# ---- rule 5: invariant H -----------------------------------------------------------------------


def redriven(second_no: int, attempts: tuple[Attempt, ...]) -> tuple[H, FinalState]:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "dead_letter")
    h.redrive(3, "t1")
    h.claim(5, "w1", "t1", B, no=second_no, count=0)
    h.run(5, "w1", "t1", B, end=6).report(6, "w1", "t1", B)
    return h, final(task("t1", Status.SUCCEEDED, *attempts, redrives=1))


def test_numbering_restarting_after_a_redrive_is_rejected() -> None:
    h, state = redriven(1, (att(1, 5, 6, SUCCESS),))  # history reset by the redrive
    got = check(h.events, state)
    restarted = of(got, "history-numbering")
    assert len(restarted) == 1
    assert_names(restarted[0], "t1", ("w0", "w1"), (A, B))
    assert "restarted" in restarted[0].message
    lost = of(got, "outcome-recorded")  # w0's acknowledged dead_letter is gone too
    assert len(lost) == 1
    assert_names(lost[0], "t1", ("w0",), (A,))


def test_numbering_continuing_after_a_redrive_is_accepted() -> None:
    h, state = redriven(2, (att(1, 0, 1, PERM), att(2, 5, 6, SUCCESS)))
    clean(h.events, state)


def test_a_duplicate_attempt_number_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(4, "w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(1, 10, 11, SUCCESS)))
    got = of(check(h.events, state), "history-numbering")
    dup = [v for v in got if "duplicate" in v.message]
    assert len(dup) == 1
    assert_names(dup[0], "t1", ("w0", "w1"), (A, B))


def test_an_attempt_numbered_below_its_claim_is_rejected() -> None:
    """The claim saw attempt 1 in the history (announced 2); its attempt reuses 1."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A, no=2, count=1).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
             "history-numbering")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0",), (A,))
    assert "already used" in got[0].message


def test_gaps_in_numbering_are_accepted() -> None:
    h, _ = redriven(4, ())
    state = final(
        task("t1", Status.SUCCEEDED, att(3, 0, 1, PERM), att(7, 5, 6, SUCCESS), redrives=1)
    )
    clean(h.events, state)


# ---- rule 6: executions ------------------------------------------------------------------------


def test_a_task_run_more_often_than_its_attempts_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).run(1, "w0", "t1", A, end=2, again=True)
    h.report(2, "w0", "t1", A)
    got = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 2, SUCCESS)))),
             "execution-count")
    assert len(got) == 2  # twice under one token, and 2 runs for 1 attempt
    for v in got:
        assert_names(v, "t1", ("w0",), (A,))


def test_runs_of_reclaimed_and_open_claims_are_accepted() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(2, "w0")  # ran, no outcome
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1).run(10, "w1", "t1", B)
    state = final(task("t1", Status.IN_FLIGHT, att(1, 0, 10, EXPIRED)), drained=False)
    got = check(h.events, state)
    assert [v.rule for v in got] == ["drain-timeout"]  # still running: no execution-count


# ---- rule 7: fencing ---------------------------------------------------------------------------


def stale_worker(beat: str | None, report: str | None, *, at_: float = 12) -> tuple[H, FinalState]:
    """w0 pauses past its lease; w1 reclaims t1 at 10; w0 wakes at ``at_``."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    h.ev(1, "harness", "info", "fault", kind="pause", target="w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1).run(10, "w1", "t1", B)
    h.ev(at_ - 0.5, "harness", "info", "fault", kind="resume", target="w0")
    if beat is not None:
        h.beat(at_, "w0", "t1", A, beat)
    if report is not None:
        h.report(at_ + 0.5, "w0", "t1", A, "complete", report)
    h.run(10, "w1", "t1", B, end=15).report(15, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 15, SUCCESS)))
    return h, state


def test_a_stale_heartbeat_accepted_is_rejected() -> None:
    h, state = stale_worker("ok", None)
    got = check(h.events, state)
    fenced = of(got, "fencing")
    assert len(fenced) == 1, got
    assert_names(fenced[0], "t1", ("w0", "w1"), (A, B))
    assert "heartbeat" in fenced[0].message and "after w1 claimed it" in fenced[0].message
    assert not of(got, "lease-respected")  # the stale beat does not make w1's claim early


def test_a_heartbeat_after_its_own_outcome_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    h.beat(3, "w0", "t1", A)
    fenced = of(check(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))),
                "fencing")
    assert len(fenced) == 1
    assert_names(fenced[0], "t1", ("w0",), (A,))
    assert "its own outcome" in fenced[0].message


def test_a_stale_worker_refused_is_accepted() -> None:
    h, state = stale_worker("fail", "fail")
    clean(h.events, state)


def test_a_late_worker_nobody_reclaimed_is_accepted() -> None:
    """The token fences, not the clock: past its lease, a worker may still report."""
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    h.beat(12, "w0", "t1", A).run(12, "w0", "t1", A, end=14)
    h.report(14, "w0", "t1", A)
    h.beat(15, "w0", "t1", A, "fail")  # a beat refused after the outcome is fine
    clean(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 14, SUCCESS))))


def test_a_stale_outcome_accepted_is_rejected() -> None:
    """The broken store accepted w0's complete after the reclaim, as w1's attempt."""
    h, _ = stale_worker(None, "ok")
    h.events = [e for e in h.events if not (e["proc"] == "w1" and e["op"] == "complete")]
    h.report(15, "w1", "t1", B, "complete", "fail")
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 12.5, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    assert len(fenced) == 2
    acknowledged, written = fenced
    assert_names(acknowledged, "t1", ("w0", "w1"), (A, B))
    assert "records that claim as attempt 1 LEASE_EXPIRED" in acknowledged.message
    assert_names(written, "t1", ("w1",), (B,))
    assert "refused as stale" in written.message


def test_an_outcome_accepted_after_the_next_claim_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=11).report(11, "w0", "t1", A, "reschedule")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=12).report(12, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 11, RETRY), att(2, 10, 12, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    late = [v for v in fenced if "a stale outcome accepted" in v.message]
    assert len(late) == 1
    assert_names(late[0], "t1", ("w0", "w1"), (A, B))


def test_a_token_minted_twice_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    h.claim(10, "w1", "t1", A, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", A, end=11).report(11, "w1", "t1", A)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    assert len(fenced) == 1
    assert_names(fenced[0], "t1", ("w0", "w1"), (A,))
    assert "same token" in fenced[0].message


def test_an_outcome_at_no_claim_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS), att(2, 5, 6, SUCCESS)))
    fenced = of(check(h.events, state), "fencing")
    assert len(fenced) == 1
    assert_names(fenced[0], "t1", ("w0",), (A,))
    assert "starts at no claim" in fenced[0].message


# ---- acknowledged outcomes are kept ----------------------------------------------------------


def test_an_acknowledged_outcome_missing_from_the_history_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    got = check(h.events, final(task("t1", Status.SUCCEEDED, count=1)))
    lost = of(got, "outcome-recorded")
    assert len(lost) == 1
    assert_names(lost[0], "t1", ("w0",), (A,))
    assert of(got, "transition")  # SUCCEEDED without its SUCCESS attempt


@pytest.mark.parametrize("applied", [True, False])
def test_an_unknown_outcome_is_accepted_either_way(applied: bool) -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "complete",
                                                                   "info")
    if applied:
        state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)))
    else:
        h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
        h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B)
        state = final(
            task("t1", Status.SUCCEEDED, att(1, 0, 10, EXPIRED), att(2, 10, 11, SUCCESS))
        )
    clean(h.events, state)


# ---- rule 2: no lost task, the drain, the DLQ ------------------------------------------------


def test_a_lost_task_is_rejected() -> None:
    h = H().enqueue("t1", "t2")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "reschedule")
    state = final(task("t2", Status.SUCCEEDED), enqueued=("t2",))  # t1 only in enqueue events
    lost = of(check(h.events, state), "no-loss")
    assert len(lost) == 1
    assert_names(lost[0], "t1", ("w0",), (A,))
    assert "no longer finds it" in lost[0].message


@pytest.mark.parametrize("drained, rule", [(True, "drain-complete"), (False, "drain-timeout")])
def test_live_tasks_after_the_drain_are_rejected(drained: bool, rule: str) -> None:
    h = H().enqueue("t1", "t2")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A)
    state = final(task("t1", Status.IN_FLIGHT), task("t2", Status.PENDING), drained=drained)
    got = check(h.events, state)
    assert sorted((v.rule, v.task) for v in got) == [(rule, "t1"), (rule, "t2")]
    assert_names(got[0], "t1", ("w0",), (A,))
    if not drained:
        assert all("still live after drain timeout" in v.message for v in got)


def dead_run() -> H:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A, "dead_letter")
    return h


def test_a_dead_task_missing_from_the_dlq_is_rejected() -> None:
    got = check(dead_run().events, final(task("t1", Status.DEAD, att(1, 0, 1, PERM)), dlq=[]))
    missing = of(got, "dlq-complete")
    assert len(missing) == 1
    assert_names(missing[0], "t1", ("w0",), (A,))
    assert "missing from the DLQ" in missing[0].message


def test_a_truncated_dlq_history_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A).kill(4, "w0")
    h.claim(10, "w1", "t1", B, reclaimed=True, no=2, count=1)
    h.run(10, "w1", "t1", B, end=11).report(11, "w1", "t1", B, "dead_letter")
    full = task("t1", Status.DEAD, att(1, 0, 10, EXPIRED), att(2, 10, 11, PERM))
    cut = task("t1", Status.DEAD, att(2, 10, 11, PERM))
    got = of(check(h.events, final(full, dlq=[cut])), "dlq-complete")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))
    assert "whole history" in got[0].message
    clean(h.events, final(full, dlq=[full]))


def test_a_dlq_listing_a_live_task_or_twice_is_rejected() -> None:
    dead = task("t1", Status.DEAD, att(1, 0, 1, PERM))
    got = check(dead_run().events, final(dead, dlq=[dead, dead]))
    assert [v.rule for v in got] == ["dlq-complete"]
    assert "2 times" in got[0].message
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    done = task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))
    got = check(h.events, final(done, dlq=[done]))
    assert [v.rule for v in got] == ["dlq-complete"]


# ---- terminal states -------------------------------------------------------------------------


def test_a_succeeded_task_claimed_again_is_rejected() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    h.claim(5, "w1", "t1", B, no=2, count=1).run(5, "w1", "t1", B, end=6).report(6, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS), att(2, 5, 6, SUCCESS)))
    got = of(check(h.events, state), "terminal-final")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))


def test_a_dead_task_claimed_without_a_redrive_is_rejected() -> None:
    h = dead_run()
    h.claim(5, "w1", "t1", B, no=2, count=0).run(5, "w1", "t1", B, end=6).report(6, "w1", "t1", B)
    state = final(task("t1", Status.SUCCEEDED, att(1, 0, 1, PERM), att(2, 5, 6, SUCCESS)))
    got = of(check(h.events, state), "terminal-final")
    assert len(got) == 1
    assert_names(got[0], "t1", ("w0", "w1"), (A, B))
    h2 = dead_run().redrive(3, "t1")
    h2.claim(5, "w1", "t1", B, no=2, count=0).run(5, "w1", "t1", B, end=6)
    h2.report(6, "w1", "t1", B)
    clean(h2.events, state)


# ---- journals: a torn last line ----------------------------------------------------------------


def write_journals(tmp_path: Path, h: H) -> list[Path]:
    paths: dict[str, Path] = {}
    journals: dict[str, Journal] = {}
    for e in h.events:
        proc = e["proc"]
        if proc not in journals:
            paths[proc] = tmp_path / f"{proc}.jsonl"
            journals[proc] = Journal(paths[proc], proc)
        fields = {k: v for k, v in e.items() if k not in ("seq", "proc", "pid", "t", "type", "op")}
        journals[proc].write(e["type"], e["op"], **fields)
    for j in journals.values():
        j.close()
    return list(paths.values())


def test_a_torn_last_journal_line_is_read_as_an_open_operation(tmp_path: Path) -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1)
    h.report(1, "w0", "t1", A, "complete", "open")
    paths = write_journals(tmp_path, h)
    w0 = tmp_path / "w0.jsonl"
    with open(w0, "ab") as fh:  # SIGKILL while writing the ``ok complete`` line
        fh.write(b'{"seq":5,"proc":"w0","pid":1,"t":1.0,"type":"ok","op":"compl')
    events = read_history(paths)
    assert len(events) == len(h.events)
    assert events[-1]["op"] == "complete" and events[-1]["type"] == "invoke"
    clean(events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))))
    # the same journals still prove a violation elsewhere in the history
    got = check(events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS)), dlq=[
        task("t1", Status.DEAD)]))
    assert [v.rule for v in got] == ["dlq-complete"]


def test_malformed_events_are_skipped_not_fatal() -> None:
    h = H().enqueue("t1")
    h.claim(0, "w0", "t1", A).run(0, "w0", "t1", A, end=1).report(1, "w0", "t1", A)
    h.events.append({"proc": "w9", "type": "ok", "op": "claim", "claims": [{"task": "t1"}]})
    h.events.append({"proc": "w9", "type": "ok", "op": "heartbeat", "task": "t1"})
    h.events.append({"proc": "w9"})
    clean(h.events, final(task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))))


def test_violation_report_is_readable() -> None:
    h, state = reclaimed_at(6)
    (v,) = of(check(h.events, state), "lease-respected")
    text = str(v)
    lines = text.splitlines()
    assert lines[0] == v.message
    assert lines[1].strip().startswith("timeline of task 't1'")
    claim_lines = [ln for ln in lines if " claim " in ln and " ok " in ln]
    assert len(claim_lines) == 2
    assert "reclaimed=True" in claim_lines[1] and "claimed_at=" in claim_lines[1]
    assert all(e.get("claims", [{"task": "t1"}])[0]["task"] == "t1" for e in v.excerpt)


def test_each_rule_function_runs_alone() -> None:
    h, state = reclaimed_at(6)
    assert [v.rule for v in checker.check_mutual_exclusion(h.events, state)] == ["lease-respected"]
    assert checker.check_fencing(h.events, state) == []
    for fn in (
        checker.check_reclaim_after_expiry, checker.check_lease_expired_recorded,
        checker.check_history_numbering, checker.check_execution_count,
        checker.check_outcomes_recorded, checker.check_no_loss, checker.check_drained,
        checker.check_dlq, checker.check_terminal_final, checker.check_final_status,
    ):
        assert fn.__doc__
        assert fn(h.events, state) == []


def test_final_state_accepts_a_list_of_tasks() -> None:
    t = task("t1", Status.SUCCEEDED, att(1, 0, 1, SUCCESS))
    state = FinalState([t], (), ["t1"])  # type: ignore[arg-type]
    assert state.tasks == {"t1": t} and state.enqueued == frozenset({"t1"}) and state.drained


# ---- simulated runs (hypothesis) ---------------------------------------------------------------

steps_st = st.lists(
    st.tuples(*(st.integers(0, 49) for _ in range(4))), min_size=1, max_size=60
)
tick_st = st.sampled_from([1, 1, 0, 37])  # µs per storage call; 0: a clock standing still

SIM_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SIM_SETTINGS
@given(steps=steps_st, tick=tick_st)
def test_random_correct_runs_are_accepted(steps: list[tuple[int, ...]], tick: int) -> None:
    _sim, events, state = run(steps, tick_us=tick)
    got = check(events, state)
    assert got == [], "\n\n".join(map(str, got))


# -- mutations: each returns (events, final state, task, expected rule) or None


def _claims(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for e in events if e["op"] == "claim" and e["type"] == "ok" for c in e["claims"]]


def _with_task(state: FinalState, t: Task) -> FinalState:
    tasks = dict(state.tasks)
    tasks[t.id] = t
    dlq = [t if d.id == t.id else d for d in state.dlq]
    return FinalState(tasks, dlq, state.enqueued, state.drained)


def drop_lease_expired(events, state, pick):  # type: ignore[no-untyped-def]
    starts = {(c["task"], c["claimed_at"]) for c in _claims(events)}
    cands = [
        (t, a) for t in state.tasks.values() for a in t.attempts
        if a.outcome is EXPIRED and (t.id, micros_from_utc(a.started_at)) in starts
    ]
    if not cands:
        return None
    t, a = cands[pick % len(cands)]
    cut = Task(**{**t.__dict__, "attempts": tuple(x for x in t.attempts if x is not a)})
    return events, _with_task(state, cut), t.id, "lease-expired-recorded"


def shift_reclaim_earlier(events, state, pick):  # type: ignore[no-untyped-def]
    claims = _claims(events)
    starts = {(c["task"], c["claimed_at"]) for c in claims}
    cands = []
    for c in claims:
        t = state.tasks.get(c["task"])
        if not c["reclaimed"] or t is None:
            continue
        for a in t.attempts:  # the LEASE_EXPIRED attempt this reclaim wrote, of a known claim
            start, fin = micros_from_utc(a.started_at), micros_from_utc(a.finished_at)
            if a.outcome is EXPIRED and fin == c["claimed_at"] and (t.id, start) in starts:
                if not any(micros_from_utc(x.started_at) == start + 1 for x in t.attempts):
                    cands.append((c, t, start))
    if not cands:
        return None
    c, t, victim_start = cands[pick % len(cands)]
    events = copy.deepcopy(events)
    old = c["claimed_at"]
    new = victim_start + 1  # one µs after the claim it reclaims: its lease was live
    for e in _claims(events):
        if e["task"] == c["task"] and e["token"] == c["token"]:
            e["claimed_at"], e["lease_expires_at"] = new, e["lease_expires_at"] - (old - new)
    moved = []
    for a in t.attempts:
        start, fin = micros_from_utc(a.started_at), micros_from_utc(a.finished_at)
        if start == old:
            a = Attempt(a.attempt_no, utc_from_micros(new), a.finished_at, a.outcome, a.error)
        elif fin == old and a.outcome is EXPIRED:
            a = Attempt(a.attempt_no, a.started_at, utc_from_micros(new), a.outcome, a.error)
        moved.append(a)
    shifted = Task(**{**t.__dict__, "attempts": tuple(moved)})
    return events, _with_task(state, shifted), t.id, "lease-respected"


def hide_reclaim(events, state, pick):  # type: ignore[no-untyped-def]
    reclaims = [c for c in _claims(events) if c["reclaimed"] and c["task"] in state.tasks]
    if not reclaims:
        return None
    target = reclaims[pick % len(reclaims)]
    events = copy.deepcopy(events)
    for c in _claims(events):
        if c["task"] == target["task"] and c["token"] == target["token"]:
            c["reclaimed"] = False
    return events, state, target["task"], "reclaim-expired"


def drop_task(events, state, pick):  # type: ignore[no-untyped-def]
    ids = sorted(state.tasks)
    if not ids:
        return None
    gone = ids[pick % len(ids)]
    tasks = {k: v for k, v in state.tasks.items() if k != gone}
    dlq = [t for t in state.dlq if t.id != gone]
    return events, FinalState(tasks, dlq, state.enqueued, state.drained), gone, "no-loss"


def drop_from_dlq(events, state, pick):  # type: ignore[no-untyped-def]
    if not state.dlq:
        return None
    gone = state.dlq[pick % len(state.dlq)].id
    dlq = [t for t in state.dlq if t.id != gone]
    return events, FinalState(state.tasks, dlq, state.enqueued, state.drained), gone, "dlq-complete"


def run_twice(events, state, pick):  # type: ignore[no-untyped-def]
    runs = [i for i, e in enumerate(events) if e["op"] == "run" and e["type"] == "invoke"]
    if not runs:
        return None
    i = runs[pick % len(runs)]
    doubled = [*events[: i + 1], dict(events[i]), *events[i + 1 :]]
    return doubled, state, events[i]["task"], "execution-count"


MUTATIONS = [drop_lease_expired, shift_reclaim_earlier, hide_reclaim, drop_task, drop_from_dlq,
             run_twice]


@SIM_SETTINGS
@given(
    steps=steps_st,
    tick=st.sampled_from([1, 37]),
    mutation=st.sampled_from(MUTATIONS),
    pick=st.integers(0, 1000),
)
def test_mutated_runs_are_rejected(
    steps: list[tuple[int, ...]], tick: int, mutation: Any, pick: int
) -> None:
    _sim, events, state = run(steps, tick_us=tick)
    mutated = mutation(events, state, pick)
    assume(mutated is not None)
    events, state, task_id, rule = mutated
    got = check(events, state)
    assert any(v.rule == rule and v.task == task_id for v in got), (
        f"{mutation.__name__}: expected [{rule}] on {task_id!r}, got:\n"
        + "\n".join(v.message for v in got)
    )


# ---- the deliberately broken stores, through the simulator -------------------------------------


def _first(sim: Sim, w: Any) -> Any:
    return next(iter(w.held.values()))


def _report(sim: Sim, w: Any, kind: str = "complete", **kw: Any) -> None:
    """Report the worker's first held claim, if the store gave it one."""
    if w.held:
        sim.report(w, _first(sim, w), kind, **kw)


def script_steal(sim: Sim) -> None:  # a reclaim while the lease is live
    w0, w1 = sim.spawn(), sim.spawn()
    sim.enqueue(1)
    sim.claim(w0)
    sim.advance(LEASE_US // 2)
    sim.claim(w1)
    _report(sim, w1)


def script_stale_outcome(sim: Sim) -> None:  # w0 paused past its lease, then completes
    w0, w1 = sim.spawn(), sim.spawn()
    sim.enqueue(1)
    sim.claim(w0)
    sim.start(w0, _first(sim, w0))
    sim.advance(LEASE_US + 1)
    sim.claim(w1)
    _report(sim, w0)
    _report(sim, w1)


def script_stale_heartbeat(sim: Sim) -> None:
    w0, w1 = sim.spawn(), sim.spawn()
    sim.enqueue(1)
    sim.claim(w0)
    sim.advance(LEASE_US + 1)
    sim.claim(w1)
    sim.heartbeat(w0, _first(sim, w0))
    _report(sim, w1)


def script_kill_and_reclaim(sim: Sim) -> None:
    w0 = sim.spawn()
    sim.enqueue(1)
    sim.claim(w0)
    sim.start(w0, _first(sim, w0))
    w1 = sim.kill(w0)
    sim.advance(LEASE_US + 1)
    sim.claim(w1)
    _report(sim, w1)


def script_redrive_then_expire(sim: Sim) -> None:  # the original incident
    w0 = sim.spawn()
    sim.enqueue(1)
    sim.claim(w0)
    _report(sim, w0, "dead_letter")
    sim.redrive_dead()
    sim.claim(w0)
    w1 = sim.kill(w0)
    sim.advance(LEASE_US + 1)
    sim.claim(w1)


def script_complete_twice(sim: Sim) -> None:
    w0 = sim.spawn()
    sim.enqueue(1)
    sim.claim(w0)
    _report(sim, w0)
    sim.claim(w0)


def script_fail_then_succeed(sim: Sim) -> None:
    w0 = sim.spawn()
    sim.enqueue(2)
    for kind in ("reschedule", "dead_letter"):
        sim.claim(w0)
        _report(sim, w0, kind, outcome=Outcome.RETRYABLE_FAILURE)


@pytest.mark.parametrize(
    "store, script, rules",
    [
        ("ReclaimIgnoresLease", script_steal, {"lease-respected"}),
        ("OutcomeIgnoresToken", script_stale_outcome, {"fencing"}),
        ("TokenNotRotatedOnReclaim", script_stale_outcome, {"fencing"}),
        ("ReclaimWithoutLeaseExpiredAttempt", script_kill_and_reclaim, {"lease-expired-recorded"}),
        ("LeaseExpiredNumberedFromCount", script_redrive_then_expire, {"drain-timeout"}),
        ("RedriveResetsHistory", script_redrive_then_expire,
         {"history-numbering", "outcome-recorded"}),
        ("ClaimsTerminalTasks", script_complete_twice, {"terminal-final"}),
        ("CompleteRecordsNoAttempt", script_complete_twice, {"outcome-recorded", "transition"}),
        ("RescheduleDeletesTask", script_fail_then_succeed, {"no-loss"}),
        ("DlqMissesRetryableDeaths", script_fail_then_succeed, {"dlq-complete"}),
        ("ExpiredLeasesNeverReclaimed", script_kill_and_reclaim, {"drain-timeout"}),
    ],
)
def test_broken_stores_are_caught(store: str, script: Any, rules: set[str]) -> None:
    cls = getattr(broken, store)
    cls.victims.clear()
    sim = Sim(cls)
    script(sim)
    sim.drain()
    sim.wake_stale()
    got = check(sim.events, sim.final())
    assert cls.victims, "the script did not hit the bug"
    found = {v.rule for v in got if v.task in cls.victims}
    assert rules <= found, "\n\n".join(map(str, got))


@pytest.mark.parametrize(
    "script",
    [script_steal, script_stale_outcome, script_stale_heartbeat, script_kill_and_reclaim,
     script_redrive_then_expire, script_complete_twice, script_fail_then_succeed],
)
def test_the_same_scripts_pass_on_the_reference_store(script: Any) -> None:
    sim = Sim()
    script(sim)
    sim.drain()
    sim.wake_stale()
    clean(sim.events, sim.final())


def test_a_heartbeat_extending_a_lost_lease_is_caught() -> None:
    """SPEC §5.8: a backend whose extend_lease ignores the token."""

    class HeartbeatIgnoresToken(broken.MemoryStore):
        def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> Any:
            with self._lock:
                row = self._rows[task_id]
                expires = self._now() + lease
                row.task = row.task.__class__(**{**row.task.__dict__, "lease_expires_at": expires})
                return expires

    sim = Sim(HeartbeatIgnoresToken)
    script_stale_heartbeat(sim)
    sim.drain()
    got = check(sim.events, sim.final())
    assert "fencing" in {v.rule for v in got}, got


# ---- the real worker loop, journaled as the fleet journals it ----------------------------------


def real_run(tmp_path: Path, store_cls: type) -> tuple[list[dict[str, Any]], FinalState, int]:
    """Real rdq_core workers (threads) on a memory store, journaled by the fleet's
    JournalObserver; the store's clock jumps past every lease while handlers run, so
    tasks are reclaimed under running handlers, whose heartbeats and late (zombie)
    reports must be refused. Returns the history, the final state, the reclaims."""
    import threading
    import time
    from datetime import datetime

    from rdq_compliance.chaos.checker import read_final_state
    from rdq_compliance.chaos.journal_observer import JournalObserver
    from rdq_core.model import UTC, NewTask
    from rdq_core.retry import PermanentError, RetryableError, RetryPolicy
    from rdq_core.worker import Worker

    offset = [timedelta(0)]
    store = store_cls(clock=lambda: datetime.now(UTC) + offset[0])
    lease = timedelta(milliseconds=300)

    def handler(ctx: Any) -> None:
        kind = ctx.task.handler
        if kind == "slow":
            time.sleep(0.4)
        else:
            time.sleep(0.01)
        if kind == "flaky" and ctx.attempt_no < 2:
            raise RetryableError("flaky")
        if kind == "bad":
            raise PermanentError("bad")

    kinds = ["ok", "flaky", "bad", "slow"]
    ids = []
    harness = Journal(tmp_path / "harness.jsonl", "harness")
    for i in range(40):
        task_id = f"t{i:02d}"
        store.enqueue(NewTask(task_id, "q", kinds[i % 4]))
        harness.write("ok", "enqueue", task=task_id, handler=kinds[i % 4], created=True)
        ids.append(task_id)
    journals = [Journal(tmp_path / f"w{i}.jsonl", f"w{i}") for i in range(3)]
    workers = [
        Worker(
            store, "q", dict.fromkeys(kinds, handler),
            policy=RetryPolicy(max_attempts=5, base=timedelta(milliseconds=5),
                               cap=timedelta(milliseconds=5), jitter="none"),
            lease=lease, concurrency=2, batch=2, observer=JournalObserver(j),
            poll_interval=timedelta(milliseconds=5), max_poll_interval=timedelta(milliseconds=20),
            name=j.proc, report_after_lease_loss=True,
        )
        for j in journals
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,)) for w in workers]
    for t in threads:
        t.start()
    try:
        for _ in range(3):  # leases expire under running handlers
            time.sleep(0.25)
            offset[0] += timedelta(seconds=1)
            harness.write("info", "fault", kind="clock_jump", target="server")
        deadline = time.monotonic() + 30
        drained = False
        while time.monotonic() < deadline:
            stats = store.stats("q")
            if stats.pending == 0 and stats.in_flight == 0:
                drained = True
                break
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    for j in [harness, *journals]:
        j.close()
    events = read_history(tmp_path.glob("*.jsonl"))
    state = read_final_state(store, "q", ids, drained=drained)
    reclaims = sum(c["reclaimed"] for e in events if e["op"] == "claim" and e["type"] == "ok"
                   for c in e["claims"])
    return events, state, reclaims


def test_real_workers_with_lease_expiries_are_accepted(tmp_path: Path) -> None:
    from rdq_core.memory import MemoryStore

    events, state, reclaims = real_run(tmp_path, MemoryStore)
    assert state.drained
    assert reclaims > 0, "the clock jumps caused no reclaim"
    clean(events, state)


@pytest.mark.parametrize(
    "store, rule",
    [("OutcomeIgnoresToken", "fencing"), ("ReclaimIgnoresLease", "lease-respected")],
)
def test_real_workers_on_a_broken_store_are_caught(tmp_path: Path, store: str, rule: str) -> None:
    cls = getattr(broken, store)
    cls.victims.clear()
    events, state, _ = real_run(tmp_path, cls)
    got = check(events, state)
    assert cls.victims
    assert rule in {v.rule for v in got if v.task in cls.victims}, got
