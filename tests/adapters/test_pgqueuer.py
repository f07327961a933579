"""The pgqueuer adapter (``adapters/pgqueuer``) and what the kit found in pgqueuer 1.6.0.

- the adapter's own pieces: the heartbeat-timeout option carried in the DSN, the history
  read from ``pgqueuer_log`` (crafted logs), the plugin's server (pgqueuer installed in
  each namespace, the option in the DSN it hands out);
- what the adapter keeps as pgqueuer's own worker does, and adds nothing to: one storage
  is one ``QueueManager`` with its ``job_context`` (its own re-pick of a job it still runs
  is skipped), no check of an idle connection before a call, no connect timeout;
- the ledger: a few of its gaps, run through the kit, are reported as expected failures
  (and a ledger key that names no test would be a usage error: the run would fail);
- each finding of ``findings/pgqueuer/README.md``: the kit fails on the adapter under the
  finding's rule (a chaos campaign of the finding's own scenario, run in the finding's
  test, a second seed only if the first missed), and the standalone reproducer exits 1.

The server is ``RDQ_POSTGRES_DSN`` (or ``RDQ_DSN``), else
``postgresql://postgres@127.0.0.1:5432/test``; without one these tests skip — except
under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from rdq_pgqueuer import dsn as dsns
from rdq_pgqueuer.history import JobRecord, LogRow, decode, traceback_context
from rdq_pgqueuer.plugin import PgqueuerBackend
from rdq_pgqueuer.storage import PgqueuerStorage

from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import load_scenario
from rdq_compliance.provision.backend import ProvisionRequest
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from rdq_compliance.suite.helpers import wait_until
from rdq_core.errors import BackendUnavailable
from rdq_core.model import ErrorInfo, NewTask, Outcome, Status
from tests._ci import missing
from tests._proof import AttemptResult, Proof, run_seeds, seeds_from
from tests._waiting import HANG_S

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "findings" / "pgqueuer"
DSN = (
    os.environ.get("RDQ_POSTGRES_DSN")
    or os.environ.get("RDQ_DSN")
    or ("postgresql://postgres@127.0.0.1:5432/test")
)
#: Seeds a finding's campaign is run with, one after the other, until the rule shows.
TRIES = 2


def _server_answers() -> str | None:
    try:
        with psycopg.connect(dsns.split(DSN)[0], connect_timeout=int(HANG_S)) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip() or type(exc).__name__
    return None


@pytest.fixture(scope="module")
def dsn() -> str:
    reason = _server_answers()
    if reason is not None:
        message = f"no PostgreSQL server answers at {dsns.mask(DSN)!r}: {reason}"
        missing(message)
    return DSN


# ---- the adapter's own pieces ---------------------------------------------------------------


def test_the_heartbeat_timeout_travels_in_the_dsn():
    url = "postgresql://u:secret@h:5432/db?sslmode=disable"
    carried = dsns.with_timeout(url, timedelta(seconds=2.5))
    assert "pgqueuer_heartbeat_timeout=2.5" in carried and "sslmode=disable" in carried
    assert dsns.split(carried) == (url, timedelta(seconds=2.5))
    assert dsns.split(url) == (url, None)
    kv = dsns.with_timeout("host=h dbname=db", timedelta(seconds=7))
    assert dsns.split(kv) == ("host=h dbname=db", timedelta(seconds=7))
    assert "secret" not in dsns.mask(carried)
    for bad in ("0", "-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="positive number of seconds"):
            dsns.split(f"{url}&pgqueuer_heartbeat_timeout={bad}")


US = 1_000_000
T = timedelta(seconds=2)


def _record(log: list[tuple[str, int, dict | None]], row: dict | None, job_id: int = 1):
    rows = tuple(LogRow(i, at * US, status, tb) for i, (status, at, tb) in enumerate(log, 1))
    return JobRecord(job_id, "q", "h", row, rows)


ERROR = ErrorInfo("E", "m")


def _tb(
    outcome: Outcome, claim_at: int, error: ErrorInfo | None = ERROR, repicks: tuple[int, ...] = ()
):
    return {
        "exception_type": error.type if error else "",
        "exception_message": error.message if error else "",
        "traceback": "",
        "additional_context": traceback_context(
            outcome, error, claim_at * US, [r * US for r in repicks]
        ),
    }


def _row(status: str, heartbeat: int = 0) -> dict:
    return {
        "status": status,
        "payload": b"p",
        "headers": {"k": "v", "rdq.handler": "h"},
        "execute_after_us": 100 * US,
        "heartbeat_us": heartbeat * US,
        "created_us": 0,
    }


def test_history_reads_a_stale_retry_as_the_log_records_it():
    """F1 as pgqueuer_log records it: A picks (10), B re-picks (13), A's late retry_job
    (14) ends B's pick too, C picks (15): A's pick is LEASE_EXPIRED at the re-pick and
    gets A's retry, B's pick is LEASE_EXPIRED at A's retry, C's pick is no reclaim."""
    log = [
        ("queued", 1, None),
        ("picked", 10, None),
        ("picked", 13, None),
        ("queued", 14, _tb(Outcome.RETRYABLE_FAILURE, 10)),
        ("picked", 15, None),
    ]
    decoded = decode("t", [_record(log, _row("picked", heartbeat=15))], T)
    assert decoded is not None
    task = decoded.task
    assert [
        (a.attempt_no, a.outcome, a.started_at.second, a.finished_at.second) for a in task.attempts
    ] == [
        (1, Outcome.LEASE_EXPIRED, 10, 13),
        (2, Outcome.LEASE_EXPIRED, 13, 14),
        (3, Outcome.RETRYABLE_FAILURE, 10, 14),
    ]
    assert task.status is Status.IN_FLIGHT and not decoded.reclaimed
    assert task.lease_expires_at is not None and task.lease_expires_at.second == 17
    assert dict(task.headers) == {"k": "v"} and task.attempt_count == 3


def test_history_reads_a_resurrected_held_job_and_a_redrive():
    """F2 as the log records it (B holds the job, A's late retry makes it queued), then a
    redrive of a held job (requeue_jobs: 'queued' with no traceback after 'failed')."""
    f2 = [
        ("queued", 1, None),
        ("picked", 10, None),
        ("picked", 13, None),
        ("failed", 14, _tb(Outcome.PERMANENT_FAILURE, 13)),
        ("queued", 16, _tb(Outcome.RETRYABLE_FAILURE, 10)),
    ]
    task = decode("t", [_record(f2, _row("queued"))], T).task  # type: ignore[union-attr]
    assert [a.outcome for a in task.attempts] == [
        Outcome.LEASE_EXPIRED,
        Outcome.PERMANENT_FAILURE,
        Outcome.RETRYABLE_FAILURE,
    ]
    assert task.status is Status.PENDING and task.redrive_count == 0
    redriven = [
        ("queued", 1, None),
        ("picked", 2, None),
        ("failed", 3, _tb(Outcome.RETRYABLE_FAILURE, 2, None)),
        ("queued", 4, None),
    ]
    task = decode("t", [_record(redriven, _row("queued"))], T).task  # type: ignore[union-attr]
    assert task.redrive_count == 1 and task.attempt_count == 0
    assert [(a.outcome, a.error) for a in task.attempts] == [(Outcome.RETRYABLE_FAILURE, None)]
    done = [("queued", 1, None), ("picked", 2, None), ("successful", 3, _tb(Outcome.SUCCESS, 2))]
    task = decode("t", [_record(done, None)], T).task  # type: ignore[union-attr]
    assert task.status is Status.SUCCEEDED and task.payload == b"" and not task.headers
    gone = [("queued", 1, None), ("canceled", 2, None)]
    assert decode("t", [_record(gone, None)], T) is None


def test_history_reads_a_holders_own_re_pick_as_its_run_going_on():
    """QueueManager.run skips a job its own dequeue re-picked while it still runs it
    (``job_context``): the row is picked again (13) and the first run goes on to report
    (14), naming the re-pick in its traceback. One run, one attempt; a re-pick by another
    worker (16) still ends the pick it took over."""
    log = [
        ("queued", 1, None),
        ("picked", 10, None),
        ("picked", 13, None),
        ("successful", 14, _tb(Outcome.SUCCESS, 10, None, repicks=(13,))),
    ]
    task = decode("t", [_record(log, None)], T).task  # type: ignore[union-attr]
    assert [(a.outcome, a.started_at.second, a.finished_at.second) for a in task.attempts] == [
        (Outcome.SUCCESS, 10, 14)
    ]
    taken = [
        ("queued", 1, None),
        ("picked", 10, None),
        ("picked", 13, None),
        ("picked", 16, None),
        ("queued", 17, _tb(Outcome.RETRYABLE_FAILURE, 10, repicks=(13,))),
    ]
    decoded = decode("t", [_record(taken, _row("queued"))], T)
    assert decoded is not None
    assert [
        (a.outcome, a.started_at.second, a.finished_at.second) for a in decoded.task.attempts
    ] == [
        (Outcome.LEASE_EXPIRED, 10, 16),
        (Outcome.LEASE_EXPIRED, 16, 17),
        (Outcome.RETRYABLE_FAILURE, 10, 17),
    ]


@contextmanager
def _deployed(dsn: str, tmp_path: Path, heartbeat_timeout: str) -> Iterator[tuple[str, str]]:
    """A namespace with pgqueuer installed and the DSN that deploys ``heartbeat_timeout``."""
    backend = PgqueuerBackend()
    request = ProvisionRequest(
        workdir=tmp_path, dsn=dsn, options={dsns.OPTION: heartbeat_timeout}, allow_docker=False
    )
    server = backend.provision(request)
    try:
        namespace = server.create_namespace()
        try:
            yield server.dsn, namespace
        finally:
            server.drop_namespace(namespace)
    finally:
        server.close()


def test_a_worker_never_hands_itself_a_job_it_still_runs(dsn, tmp_path):
    """QueueManager.run keeps the jobs it runs in ``job_context`` and skips one its own
    dequeue re-picks (its heartbeat late): one storage is one QueueManager, so its
    claim_due returns nothing for a claim it still holds, whose report then stands as the
    one run. Another worker's dequeue still takes the stale job, and a reschedule releases
    the job before retry_job (as _dispatch does), so the same worker may claim it again."""
    with _deployed(dsn, tmp_path, "1") as (deployed, namespace):
        mine, other = PgqueuerStorage(deployed, namespace), PgqueuerStorage(deployed, namespace)
        try:
            mine.enqueue(NewTask("a", "q", "h", b"x"))
            (held,) = mine.claim_due("q", 5, timedelta(minutes=1))
            wait_until(mine, held.lease_expires_at)
            assert mine.claim_due("q", 5, timedelta(minutes=1)) == []
            assert mine.get("a").status is Status.IN_FLIGHT  # pgqueuer's dequeue re-picked it
            mine.complete("a", held.token)
            done = mine.get("a")
            assert done.status is Status.SUCCEEDED
            assert [a.outcome for a in done.attempts] == [Outcome.SUCCESS]

            mine.enqueue(NewTask("b", "q", "h", b"x"))
            (lost,) = mine.claim_due("q", 5, timedelta(minutes=1))
            wait_until(mine, lost.lease_expires_at)
            (taken,) = other.claim_due("q", 5, timedelta(minutes=1))
            assert taken.task_id == "b" and taken.reclaimed
            other.reschedule("b", taken.token, timedelta(0))
            (again,) = other.claim_due("q", 5, timedelta(minutes=1))
            assert again.task_id == "b" and not again.reclaimed
        finally:
            mine.close()
            other.close()


def test_a_session_ended_while_idle_fails_the_next_call_as_pgqueuer_would(dsn, tmp_path):
    """pgqueuer's PsycopgDriver runs on the connection it was given and checks nothing
    before a statement: a session the server ended while idle fails the next call, which
    the storage reports as BackendUnavailable; the call after it connects again."""
    with _deployed(dsn, tmp_path, "30") as (deployed, namespace):
        storage = PgqueuerStorage(deployed, namespace)
        try:
            storage.enqueue(NewTask("a", "q", "h", b"x"))
            with psycopg.connect(dsns.split(dsn)[0], autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (f"rdq:{namespace}",),
                ).fetchone()
            assert ended is not None and ended[0] == 1
            # the termination notice reaches the idle socket (the wait ends when it does)
            assert storage._conn is not None
            readable, _, _ = select.select([storage._conn.fileno()], [], [], HANG_S)
            assert readable, "the server's termination notice never arrived"
            with pytest.raises(BackendUnavailable):
                storage.get("a")
            assert storage.get("a").status is Status.PENDING
        finally:
            storage.close()


def test_a_connection_waits_as_long_as_libpq_does(tmp_path):
    """pgqueuer sets no connect timeout (``ConnectionSettings.connect_timeout`` defaults to
    None; libpq then waits for good) and neither does the storage: against a server that
    accepts the TCP connection and never answers, a call is still waiting after 6 s, and
    ends (BackendUnavailable) when the server goes away."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    storage = PgqueuerStorage(f"postgresql://postgres@127.0.0.1:{port}/test", "rdq_unused")
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            storage.now()
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        accepted, _ = listener.accept()
        caller.join(6.0)
        assert caller.is_alive(), f"the connect gave up by itself: {outcome}"
        accepted.close()
        listener.close()
        caller.join(30.0)
        assert not caller.is_alive() and isinstance(outcome[0], BackendUnavailable), outcome
    finally:
        listener.close()
        storage.close()


def test_the_plugin_installs_pgqueuer_and_deploys_the_heartbeat_timeout(dsn, tmp_path):
    backend = PgqueuerBackend()
    request = ProvisionRequest(
        workdir=tmp_path, dsn=dsn, options={dsns.OPTION: "3.5"}, allow_docker=False
    )
    server = backend.provision(request)
    try:
        assert dsns.split(server.dsn)[1] == timedelta(seconds=3.5)
        assert "pgqueuer 1.6.0" in (server.version or "")
        namespace = server.create_namespace()
        try:
            with psycopg.connect(dsns.split(dsn)[0]) as conn:
                tables = {
                    r[0]
                    for r in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (namespace,)
                    )
                }
            assert {"pgqueuer", "pgqueuer_log", "rdq_pgqueuer_task"} <= tables
            storage = backend.open(server.dsn, namespace)
            try:
                caps = storage.capabilities()
                assert caps.lease_model == "reclaimer_threshold"
                assert caps.fixed_lease == timedelta(seconds=3.5)
                assert storage.enqueue(NewTask("a", "q", "h", b"\x00x", {"k": "v"}))
                (claim,) = storage.claim_due("q", 5, timedelta(minutes=10))
                assert claim.lease_expires_at == claim.claimed_at + timedelta(seconds=3.5)
                assert int(claim.token[:16], 16) > 0  # the pgqueuer job id
                storage.complete("a", claim.token)
                assert storage.get("a").status is Status.SUCCEEDED
            finally:
                storage.close()
        finally:
            server.drop_namespace(namespace)
    finally:
        server.close()
    default = PgqueuerStorage(dsn, "rdq_unused")
    assert default.heartbeat_timeout == dsns.DEFAULT_HEARTBEAT_TIMEOUT
    default.close()


# ---- the ledger, through the kit ----------------------------------------------------------------

#: Ledgered gaps (xfail) and tests of the same rules the gap does not touch (pass).
GAP_TESTS = (
    "test_claims_come_out_oldest_due_first or test_complete_makes_the_task_succeeded "
    "or test_a_claim_holds_the_lease_it_asked_for or test_at_most_one_outcome_per_token "
    "or test_same_id_in_another_queue_raises_id_conflict"
)


def test_the_gaps_are_expected_failures_and_the_rest_passes(dsn, tmp_path):
    junit = tmp_path / "junit.xml"
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
            "--rdq-backend=pgqueuer", f"--rdq-dsn={dsn}", "-k", GAP_TESTS,
            "-p", "no:cacheprovider", "-q", f"--junitxml={junit}",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    verdicts = {}
    for case in ET.parse(junit).iter("testcase"):
        skipped = case.find("skipped")
        xfail = skipped is not None and skipped.get("type") == "pytest.xfail"
        verdict = "xfail" if xfail else ("skip" if skipped is not None else "pass")
        verdicts[case.get("name")] = verdict
    expected_xfail = {
        "test_claims_come_out_oldest_due_first",
        "test_complete_makes_the_task_succeeded",
        "test_a_claim_holds_the_lease_it_asked_for",
        "test_at_most_one_outcome_per_token",
        "test_same_id_in_another_queue_raises_id_conflict[SUCCEEDED]",
        "test_same_id_in_another_queue_raises_id_conflict[DEAD]",
    }
    assert {n for n, v in verdicts.items() if v == "xfail"} == expected_xfail, verdicts
    assert verdicts["test_same_id_in_another_queue_raises_id_conflict[PENDING]"] == "pass"


# ---- the findings: the kit fails under their rules, the reproducers exit 1 ---------------------

#: finding -> (its scenario and reproducer, the rule the kit reports it under)
CAMPAIGNS = {
    "01-stale-retry-steals-live-claim": "lease-respected",
    "02-stale-retry-resurrects-held-job": "terminal-final",
}


@pytest.fixture(scope="module")
def pgqueuer_session(dsn) -> Iterator[Session]:
    """One session on the server for the module's campaigns."""
    session = Session(Settings(backend="pgqueuer", dsn=dsn))
    session.start()
    try:
        yield session
    finally:
        session.close()


def _proof(
    session: Session, tmp_path_factory: pytest.TempPathFactory, name: str
) -> Proof[CampaignResult]:
    """The finding's campaign, run in this test (its scenario's seed, then the next only
    when the first did not show the finding; :func:`tests._proof.run_seeds`): its proof,
    which must show the finding, every campaign drained."""
    scenario = load_scenario(FINDINGS / f"{name}.toml")

    def attempt(seed: int, number: int) -> AttemptResult[CampaignResult]:
        outdir = tmp_path_factory.mktemp(f"{name[:2]}-seed{seed}")
        result = run_campaign(scenario.with_seed(seed), session=session, outdir=outdir)
        assert result.checked, f"{result.checker_error}; report folder {outdir}"
        rules = sorted({v.rule for v in result.violations})
        facts = {"rules": rules, "drained": result.drained}
        return AttemptResult(bool(FOUND[name]([result])), result, facts)

    wanted = f"finding {name} ({CAMPAIGNS[name]})"
    proof = run_seeds(wanted, seeds_from(scenario.seed, TRIES), attempt).require()
    assert all(a.facts["drained"] for a in proof.attempts), proof.report()
    return proof


def _reproduce(name: str) -> subprocess.CompletedProcess[str]:
    """The reproducer, its heartbeat_timeout shortened from pgqueuer's 30 s to 1 s (its
    ``HEARTBEAT_TIMEOUT``: the worker's freeze only has to outlast it)."""
    env = dict(os.environ)
    env.setdefault("PGDSN", dsns.split(DSN)[0])
    env["HEARTBEAT_TIMEOUT"] = "1"
    return subprocess.run(
        [sys.executable, str(FINDINGS / f"{name}.py")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def _attempts(result: CampaignResult) -> dict[str, list[dict]]:
    """Each task's attempts in the campaign's final state (times in µs)."""
    out = {}
    for line in (result.outdir / "final-state.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "id" in record and "attempts" in record:
            out[record["id"]] = record["attempts"]
    return out


_TAKEN = re.compile(
    r"as attempt (\d+) LEASE_EXPIRED \[[^]]*\]: reclaimed at \S+, ([\d.]+) ms before its "
    r"lease ended"
)
_RESURRECTED = re.compile(r"dead-lettered it \(attempt (\d+) ")


def _stale_retry_took_a_live_claim(results: list[CampaignResult]) -> list[str]:
    """Finding 01 in a campaign: a ``lease-respected`` violation whose claim (B) was ended
    early by a RETRYABLE_FAILURE of an older claim (A's late reschedule, same instant,
    started before B's), after which another claim started while B's lease still ran."""
    found = []
    for result in results:
        attempts = _attempts(result)
        for v in result.violations:
            m = _TAKEN.search(v.message) if v.rule == "lease-respected" else None
            if m is None or v.task not in attempts:
                continue
            task = attempts[v.task]
            b = next(a for a in task if a["no"] == int(m.group(1)))
            lease_end = b["finished_at"] + float(m.group(2)) * 1000
            stale_retry = any(
                a["outcome"] == "RETRYABLE_FAILURE"
                and a["finished_at"] == b["finished_at"]
                and a["started_at"] < b["started_at"]
                for a in task
            )
            next_claim = any(b["finished_at"] < a["started_at"] < lease_end for a in task)
            if stale_retry and next_claim:
                found.append(f"seed {result.seed}: {v.message}")
    return found


def _stale_retry_resurrected_a_dead_task(results: list[CampaignResult]) -> list[str]:
    """Finding 02 in a campaign: a ``terminal-final`` violation whose task, after the
    dead-letter (D), got a RETRYABLE_FAILURE of a claim older than D's (a late reschedule)
    and was then claimed again."""
    found = []
    for result in results:
        attempts = _attempts(result)
        for v in result.violations:
            m = _RESURRECTED.search(v.message) if v.rule == "terminal-final" else None
            if m is None or v.task not in attempts:
                continue
            task = attempts[v.task]
            d = next(a for a in task if a["no"] == int(m.group(1)))
            revivals = [
                a
                for a in task
                if a["outcome"] == "RETRYABLE_FAILURE"
                and a["started_at"] < d["started_at"]
                and a["finished_at"] > d["finished_at"]
            ]
            if any(a["started_at"] > r["finished_at"] for r in revivals for a in task):
                found.append(f"seed {result.seed}: {v.message}")
    return found


#: finding -> what shows it in a campaign's results
FOUND = {
    "01-stale-retry-steals-live-claim": _stale_retry_took_a_live_claim,
    "02-stale-retry-resurrects-held-job": _stale_retry_resurrected_a_dead_task,
}


def test_finding_01_a_stale_retry_takes_a_live_claim(pgqueuer_session, tmp_path_factory):
    """The kit: a claim still heartbeating is ended early (``lease-respected``) by the late
    reschedule of the worker whose claim had been reclaimed, and another claim takes the
    task inside the live lease; the reproducer shows it with pgqueuer alone. (A stale
    *complete* that ends a live claim is ``lease-respected`` too, but is G1's documented
    stale-outcome-wins: the signature looked for is the retry and the next claim.)"""
    name = "01-stale-retry-steals-live-claim"
    _proof(pgqueuer_session, tmp_path_factory, name)
    run = _reproduce(name)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "PRESENT: C held the job B was still running and heartbeating" in run.stdout


def test_finding_02_a_stale_retry_resurrects_a_held_job(pgqueuer_session, tmp_path_factory):
    """The kit: a DEAD task is claimed again without a redrive (``terminal-final``) — put
    back to queued by the late reschedule of the worker whose claim had been reclaimed;
    the reproducer shows it with pgqueuer alone."""
    name = "02-stale-retry-resurrects-held-job"
    _proof(pgqueuer_session, tmp_path_factory, name)
    run = _reproduce(name)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "PRESENT: a held ('failed') job ran again without requeue_jobs()" in run.stdout
