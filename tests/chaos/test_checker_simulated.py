"""The checker on random runs of a small simulated queue (the reference store on a
manual clock, with lost replies, kills mid-operation, pauses and redrives): every run
is accepted; the same runs mutated (a LEASE_EXPIRED attempt dropped, a reclaim moved
earlier, ...) are rejected with the mutation's rule named."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rdq_compliance.chaos.checker import FinalState, check
from rdq_core.model import Attempt, Task, micros_from_utc, utc_from_micros
from tests.chaos.checker_sim import run
from tests.chaos.crafted_history import EXPIRED

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
