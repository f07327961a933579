"""The reference store's public back door (not SPI): what a model asks of it, and the one
write it offers beyond the SPI (:meth:`MemoryStore.claim_ids`)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rdq_core.errors import InvalidArgument
from rdq_core.memory import DueTask, MemoryStore
from rdq_core.model import UTC, ByIds, DlqFilter, NewTask, Outcome, Status

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=10)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemoryStore:
    return MemoryStore(clock)


def _enqueue(store: MemoryStore, tid: str, queue: str = "q", delay: float = 0) -> None:
    assert store.enqueue(NewTask(tid, queue, "h", delay=timedelta(seconds=delay)))


def test_task_ids_in_enqueue_order_a_purged_id_again_last(store: MemoryStore) -> None:
    for tid in ("b", "a", "c"):
        _enqueue(store, tid)
    claim = store.claim_due("q", 1, LEASE)[0]
    store.dead_letter(claim.task_id, claim.token)
    assert store.task_ids() == ["b", "a", "c"]
    assert store.purge("q", ByIds(["b"])) == 1
    _enqueue(store, "b")
    assert store.task_ids() == ["a", "c", "b"]


def test_claimable_in_claim_order_with_due_time_and_seq(store: MemoryStore, clock: Clock) -> None:
    _enqueue(store, "later", delay=2)
    _enqueue(store, "now-1")
    _enqueue(store, "now-2")
    _enqueue(store, "other", queue="other")
    held = store.claim_due("q", 1, LEASE)[0]
    assert held.task_id == "now-1"
    at = T0 + timedelta(seconds=3)
    assert [(d.id, d.due_at, d.seq, d.reclaim) for d in store.claimable("q", at)] == [
        ("now-2", T0, 3, False),
        ("later", T0 + timedelta(seconds=2), 1, False),
    ]
    expired = T0 + LEASE
    due = store.claimable("q", expired)
    assert [(d.id, d.reclaim) for d in due] == [
        ("now-2", False),
        ("later", False),
        ("now-1", True),
    ]
    assert isinstance(due[-1], DueTask) and due[-1].task.status is Status.IN_FLIGHT
    assert store.claimable("q", T0 - timedelta(seconds=1)) == []
    assert clock.now == T0  # asking never reads (or moves) the clock


def test_dead_at_and_selected_ids(store: MemoryStore, clock: Clock) -> None:
    for tid in ("d1", "d2", "live"):
        _enqueue(store, tid)
    for tid in ("d1", "d2"):
        clock.now += timedelta(seconds=1)
        claim = store.claim_due("q", 1, LEASE)[0]
        assert claim.task_id == tid
        store.dead_letter(tid, claim.token, None, Outcome.PERMANENT_FAILURE)
    assert store.dead_at("d1") == T0 + timedelta(seconds=1)
    assert store.dead_at("d2") == T0 + timedelta(seconds=2)
    assert store.dead_at("live") is None and store.dead_at("nope") is None
    assert store.selected_ids("q", DlqFilter(everything=True)) == ["d1", "d2"]
    assert store.selected_ids("q", ByIds(["d2", "live", "nope"])) == ["d2"]
    assert store.selected_ids("q", DlqFilter()) == []
    assert store.selected_ids("q", ByIds([])) == []
    assert store.selected_ids("other", DlqFilter(everything=True)) == []
    store.redrive("q", ByIds(["d1"]))
    assert store.dead_at("d1") is None


def test_claim_ids_claims_exactly_those_in_claim_order(store: MemoryStore, clock: Clock) -> None:
    for tid in ("a", "b", "c"):
        _enqueue(store, tid)
    first = store.claim_ids("q", ["a"], timedelta(seconds=1))
    clock.now += timedelta(seconds=2)  # a's lease has expired
    claims = store.claim_ids("q", ["c", "a"], LEASE)
    assert [(c.task_id, c.reclaimed) for c in claims] == [("c", False), ("a", True)]
    assert {c.claimed_at for c in claims} == {clock.now}
    assert claims[1].token != first[0].token
    reclaimed = store.get("a")
    assert [a.outcome for a in reclaimed.attempts] == [Outcome.LEASE_EXPIRED]
    assert reclaimed.attempt_count == 1
    assert store.get("b").status is Status.PENDING


def test_claim_ids_refuses_what_is_not_claimable_and_changes_nothing(
    store: MemoryStore,
) -> None:
    _enqueue(store, "due")
    _enqueue(store, "not-due", delay=60)
    _enqueue(store, "elsewhere", queue="other")
    before = {tid: store.get(tid) for tid in store.task_ids()}
    for ids in (["due", "not-due"], ["due", "elsewhere"], ["due", "missing"], ["due", "due"]):
        with pytest.raises(InvalidArgument, match="claim_ids"):
            store.claim_ids("q", ids, LEASE)
    assert {tid: store.get(tid) for tid in store.task_ids()} == before
    assert store.claim_ids("q", [], LEASE) == []
