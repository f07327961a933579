"""The worker loop (rdq_core.worker) against the in-memory reference store.

Real threads, short real leases; a few tests move the store's clock instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_core.memory import MemoryStore
from rdq_core.model import (
    ATTEMPTS_EXHAUSTED_ERROR,
    UTC,
    ByIds,
    NewTask,
    Outcome,
    Status,
)
from rdq_core.retry import PermanentError, RetryableError, RetryPolicy
from rdq_core.spi import Storage
from rdq_core.worker import (
    UNKNOWN_HANDLER_ERROR,
    LeaseLost,
    TaskContext,
    Worker,
    WorkerObserver,
)
from tests._waiting import HANG_S

Q = "jobs"
MS = timedelta(milliseconds=1)
FAST = RetryPolicy(base=10 * MS, cap=10 * MS, jitter="none")


# ---- helpers ---------------------------------------------------------------------------------


class OffsetClock:
    """Real UTC time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, delta: timedelta) -> None:
        self.offset += delta


class Recorder(WorkerObserver):
    """Journals every hook as a small tuple (thread-safe)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self._lock = threading.Lock()

    def _add(self, *event) -> None:
        with self._lock:
            self.events.append(event)

    def kinds(self, *skip: str) -> list[tuple]:
        with self._lock:
            return [e for e in self.events if e[0] not in skip]

    def on_claim(self, claims):
        self._add("claim", tuple(c.task_id for c in claims))

    def on_claim_error(self, exc):
        self._add("claim_error", type(exc).__name__)

    def on_start(self, ctx):
        self._add("start", ctx.task.id, ctx.attempt_no)

    def on_handler_end(self, ctx, error):
        self._add("handler_end", ctx.task.id, None if error is None else type(error).__name__)

    def on_heartbeat(self, task_id, token, result):
        self._add("heartbeat", task_id, "ok" if isinstance(result, datetime) else "error")

    def on_report_begin(self, kind, task_id, token):
        self._add("report_begin", kind, task_id)

    def on_report_end(self, kind, task_id, token, result):
        self._add("report_end", kind, task_id, result)

    def on_report(self, kind, task_id, token, result):
        self._add("report", kind, task_id, result)

    def on_lease_lost(self, task_id, token):
        self._add("lease_lost", task_id)


class FlakyStore(Storage):
    """Wraps a store; injects BackendUnavailable before (``fail``) or after (``fail_after``)
    the next N calls of an operation, can run a hook before one, and can hold heartbeats."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.fail: Counter[str] = Counter()
        self.fail_after: Counter[str] = Counter()
        self.before: dict[str, Callable[[], None]] = {}
        self.hold_extend: threading.Event | None = None  # extend waits until it is set
        self.extend_waiting = threading.Event()
        self._lock = threading.Lock()

    def _call(self, op: str, *args):
        with self._lock:
            fail_before = self.fail[op] > 0
            self.fail[op] -= fail_before
            fail_after = not fail_before and self.fail_after[op] > 0
            self.fail_after[op] -= fail_after
        if fail_before:
            raise BackendUnavailable(f"injected outage before {op}")
        hook = self.before.pop(op, None)
        if hook is not None:
            hook()
        result = getattr(self.inner, op)(*args)
        if fail_after:
            raise BackendUnavailable(f"injected outage after {op}")
        return result

    def _extend_lease(self, *args):
        gate = self.hold_extend
        if gate is not None:
            self.extend_waiting.set()
            gate.wait()
        return self._call("_extend_lease", *args)

    def _enqueue(self, *a):
        return self._call("_enqueue", *a)

    def _claim_due(self, *a):
        return self._call("_claim_due", *a)

    def _complete(self, *a):
        return self._call("_complete", *a)

    def _reschedule(self, *a):
        return self._call("_reschedule", *a)

    def _dead_letter(self, *a):
        return self._call("_dead_letter", *a)

    def _get(self, *a):
        return self._call("_get", *a)

    def _stats(self, *a):
        return self._call("_stats", *a)

    def _now(self):
        return self.inner._now()

    def _dlq_list(self, *a):
        return self._call("_dlq_list", *a)

    def _redrive(self, *a):
        return self._call("_redrive", *a)

    def _purge(self, *a):
        return self._call("_purge", *a)

    def _purge_succeeded(self, *a):
        return self._call("_purge_succeeded", *a)

    def capabilities(self):
        return self.inner.capabilities()

    def close(self):
        pass


def enqueue(store: Storage, task_id: str = "t1", handler: str = "work", payload=b"hi"):
    assert store.enqueue(NewTask(task_id, Q, handler, payload))


def history(store: Storage, task_id: str = "t1") -> list[tuple[int, Outcome]]:
    return [(a.attempt_no, a.outcome) for a in store.get(task_id).attempts]


def wait_for(predicate: Callable[[], bool], timeout: float = HANG_S) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.01)


def in_thread(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


# ---- outcomes ---------------------------------------------------------------------------------


def test_success():
    store = MemoryStore()
    enqueue(store)
    seen = []
    w = Worker(store, Q, {"work": lambda ctx: seen.append((ctx.attempt_no, ctx.payload))})
    assert w.run_once() == 1
    task = store.get("t1")
    assert task.status is Status.SUCCEEDED
    assert history(store) == [(1, Outcome.SUCCESS)]
    assert seen == [(1, b"hi")]
    assert w.run_once() == 0


def test_retry_then_success():
    store = MemoryStore()
    enqueue(store)
    seen = []

    def flaky(ctx: TaskContext) -> None:
        seen.append(ctx.attempt_no)
        if len(seen) == 1:
            raise RetryableError("try again")

    w = Worker(store, Q, {"work": flaky}, policy=FAST, poll_interval=5 * MS)
    assert w.run_until_idle(HANG_S) == 2
    assert seen == [1, 2]
    assert history(store) == [(1, Outcome.RETRYABLE_FAILURE), (2, Outcome.SUCCESS)]
    first = store.get("t1").attempts[0].error
    assert first is not None and first.type == "rdq_core.retry.RetryableError"
    assert first.message == "try again"


def test_dead_after_budget_with_retryable_outcome():
    store = MemoryStore()
    enqueue(store)

    def always(ctx):
        raise ValueError("nope")

    policy = RetryPolicy(max_attempts=3, base=5 * MS, cap=5 * MS)
    w = Worker(store, Q, {"work": always}, policy=policy, poll_interval=5 * MS)
    assert w.run_until_idle(HANG_S) == 3
    task = store.get("t1")
    assert task.status is Status.DEAD and task.attempt_count == 3
    assert history(store) == [(n, Outcome.RETRYABLE_FAILURE) for n in (1, 2, 3)]
    assert task.last_error is not None and task.last_error.type == "ValueError"
    assert "Traceback" in (task.last_error.detail or "")


def test_permanent_failure_is_dead_at_once():
    store = MemoryStore()
    enqueue(store)

    def bad(ctx):
        raise PermanentError("malformed payload")

    assert Worker(store, Q, {"work": bad}).run_until_idle(HANG_S) == 1
    task = store.get("t1")
    assert task.status is Status.DEAD
    assert history(store) == [(1, Outcome.PERMANENT_FAILURE)]
    assert task.last_error is not None
    assert task.last_error.type == "rdq_core.retry.PermanentError"


def test_unknown_handler_is_dead_permanent():
    store = MemoryStore()
    enqueue(store, handler="nobody")
    assert Worker(store, Q, {"work": lambda ctx: None}).run_once() == 1
    task = store.get("t1")
    assert task.status is Status.DEAD
    assert history(store) == [(1, Outcome.PERMANENT_FAILURE)]
    assert task.last_error is not None and task.last_error.type == UNKNOWN_HANDLER_ERROR


def test_poison_pill_is_dead_lettered_without_running():
    clock = OffsetClock()
    store = MemoryStore(clock)
    enqueue(store)
    lease = timedelta(seconds=1)
    # two claims whose leases expire: the reclaims spend the budget of 2
    assert len(store.claim_due(Q, 1, lease)) == 1
    clock.advance(2 * lease)
    assert store.claim_due(Q, 1, lease)[0].reclaimed
    clock.advance(2 * lease)
    ran = []
    w = Worker(store, Q, {"work": ran.append}, policy=RetryPolicy(max_attempts=2), lease=lease)
    assert w.run_once() == 1
    assert ran == []
    task = store.get("t1")
    assert task.status is Status.DEAD
    assert history(store) == [
        (1, Outcome.LEASE_EXPIRED),
        (2, Outcome.LEASE_EXPIRED),
        (3, Outcome.RETRYABLE_FAILURE),
    ]
    assert task.last_error is not None and task.last_error.type == ATTEMPTS_EXHAUSTED_ERROR


def test_attempt_no_comes_from_history_after_redrive():
    store = MemoryStore()
    enqueue(store)

    def always(ctx):
        raise RetryableError("down")

    policy = RetryPolicy(max_attempts=3, base=MS, cap=MS, jitter="none")
    Worker(store, Q, {"work": always}, policy=policy, poll_interval=5 * MS).run_until_idle(HANG_S)
    assert store.get("t1").status is Status.DEAD
    assert store.redrive(Q, ByIds(["t1"])) == 1
    seen = []

    def ok(ctx):
        seen.append((ctx.attempt_no, ctx.task.attempt_count, ctx.task.redrive_count))

    assert Worker(store, Q, {"work": ok}, policy=policy).run_once() == 1
    assert seen == [(4, 0, 1)]
    assert [n for n, _ in history(store)] == [1, 2, 3, 4]
    assert store.get("t1").status is Status.SUCCEEDED


# ---- leases -------------------------------------------------------------------------------------


#: A heartbeat's lateness the test must survive: 20 times the latest measured on 2 busy
#: cores (25 ms, two busy loops beside the test), so a lost lease is the worker's fault,
#: not the load's.
STALL_S = 0.5
#: A heartbeat comes every third of the lease, so the lease lapses only when a beat is two
#: thirds of it (twice :data:`STALL_S`) late.
HEARTBEAT_LEASE = timedelta(seconds=3 * STALL_S)
#: The long handler: three leases, so staying alive takes at least three extensions.
LONG_HANDLER_S = 3 * HEARTBEAT_LEASE.total_seconds()


def test_heartbeat_keeps_a_long_handler_alive():
    """A handler three leases long keeps its claim while its heartbeats go through; beside
    it, the same handler whose heartbeats are held loses its claim to another claimer
    within the handler's time (so the lease is short enough to lapse: the first worker
    keeps it by its heartbeats)."""
    beating, held = MemoryStore(), MemoryStore()
    gated = FlakyStore(held)
    gated.hold_extend = threading.Event()  # every heartbeat of this worker waits
    ended = {"beating": threading.Event(), "held": threading.Event()}

    def handler(name: str) -> Callable[[TaskContext], None]:
        def run(ctx: TaskContext) -> None:
            time.sleep(LONG_HANDLER_S)
            ended[name].set()

        return run

    rec = Recorder()
    workers = {
        "beating": Worker(
            beating, Q, {"work": handler("beating")}, lease=HEARTBEAT_LEASE, observer=rec
        ),
        "held": Worker(gated, Q, {"work": handler("held")}, lease=HEARTBEAT_LEASE),
    }
    stores = {"beating": beating, "held": held}
    for store in stores.values():
        enqueue(store)
    threads = [in_thread(w.run_once) for w in workers.values()]
    wait_for(lambda: all(store.stats(Q).in_flight == 1 for store in stores.values()))
    stolen: dict[str, list] = {"beating": [], "held": []}
    stolen_after_end = []
    while not all(e.is_set() for e in ended.values()):
        for name, store in stores.items():
            if ended[name].is_set() or stolen[name]:
                continue
            got = store.claim_due(Q, 1, timedelta(minutes=5))
            stolen[name] += got
            if got and ended[name].is_set():
                stolen_after_end.append(name)
        time.sleep(0.03)
    gated.hold_extend.set()  # the held heartbeat goes through now: StaleClaim, lease lost
    for t in threads:
        t.join(HANG_S)
        assert not t.is_alive()
    assert stolen["beating"] == []
    assert history(beating) == [(1, Outcome.SUCCESS)]
    beats = [e for e in rec.events if e[0] == "heartbeat"]
    assert len(beats) >= 3 and all(e[2] == "ok" for e in beats)
    # the contrast: without its heartbeats the lease lapsed while the handler still ran
    assert len(stolen["held"]) == 1 and stolen_after_end == [], (stolen, stolen_after_end)
    assert history(held) == [(1, Outcome.LEASE_EXPIRED)]


def test_lease_lost_to_another_claim_reports_nothing():
    inner = MemoryStore()
    flaky = FlakyStore(inner)
    enqueue(inner)
    rec = Recorder()
    started, outcome = threading.Event(), {}

    def stuck(ctx: TaskContext) -> str:
        started.set()
        outcome["saw_lost"] = ctx.lease_lost.wait(HANG_S)
        try:
            ctx.check()
        except LeaseLost:
            outcome["check_raised"] = True
            raise
        return "finished anyway"

    a = Worker(flaky, Q, {"work": stuck}, lease=400 * MS, observer=rec, name="a")
    t = in_thread(a.run_once)
    assert started.wait(HANG_S)
    flaky.hold_extend = threading.Event()  # pause A's next heartbeat...
    assert flaky.extend_waiting.wait(HANG_S)
    time.sleep(0.45)  # ...until its lease expired
    b_seen = []
    b = Worker(inner, Q, {"work": lambda ctx: b_seen.append(ctx.attempt_no)}, name="b")
    assert b.run_once() == 1  # B reclaims and succeeds
    flaky.hold_extend.set()  # A's heartbeat resumes: StaleClaim
    t.join(HANG_S)
    assert not t.is_alive()
    assert outcome == {"saw_lost": True, "check_raised": True}
    assert b_seen == [2]
    assert history(inner) == [(1, Outcome.LEASE_EXPIRED), (2, Outcome.SUCCESS)]
    kinds = [e[0] for e in rec.events]
    assert "lease_lost" in kinds
    assert not any(k.startswith("report") for k in kinds)
    assert ("handler_end", "t1", "LeaseLost") in rec.events


def test_heartbeat_outage_until_the_deadline_loses_the_lease():
    inner = MemoryStore()
    flaky = FlakyStore(inner)
    flaky.fail["_extend_lease"] = 10**6
    enqueue(inner)
    rec = Recorder()
    waited = {}

    lease = 300 * MS

    def stuck(ctx):
        t0 = time.monotonic()
        waited["lost"] = ctx.lease_lost.wait(HANG_S)
        waited["after"] = time.monotonic() - t0

    w = Worker(flaky, Q, {"work": stuck}, lease=lease, observer=rec)
    assert w.run_once() == 1
    # lost at the lease's deadline (the subject), not before it; the upper bound only
    # says "about then" (10 leases), so a busy runner's late heartbeat thread passes
    seconds = lease.total_seconds()
    assert waited["lost"] and 2 / 3 * seconds <= waited["after"] < 10 * seconds
    kinds = [e[0] for e in rec.events]
    assert "lease_lost" in kinds and not any(k.startswith("report") for k in kinds)
    assert ("heartbeat", "t1", "error") in rec.events
    # nothing was reported: the task is reclaimed after its lease, with LEASE_EXPIRED
    wait_for(lambda: bool(inner.claim_due(Q, 1, timedelta(seconds=1))))
    assert history(inner) == [(1, Outcome.LEASE_EXPIRED)]


def test_stale_report_is_observed_not_raised():
    clock = OffsetClock()
    inner = MemoryStore(clock)
    flaky = FlakyStore(inner)
    enqueue(inner)
    rec = Recorder()

    def steal():  # just before A's complete: A's lease expires and someone reclaims
        clock.advance(timedelta(hours=1))
        assert inner.claim_due(Q, 1, timedelta(seconds=30))[0].reclaimed

    flaky.before["_complete"] = steal
    w = Worker(flaky, Q, {"work": lambda ctx: None}, lease=timedelta(seconds=10), observer=rec)
    assert w.run_once() == 1
    assert rec.kinds("heartbeat")[-3:] == [
        ("report_end", "complete", "t1", "stale"),
        ("report", "complete", "t1", "stale"),
        ("lease_lost", "t1"),
    ]
    assert inner.get("t1").status is Status.IN_FLIGHT  # the other claim stands


# ---- outages ------------------------------------------------------------------------------------


def test_recovers_from_backend_unavailable():
    inner = MemoryStore()
    flaky = FlakyStore(inner)
    enqueue(inner)
    flaky.fail["_claim_due"] = 3
    flaky.fail["_complete"] = 2
    rec = Recorder()
    w = Worker(
        flaky,
        Q,
        {"work": lambda ctx: None},
        observer=rec,
        poll_interval=5 * MS,
        max_poll_interval=20 * MS,
    )
    stop = threading.Event()
    t = in_thread(lambda: w.run(stop))
    wait_for(lambda: inner.get("t1").status is Status.SUCCEEDED)
    stop.set()
    t.join(HANG_S)
    assert not t.is_alive()
    events = rec.kinds("heartbeat")
    assert events[:3] == [("claim_error", "BackendUnavailable")] * 3
    reports = [e for e in events if e[0] in ("report_end", "report")]
    assert reports == [
        ("report_end", "complete", "t1", "unavailable"),
        ("report_end", "complete", "t1", "unavailable"),
        ("report_end", "complete", "t1", "ok"),
        ("report", "complete", "t1", "ok"),
    ]
    assert history(inner) == [(1, Outcome.SUCCESS)]


def test_report_that_took_effect_before_the_outage_is_ok():
    inner = MemoryStore()
    flaky = FlakyStore(inner)
    enqueue(inner)
    flaky.fail_after["_complete"] = 1  # applied, but the answer is lost
    rec = Recorder()
    w = Worker(flaky, Q, {"work": lambda ctx: None}, observer=rec, poll_interval=5 * MS)
    assert w.run_once() == 1
    assert [e for e in rec.events if e[0].startswith("report") or e[0] == "lease_lost"] == [
        ("report_begin", "complete", "t1"),
        ("report_end", "complete", "t1", "unavailable"),
        ("report_begin", "complete", "t1"),
        ("report_end", "complete", "t1", "stale"),
        ("report", "complete", "t1", "ok"),
    ]
    assert history(inner) == [(1, Outcome.SUCCESS)]


# ---- loop mechanics ------------------------------------------------------------------------------


def test_observer_sees_events_in_order():
    store = MemoryStore()
    enqueue(store, "t1")
    rec = Recorder()

    def fail_once(ctx):
        if ctx.attempt_no == 1:
            raise RetryableError("once")

    w = Worker(store, Q, {"work": fail_once}, policy=FAST, observer=rec, poll_interval=5 * MS)
    w.run_until_idle(HANG_S)
    assert rec.kinds("heartbeat") == [
        ("claim", ("t1",)),
        ("start", "t1", 1),
        ("handler_end", "t1", "RetryableError"),
        ("report_begin", "reschedule", "t1"),
        ("report_end", "reschedule", "t1", "ok"),
        ("report", "reschedule", "t1", "ok"),
        ("claim", ("t1",)),
        ("start", "t1", 2),
        ("handler_end", "t1", None),
        ("report_begin", "complete", "t1"),
        ("report_end", "complete", "t1", "ok"),
        ("report", "complete", "t1", "ok"),
    ]


def test_run_finishes_in_flight_tasks_when_stopped():
    store = MemoryStore()
    enqueue(store)
    started = threading.Event()

    def slow(ctx):
        started.set()
        time.sleep(0.3)

    w = Worker(store, Q, {"work": slow})
    stop = threading.Event()
    result = []
    t = in_thread(lambda: result.append(w.run(stop)))
    assert started.wait(HANG_S)
    stop.set()
    t.join(HANG_S)
    assert result == [1]
    assert store.get("t1").status is Status.SUCCEEDED


def test_concurrency_and_batch():
    store = MemoryStore()
    for i in range(6):
        enqueue(store, f"t{i}")
    lock = threading.Lock()
    running, peak = [0], [0]
    three = threading.Event()

    def work(ctx):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 3:
                three.set()
        three.wait(HANG_S)  # held until three run at once (a hang guard if they never do)
        with lock:
            running[0] -= 1

    rec = Recorder()
    w = Worker(store, Q, {"work": work}, concurrency=3, batch=10, observer=rec)
    assert w.run_until_idle(HANG_S) == 6
    assert peak[0] == 3  # three at once (how long the six took depends on the machine)
    assert all(len(e[1]) <= 3 for e in rec.events if e[0] == "claim")
    assert store.stats(Q).succeeded == 6


def test_observer_errors_do_not_break_the_worker():
    class Broken(WorkerObserver):
        def on_report(self, *args):
            raise RuntimeError("journal is full")

    store = MemoryStore()
    enqueue(store)
    assert Worker(store, Q, {"work": lambda ctx: None}, observer=Broken()).run_once() == 1
    assert store.get("t1").status is Status.SUCCEEDED


def test_a_worker_runs_one_session_at_a_time():
    store = MemoryStore()
    enqueue(store)
    release = threading.Event()
    w = Worker(store, Q, {"work": lambda ctx: release.wait(HANG_S)})
    t = in_thread(w.run_once)
    wait_for(lambda: store.stats(Q).in_flight == 1)
    with pytest.raises(RuntimeError, match="already running"):
        w.run_once()
    release.set()
    t.join(HANG_S)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queue": "Bad Queue"}, "queue"),
        ({"handlers": {"Bad Name": print}}, "handler"),
        ({"handlers": {"work": 3}}, "callable"),
        ({"lease": timedelta(0)}, "lease"),
        ({"batch": 0}, "limit"),
        ({"concurrency": 0}, "concurrency"),
        ({"heartbeat_fraction": 1.0}, "heartbeat_fraction"),
        ({"heartbeat_fraction": 0}, "heartbeat_fraction"),
        ({"poll_interval": timedelta(0)}, "poll_interval"),
        ({"poll_interval": timedelta(seconds=5)}, "max_poll_interval"),
        ({"policy": "retry"}, "policy"),
        ({"observer": object()}, "observer"),
    ],
)
def test_bad_worker_arguments_raise(kwargs, match):
    args = {"queue": Q, "handlers": {"work": print}, **kwargs}
    with pytest.raises(InvalidArgument, match=match):
        Worker(MemoryStore(), args.pop("queue"), args.pop("handlers"), **args)


# ---- chaos-testing aid: report_after_lease_loss, and the begin/end hooks ------------------------


class BeginRecorder(Recorder):
    def on_claim_begin(self, limit):
        self._add("claim_begin", limit)

    def on_claim_end(self, claims):
        self._add("claim_end", len(claims))

    def on_heartbeat_begin(self, task_id, token):
        self._add("heartbeat_begin", task_id)


def test_claim_and_heartbeat_begin_hooks():
    store = MemoryStore()
    enqueue(store)
    rec = BeginRecorder()

    def until_a_heartbeat(ctx: TaskContext) -> None:
        wait_for(lambda: any(e[0] == "heartbeat" for e in rec.kinds()))

    # the lease lapses only if the first beat is two thirds of it late (see STALL_S)
    w = Worker(store, Q, {"work": until_a_heartbeat}, lease=HEARTBEAT_LEASE, observer=rec)
    assert w.run_once() == 1
    assert w.run_once() == 0
    kinds = [e[0] for e in rec.events]
    assert kinds[:3] == ["claim_begin", "claim_end", "claim"]
    assert rec.events[0] == ("claim_begin", 1) and rec.events[1] == ("claim_end", 1)
    assert rec.events[-2:] == [("claim_begin", 1), ("claim_end", 0)]  # an empty poll
    begins = kinds.count("heartbeat_begin")
    assert begins >= 1 and begins == kinds.count("heartbeat")
    for i, kind in enumerate(kinds):
        if kind == "heartbeat":
            assert kinds[i - 1] == "heartbeat_begin"


@pytest.mark.parametrize("flag", [False, True])
def test_report_after_lease_loss_makes_a_zombie_report(flag):
    """With the flag the worker still reports after losing its lease; the store refuses."""
    inner = MemoryStore()
    flaky = FlakyStore(inner)
    enqueue(inner)
    rec = Recorder()
    started = threading.Event()

    def blocked(ctx: TaskContext) -> None:  # a blocked loop: never looks at the lease
        started.set()
        assert ctx.lease_lost.wait(HANG_S)

    a = Worker(
        flaky,
        Q,
        {"work": blocked},
        lease=300 * MS,
        observer=rec,
        name="a",
        report_after_lease_loss=flag,
    )
    t = in_thread(a.run_once)
    assert started.wait(HANG_S)
    flaky.hold_extend = threading.Event()
    assert flaky.extend_waiting.wait(HANG_S)
    time.sleep(0.35)  # the lease expires
    b = Worker(inner, Q, {"work": lambda ctx: None}, name="b")
    assert b.run_once() == 1  # B reclaims and completes
    flaky.hold_extend.set()  # A's heartbeat: StaleClaim, lease lost
    t.join(HANG_S)
    assert not t.is_alive()
    reports = [e for e in rec.events if e[0].startswith("report")]
    if flag:
        assert reports == [
            ("report_begin", "complete", "t1"),
            ("report_end", "complete", "t1", "stale"),
            ("report", "complete", "t1", "stale"),
        ]
    else:
        assert reports == []
    assert [e[0] for e in rec.events].count("lease_lost") == 1
    assert history(inner) == [(1, Outcome.LEASE_EXPIRED), (2, Outcome.SUCCESS)]


def test_report_after_lease_loss_must_be_a_bool():
    with pytest.raises(InvalidArgument, match="report_after_lease_loss"):
        Worker(MemoryStore(), Q, {"work": print}, report_after_lease_loss="yes")
