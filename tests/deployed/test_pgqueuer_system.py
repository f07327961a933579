"""pgqueuer 1.6.0 as a deployed system (``rdq_pgqueuer.deployed``): its declaration, the
states it reads, two real ``pgq run`` workers running every behaviour the probe has on
pgqueuer (a failing job asking no retry run once, one asking pgqueuer's own retried by
``DatabaseRetryEntrypointExecutor`` at its defaults, 5 times with its backoff), and what
pgqueuer does with a job whose worker is SIGKILLed mid-job.

The server is ``RDQ_POSTGRES_DSN`` (or ``RDQ_DSN``), else the shared
``postgresql://postgres@127.0.0.1:5432/test``; each test installs pgqueuer in a schema
of its own, dropped at the end, and every worker it starts is killed at the end.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from rdq_pgqueuer.deployed import FLAGS, InstallFailed, PgqueuerSystem, entrypoint_of
from rdq_pgqueuer.deployed_app import RETRYING_ENTRYPOINT

from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.plan import make_plan
from rdq_compliance.deployed.probe import Execution, read_probe
from rdq_compliance.deployed.scenario import BUILTIN
from rdq_compliance.deployed.system import DeployedSystem, JobSpec, declaration_problems
from rdq_compliance.deployed.verdicts import RULES, Accepted, Drain, judge
from rdq_compliance.provision.process import ManagedProcess
from rdq_core.errors import InvalidArgument
from tests._ci import missing
from tests._waiting import HANG_S

T = TypeVar("T")

DSN = (
    os.environ.get("RDQ_POSTGRES_DSN")
    or os.environ.get("RDQ_DSN")
    or "postgresql://postgres@127.0.0.1:5432/test"
)
FINAL = ("finished", "failed-for-good", "held")


def _server_answers() -> str | None:
    try:
        with psycopg.connect(DSN, connect_timeout=int(HANG_S)) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def _until(what: str, check: Callable[[], T | None], workers: list[ManagedProcess]) -> T:
    """``check()``'s first true answer, polled; a hang guard of :data:`HANG_S`."""
    deadline = time.monotonic() + HANG_S
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            tails = "\n".join(w.log_tail() for w in workers)
            raise AssertionError(f"no {what} within {HANG_S} s; worker logs:\n{tails}")
        time.sleep(0.1)


@dataclass
class Deployment:
    system: PgqueuerSystem
    namespace: str
    folder: Path
    workers: dict[str, ManagedProcess] = field(default_factory=dict)

    @property
    def probe(self) -> Path:
        return self.folder / "probe.jsonl"

    def start(self, name: str) -> ManagedProcess:
        launch = self.system.worker(name, "fast", str(self.probe))
        worker = ManagedProcess(
            launch.argv, log_path=self.folder / f"{name}.log", env={**os.environ, **launch.env}
        ).start()
        self.workers[name] = worker
        return worker

    def executions(self) -> list[Execution]:
        return read_probe(self.probe).executions() if self.probe.exists() else []

    def wait_final(self, ids: list[str]) -> dict[str, str]:
        def done() -> dict[str, str] | None:
            states = self.system.final_states(ids)
            if all(s.state in FINAL for s in states.values()):
                return {j: s.words for j, s in states.items()}
            return None

        return _until("final state of every job", done, list(self.workers.values()))

    def sessions(self) -> int:
        """The server sessions tagged with the namespace (``application_name``)."""
        with psycopg.connect(DSN) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (f"rdq:{self.namespace}",),
            ).fetchone()
        return int(row[0]) if row else 0

    def log(self, job: str) -> list[tuple[str, float]]:
        """The job's rows in pgqueuer's log table: (status, created as epoch seconds)."""
        table = self.system.names().queue_table_log
        with psycopg.connect(DSN) as conn:
            rows = conn.execute(
                f"SELECT status::text, extract(epoch FROM created)::float8 FROM {table} "
                "WHERE job_id = %s ORDER BY id",
                (int(job),),
            ).fetchall()
        return [(s, t) for s, t in rows]


@pytest.fixture
def deployed(tmp_path: Path) -> Iterator[Deployment]:
    reason = _server_answers()
    if reason is not None:
        missing(f"no PostgreSQL server answers at {DSN!r}: {reason}")
    namespace = f"rdq_pgqtest_{uuid.uuid4().hex[:12]}"
    system = PgqueuerSystem()
    here = Deployment(system, namespace, tmp_path)
    try:
        system.bind(DSN, namespace, str(tmp_path), "fast")
        yield here
    finally:
        for worker in here.workers.values():
            worker.kill()
            worker.stop()
        system.close()
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {namespace} CASCADE")


# ---- the declaration ------------------------------------------------------------------------


def test_the_declaration_is_complete_and_cites_the_pinned_release():
    system = PgqueuerSystem()
    assert isinstance(system, DeployedSystem)
    assert declaration_problems(system, [r.id for r in RULES]) == []
    assert system.name == f"pgqueuer=={version('pgqueuer')}" == "pgqueuer==1.6.0"
    assert system.server == "postgres"
    assert [p.name for p in system.parts] == ["main"]
    for promise in system.promises:
        assert promise.link.startswith("https://github.com/janbjorge/pgqueuer/blob/v1.6.0/docs/")
    defaults, fast = system.profiles["defaults"], system.profiles["fast"]
    assert not [s for s in defaults.settings if s.changed]
    changed = {s.name: (s.value, s.default) for s in fast.settings if s.changed}
    assert changed == {"heartbeat_timeout": ("15", "30"), "dequeue_timeout": ("5", "30")}
    assert all("/blob/v1.6.0/docs/" in s.allowed_by for s in fast.settings if s.changed)
    assert (defaults.recovery_after, fast.recovery_after) == (60.0, 20.0)
    assert defaults.execution_limit is None and fast.execution_limit is None
    # a failing job is retried by DatabaseRetryEntrypointExecutor at its defaults (the retry
    # guide's Parameters table), a budget set per entrypoint, not per job
    executor = {
        s.name.split(".", 1)[1]: (s.value, s.default, s.allowed_by)
        for s in defaults.settings
        if s.name.startswith("DatabaseRetryEntrypointExecutor.")
    }
    assert {k: v[:2] for k, v in executor.items()} == {
        "max_attempts": ("5", "5"), "initial_delay": ("1s", "1s"),
        "max_delay": ("300s", "300s"), "backoff_multiplier": ("2.0", "2.0"),
    }  # fmt: skip
    assert all("/blob/v1.6.0/docs/guides/retry.md#L106-L113" in v[2] for v in executor.values())
    assert system.retries_per_job is False


def test_the_standard_plans_fail_and_retry_jobs_ask_pgqueuers_own_budget():
    """Every job of the standard scenario is one pgqueuer runs: its fail jobs go to the
    retrying executor's entrypoint (asked no retry count of their own), none refused."""
    system = PgqueuerSystem()
    plan = make_plan(BUILTIN["standard"], 1, system=system, profile=system.profiles["fast"],
                     server_faults=frozenset())  # fmt: skip
    fails = [j for j in plan.jobs if j.behaviour == "fail"]
    assert len(fails) == 8 and plan.substituted == ()
    assert all(j.retries is None for j in plan.jobs)
    assert any("retries: the library takes no retry count per job" in n for n in plan.notes)
    assert {entrypoint_of(j) for j in fails} == {RETRYING_ENTRYPOINT}
    assert [PgqueuerSystem._order(j).retries for j in fails] == [5] * 8


def test_bad_input_is_refused_in_words_and_no_password_is_shown(tmp_path):
    system = PgqueuerSystem()
    with pytest.raises(InvalidArgument, match="unknown profile 'slow'"):
        system.bind(DSN, "rdq_unused", str(tmp_path), "slow")
    with pytest.raises(InvalidArgument, match="not a Postgres schema name"):
        system.bind(DSN, "no-dashes", str(tmp_path), "fast")
    with pytest.raises(InvalidArgument, match="call bind"):
        system.worker("w1", "fast", str(tmp_path / "probe"))
    with pytest.raises(InvalidArgument, match="'fail' with retries=2 has no pgqueuer meaning"):
        system.enqueue([JobSpec("k", "fail", retries=2)])
    assert entrypoint_of(JobSpec("k", "fail", retries=0)) == "rdq_probe"
    assert entrypoint_of(JobSpec("k", "fail", retries=5)) == RETRYING_ENTRYPOINT
    secret = "postgresql://postgres:s3cret-pw@127.0.0.1:1/test"
    with pytest.raises(InstallFailed) as refused:
        system.bind(secret, "rdq_unused", str(tmp_path), "fast")
    assert "pgq install" in str(refused.value)
    assert "s3cret-pw" not in str(refused.value)


def test_the_states_pgqueuer_records_are_read_in_its_own_words(deployed):
    """Every status pgqueuer 1.6.0 has, mapped: a queued job, one picked, one held, one
    in the log only (successful, exception, canceled), one pgqueuer never knew."""
    system = deployed.system
    ids = system.enqueue([JobSpec(str(i)) for i in range(6)])
    assert sorted(ids) == [str(i) for i in range(6)]
    job = [ids[str(i)] for i in range(6)]
    queue, log = system.names().queue_table, system.names().queue_table_log
    # what pgqueuer's own statements leave (qb.py build_log_job_query: a finished job's row
    # goes, a log row stays; a held one keeps its row as 'failed')
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f"UPDATE {queue} SET status = 'picked' WHERE id = %s", (int(job[1]),))
        conn.execute(f"UPDATE {queue} SET status = 'failed' WHERE id = %s", (int(job[2]),))
        for j, status in ((job[3], "successful"), (job[4], "exception"), (job[5], "canceled")):
            conn.execute(f"DELETE FROM {queue} WHERE id = %s", (int(j),))
            conn.execute(
                f"INSERT INTO {log} (job_id, status, entrypoint, priority) "
                "VALUES (%s, %s, 'rdq_probe', 0)",
                (int(j), status),
            )
    states = system.final_states([*job, "999999", "not-a-job"])
    assert {j: (s.state, s.words) for j, s in states.items()} == {
        job[0]: ("waiting", "queue: queued"),
        job[1]: ("running", "queue: picked"),
        job[2]: ("held", "queue: failed"),
        job[3]: ("finished", "log: successful"),
        job[4]: ("failed-for-good", "log: exception"),
        job[5]: ("unknown", "log: canceled"),
        "999999": ("unknown", "absent from the queue and the log"),
        "not-a-job": ("unknown", "absent from the queue and the log"),
    }


# ---- real workers ---------------------------------------------------------------------------


def test_two_workers_run_every_behaviour_as_pgqueuer_documents(deployed):
    launch = deployed.system.worker("w1", "fast", str(deployed.probe))
    assert launch.argv[1:5] == ("-m", "pgqueuer", "run", "rdq_pgqueuer.deployed_app:main")
    assert launch.argv[5:] == (FLAGS["heartbeat_timeout"], "15", FLAGS["dequeue_timeout"], "5")
    assert launch.env["PGQUEUER_SCHEMA"] == deployed.namespace
    assert {"RDQ_PROBE_PATH", "RDQ_PROBE_WORKER", "PGDSN"} <= set(launch.env)
    for name in ("w1", "w2"):
        deployed.start(name)
    # the workers' sessions carry the tag the kit's connection cuts find them by
    assert launch.env["PGQUEUER_APPLICATION_NAME"] == f"rdq:{deployed.namespace}"
    _until("both workers' sessions", lambda: deployed.sessions() >= 2, [*deployed.workers.values()])
    specs = [
        JobSpec("ok1"), JobSpec("ok2"),
        JobSpec("nap1", "sleep", seconds=0.5), JobSpec("nap2", "sleep", seconds=0.5),
        JobSpec("bad1", "fail", retries=0), JobSpec("bad2", "fail"),
        JobSpec("again", "retry", retries=2),
        JobSpec("park", "hold"),
        JobSpec("later", delay=2.0),
    ]  # fmt: skip
    before = time.time()
    ids = deployed.system.enqueue(specs)
    accepted_at = time.time()
    assert sorted(ids) == sorted(s.key for s in specs)
    words = deployed.wait_final(list(ids.values()))
    expected = {"ok1": "log: successful", "ok2": "log: successful",
                "nap1": "log: successful", "nap2": "log: successful",
                "bad1": "log: exception", "bad2": "log: exception",
                "again": "log: exception", "park": "queue: failed",
                "later": "log: successful"}  # fmt: skip
    assert {k: words[ids[k]] for k in ids} == expected

    runs: dict[str, list[Execution]] = {}
    for x in deployed.executions():
        runs.setdefault(x.job, []).append(x)
    outcomes = {k: [(x.attempt, x.outcome) for x in runs.get(ids[k], [])] for k in ids}
    assert outcomes == {
        "ok1": [(0, "succeeded")], "ok2": [(0, "succeeded")],
        "nap1": [(0, "succeeded")], "nap2": [(0, "succeeded")],
        "bad1": [(0, "failed")], "bad2": [(n, "failed") for n in range(6)],
        "again": [(0, "retry-asked"), (1, "retry-asked"), (2, "retry-asked")],
        "park": [(0, "held")], "later": [(0, "succeeded")],
    }  # fmt: skip
    assert {x.worker for r in runs.values() for x in r} <= {"w1", "w2"}
    # "deferred jobs are never picked early" (docs/guides/deferred-execution.md#L32-L34)
    assert runs[ids["later"]][0].started >= before + 2.0
    # the retrying executor's backoff: each retry due 1, 2, 4, 8, 16 s after the failure
    # before it (initial_delay 1s, backoff_multiplier 2.0, docs/guides/retry.md)
    bad2 = runs[ids["bad2"]]
    for n, (failed, retried) in enumerate(pairwise(bad2)):
        assert failed.ended is not None and retried.started > failed.ended + 2**n

    final = deployed.system.final_states(list(ids.values()))
    verdicts = judge(
        deployed.executions(), [],
        [Accepted(ids[s.key], accepted_at, s.retries) for s in specs],
        final, deployed.system.promises, Drain(time.time(), frozenset({"w1", "w2"})),
    )  # fmt: skip
    assert [v.message for v in verdicts] == []


def test_a_job_whose_worker_is_killed_mid_job_is_picked_again_after_the_heartbeat_timeout(
    deployed,
):
    """At the fast profile (``--heartbeat-timeout 15``): the killed worker's job stays
    ``picked`` with a stale heartbeat, and another worker's dequeue re-picks it once that
    heartbeat is older than the timeout ("a picked job with a stale heartbeat becomes
    eligible for re-pickup by any available worker", docs/guides/heartbeat.md#L28-L34;
    the stale branch of the dequeue, ``heartbeat < NOW() - heartbeat_timeout``,
    pgqueuer/adapters/persistence/qb.py#L424-L439 at v1.6.0). The re-pick leaves
    ``attempts`` alone (ADR-0004#L42-L45)."""
    system = deployed.system
    w1 = deployed.start("w1")
    # the job outlasts the kill, sent as soon as its start is seen (one 0.1 s poll); w2
    # starts after the kill (a start waits for its watchdog's greeting, seconds under load)
    ids = system.enqueue([JobSpec("long", "sleep", seconds=3.0)])
    job = ids["long"]
    first = _until(
        "start of the job on w1",
        lambda: next((x for x in deployed.executions() if x.job == job), None),
        [w1],
    )
    assert first.worker == "w1"
    kill_sent = time.time()
    w1.kill()
    killed_at = time.time()
    assert system.final_states([job])[job].words == "queue: picked"
    deployed.start("w2")

    words = deployed.wait_final([job])
    assert words == {job: "log: successful"}
    runs = [x for x in deployed.executions() if x.job == job]
    assert [(x.worker, x.attempt, x.outcome) for x in runs] == [
        ("w1", 0, None),
        ("w2", 0, "succeeded"),
    ]
    picks = [t for status, t in deployed.log(job) if status == "picked"]
    assert len(picks) == 2
    # re-picked only once the heartbeat written at the first pick was 15 s old
    assert picks[1] - picks[0] >= 15.0
    assert runs[1].started > killed_at

    kill = Fault("kill", kill_sent, killed_at, targets=("w1",))
    verdicts = judge(
        runs, [kill], [Accepted(job, first.started, None)], system.final_states([job]),
        system.promises, Drain(time.time(), frozenset({"w2"})),
    )  # fmt: skip
    assert [v.message for v in verdicts] == []
    print(
        f"\nkill -> re-pick {picks[1] - killed_at:.1f} s; first pick -> re-pick "
        f"{picks[1] - picks[0]:.1f} s (heartbeat_timeout 15, dequeue_timeout 5)"
    )
