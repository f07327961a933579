"""The checker on the real ``rdq_core`` worker loop, journaled as the fleet journals it:
leases expire under running handlers; a correct store is accepted, a broken one caught
with its rule named."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rdq_compliance.chaos.checker import FinalState, check
from rdq_compliance.chaos.events import Journal, read_history
from tests._waiting import HANG_S
from tests.broken import memory as broken
from tests.chaos.crafted_history import clean

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
    from rdq_core.model import UTC, NewTask, Outcome
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

    def reclaimed() -> bool:  # a LEASE_EXPIRED attempt: a claim was taken over
        return any(a.outcome is Outcome.LEASE_EXPIRED for i in ids for a in store.get(i).attempts)

    try:
        # Leases expire under running handlers: the clock jumps past every lease, three
        # times 0.25 s apart, then every 20 ms until a claim was taken over. A holder's
        # next heartbeat (a third of the lease later) renews an expired lease nobody took
        # yet, and pending tasks are claimed before expired ones, so whether a jump ends
        # in a reclaim is the machine's timing; each jump waits for a claim held (a jump
        # with none expires nothing).
        jumps, deadline = 0, time.monotonic() + HANG_S
        while jumps < 3 or not reclaimed():
            time.sleep(0.25 if jumps < 3 else 0.02)
            while not (stats := store.stats("q")).in_flight:
                assert stats.pending, f"the queue drained after {jumps} jumps, none reclaimed"
                assert time.monotonic() < deadline, f"no claim held after {jumps} jumps"
                time.sleep(0.005)
            offset[0] += timedelta(seconds=1)
            jumps += 1
            harness.write("info", "fault", kind="clock_jump", target="server")
        deadline = time.monotonic() + HANG_S  # the drain ends when the queue is empty
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
            t.join(HANG_S)
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
