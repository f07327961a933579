"""procrastinate 3.10.0 as a deployed system (``rdq_procrastinate.deployed``): its
declaration, then its own workers on a real PostgreSQL.

- The declaration is complete and its ``fast`` profile cites the docs for each change.
- Two workers started with the system's argv (procrastinate's CLI) run jobs of every
  behaviour the system supports, deferred with procrastinate's client into a PostgreSQL
  schema made for the test: each ends in the state procrastinate's docs give it, with the
  executions and attempts its retry strategy makes, and the deployed checker finds nothing.
- A worker SIGKILLed mid-job leaves its job ``doing``; the job comes back only through the
  documented stalled-jobs recipe, once the dead worker's heartbeat is older than the
  profile's threshold, and runs again (attempt 1) on the other worker
  (https://procrastinate.readthedocs.io/en/3.10.0/howto/production/retry_stalled_jobs.html).
- A defer the server did not take (a private PostgreSQL killed) raises procrastinate's
  own error, as does any other error of its client: the system swallows none.

Needs the PostgreSQL at ``RDQ_POSTGRES_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``), and PostgreSQL's binaries for the private
server; without them these tests skip, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from procrastinate.exceptions import ConnectorException
from rdq_procrastinate.deployed import DOCS, PROFILES, ProcrastinateSystem

from rdq_compliance.deployed import verdicts
from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.probe import Execution, read_probe
from rdq_compliance.deployed.system import JobSpec, JobState, declaration_problems
from rdq_compliance.provision.backend import ProvisionRequest, Server
from rdq_compliance.provision.process import ManagedProcess
from rdq_compliance.registry import load_backend
from tests._ci import missing
from tests._waiting import HANG_S

PG_DSN = os.environ.get("RDQ_POSTGRES_DSN") or "postgresql://postgres@127.0.0.1:5432/test"
RULE_IDS = [r.id for r in verdicts.RULES]
RECIPE = "rdq_procrastinate.deployed_app.retry_stalled_jobs"
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None]) -> T:
    """``check()``'s first true value, asked every 0.1 s; a hang after ``HANG_S``."""
    deadline = time.monotonic() + HANG_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"hang: {what} did not happen within {HANG_S:.0f} s")
        time.sleep(0.1)


@dataclass
class Campaign:
    """A bound system, its namespace, its probe journal and its running workers."""

    system: ProcrastinateSystem
    server: Server
    namespace: str
    workdir: Path
    probe: Path
    workers: dict[str, ManagedProcess]

    def start(self, profile: str, *names: str) -> None:
        for name in names:
            launch = self.system.worker(name, profile, str(self.probe))
            self.workers[name] = ManagedProcess(
                launch.argv,
                log_path=self.workdir / f"{name}.log",
                cwd=Path(launch.cwd) if launch.cwd else None,
                env={**os.environ, **launch.env},
            ).start()

    def executions(self) -> list[Execution]:
        return read_probe(self.probe).executions() if self.probe.exists() else []

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        """A query in the campaign's schema (what procrastinate's workers see)."""
        options = f"-c search_path={self.namespace}"
        with psycopg.connect(PG_DSN, options=options, autocommit=True) as conn:
            cursor = conn.execute(query, args)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    def final(self, ids: dict[str, str]) -> dict[str, JobState]:
        return dict(self.system.final_states(list(ids.values())))


@pytest.fixture
def campaign(tmp_path: Path) -> Iterator[Campaign]:
    try:
        psycopg.connect(PG_DSN, connect_timeout=int(HANG_S)).close()
    except psycopg.Error as exc:
        missing(f"no PostgreSQL answers at RDQ_POSTGRES_DSN / default {PG_DSN!r}: {exc}")
    server = load_backend("postgres").provision(ProvisionRequest(workdir=tmp_path, dsn=PG_DSN))
    namespace = server.create_namespace()
    c = Campaign(ProcrastinateSystem(), server, namespace, tmp_path, tmp_path / "probe", {})
    try:
        yield c
    finally:
        for process in c.workers.values():
            process.stop(grace=0.0)  # SIGKILL to each worker's whole process group
        c.system.close()
        server.drop_namespace(namespace)
        server.close()


def by_job(executions: list[Execution]) -> dict[str, list[Execution]]:
    out: dict[str, list[Execution]] = {}
    for x in executions:
        out.setdefault(x.job, []).append(x)
    return out


# ---- the declaration -----------------------------------------------------------------------


def test_the_declaration_is_complete_and_cites_the_pinned_docs() -> None:
    system = ProcrastinateSystem()
    assert declaration_problems(system, RULE_IDS) == []
    assert system.name == "procrastinate==3.10.0" and system.server == "postgres"
    assert all(p.link.startswith(f"{DOCS}/") for p in system.promises)
    defaults, fast = PROFILES["defaults"], PROFILES["fast"]
    assert not any(s.changed for s in defaults.settings)
    changed = {s.name: (s.value, s.default) for s in fast.settings if s.changed}
    assert changed == {
        "update_heartbeat_interval": ("2.0", "10.0"),
        "stalled_worker_timeout": ("6.0", "30.0"),
        "seconds_since_heartbeat": ("6.0", "30.0"),
        "retry_stalled_jobs cron": ("* * * * * */2", "*/10 * * * *"),
    }
    assert all(DOCS in s.allowed_by for s in fast.settings if s.changed)
    # threshold + the recipe's period + the deferrer's margin + a poll; no time limit
    assert (defaults.recovery_after, fast.recovery_after) == (635.5, 13.5)
    assert defaults.execution_limit is None and fast.execution_limit is None


def test_bad_calls_say_what_to_do() -> None:
    system = ProcrastinateSystem()
    with pytest.raises(RuntimeError, match=r"call bind\(\) before worker\(\)"):
        system.worker("w1", "fast", "/tmp/probe")
    with pytest.raises(ValueError, match=r"no profile 'quick'; it has \['defaults', 'fast'\]"):
        system.bind("postgresql://u:secret@127.0.0.1:1/x", "rdq_x", "/tmp", "quick")
    with pytest.raises(RuntimeError, match=r"call bind\(\) first"):
        system.enqueue([JobSpec("a")])


# ---- its workers ---------------------------------------------------------------------------


def test_jobs_of_every_behaviour_end_as_procrastinate_documents(campaign: Campaign) -> None:
    c = campaign
    c.system.bind(c.server.dsn, c.namespace, str(c.workdir), "defaults")
    # procrastinate's schema landed in the campaign's PostgreSQL schema, through search_path
    [(where,)] = c.sql(
        "SELECT n.nspname FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE t.oid = 'procrastinate_jobs'::regclass"
    )
    [(functions,)] = c.sql(
        "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = %s AND p.proname LIKE 'procrastinate%%'",
        c.namespace,
    )
    assert where == c.namespace and functions > 10
    with pytest.raises(ValueError, match=r"cannot make the handler \['hold'\]; it supports"):
        c.system.enqueue([JobSpec("h", "hold")])

    c.start("defaults", "w1", "w2")
    specs = [
        JobSpec("ok-1"),
        JobSpec("ok-2"),
        JobSpec("sleep-1", "sleep", 0.5),
        JobSpec("sleep-2", "sleep", 0.5),
        JobSpec("fail", "fail"),
        JobSpec("fail-r2", "fail", retries=2),
        JobSpec("retry-r1", "retry", retries=1),
        JobSpec("retry", "retry"),
        JobSpec("late", delay=3.0),
    ]
    asked = time.time()
    ids = dict(c.system.enqueue(specs))
    acked = time.time()
    assert sorted(ids) == sorted(s.key for s in specs)
    final = wait_for(
        "every job final",
        lambda: (
            (f := c.final(ids))
            and all(s.state in ("finished", "failed-for-good") for s in f.values())
            and f
        ),
    )
    words = {key: final[ids[key]].words for key in ids}
    assert words == {
        "ok-1": "succeeded", "ok-2": "succeeded", "sleep-1": "succeeded", "sleep-2": "succeeded",
        "fail": "failed", "fail-r2": "failed", "retry-r1": "failed", "retry": "failed",
        "late": "succeeded",
    }  # fmt: skip
    assert {final[ids[k]].state for k in ("ok-1", "sleep-2", "late")} == {"finished"}
    assert {final[ids[k]].state for k in ("fail", "retry")} == {"failed-for-good"}

    runs = by_job(c.executions())
    assert set(runs) == set(ids.values())  # the probe journals procrastinate's job ids
    attempts = {k: [(x.attempt, x.outcome) for x in runs[ids[k]]] for k in ids}
    assert attempts == {
        "ok-1": [(0, "succeeded")], "ok-2": [(0, "succeeded")],
        "sleep-1": [(0, "succeeded")], "sleep-2": [(0, "succeeded")],
        "fail": [(0, "failed")],
        "fail-r2": [(0, "failed"), (1, "failed"), (2, "failed")],  # retry=2: 3 attempts
        "retry-r1": [(0, "retry-asked"), (1, "retry-asked")],
        "retry": [(0, "retry-asked")],  # no retry strategy: the asked retry is not given
        "late": [(0, "succeeded")],
    }  # fmt: skip
    pids = {name: set(p.pids()) for name, p in c.workers.items()}
    assert all(x.pid in pids[x.worker] for xs in runs.values() for x in xs)
    assert all(x.ended - x.started >= 0.5 for k in ("sleep-1", "sleep-2") for x in runs[ids[k]])
    assert runs[ids["late"]][0].started >= asked + 3.0

    accepted = [verdicts.Accepted(ids[s.key], acked, s.retries) for s in specs]
    drain = verdicts.Drain(time.time(), frozenset(c.workers))
    found = verdicts.judge(c.executions(), [], accepted, final, c.system.promises, drain)
    assert [v.message for v in found] == []


def test_a_killed_workers_job_stays_doing_until_the_stalled_jobs_recipe(
    campaign: Campaign,
) -> None:
    """The docs: a worker "killed with SIGKILL [...] possibly leaving jobs with the `doing`
    status in the queue. And, if no specific action is taken, these *stalled* jobs will
    remain in the queue forever"; the recipe retries the jobs of workers without a heartbeat
    for ``seconds_since_heartbeat`` (6 s in ``fast``)."""
    c = campaign
    c.system.bind(c.server.dsn, c.namespace, str(c.workdir), "fast")
    c.start("fast", "w1", "w2")
    # 4 s: past the kill, sent as soon as the job's start is seen (one 0.1 s poll)
    job = c.system.enqueue([JobSpec("long", "sleep", 4.0)])["long"]
    first = wait_for("the job's first execution", lambda: c.executions())[0]
    c.workers[first.worker].kill()
    killed = time.time()
    assert c.system.final_states([job])[job] == JobState("running", "doing")
    [(dead_worker,)] = c.sql("SELECT worker_id FROM procrastinate_jobs WHERE id = %s", int(job))
    [(beat,)] = c.sql("SELECT last_heartbeat FROM procrastinate_workers WHERE id = %s", dead_worker)

    wait_for("the job done again", lambda: c.final({"j": job})[job].state == "finished")
    runs = by_job(c.executions())[job]
    survivor = next(name for name in c.workers if name != first.worker)
    assert [(x.worker, x.attempt, x.outcome) for x in runs] == [
        (first.worker, 0, None),  # killed mid-job: no end line
        (survivor, 1, "succeeded"),  # the recipe's retry_job counted an attempt
    ]
    events = c.sql(
        "SELECT type::text, at FROM procrastinate_events WHERE job_id = %s ORDER BY id", int(job)
    )
    assert [e for e, _ in events] == [
        "deferred", "started", "scheduled", "deferred_for_retry", "started", "succeeded",
    ]  # fmt: skip  # `doing` from the first start until the recipe's retry_job
    retried = events[3][1]
    fast = {
        s.name: float(s.value)
        for s in PROFILES["fast"].settings
        if s.name != "retry_stalled_jobs cron"
    }
    assert (retried - beat).total_seconds() > fast["seconds_since_heartbeat"]
    # the retry happened inside a run of the documented recipe, on the surviving worker
    recipe_runs = c.sql(
        "SELECT j.worker_id, min(e.at) FILTER (WHERE e.type = 'started'), "
        "max(e.at) FILTER (WHERE e.type = 'succeeded') FROM procrastinate_jobs j "
        "JOIN procrastinate_events e ON e.job_id = j.id WHERE j.task_name = %s "
        "GROUP BY j.id, j.worker_id",
        RECIPE,
    )
    [by] = [w for w, start, end in recipe_runs if end and start <= retried <= end]
    assert by != dead_worker
    assert runs[1].started >= killed

    kill = Fault("kill", killed, None, (first.worker,))
    accepted = [verdicts.Accepted(job, killed)]
    final = c.final({"j": job})
    drain = verdicts.Drain(time.time(), frozenset({survivor}))
    found = verdicts.judge(c.executions(), [kill], accepted, final, c.system.promises, drain)
    assert [v.message for v in found] == []


def test_an_error_other_than_an_unreachable_server_is_raised(campaign: Campaign) -> None:
    c = campaign
    c.system.bind(c.server.dsn, c.namespace, str(c.workdir), "fast")
    c.sql("DROP FUNCTION procrastinate_defer_jobs_v1")
    with pytest.raises(ConnectorException) as raised:
        c.system.enqueue([JobSpec("a")])
    assert isinstance(raised.value.__cause__, psycopg.errors.UndefinedFunction)


def test_a_defer_a_dead_server_did_not_take_raises_procrastinates_error(
    tmp_path: Path,
) -> None:
    """On a private PostgreSQL the kit starts (its local rung) and kills: the defer waits
    for the client's pool (psycopg_pool's 30 s) and raises procrastinate's
    ``ConnectorException`` from psycopg's ``OperationalError`` (the campaign records it as
    the job's refusal), and the client defers again once the server is back."""
    from rdq_compliance.provision.backend import ProvisionUnavailable

    try:
        server = load_backend("postgres").provision(
            ProvisionRequest(workdir=tmp_path, allow_docker=False)
        )
    except ProvisionUnavailable as exc:
        missing(f"no local PostgreSQL binaries for a server the test may kill: {exc}")
    system = ProcrastinateSystem()
    try:
        system.bind(server.dsn, server.create_namespace(), str(tmp_path), "fast")
        assert list(system.enqueue([JobSpec("before")])) == ["before"]
        server.kill()
        with pytest.raises(ConnectorException) as refused:
            system.enqueue([JobSpec("a"), JobSpec("b")])
        assert isinstance(refused.value.__cause__, psycopg.OperationalError)
        server.restart()

        def defer_after() -> dict[str, str] | None:
            try:
                return dict(system.enqueue([JobSpec("after")]))
            except ConnectorException:
                return None  # the client's pool still reconnecting

        taken = wait_for("a defer taken again", defer_after)
        assert list(taken) == ["after"]
        keys = [j.task_kwargs["key"] for j in system._open_client().job_manager.list_jobs()]
        assert sorted(keys) == ["after", "before"]
    finally:
        system.close()
        server.close()
