"""The procrastinate adapter (``adapters/procrastinate``) and what the kit found with it.

- procrastinate's SQL resolves every name through the search path (nothing is qualified
  to ``public``), so its schema applied in a namespace's PostgreSQL schema is found there
  and nowhere else; the settings travel in the DSN; a token is the worker id and the job
  id;
- each finding of ``findings/procrastinate/README.md``: the kit fails the adapter under
  the finding's rule (a pytest subprocess of the kit's suite on the adapter) and the
  standalone reproducer exits 1 with the behaviour in its output. The kit run and the four
  reproducers start together, once, and run in parallel (about 15 s in all).

Needs the PostgreSQL at ``RDQ_POSTGRES_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``); without it these tests skip, except under
``CI=true``, where that is a failure.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests._ci import missing
from tests._waiting import HANG_S

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "findings" / "procrastinate"
PG_DSN = (
    os.environ.get("RDQ_POSTGRES_DSN")
    or os.environ.get("RDQ_DSN")
    or "postgresql://postgres@127.0.0.1:5432/test"
)
#: The kit's fencing test and the situations where a finding shows (the other situations
#: of that test are gaps, in the adapter's ledger; F3 and F4 show in no quick kit run).
FENCING = "test_stale_token_is_refused_and_changes_nothing"
FINDING_TESTS = {
    "F1": [f"{FENCING}[complete-reclaimed]", f"{FENCING}[dead_letter-reclaimed]"],
    "F2": [f"{FENCING}[reschedule-reclaimed]"],
}
#: The task of the stalled-jobs recipe's jobs (``rdq_procrastinate.storage.RECIPE_TASK``).
RECIPE = "retry_stalled_jobs"
REPRODUCERS = {
    "F1": "01-stale-finish-overwrites-live-outcome.py",
    "F2": "02-stale-retry-hands-live-job-to-third-worker.py",
    "F3": "03-pruned-live-worker-loses-its-job-and-dies.py",
    "F4": "04-stalled-recipe-acts-on-a-stale-list.py",
}


def _need_postgres() -> None:
    import psycopg

    try:
        psycopg.connect(PG_DSN, connect_timeout=int(HANG_S)).close()
    except psycopg.Error as exc:
        missing(f"no PostgreSQL answers at RDQ_POSTGRES_DSN / default {PG_DSN!r}: {exc}")


# ---- without a server ----------------------------------------------------------------------


def test_procrastinates_sql_names_nothing_outside_the_search_path():
    """schema.sql and queries.sql qualify no name but pg_catalog and set no search_path of
    their own: a session whose search_path is the namespace reaches only its tables."""
    import procrastinate

    sql = Path(procrastinate.__file__).parent / "sql"
    for name in ("schema.sql", "queries.sql"):
        text = (sql / name).read_text()
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        qualified = set(re.findall(r"\b([a-z_]+)\.procrastinate_\w+", code))
        assert qualified <= {"job", "jobs", "other_jobs", "sw", "e"}, (name, qualified)
        assert not re.search(r"\bpublic\.", code), name
        assert "search_path" not in code.lower(), name
        schemas = set(re.findall(r"WITH SCHEMA (\w+)", code))
        assert schemas <= {"pg_catalog"}, (name, schemas)


def test_settings_travel_in_the_dsn_and_never_reach_libpq():
    from rdq_procrastinate.dsn import Settings, split_dsn, with_settings

    dsn = "postgresql://postgres@127.0.0.1:5432/test?sslmode=disable"
    carried = with_settings(dsn, Settings(threshold=5.0, recipe_period=2))
    base, settings = split_dsn(carried)
    assert base == dsn
    assert (settings.threshold_s, settings.recipe_period_s) == (5.0, 2)
    assert with_settings(dsn, Settings()) == dsn
    assert split_dsn(dsn)[1] == Settings()
    assert split_dsn(dsn)[1].threshold_s == 2.0


@pytest.mark.parametrize("bad", ["0", "-1", "soon", "nan"])
def test_a_bad_threshold_is_one_clear_error(bad):
    from rdq_procrastinate.dsn import split_dsn

    from rdq_core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="procrastinate_stalled_threshold"):
        split_dsn(f"postgresql://h:1/d?procrastinate_stalled_threshold={bad}")


@pytest.mark.parametrize("bad", ["0", "0.2", "-1", "7", "90", "7200", "soon"])
def test_the_recipe_period_is_one_a_cron_line_gives(bad):
    """The recipe is a periodic task: its period is one a cron line gives (whole seconds
    dividing a minute, or whole minutes dividing an hour); no "every claim" mode."""
    from rdq_procrastinate.dsn import split_dsn

    from rdq_core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="procrastinate_recipe_period"):
        split_dsn(f"postgresql://h:1/d?procrastinate_recipe_period={bad}")
    assert split_dsn("postgresql://h:1/d?procrastinate_recipe_period=600")[1].recipe_period == 600


def test_the_default_recipe_period_and_the_docs_are_cron_lines():
    from rdq_procrastinate.dsn import DEFAULT_RECIPE_PERIOD_S, DOCS_RECIPE_PERIOD_S, recipe_cron

    assert recipe_cron(DOCS_RECIPE_PERIOD_S) == "*/10 * * * *"  # the docs' recipe
    assert recipe_cron(DEFAULT_RECIPE_PERIOD_S) == "* * * * * *"  # "1 per second"
    assert [recipe_cron(p) for p in (2, 60, 3600)] == ["* * * * * */2", "* * * * *", "0 * * * *"]


def test_a_token_is_the_worker_id_and_the_job_id():
    from rdq_procrastinate.storage import token_of, worker_and_job

    from rdq_core.validation import token

    made = token_of(0x1BC, 28)
    assert token(made) == made == "00000000000001bc000000000000001c"
    assert worker_and_job(made) == (0x1BC, 28)


def test_the_ledger_names_no_finding():
    """Findings are never ledger entries: the kit tests where they show stay failures."""
    from rdq_procrastinate.ledger import EXPECTED_FAILURES

    shown = {t for tests in FINDING_TESTS.values() for t in tests}
    assert not shown & set(EXPECTED_FAILURES)
    assert all("3.10.0" in reason for reason in EXPECTED_FAILURES.values())


# ---- with a server ---------------------------------------------------------------------------


def test_the_schema_lands_in_the_namespace_and_the_storage_works_there(tmp_path):
    """The plugin's rung wraps the postgres server; a namespace gets procrastinate's own
    schema inside it; a storage on it enqueues, claims (lease = the worker's heartbeat +
    the threshold, by the server's clock) and completes through procrastinate."""
    _need_postgres()
    import psycopg
    from rdq_procrastinate.plugin import backend

    from rdq_compliance.provision.backend import ProvisionRequest
    from rdq_core.model import NewTask, Status

    server = backend.provision(
        ProvisionRequest(
            workdir=tmp_path,
            dsn=PG_DSN,
            options={"procrastinate_stalled_threshold": "3"},
            allow_docker=False,
        )
    )
    try:
        assert "procrastinate 3.10.0" in (server.version or "")
        namespace = server.create_namespace()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            found = conn.execute(
                "SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE p.proname = 'procrastinate_fetch_job_v2' AND n.nspname = %s",
                (namespace,),
            ).fetchall()
        assert found == [(namespace,)]
        with backend.open(server.dsn, namespace) as storage:
            caps = storage.capabilities()
            assert (caps.lease_model, caps.fixed_lease) == (
                "reclaimer_threshold",
                timedelta(seconds=3),
            )
            assert storage.enqueue(NewTask(id="t1", queue="q", handler="h", payload=b"\0x"))
            assert storage.enqueue(NewTask(id="t1", queue="q", handler="h")) is False
            [claim] = storage.claim_due("q", 5, timedelta(seconds=30))
            assert claim.task.payload == b"\0x"
            assert claim.lease_expires_at - claim.claimed_at <= timedelta(seconds=3)
            storage.complete("t1", claim.token)
            assert storage.get("t1").status is Status.SUCCEEDED
        server.drop_namespace(namespace)
    finally:
        server.close()


# ---- the adapter adds nothing procrastinate lacks ---------------------------------------------


@dataclass
class Namespace:
    """A namespace holding procrastinate's schema, on a server whose stalled threshold is
    1 s; storages opened on it, and SQL in its schema."""

    server: Any
    name: str

    def open(self) -> Any:
        from rdq_procrastinate.plugin import backend

        return backend.open(self.server.dsn, self.name)

    def sql(self, query: str, *args: Any) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(PG_DSN, options=f"-c search_path={self.name}", autocommit=True) as c:
            cursor = c.execute(query, args)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    _need_postgres()
    from rdq_procrastinate.plugin import backend

    from rdq_compliance.provision.backend import ProvisionRequest

    options = {"procrastinate_stalled_threshold": "1"}
    request = ProvisionRequest(workdir=tmp_path, dsn=PG_DSN, options=options, allow_docker=False)
    server = backend.provision(request)
    name = server.create_namespace()
    try:
        yield Namespace(server, name)
    finally:
        server.drop_namespace(name)
        server.close()


def _past_the_threshold(storage: Any, claim: Any) -> None:
    """Wait until ``claim``'s worker is stalled by the storage's clock."""
    while storage.now() <= claim.lease_expires_at:
        time.sleep(0.05)


def _unique_violation(exc: BaseException) -> bool:
    from procrastinate import exceptions as pe

    return isinstance(exc.__cause__, pe.UniqueViolation)


def test_the_recipe_runs_once_per_period(ns, monkeypatch):
    """The stalled-jobs recipe is a periodic task: however many claims a period (1 s)
    holds, procrastinate's defer_periodic_job defers one run of it; the next period has
    its own. The periodic deferrer's clock (``time.time()``) is set for each claim."""
    import types

    import rdq_procrastinate.storage as storage

    from rdq_core.model import NewTask

    start = float(int(time.time()))
    clock = types.SimpleNamespace(time=lambda: start)
    monkeypatch.setattr(storage, "time", clock)
    count = f"SELECT count(*) FROM procrastinate_jobs WHERE task_name = '{RECIPE}'"
    with ns.open() as a, ns.open() as b:
        a.enqueue(NewTask(id="t", queue="q", handler="h"))
        for i, at in enumerate((0.0, 0.3, 0.6, 0.9)):
            clock.time = lambda at=at: start + at
            (a if i % 2 else b).claim_due("q", 1, timedelta(seconds=30))
        assert ns.sql(count) == [(1,)]
        clock.time = lambda: start + 1.0
        a.claim_due("q", 1, timedelta(seconds=30))
        assert ns.sql(count) == [(2,)]


def test_an_error_of_the_recipe_ends_its_run_as_a_task_error_ends_a_job(ns, caplog):
    """The docs' recipe catches nothing: a retry_job that raises (here the UniqueViolation
    of upstream procrastinate-org/procrastinate#1446: a todo job holds the stalled job's
    queueing lock) ends the run. procrastinate's worker logs a task's error, finishes its
    job failed and goes on fetching: so does the claim that ran the recipe."""
    from procrastinate import exceptions as pe

    from rdq_core.model import NewTask

    with ns.open() as a, ns.open() as b:
        a.enqueue(NewTask(id="t", queue="q", handler="h"))
        [first] = a.claim_due("q", 1, timedelta(seconds=30))
        assert a.enqueue(NewTask(id="t", queue="q", handler="h"))  # a todo job, same lock
        _past_the_threshold(a, first)
        with caplog.at_level("ERROR", logger="rdq_procrastinate.storage"):
            [twin] = b.claim_due("q", 1, timedelta(seconds=30))
    assert twin.task_id == "t" and not twin.reclaimed
    last_run = "SELECT status::text FROM procrastinate_jobs WHERE task_name = %s ORDER BY id DESC"
    assert ns.sql(last_run, RECIPE)[0] == ("failed",)
    stalled = "SELECT status::text FROM procrastinate_jobs WHERE queueing_lock = 't' ORDER BY id"
    assert ns.sql(stalled) == [("doing",), ("doing",)]  # the first stays doing (#1446)
    [logged] = [r for r in caplog.records if r.name == "rdq_procrastinate.storage"]
    assert logged.exc_info and isinstance(logged.exc_info[1], pe.UniqueViolation)


def test_a_reschedule_procrastinate_cannot_make_is_not_a_stale_claim(ns):
    """retry_job raises a UniqueViolation when a todo job holds the job's queueing lock
    (upstream procrastinate-org/procrastinate#1446): the job stays doing under its live
    worker; that is no refusal of a stale token, and the kit sees it as it is."""
    from rdq_core.errors import BackendUnavailable, StaleClaim
    from rdq_core.model import NewTask, Status

    with ns.open() as s:
        s.enqueue(NewTask(id="t", queue="q", handler="h"))
        [claim] = s.claim_due("q", 1, timedelta(seconds=30))
        assert s.enqueue(NewTask(id="t", queue="q", handler="h"))
        with pytest.raises(BackendUnavailable) as raised:
            s.reschedule("t", claim.token, timedelta(0))
        assert not isinstance(raised.value, StaleClaim) and _unique_violation(raised.value)
        assert s.get("t").status is Status.IN_FLIGHT  # 'doing', as #1446 says


def test_redrive_raises_what_procrastinate_raises(ns):
    """The Django admin's "Retry Job" catches nothing: a failed job whose queueing lock a
    todo job holds makes retry_job raise, and so does redrive."""
    from rdq_core.errors import BackendUnavailable
    from rdq_core.model import ByIds, NewTask

    with ns.open() as s:
        s.enqueue(NewTask(id="t", queue="q", handler="h"))
        [claim] = s.claim_due("q", 1, timedelta(seconds=30))
        s.dead_letter("t", claim.token)
        assert s.enqueue(NewTask(id="t", queue="q", handler="h"))
        with pytest.raises(BackendUnavailable) as raised:
            s.redrive("q", ByIds(["t"]))
        assert _unique_violation(raised.value), raised.value


def test_a_pruned_workers_heartbeat_reports_no_lease(ns):
    """update_heartbeat on a pruned worker's row updates nothing and says nothing; its
    jobs' worker_id is NULL, which get_stalled_jobs lists whatever the threshold: the
    lease extend_lease reports is none (the server's now), not a new one."""
    from rdq_procrastinate.storage import worker_and_job

    from rdq_core.model import NewTask

    with ns.open() as s:
        s.enqueue(NewTask(id="t", queue="q", handler="h"))
        [claim] = s.claim_due("q", 1, timedelta(seconds=30))
        _, job = worker_and_job(claim.token)
        ns.sql("SELECT procrastinate_prune_stalled_workers_v1(-60)")  # every worker row
        assert ns.sql("SELECT worker_id FROM procrastinate_jobs WHERE id = %s", job) == [(None,)]
        before = s.now()
        lease = s.extend_lease("t", claim.token, timedelta(seconds=30))
        assert lease <= s.now() and lease >= before, (before, lease)


def test_a_storage_prunes_workers_once_at_its_start_with_the_workers_timeout(ns):
    """procrastinate's Worker.run prunes once, at its start, the workers silent for
    stalled_worker_timeout (its default, 30 s); a storage does the same at its first
    claim, and never prunes a worker silent only for the stalled threshold."""
    from procrastinate.worker import Worker
    from rdq_procrastinate.storage import worker_and_job

    from rdq_core.model import NewTask

    timeout = inspect.signature(Worker).parameters["stalled_worker_timeout"].default
    old = f"now() - interval '{timeout + 1} seconds'"
    add = f"INSERT INTO procrastinate_workers (last_heartbeat) VALUES ({old}) RETURNING id"
    with ns.open() as a, ns.open() as b:
        a.enqueue(NewTask(id="t", queue="q", handler="h"))
        [claim] = a.claim_due("q", 1, timedelta(seconds=30))
        silent, _ = worker_and_job(claim.token)
        _past_the_threshold(a, claim)
        [(before_start,)] = ns.sql(add)
        b.claim_due("q", 1, timedelta(seconds=30))  # b starts: prunes
        [(after_start,)] = ns.sql(add)
        b.claim_due("q", 1, timedelta(seconds=30))  # b runs on: no prune
    left = {w for (w,) in ns.sql("SELECT id FROM procrastinate_workers")}
    assert before_start not in left  # pruned at b's start
    assert silent in left  # silent past the threshold only: stalled, not pruned
    assert after_start in left  # b started once


# ---- the findings: the kit run and the reproducers, started together -------------------------


@dataclass
class Runs:
    """What the kit reported for each test it ran, and each reproducer's exit and output."""

    kit: dict[str, tuple[str, list[str]]]  # test name -> (outcome, rules)
    kit_output: str
    reproducers: dict[str, tuple[int, str]]  # finding -> (exit code, output)


def _junit(path: Path) -> dict[str, tuple[str, list[str]]]:
    out = {}
    for case in ET.parse(path).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        rules = [p.get("value", "") for p in case.iter("property") if p.get("name") == "rdq.rule"]
        out[case.get("name", "")] = (outcome, rules)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    _need_postgres()
    where = tmp_path_factory.mktemp("procrastinate-findings")
    junit = where / "kit.xml"
    kit = subprocess.Popen(
        [
            sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
            "--rdq-backend=procrastinate", f"--rdq-dsn={PG_DSN}", "--rdq-no-docker",
            "--rdq-option=procrastinate_stalled_threshold=1",
            "-k", f"{FENCING} and reclaimed and not after",
            "-p", "no:cacheprovider", "-q", f"--junitxml={junit}",
        ],
        cwd=where, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    env = {**os.environ, "PROCRASTINATE_REPRO_DSN": PG_DSN, "PROCRASTINATE_REPRO_FAST": "1"}
    reproducers = {
        finding: subprocess.Popen(
            [sys.executable, str(FINDINGS / name)],
            cwd=where,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for finding, name in REPRODUCERS.items()
    }
    done = {}
    for finding, proc in reproducers.items():
        output, _ = proc.communicate(timeout=300)
        done[finding] = (proc.returncode, output)
    kit_output, _ = kit.communicate(timeout=300)
    yield Runs(_junit(junit) if junit.exists() else {}, kit_output, done)


def _kit_fails_under(runs: Runs, finding: str, rule: str) -> None:
    for test in FINDING_TESTS[finding]:
        outcome, rules = runs.kit.get(test, ("not run", []))
        assert outcome == "failed" and rule in rules, (
            f"{test}: {outcome} {rules}\n{runs.kit_output[-3000:]}"
        )


def _reproducer_shows(runs: Runs, finding: str, *lines: str) -> None:
    code, output = runs.reproducers[finding]
    assert code == 1, output
    for line in lines:
        assert line in output, output


def test_f1_a_stale_finish_is_accepted_over_the_live_workers(runs):
    _kit_fails_under(runs, "F1", "fencing")
    _reproducer_shows(
        runs,
        "F1",
        "A resumes, finish_job(succeeded) accepted: True",
        "B's finish_job(failed) refused",
        "status=succeeded",
    )


def test_f2_a_stale_retry_hands_a_live_job_to_a_third_worker(runs):
    _kit_fails_under(runs, "F2", "fencing")
    _reproducer_shows(
        runs, "F2", "its retry_job accepted: True", "while B runs it: two live workers = True"
    )


def test_f3_a_pruned_worker_heartbeats_into_nothing_loses_its_job_and_dies(runs):
    """A worker is pruned only by a starting worker, once its heartbeat is
    ``stalled_worker_timeout`` old (30 s by default): no quick kit run reaches that (the
    kit's stale heartbeat of ``[extend_lease-reclaimed]`` finds its worker's row and is
    gap G5); the reproducer runs procrastinate's own worker."""
    outcome, _ = runs.kit.get(f"{FENCING}[extend_lease-reclaimed]", ("not run", []))
    assert outcome == "skipped", runs.kit_output[-3000:]  # the ledger's xfail
    _reproducer_shows(
        runs,
        "F3",
        "get_stalled_jobs() (default 30 s) returned [1]",
        "while A was still running it: True",
        "worker A died: ConnectorException (ForeignKeyViolation)",
    )


def test_f4_the_stalled_recipe_acts_on_a_stale_list(runs):
    """The recipe's race is two statements wide: no quick kit run forces it; the
    reproducer interleaves it."""
    _reproducer_shows(
        runs,
        "F4",
        "failed job requeued = True",
        "events=['deferred', 'started', 'failed', 'scheduled', 'retried']",
    )
