"""Deliberately broken stores (``contract.md#8-bug-classes``), driven through the simulator: each is
caught by the checker with its rule named, and the same scripts pass on the reference
store."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from rdq_compliance.chaos.checker import check
from rdq_core.model import Outcome
from tests.broken import memory as broken
from tests.chaos.checker_sim import LEASE_US, Sim
from tests.chaos.crafted_history import clean

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
    """Bug class stale-heartbeat: a backend whose extend_lease ignores the token."""

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
