"""The claim's plan test: LIMIT must bound the claim whatever plan PostgreSQL picks.

The shape from the original write-up,

    UPDATE tasks SET … WHERE id IN (SELECT id … ORDER BY … LIMIT n FOR UPDATE SKIP LOCKED)

is planned as a semi-join. When the planner puts the subquery on the inner side of a
nested loop (a rescan per outer row, no Materialize above it), every rescan re-runs
LockRows + Limit. LockRows silently drops rows the same statement has already updated
(``TM_SelfModified``: "treat the tuple as deleted"), so each rescan's LIMIT reaches
further down the queue and the UPDATE claims (far) more than ``n`` rows. It is the
locking clause that does it: with plain ``FOR UPDATE`` the same happens, without any
locking clause the rescans return the same n rows (and the claim is unsafe in another
way). Two settings produce that plan here:

- ``forced-plan``: a fresh, never analysed table and the session settings
  ``enable_hashjoin/mergejoin/material/hashagg/sort = off`` (no hash or merge semi-join,
  no unique-ified subquery, no Materialize);
- ``stale-statistics``: DEFAULT planner settings, the table analysed when it held one
  task and then filled — the planner believes the outer side is one row, so a nested
  loop rescanning the subquery looks cheapest. This is how it happens in production.

The backend's claim picks its rows in a ``MATERIALIZED`` CTE, which runs once per
statement (a CTE scan only re-reads its tuplestore), so under the same session settings
it never returns, nor stamps, more than ``n`` rows — including reclaims of expired leases.
The fresh claim (the fast path for never-attempted tasks) picks its rows the same way.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from rdq_postgres.queries import Queries, claim_params
from rdq_postgres.server import PostgresServer
from rdq_postgres.storage import PostgresStorage

from rdq_core.model import NewTask, Outcome, Status
from tests._waiting import HANG_S
from tests.backends.postgres._pg_support import count_rows, require_server

DSN = require_server()

Q = "plan-q"
TASKS = 40
LIMIT = 5
LEASE = timedelta(minutes=10)

#: Session settings per scenario (``jit=off``: disabled plan types cost 1e10 and would
#: make every statement JIT-compile, slowly, for nothing).
SCENARIOS: dict[str, dict[str, str]] = {
    "forced-plan": {
        "enable_hashjoin": "off",
        "enable_mergejoin": "off",
        "enable_material": "off",
        "enable_hashagg": "off",
        "enable_sort": "off",
        "jit": "off",
    },
    "stale-statistics": {"jit": "off"},
}

UNSAFE = """
UPDATE {tasks}
SET status = 'IN_FLIGHT', token = replace(gen_random_uuid()::text, '-', ''),
    claimed_at = now(), lease_expires_at = now() + %(lease)s, due_at = now() + %(lease)s,
    next_attempt_at = NULL
WHERE id IN (
    SELECT id FROM {tasks}
    WHERE queue = %(queue)s AND due_at <= now()
    ORDER BY due_at, seq
    LIMIT %(limit)s
    {locking}
)
RETURNING id
"""

#: Nested-loop semi-join whose INNER side is the subquery, re-running Limit + LockRows.
RESCANNED_PLAN = re.compile(
    r"Nested Loop Semi Join.*\n(?:.*Join Filter.*\n)?.*Seq Scan on tasks\n"
    r".*Subquery Scan.*\n.*Limit\n.*LockRows\n"
)
LOOPS = re.compile(r"loops=(\d+)")


@dataclass
class World:
    scenario: str
    schema: str
    session_dsn: str  # the DSN whose connections carry the scenario's settings
    conn: psycopg.Connection  # a connection with those settings


def _options(settings: dict[str, str]) -> str:
    return " ".join(f"-c {k}={v}" for k, v in settings.items())


@pytest.fixture(params=list(SCENARIOS))
def world(request, server: PostgresServer, raw: psycopg.Connection) -> Iterator[World]:
    scenario = request.param
    schema = server.create_namespace()
    tasks = sql.Identifier(schema, "tasks")
    # No autovacuum: its ANALYZE would change the statistics under the test.
    raw.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(tasks))
    loader = PostgresStorage(DSN, schema)
    try:
        for i in range(TASKS):
            loader.enqueue(NewTask(f"plan-{i:03d}", Q, "h"))
            if i == 0 and scenario == "stale-statistics":
                raw.execute(sql.SQL("ANALYZE {}").format(tasks))
    finally:
        loader.close()
    session_dsn = make_conninfo(DSN, options=_options(SCENARIOS[scenario]))
    with psycopg.connect(session_dsn, autocommit=True) as conn:
        yield World(scenario, schema, session_dsn, conn)
    server.drop_namespace(schema)


def _unsafe(world: World, locking: str) -> sql.Composed:
    return sql.SQL(UNSAFE).format(
        tasks=sql.Identifier(world.schema, "tasks"), locking=sql.SQL(locking)
    )


def _explain(conn: psycopg.Connection, statement: sql.Composable, params: dict, *, analyze: bool):
    options = "ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF" if analyze else "COSTS OFF"
    query = sql.SQL("EXPLAIN ({}) ").format(sql.SQL(options)) + statement
    with conn.transaction(force_rollback=True):  # EXPLAIN ANALYZE runs the UPDATE
        return "\n".join(r[0] for r in conn.execute(query, params))


def _node_loops(plan: str, node: str) -> list[int]:
    return [
        int(m.group(1))
        for line in plan.splitlines()
        if node in line
        for m in [LOOPS.search(line)]
        if m
    ]


@pytest.mark.parametrize("locking", ["FOR UPDATE SKIP LOCKED", "FOR UPDATE"])
def test_in_subquery_claim_hands_out_more_than_limit_when_the_subquery_is_rescanned(
    world: World, locking: str
):
    """The unsafe shape claims MORE than LIMIT rows once the plan rescans the subquery."""
    if locking == "FOR UPDATE" and world.scenario != "forced-plan":
        pytest.skip("plain FOR UPDATE is shown once, under the forced plan")
    conn, statement = world.conn, _unsafe(world, locking)
    params = {"queue": Q, "limit": LIMIT, "lease": LEASE}
    plan = _explain(conn, statement, params, analyze=False)
    print(f"\n[{world.scenario}, {locking}] EXPLAIN of the unsafe shape:\n{plan}")
    if not RESCANNED_PLAN.search(plan):
        if world.scenario == "forced-plan":
            pytest.fail(f"the forced settings did not give the rescanned semi-join:\n{plan}")
        pytest.skip(f"this server's planner did not pick the rescanned plan:\n{plan}")
    # The real run comes first: any execution (even rolled back) grows the table, and a
    # re-plan may then see a bigger table and put a Materialize above the subquery.
    with conn.transaction(force_rollback=True):
        returned = len(conn.execute(statement, params).fetchall())
        stamped = count_rows(conn, world.schema, "status = 'IN_FLIGHT'")
    print(
        f"LIMIT {LIMIT} with {TASKS} due: the unsafe claim returned {returned} rows and "
        f"stamped {stamped} rows IN_FLIGHT"
    )
    assert returned > LIMIT and stamped > LIMIT, (
        f"expected the unsafe shape to over-claim under {world.scenario}; it returned "
        f"{returned} and stamped {stamped} with LIMIT {LIMIT}; plan:\n{plan}"
    )
    assert count_rows(conn, world.schema, "status = 'IN_FLIGHT'") == 0  # rolled back

    analyzed = _explain(conn, statement, params, analyze=True)
    print(f"EXPLAIN ANALYZE (rolled back):\n{analyzed}")
    if world.scenario == "forced-plan":  # no Materialize possible: the same plan again
        limit_loops = _node_loops(analyzed, "Limit")
        assert limit_loops and max(limit_loops) > LIMIT, f"not rescanned:\n{analyzed}"


def _expire_some(world: World, how_many: int) -> set[str]:
    """Claim ``how_many`` tasks with a 1 ms lease and wait (server clock) until it expired."""
    st = PostgresStorage(DSN, world.schema)
    try:
        claims = st.claim_due(Q, how_many, timedelta(milliseconds=1))
        deadline = time.monotonic() + HANG_S  # the wait ends when the clock moves
        while st.now() <= max(c.lease_expires_at for c in claims):
            assert time.monotonic() < deadline, "the server clock did not move"
            time.sleep(0.005)
    finally:
        st.close()
    return {c.task_id for c in claims}


def test_backend_claim_never_exceeds_limit_under_the_same_session_settings(world: World):
    """Under the settings that break the unsafe shape, claim_due(limit) returns and stamps
    exactly ``limit`` rows (PENDING and expired IN_FLIGHT alike), and its picking CTE runs
    once however often the join rescans it."""
    expired = _expire_some(world, 3)  # 3 expired leases, due since their lease ended
    statement = Queries(world.schema).claim
    analyzed = _explain(world.conn, statement, claim_params(Q, LIMIT, LEASE), analyze=True)
    print(f"\n[{world.scenario}] EXPLAIN ANALYZE of the backend's claim (rolled back):\n{analyzed}")
    cte = analyzed.split("CTE picked", 1)[1].split("CTE expired", 1)[0]
    assert _node_loops(cte, "Limit") == [1], f"the picking CTE ran more than once:\n{analyzed}"
    fresh = Queries(world.schema).claim_fresh  # the fast path for never-attempted tasks
    analyzed = _explain(world.conn, fresh, claim_params(Q, LIMIT, LEASE), analyze=True)
    print(f"EXPLAIN ANALYZE of the backend's fresh claim (rolled back):\n{analyzed}")
    cte = analyzed.split("CTE picked", 1)[1].split("CTE fresh", 1)[0]
    assert _node_loops(cte, "Limit") == [1], f"the picking CTE ran more than once:\n{analyzed}"

    storage = PostgresStorage(world.session_dsn, world.schema)
    try:
        taken: list[str] = []
        limits = iter([LIMIT, 1, 7] * TASKS)
        while len(taken) < TASKS:
            limit, due = next(limits), TASKS - len(taken)
            claims = storage.claim_due(Q, limit, LEASE)
            stamped = world.conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE claimed_at = %s").format(
                    sql.Identifier(world.schema, "tasks")
                ),
                (claims[0].claimed_at,),
            ).fetchone()
            print(
                f"claim_due(limit={limit}) with {due} due: returned {len(claims)}, "
                f"stamped {stamped[0]}"
            )
            assert len(claims) == min(limit, due) and stamped[0] == len(claims), (
                f"{world.scenario}: claim_due(limit={limit}) with {due} due returned "
                f"{len(claims)} claims and stamped {stamped[0]} rows"
            )
            taken += [c.task_id for c in claims]
        assert storage.claim_due(Q, LIMIT, LEASE) == []
        assert len(set(taken)) == len(taken) == TASKS, "a task was handed out twice"
        in_flight = count_rows(world.conn, world.schema, "status = 'IN_FLIGHT'")
        assert in_flight == TASKS, f"{in_flight} rows IN_FLIGHT after claiming all {TASKS}"
        for task in (storage.get(t) for t in expired):  # reclaimed last: due at lease end
            assert task.status is Status.IN_FLIGHT and task.attempt_count == 1
            assert [(a.attempt_no, a.outcome) for a in task.attempts] == [
                (1, Outcome.LEASE_EXPIRED)
            ]
        assert set(taken[-len(expired) :]) == expired, "expired leases are due at lease end"
    finally:
        storage.close()
