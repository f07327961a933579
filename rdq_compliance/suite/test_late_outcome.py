"""Conformance: a late outcome against a reclaim (bug class ``unfenced-outcome``).

Holders claim tasks on a short lease and let it expire; then, released together by a
barrier, they report on those claims (``complete``, ``reschedule``, ``dead_letter``, or
``extend_lease`` then ``complete``) while other workers reclaim the same tasks. For
every task exactly one side wins and the other is refused with ``StaleClaim``, and the
task ends as the winner left it: nothing acknowledged is overwritten. A reclaim that
re-reads the row without a lock and writes it unguarded overwrites a late outcome that
committed in between, which the campaign's long pauses never show (the paused worker
always reports well after the reclaim). Threads each use their own handle; processes
(``spawn``) each open the storage themselves from the ``StorageSpec``.
"""

from __future__ import annotations

import multiprocessing
import queue as queue_module
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from rdq_compliance import rules
from rdq_compliance.invariants import listed
from rdq_compliance.suite import late_outcome
from rdq_compliance.suite.concurrency import race_tasks
from rdq_compliance.suite.helpers import LONG_LEASE, SHORT_LEASE, enqueue, wait_until
from rdq_compliance.suite.late_outcome import Held, SideReport
from rdq_core.model import Claim
from rdq_core.spi import Storage

pytestmark = pytest.mark.rdq_conformance

#: How long one race may run before a worker gives up (reported as a failure).
RACE_DEADLINE_S = 30.0
#: Races per test with a short lease; one when the lease is long (a fixed-lease queue).
ROUNDS = 3
#: A lease above this gets one round.
ONE_ROUND_ABOVE = timedelta(seconds=5)


def _verdict(problems: dict[str, list[str]]) -> str:
    return "\n".join(rules.message(rule, listed(items)) for rule, items in sorted(problems.items()))


def _claim_all(
    handles: list[Storage], queue: str, tasks: int, lease: timedelta
) -> list[list[Claim]]:
    """Claim every task of ``queue``, the handles taking turns a claim of 1-4 each; the
    claims of each handle, in the order made."""
    held: list[list[Claim]] = [[] for _ in handles]
    got, turn, idle = 0, 0, 0
    while got < tasks and idle < 3 * len(handles):
        claims = handles[turn % len(handles)].claim_due(queue, 1 + turn % 4, lease)
        held[turn % len(handles)].extend(claims)
        got += len(claims)
        idle = 0 if claims else idle + 1
        turn += 1
    return held


#: How many times the claim phase may double its lease (400 ms -> 12.8 s).
DOUBLINGS = 5


def _hold_all(
    storage: Storage, handles: list[Storage], queue: str, tasks: int, seed: int
) -> tuple[str, list[list[Held]]]:
    """Enqueue ``tasks`` tasks and have ``handles`` claim them all on a short lease, each
    claim with its late call: the queue, and each handle's claims. A slow server may take
    longer to claim them all than the lease lasts (the first claims are then reclaimed by
    the last): the phase is run again on a fresh queue with the lease doubled, up to
    :data:`DOUBLINGS` times; a fixed lease, which asking more does not change, runs once."""
    asked = SHORT_LEASE
    for attempt in range(DOUBLINGS + 1):
        lease = storage.capabilities().lease_for(asked)
        q = f"{queue}-{attempt}"
        ids = {enqueue(storage, q) for _ in range(tasks)}
        claims = _claim_all(handles, q, tasks, lease)
        made = [c for mine in claims for c in mine]
        if len(made) == tasks and {c.task_id for c in made} == ids:
            return q, [late_outcome.assign_ops(c, seed=seed + i) for i, c in enumerate(claims)]
        if storage.capabilities().lease_for(asked * 2) == lease:
            break  # a fixed lease: doubling the ask changes nothing
        asked *= 2
    raise AssertionError(
        rules.message(
            "claim-complete",
            f"{tasks} due tasks of {q!r} on a lease of {lease}: {len(made)} claims of "
            f"{len({c.task_id for c in made})} tasks (the lease ran out while claiming, "
            f"{attempt + 1} tries)",
        )
    )


def _expire_all(storage: Storage, held: list[Held]) -> None:
    wait_until(storage, max(h.lease_expires_at for h in held))


def test_a_late_outcome_and_a_reclaim_never_both_win(rdq_storage, rdq_connect, rdq_server):
    """Rules fencing, terminal-final, lease-respected, claim-due-only and outcome-recorded:
    4 holder threads claim 400 tasks on a short lease and let it expire; then, with 4
    reclaiming threads released by the same barrier, each holder reports late on its
    claims, earliest lease first, while the reclaimers claim and complete whatever is
    due. Every task has exactly one winner, the loser's call is refused, and the task
    ends as its winner left it. Three rounds (one when the lease is fixed and long, or the
    server says it is slow); the race may take ``Server.race_time_factor`` times the
    deadline, on ``Server.race_size`` of the tasks."""
    deadline_s = RACE_DEADLINE_S * max(1.0, float(rdq_server.race_time_factor))
    lease = rdq_storage.capabilities().lease_for(SHORT_LEASE)
    slow = float(rdq_server.race_time_factor) > 1 or lease > ONE_ROUND_ABOVE
    rounds = 1 if slow else ROUNDS
    holders, reclaimers = 4, 4
    tasks = race_tasks(rdq_server, holders + reclaimers, 50)
    handles = [rdq_connect() for _ in range(holders + reclaimers)]
    for r in range(rounds):
        queue, held = _hold_all(rdq_storage, handles[:holders], f"late-{r}", tasks, 100 * r)
        everything = [h for mine in held for h in mine]
        _expire_all(rdq_storage, everything)
        start = threading.Barrier(holders + reclaimers)
        with ThreadPoolExecutor(holders + reclaimers) as pool:
            futures = [
                pool.submit(
                    late_outcome.late_calls, handles[i], held[i], f"holder-{i}", LONG_LEASE, start
                )
                for i in range(holders)
            ] + [
                pool.submit(
                    late_outcome.reclaim_loop,
                    handles[holders + i],
                    queue,
                    f"reclaimer-{i}",
                    seed=1000 * r + i,
                    max_limit=4,
                    long_lease=LONG_LEASE,
                    deadline_s=deadline_s,
                    start=start,
                )
                for i in range(reclaimers)
            ]
            reports = [f.result() for f in futures]
        problems = late_outcome.late_problems(rdq_storage, everything, reports)
        assert not problems, f"round {r + 1} of {rounds}:\n" + _verdict(problems)


@pytest.mark.rdq_requires("multi_process")
def test_late_outcomes_from_other_processes_never_beat_a_reclaim_too(
    rdq_storage, rdq_spec, rdq_server
):
    """Rules fencing, terminal-final, lease-respected, claim-due-only and outcome-recorded:
    the test's handle claims 400 tasks on a short lease; 2 spawned processes report late
    on them (half each) and 2 reclaim, all released by one barrier once every lease has
    expired. Every task has exactly one winner and ends as its winner left it."""
    deadline_s = RACE_DEADLINE_S * max(1.0, float(rdq_server.race_time_factor))
    late, reclaimers = 2, 2
    tasks = race_tasks(rdq_server, late + reclaimers, 100)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(late + reclaimers + 1)
    results = ctx.Queue()
    queue, (everything,) = _hold_all(rdq_storage, [rdq_storage], "late-processes", tasks, 7)
    shares: list[list[Held]] = [everything[i::late] for i in range(late)]
    procs = [
        ctx.Process(
            target=late_outcome.process_late_worker,
            args=(rdq_spec, shares[i], i, LONG_LEASE, start, results),
            name=f"rdq-late-{i}",
            daemon=True,
        )
        for i in range(late)
    ] + [
        ctx.Process(
            target=late_outcome.process_reclaim_worker,
            args=(rdq_spec, queue, i, 3000 + i, LONG_LEASE, deadline_s, start, results),
            name=f"rdq-reclaim-{i}",
            daemon=True,
        )
        for i in range(reclaimers)
    ]
    for p in procs:
        p.start()
    reports: list[SideReport] = []
    try:
        _expire_all(rdq_storage, everything)
        try:
            start.wait(timeout=120)
        except threading.BrokenBarrierError:
            pass  # a child could not start: its report says why
        deadline = time.monotonic() + deadline_s + 60
        while len(reports) < len(procs) and time.monotonic() < deadline:
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
    missing = len(procs) - len(reports)
    assert missing == 0, rules.message(
        "fencing",
        f"{missing} of {len(procs)} processes never reported (exit codes "
        f"{[p.exitcode for p in procs]}); reports from {[r.worker for r in reports]}",
    )
    problems = late_outcome.late_problems(rdq_storage, everything, reports)
    assert not problems, _verdict(problems)
