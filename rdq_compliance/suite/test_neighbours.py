"""Conformance: queues a backend stores side by side stay apart (rule ``queue-isolation``).

A store that shards or buckets queues (hash-tag buckets, a partitioned table, a
collection per shard) keeps two queues of one bucket apart only if its code checks the
queue there. The other isolation tests use a queue or two, which land in different
buckets; this one uses the backend's own neighbour queues
(``Backend.neighbour_queues``), or else so many names that a bucketing into a few
thousand buckets puts some together: 512 names in 4,096 buckets all land apart with a
chance of about 1e-14 (192, the floor on a server that says it is slow: about 1 %).
The names are drawn from a fixed seed, not numbered: CRC-based bucketings (Redis
Cluster's CRC16, a CRC32 shard key) are linear, and spread names that differ only in a
counter's digits over distinct buckets (256 numbered names, ``nb-000`` ..., never share
a CRC32 bucket of 4,096).
"""

from __future__ import annotations

import pytest

from rdq_compliance.queue_names import BadNeighbourQueues, named_neighbours, spread_names
from rdq_compliance.rules import message
from rdq_compliance.suite import dlq_support as s
from rdq_compliance.suite.helpers import LONG_LEASE
from rdq_core.model import ByIds, DlqFilter, QueueStats, Status

pytestmark = pytest.mark.rdq_conformance

#: Queue names when the backend names no neighbours.
SPREAD = 512
#: The fewest, on a server whose ``race_size`` says it is slow.
FLOOR = 192


def neighbour_queues(backend: object, server: object) -> list[str]:
    """The backend's neighbour queues, else :data:`SPREAD` names (scaled down to
    :data:`FLOOR` by the server's ``race_size``)."""
    try:
        named = named_neighbours(backend, 8)
    except BadNeighbourQueues as exc:
        pytest.fail(str(exc))
    if named is None:
        size = min(1.0, float(getattr(server, "race_size", 1.0)))
        return spread_names(max(FLOOR, round(SPREAD * size)))
    return named


def test_queues_stored_side_by_side_stay_apart(rdq_storage, rdq_backend, rdq_server):
    """Rule queue-isolation: each of many queues stored side by side holds one dead and
    one due task; on every queue, stats count its own two, the DLQ lists its own dead
    task, redrive and purge by another queue's id do nothing, a claim takes its own due
    task only, and a redrive by filter redrives its own dead task only."""
    st = rdq_storage
    queues = neighbour_queues(rdq_backend, rdq_server)
    for q in queues:  # dead first: make_dead needs the queue to hold nothing else due
        s.make_dead(st, q, f"{q}-dead")
    for q in queues:
        s.enqueue_new(st, q, f"{q}-due")
    problems: list[str] = []
    for i, q in enumerate(queues):
        other = f"{queues[(i + 1) % len(queues)]}-dead"
        got = st.stats(q)
        want = QueueStats(pending=1, due=1, dead=1)
        if (got.pending, got.due, got.in_flight, got.succeeded, got.dead) != (1, 1, 0, 0, 1):
            problems.append(f"stats({q!r}) is {got}, expected {want}")
        listed = s.listed_ids(s.page_through(st, q))
        if listed != [f"{q}-dead"]:
            problems.append(f"the DLQ of {q!r} lists {listed}, expected [{q + '-dead'!r}]")
        for op in (st.redrive, st.purge):
            n = op(q, ByIds([other]))
            if n != 0:
                problems.append(f"{op.__name__}({q!r}, [{other!r}]) returned {n}: not its task")
        claims = st.claim_due(q, 5, LONG_LEASE)
        taken = sorted(c.task_id for c in claims)
        if taken != [f"{q}-due"]:
            problems.append(f"claim_due({q!r}, 5) took {taken}, expected [{q + '-due'!r}]")
        for c in claims:
            st.complete(c.task_id, c.token)
    for q in queues:
        n = st.redrive(q, DlqFilter(everything=True))
        if n != 1:
            problems.append(f"redrive({q!r}, everything) returned {n}, expected 1")
    for q in queues:
        task = st.get(f"{q}-dead")
        if task.status is not Status.PENDING or task.redrive_count != 1:
            problems.append(
                f"task {q + '-dead'!r} is {task.status.value} redriven {task.redrive_count} "
                "time(s), expected PENDING redriven once (by its own queue only)"
            )
    assert not problems, message(
        "queue-isolation",
        f"{len(problems)} problem(s) over {len(queues)} queues: " + "; ".join(problems[:8]),
    )
