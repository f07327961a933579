"""Conformance: claim exclusivity under real concurrency (rule ``one-claim``, bug class
``double-claim``).

Workers race on one queue of due tasks with a lease longer than the race, so no claim
may ever hand out a task another worker already got. Threads each use their own
handle; processes (``spawn``) each open the storage themselves from the ``StorageSpec``.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rdq_compliance import rules
from rdq_compliance.invariants import listed
from rdq_compliance.suite import concurrency
from rdq_compliance.suite.concurrency import (
    WorkerReport,
    final_state_problems,
    one_claim_problems,
    race_tasks,
)
from rdq_compliance.suite.helpers import LONG_LEASE, enqueue

pytestmark = pytest.mark.rdq_conformance

Q = "race"
#: How long a race may run before a worker gives up (it is reported as a failure).
RACE_DEADLINE_S = 30.0
def test_threads_never_share_a_claim(rdq_storage, rdq_connect, rdq_server):
    """Rule one-claim: 8 threads, each with its own storage handle, race to claim and
    complete 200 due tasks with small random limits; every task is claimed exactly once
    and ends SUCCEEDED with exactly one attempt. The race may take
    ``Server.race_time_factor`` times the usual deadline, on ``Server.race_size`` of the
    tasks (a slow server)."""
    race_deadline_s = RACE_DEADLINE_S * max(1.0, float(rdq_server.race_time_factor))
    threads = 8
    tasks = race_tasks(rdq_server, threads, 25)
    ids = [enqueue(rdq_storage, Q) for _ in range(tasks)]
    handles = [rdq_connect() for _ in range(threads)]
    start = threading.Barrier(threads)
    with ThreadPoolExecutor(threads) as pool:
        futures = [
            pool.submit(
                concurrency.claim_loop,
                handle,
                Q,
                f"thread-{i}",
                seed=1000 + i,
                max_limit=5,
                lease=LONG_LEASE,
                deadline_s=race_deadline_s,
                max_claims=tasks,
                start=start,
            )
            for i, handle in enumerate(handles)
        ]
        reports = [f.result() for f in futures]
    problems = one_claim_problems(ids, reports)
    assert not problems, rules.message("one-claim", listed(problems))
    problems = final_state_problems(rdq_storage, ids)
    assert not problems, rules.message("one-claim", listed(problems))


@pytest.mark.rdq_requires("multi_process")
def test_processes_never_share_a_claim(rdq_storage, rdq_spec, rdq_server):
    """Rule one-claim: 4 OS processes (spawned, each opening the storage itself) start
    together and race to claim and complete 1200 due tasks with small random limits;
    every task is claimed exactly once and ends SUCCEEDED with exactly one attempt. The
    race may take ``Server.race_time_factor`` times the usual deadline, on
    ``Server.race_size`` of the tasks (a slow server)."""
    processes = 4
    tasks = race_tasks(rdq_server, processes, 300)
    race_deadline_s = RACE_DEADLINE_S * max(1.0, float(rdq_server.race_time_factor))
    ids = [enqueue(rdq_storage, Q) for _ in range(tasks)]
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=concurrency.process_claim_worker,
            args=(rdq_spec, Q, i, 2000 + i, 5, LONG_LEASE, race_deadline_s, tasks, start, results),
            name=f"rdq-race-{i}",
            daemon=True,
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    reports: list[WorkerReport] = []
    deadline = time.monotonic() + race_deadline_s + 30
    try:
        while len(reports) < processes and time.monotonic() < deadline:
            try:
                reports.append(results.get(timeout=0.2))
            except queue_module.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
        for p in procs:
            p.join(timeout=10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        results.close()
    missing = processes - len(reports)
    assert missing == 0, rules.message(
        "one-claim",
        f"{missing} of {processes} race processes never reported "
        f"(exit codes {[p.exitcode for p in procs]}); reports from "
        f"{[r.worker for r in reports]}",
    )
    problems = one_claim_problems(ids, reports)
    assert not problems, rules.message("one-claim", listed(problems))
    problems = final_state_problems(rdq_storage, ids)
    assert not problems, rules.message("one-claim", listed(problems))
