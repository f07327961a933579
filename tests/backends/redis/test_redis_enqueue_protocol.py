"""The two-step enqueue (index shard, then bucket) through crashes between its steps and
between the steps of a purge, and under concurrent enqueues of one id: a task exists
only while the index maps its id to its queue, so ``get`` finds every task and no id is
ever in two queues. A crash is simulated by running the first script alone."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from datetime import timedelta

import pytest

from rdq_core.errors import IdConflict, NotFound
from rdq_core.model import ByIds, ErrorInfo, NewTask, Status


def _scripts(storage):
    return storage._source.get()


def _reserve(storage, task_id, queue):
    """Step 1 alone (the client dies before step 2): returns the nonce."""
    _, scripts = _scripts(storage)
    nonce = secrets.token_hex(16)
    reply = scripts.run("reserve", [storage.layout.shard(task_id).ids], [task_id, queue, nonce])
    assert int(reply[0]) == 1
    return nonce


def _step2(storage, task_id, queue, nonce, fresh="1"):
    _, scripts = _scripts(storage)
    b = storage.layout.of_queue(queue)
    reply = scripts.run(
        "enqueue",
        [b.task, b.pay, b.hdr, b.ready, b.seq, b.rv],
        [task_id, queue, "h", b"", b"", 0, nonce, fresh],
    )
    return int(reply[0])


def _entry(storage, task_id):
    client, _ = _scripts(storage)
    return client.hget(storage.layout.shard(task_id).ids, task_id)


def _in_bucket(storage, task_id, queue):
    client, _ = _scripts(storage)
    return client.hexists(storage.layout.of_queue(queue).task, task_id)


def _make_dead(storage, task_id, queue):
    storage.enqueue(NewTask(task_id, queue, "h"))
    claim = storage.claim_due(queue, 1, timedelta(minutes=1))[0]
    assert claim.task_id == task_id
    storage.dead_letter(task_id, claim.token, ErrorInfo("E", "x"))


def test_crash_after_step_one_leaves_nothing_visible_and_is_repaired_by_any_queue(storage):
    _reserve(storage, "orphan", "q1")
    with pytest.raises(NotFound):
        storage.get("orphan")  # never acknowledged, never visible
    assert storage.stats("q1").total == 0
    assert storage.enqueue(NewTask("orphan", "q2", "h")) is True  # repairs, no IdConflict
    assert storage.get("orphan").queue == "q2"
    assert _entry(storage, "orphan").startswith(b"q2\0")
    with pytest.raises(IdConflict):
        storage.enqueue(NewTask("orphan", "q1", "h"))


def test_crash_after_step_one_is_repaired_by_the_same_queue(storage):
    _reserve(storage, "orphan", "q1")
    assert storage.enqueue(NewTask("orphan", "q1", "h")) is True
    assert storage.enqueue(NewTask("orphan", "q1", "h")) is False
    assert storage.get("orphan").status is Status.PENDING


def test_a_late_step_two_after_a_repair_refuses(storage):
    """A paused client's step 2 arrives after another enqueue repaired (revoked) its
    reservation: it must not create the task (the id now belongs to another queue)."""
    nonce = _reserve(storage, "late", "q1")
    assert storage.enqueue(NewTask("late", "q2", "h")) is True
    assert _step2(storage, "late", "q1", nonce) == -1  # revoked
    assert not _in_bucket(storage, "late", "q1")
    assert storage.get("late").queue == "q2"


def test_a_step_two_with_an_entry_it_did_not_create_never_creates(storage):
    nonce = _reserve(storage, "reused", "q1")
    assert _step2(storage, "reused", "q1", nonce, fresh="0") == -3
    assert not _in_bucket(storage, "reused", "q1")


def test_crash_between_the_two_steps_of_a_purge_is_repaired(storage):
    """The purge deleted the task (bucket) but died before dropping its index entry: the
    id is free for any queue, and ``purge(queue, [id])`` finishes the job."""
    for tid in ("p1", "p2"):
        _make_dead(storage, tid, "q1")
    _, scripts = _scripts(storage)
    b = storage.layout.of_queue("q1")
    for tid in ("p1", "p2"):
        reply = scripts.run("purge", [b.task, b.pay, b.hdr, b.hist, b.dlq], ["q1", "ids", tid])
        assert int(reply[0]) == 1
        assert _entry(storage, tid) is not None  # the stale entry a crash leaves
        with pytest.raises(NotFound):
            storage.get(tid)
    assert storage.enqueue(NewTask("p1", "q2", "h")) is True
    assert storage.get("p1").queue == "q2"
    assert storage.purge("q1", ByIds(["p2"])) == 0  # nothing was dead, but it repairs
    assert _entry(storage, "p2") is None
    assert storage.enqueue(NewTask("p2", "q1", "h")) is True


def test_purge_drops_the_index_entry_and_the_id_is_free_again(storage):
    _make_dead(storage, "gone", "q1")
    assert storage.purge("q1", ["gone"]) == 1
    assert _entry(storage, "gone") is None
    assert storage.enqueue(NewTask("gone", "q2", "h")) is True
    claim = storage.claim_due("q2", 1, timedelta(minutes=1))[0]
    storage.complete("gone", claim.token)
    assert storage.purge_succeeded("q2", timedelta(0)) == 1
    assert _entry(storage, "gone") is None
    with pytest.raises(NotFound):
        storage.get("gone")


@pytest.mark.parametrize("same_queue", [False, True], ids=["two-queues", "one-queue"])
def test_concurrent_enqueues_of_one_id_store_it_once(connect, same_queue):
    """Threads with their own handles enqueue the same ids at once, into two queues (one
    wins, the other gets IdConflict) or into one (one True, the rest False)."""
    handles = [connect() for _ in range(4)]
    rounds = 60
    results: dict[int, list[object]] = {i: [] for i in range(rounds)}
    barrier = threading.Barrier(len(handles))

    def racer(n: int) -> None:
        queue = "race" if same_queue else f"race{n % 2}"
        for i in range(rounds):
            barrier.wait()
            try:
                results[i].append((queue, handles[n].enqueue(NewTask(f"id-{i}", queue, "h"))))
            except IdConflict:
                results[i].append((queue, "conflict"))

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(len(handles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store = handles[0]
    for i, got in results.items():
        winners = [q for q, r in got if r is True]
        assert len(winners) == 1, (i, got)
        task = store.get(f"id-{i}")
        assert task.queue == winners[0]
        losers = {r for q, r in got if r is not True}
        if same_queue:
            assert losers == {False}, (i, got)
        else:
            assert all(r == "conflict" for q, r in got if q != winners[0]), (i, got)
            assert not _in_bucket(store, f"id-{i}", "race1" if winners[0] == "race0" else "race0")
    counts = Counter(store.get(f"id-{i}").queue for i in results)
    for queue in ("race", "race0", "race1"):
        assert store.stats(queue).pending == counts.get(queue, 0)
