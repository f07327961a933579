"""Where every task ends, on crafted histories (``no-loss``, ``drain-complete``,
``drain-timeout``, ``dlq-complete``, ``terminal-final``): rejected with the rule and
task named, or accepted."""

from __future__ import annotations

import pytest

from rdq_compliance.chaos.checker import check
from rdq_core.model import Status
from tests.chaos.crafted_history import (
    EXPIRED,
    PERM,
    SUCCESS,
    A,
    B,
    H,
    assert_names,
    att,
    clean,
    final,
    of,
    task,
)

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
        assert all("still live when the drain ended" in v.message for v in got)


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
