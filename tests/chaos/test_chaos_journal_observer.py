"""The worker's journal: every hook becomes an event of the schema in events.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from rdq_compliance.chaos.events import Journal, read_journal
from rdq_compliance.chaos.journal_observer import JournalObserver
from rdq_core.memory import MemoryStore
from rdq_core.model import NewTask
from rdq_core.retry import RetryableError, RetryPolicy
from rdq_core.worker import Worker
from tests._waiting import HANG_S

Q = "jobs"
CLAIM_FIELDS = {
    "task",
    "token",
    "claimed_at",
    "lease_expires_at",
    "reclaimed",
    "attempt_count",
    "attempt_no",
}


def run_worker(tmp_path, handlers, tasks, observer=JournalObserver, **kwargs):
    store = MemoryStore()
    for task_id, handler in tasks:
        store.enqueue(NewTask(task_id, Q, handler, b""))
    journal = Journal(tmp_path / "w0.jsonl", "w0")
    w = Worker(
        store,
        Q,
        handlers,
        observer=observer(journal),
        name="w0",
        policy=RetryPolicy(base=timedelta(milliseconds=5), cap=timedelta(milliseconds=5)),
        poll_interval=timedelta(milliseconds=5),
        **kwargs,
    )
    w.run_until_idle(HANG_S)
    journal.close()
    return store, list(read_journal(tmp_path / "w0.jsonl"))


def test_events_follow_the_schema(tmp_path):
    def flaky(ctx):
        if ctx.attempt_no == 1:
            raise RetryableError("once")

    beat = threading.Event()

    class Beats(JournalObserver):  # tells the slow handler a heartbeat went through
        def on_heartbeat(self, task_id, token, result):
            super().on_heartbeat(task_id, token, result)
            if not isinstance(result, BaseException):
                beat.set()

    def slow(ctx):
        assert beat.wait(HANG_S)  # runs until one of its heartbeats went through

    _store, events = run_worker(
        tmp_path,
        {"flaky": flaky, "slow": slow},
        [("t1", "flaky"), ("t2", "slow")],
        observer=Beats,
        # beats every 0.3 s; the lease lapses only if the first is 1.2 s late
        lease=timedelta(seconds=1.5),
        heartbeat_fraction=0.2,
    )
    assert [e["seq"] for e in events] == list(range(len(events)))
    for e in events:
        assert e["proc"] == "w0" and isinstance(e["pid"], int) and isinstance(e["t"], float)
        assert e["type"] in ("invoke", "ok", "fail", "info")
    claims = [e for e in events if e["op"] == "claim"]
    assert [e["type"] for e in claims[:2]] == ["invoke", "ok"]
    details = [c for e in claims if e["type"] == "ok" for c in e["claims"]]
    assert {c["task"] for c in details} == {"t1", "t2"}
    for c in details:
        assert set(c) == CLAIM_FIELDS
        assert isinstance(c["claimed_at"], int) and c["lease_expires_at"] > c["claimed_at"]
    first_t1 = next(c for c in details if c["task"] == "t1")
    assert first_t1["attempt_no"] == 1 and first_t1["attempt_count"] == 0
    ops = [(e["type"], e["op"], e.get("task")) for e in events if e["op"] != "claim"]
    for task in ("t1", "t2"):
        mine = [o[:2] for o in ops if o[2] == task and o[1] != "heartbeat"]
        if task == "t1":
            assert mine == [
                ("invoke", "run"),
                ("fail", "run"),
                ("invoke", "reschedule"),
                ("ok", "reschedule"),
                ("invoke", "run"),
                ("ok", "run"),
                ("invoke", "complete"),
                ("ok", "complete"),
            ]
        else:
            assert mine == [
                ("invoke", "run"),
                ("ok", "run"),
                ("invoke", "complete"),
                ("ok", "complete"),
            ]
    beats = [e for e in events if e["op"] == "heartbeat"]
    assert beats and beats[0]["type"] == "invoke"
    oks = [e for e in beats if e["type"] == "ok"]
    assert oks and all(isinstance(e["lease_expires_at"], int) and e["token"] for e in oks)
    tokens = {c["token"] for c in details}
    assert all(e["token"] in tokens for e in events if "token" in e)
    fail_run = next(e for e in events if e["type"] == "fail" and e["op"] == "run")
    assert "RetryableError: once" in fail_run["error"]


def test_zombie_report_is_journaled_as_fail_stale(tmp_path):
    store = MemoryStore()
    store.enqueue(NewTask("t1", Q, "work", b""))
    started, release = threading.Event(), threading.Event()

    def blocked(ctx):
        started.set()
        release.wait(HANG_S)

    journal = Journal(tmp_path / "w0.jsonl", "w0")
    lease = timedelta(milliseconds=200)
    a = Worker(
        store,
        Q,
        {"work": blocked},
        observer=JournalObserver(journal),
        lease=lease,
        heartbeat_fraction=0.9,
        report_after_lease_loss=True,
    )

    class NoBeat:  # the storage drops A's heartbeats: its lease runs out
        def __getattr__(self, name):
            return getattr(store, name)

        def extend_lease(self, *args):
            raise ConnectionError("dropped")

    a.storage = NoBeat()
    t = threading.Thread(target=a.run_once)
    t.start()
    assert started.wait(HANG_S)
    time.sleep(0.3)  # past the 200 ms lease (a sleep lasts at least this long)
    assert store.claim_due(Q, 1, timedelta(seconds=5))  # another worker reclaims
    release.set()
    t.join(HANG_S)
    journal.close()
    events = list(read_journal(tmp_path / "w0.jsonl"))
    kinds = [(e["type"], e["op"]) for e in events]
    assert ("info", "heartbeat") in kinds
    assert ("info", "lease_lost") in kinds
    assert kinds[-2:] == [("invoke", "complete"), ("fail", "complete")]
    assert events[-1]["error"] == "stale"
