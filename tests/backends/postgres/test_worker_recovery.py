"""The worker loop rides out a PostgreSQL crash: a lost connection surfaces as
``BackendUnavailable``, and the workers carry on when the server is back, without losing
or double-running anything.

200 tasks, three ``rdq_core.Worker`` threads (each with its own ``PostgresStorage``, two
handler threads each). Mid-run the server is SIGKILLed, stays down for a second, and is
restarted on the same data (crash recovery). Every handler run is recorded with the claim
it ran under. At the end:

- every task is SUCCEEDED with exactly one SUCCESS attempt, last (no committed task lost);
- every handler run is one attempt of its task's history: the attempt that started at
  the run's ``claimed_at``, with the number the run was given (``ctx.attempt_no``);
- the SUCCESS attempt was made by a handler run, and a run that is not the SUCCESS one is
  a LEASE_EXPIRED attempt (its report was lost with the server, or came too late): so
  a task ran more than once only if its history shows a LEASE_EXPIRED attempt, and it
  ran at most once per attempt;
- invariant H: attempt numbers 1, 2, 3, … in every history.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from rdq_postgres.local import LocalPostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_compliance.invariants import history_problem
from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask, Outcome, Status, Task
from rdq_core.retry import RetryPolicy
from rdq_core.worker import TaskContext, Worker, WorkerObserver
from tests._waiting import HANG_S
from tests.backends.postgres._pg_support import ensure_running, local_server

TASKS = 200
WORKERS = 3
QUEUE = "recovery"
#: Long enough to outlast the outage (reports keep their lease), short enough that a claim
#: whose answer died with the server is reclaimed well within the test.
LEASE = timedelta(seconds=4)
HANDLER_SECONDS = 0.01
KILL_AFTER = 50  # handler runs before the kill
DOWN_SECONDS = 1.0


@dataclass(frozen=True)
class Run:
    task_id: str
    attempt_no: int
    claimed_at: datetime
    worker: str


class Outages(WorkerObserver):
    """Counts what the workers saw of the outage (hooks are called from many threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()

    def _count(self, what: str, result: object) -> None:
        if isinstance(result, BackendUnavailable) or result == "unavailable":
            with self.lock:
                self.seen[what] += 1

    def on_claim_error(self, exc: BaseException) -> None:
        self._count("claim", exc)

    def on_heartbeat(self, task_id: str, token: str, result: object) -> None:
        self._count("heartbeat", result)

    def on_report_end(self, kind: str, task_id: str, token: str, result: object) -> None:
        self._count("report", result)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalPostgresServer]:
    with local_server("rdq-test-pg-recovery-") as provisioned:
        yield provisioned


@pytest.fixture
def namespace(server: LocalPostgresServer) -> Iterator[str]:
    ns = server.create_namespace()
    yield ns
    ensure_running(server)
    server.drop_namespace(ns)


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _succeeded(storage: PostgresStorage) -> int:
    try:
        return storage.stats(QUEUE).succeeded
    except BackendUnavailable:
        return -1


def test_workers_recover_from_a_server_crash_without_losing_or_double_running(
    server: LocalPostgresServer, namespace: str
) -> None:
    checker = PostgresStorage(server.dsn, namespace)
    ids = [f"task-{i:03d}" for i in range(TASKS)]
    for task_id in ids:
        assert checker.enqueue(NewTask(task_id, QUEUE, "record", payload=task_id.encode()))

    runs: list[Run] = []
    runs_lock = threading.Lock()

    def record(ctx: TaskContext) -> None:
        with runs_lock:
            runs.append(Run(ctx.task.id, ctx.attempt_no, ctx.claim.claimed_at, ctx.worker))
        time.sleep(HANDLER_SECONDS)

    outages = Outages()
    storages = [PostgresStorage(server.dsn, namespace) for _ in range(WORKERS)]
    workers = [
        Worker(
            storage,
            QUEUE,
            {"record": record},
            policy=RetryPolicy(max_attempts=100),
            lease=LEASE,
            batch=2,
            concurrency=2,
            poll_interval=timedelta(milliseconds=50),
            max_poll_interval=timedelta(milliseconds=500),
            report_retry_for=timedelta(seconds=15),
            observer=outages,
            rng_seed=i,
            name=f"w{i}",
        )
        for i, storage in enumerate(storages)
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop,), name=w.name) for w in workers]
    began = time.monotonic()
    try:
        for t in threads:
            t.start()
        _wait(lambda: len(runs) >= KILL_AFTER, HANG_S, f"{KILL_AFTER} handler runs")
        server.kill()
        at_kill = len(runs)
        time.sleep(DOWN_SECONDS)
        server.restart()
        _wait(lambda: _succeeded(checker) == TASKS, HANG_S, "every task to succeed")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for storage in storages:
            storage.close()
    elapsed = time.monotonic() - began
    assert not any(t.is_alive() for t in threads), "a worker did not stop"
    assert at_kill < TASKS, "the kill came after the run: nothing was tested"
    assert sum(outages.seen.values()) > 0, "no worker call met the outage"

    tasks: dict[str, Task] = {task_id: checker.get(task_id) for task_id in ids}
    checker.close()
    by_task: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_task[run.task_id].append(run)
    problems: list[str] = []
    for task_id, task in tasks.items():
        problem = history_problem(task)
        if problem:
            problems.append(f"{task_id}: invariant H: {problem}")
        outcomes = [a.outcome for a in task.attempts]
        if task.status is not Status.SUCCEEDED or outcomes.count(Outcome.SUCCESS) != 1:
            problems.append(f"{task_id}: {task.status.value} with attempts {outcomes}")
            continue
        if outcomes[-1] is not Outcome.SUCCESS:
            problems.append(f"{task_id}: the SUCCESS attempt is not the last: {outcomes}")
        attempts = {a.started_at: a for a in task.attempts}
        ran = Counter(run.claimed_at for run in by_task[task_id])
        for run in by_task[task_id]:
            attempt = attempts.get(run.claimed_at)
            if attempt is None:
                problems.append(f"{task_id}: run {run} is no attempt of {outcomes}")
            elif attempt.attempt_no != run.attempt_no:
                problems.append(f"{task_id}: run {run} was told #{run.attempt_no}, is {attempt}")
        for claimed_at, n in ran.items():
            if n > 1:
                problems.append(f"{task_id}: the claim of {claimed_at} ran {n} times")
        success = next(a for a in task.attempts if a.outcome is Outcome.SUCCESS)
        if ran[success.started_at] != 1:
            problems.append(f"{task_id}: its SUCCESS attempt was not made by a handler run")
        expired = sum(a.outcome is Outcome.LEASE_EXPIRED for a in task.attempts)
        if len(by_task[task_id]) > 1 + expired:
            problems.append(
                f"{task_id}: ran {len(by_task[task_id])} times with {expired} lost lease(s)"
            )
    assert not problems, f"{len(problems)} problems: " + "; ".join(problems[:10])
    reruns = sum(len(r) - 1 for r in by_task.values())
    print(
        f"\n{TASKS} tasks, {len(runs)} handler runs ({reruns} after a lost lease), "
        f"{at_kill} before the kill; outage seen by {dict(outages.seen)}; {elapsed:.1f} s"
    )
