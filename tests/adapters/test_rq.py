"""The rq adapter (``adapters/rq/rdq_rq``, ``findings/rq/``): its name mapping and DSN
settings, that dropping a namespace leaves none of rq's keys behind, that its ledger is
one the kit accepts, and its findings -- each shown twice, by the kit (a chaos campaign
run through the kit's pytest plugin on the adapter) and by its standalone reproducer.

Needs a Redis server at ``RDQ_REDIS_DSN`` (default ``redis://127.0.0.1:6379/0``; the
reproducers use databases 11, 12 and 13 of the same server, and delete what they wrote);
without one the server tests skip -- except under ``CI=true``, where that is a failure.

rq's shortest heartbeat TTL is 61 s, so everything that waits for a lease to run out
takes a minute: :func:`test_findings` runs its seven subprocesses (two chaos campaigns, two
conformance tests, three reproducers at rq's defaults) side by side, about 3 min in all.
The tests of how the adapter drives rq (it reports as rq's work horse does, with what the
claiming worker holds; its client is made as rq's CLI makes one; its dead letter takes
rq's failure path; no lock around rq's scheduler; no claim dropped) take seconds.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

rq = pytest.importorskip("rq", reason="rq is not installed: pip install -e '.[rq]'")
redis = pytest.importorskip("redis")

from rdq_rq import dsn as dsns  # noqa: E402
from rdq_rq.names import Names, escape, key_patterns, unescape  # noqa: E402
from rdq_rq.plugin import RqBackend  # noqa: E402
from rq.job import Job, JobStatus  # noqa: E402
from rq.registry import FailedJobRegistry  # noqa: E402

from rdq_compliance.provision.backend import ProvisionRequest  # noqa: E402
from rdq_compliance.rules import RULES  # noqa: E402
from rdq_core.errors import InvalidArgument  # noqa: E402
from rdq_core.model import ByIds, ErrorInfo, NewTask, Status  # noqa: E402
from tests._ci import missing  # noqa: E402
from tests._proof import AttemptResult, Proof, run_seeds  # noqa: E402
from tests._waiting import HANG_S  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "findings" / "rq"
DSN = os.environ.get("RDQ_REDIS_DSN", "redis://127.0.0.1:6379/0")


def _need_server() -> None:
    try:
        redis.Redis.from_url(DSN, socket_connect_timeout=HANG_S).ping()
    except redis.RedisError as exc:
        missing(f"no Redis server at {DSN}: {exc}")


def _db_url(db: int) -> str:
    """The server of :data:`DSN`, database ``db`` (a reproducer's own)."""
    parts = urlsplit(DSN)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", "", ""))


# ---- the mapping --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task_id", ["t-1", "a_b", "with space", "x:y/z", "unicodé 🚀", "-", "_", "a" * 255]
)
def test_a_task_id_maps_to_an_rq_job_id_and_back(task_id):
    """Any printable rdq task id becomes an id rq accepts (``[A-Za-z0-9_-]+``), and back."""
    names = Names("ns_1-x")
    job_id = names.job_id(task_id)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", job_id), job_id
    assert names.task_id(job_id) == task_id
    assert unescape(escape(task_id)) == task_id


def test_no_namespace_names_are_a_prefix_of_anothers():
    """The escaped namespace keeps no ``.`` or ``-``, so the namespace a key belongs to is
    never in doubt (what dropping a namespace relies on)."""
    a, b = Names("ns"), Names("ns-1")
    assert not b.queue("q").startswith(a.queue(""))
    assert not b.job_id("t").startswith(a.job_id(""))
    assert a.task_id(b.job_id("t")) is None
    assert key_patterns("ns-1") == ("rq:*:ns_2d1.*", "rq:*:ns_2d1-*")


def test_the_dsn_carries_rqs_deployment_settings():
    """``rq_lease`` (>= 61, rq's floor) and ``rq_maintenance_interval`` (>= 0) are read and
    removed; the built-in redis backend's ``rdq_*`` parameters are removed too; a cluster
    is refused."""
    got = dsns.parse("redis://h:1/0?rq_lease=90&rq_maintenance_interval=600&rdq_wait=1&x=y")
    assert (got.url, got.lease_s, got.maintenance_interval_s) == ("redis://h:1/0?x=y", 90, 600)
    assert dsns.parse("redis://h:1/0").lease_s == 61
    for bad in ("rq_lease=60", "rq_lease=soon", "rq_maintenance_interval=-1", "rdq_cluster=yes"):
        with pytest.raises(InvalidArgument):
            dsns.parse(f"redis://h:1/0?{bad}")
    url, ours = dsns.split_params("redis://h:1/0?rq_lease=70&a=b")
    assert (url, ours) == ("redis://h:1/0?a=b", {"rq_lease": "70"})


# ---- against a server -----------------------------------------------------------------------


def test_rdq_option_reaches_the_storage_and_the_lease(tmp_path):
    """``--rdq-option rq_lease=70`` ends up in every storage's DSN: each claim's lease is
    then 70 s, as ``Capabilities.fixed_lease`` says."""
    _need_server()
    backend = RqBackend()
    server = backend.provision(
        ProvisionRequest(workdir=tmp_path, dsn=DSN, options={"rq_lease": "70"})
    )
    try:
        ns = server.create_namespace()
        assert "rq_lease=70" in server.dsn
        with backend.open(server.dsn, ns) as storage:
            caps = storage.capabilities()
            assert (caps.lease_model, caps.fixed_lease) == ("fixed", timedelta(seconds=70))
            storage.enqueue(NewTask("t", "q", "h"))
            claim = storage.claim_due("q", 1, timedelta(seconds=5))[0]
            held = (claim.lease_expires_at - claim.claimed_at).total_seconds()
            assert 69 < held <= 70, held  # rq's registry scores are whole seconds
        server.drop_namespace(ns)
    finally:
        server.close()


def test_dropping_a_namespace_leaves_no_rq_key(tmp_path):
    """Everything rq wrote for a namespace (queues, jobs, results, executions, registries,
    workers, locks; members of ``rq:queues`` and ``rq:workers``) is gone after the drop."""
    _need_server()
    backend = RqBackend()
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    client = redis.Redis.from_url(DSN)
    try:
        ns = server.create_namespace()
        with backend.open(server.dsn, ns) as s:
            for i in range(4):
                s.enqueue(NewTask(f"t{i}", "q", "h", b"p"))
            s.enqueue(NewTask("later", "q", "h", delay=timedelta(hours=1)))
            a, b, c, d = s.claim_due("q", 4, timedelta(seconds=5))
            s.complete(a.task_id, a.token)
            s.reschedule(b.task_id, b.token, timedelta(seconds=30), ErrorInfo("E", "m"))
            s.dead_letter(c.task_id, c.token, ErrorInfo("E", "m"))
            s.extend_lease(d.task_id, d.token, timedelta(seconds=5))
            s.redrive("q", ByIds([c.task_id]))
        escaped = Names(ns).ns
        assert any(escaped in k.decode() for k in client.scan_iter(match="rq:*", count=1000))
        server.drop_namespace(ns)
        left = [k.decode() for k in client.scan_iter(match=f"*{escaped}*", count=1000)]
        members = [
            m.decode()
            for shared in ("rq:queues", "rq:workers")
            for m in client.smembers(shared)
            if escaped.encode() in m
        ]
        assert (left, members) == ([], [])
    finally:
        client.close()
        server.close()


def test_the_ledger_is_one_the_kit_accepts(tmp_path):
    """Every entry of the adapter's expected-failure ledger names a rule or a test of the
    suite (the kit checks it when it collects: a usage error otherwise)."""
    _need_server()
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
         "--rdq-backend=rq", f"--rdq-dsn={DSN}", "-p", "no:cacheprovider", "-q",
         "--collect-only"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]


# ---- the adapter reports as rq's worker does ------------------------------------------------

#: A database of :data:`DSN`'s server for the runs of rq's own workers below (the
#: reproducers use 11 to 13); every key they write carries a random tag and is deleted.
RQ_DB = 14


def _delete_own_job() -> str:
    """An rq job function that deletes its own job while it runs (``Job.delete``, as a
    user's code or a dashboard may), then returns."""
    current = rq.get_current_job()
    assert current is not None
    current.delete()
    return "done"


def _drop_tagged(client: redis.Redis, tag: str) -> None:
    for key in client.scan_iter(match=f"*{tag}*", count=1000):
        client.delete(key)
    for shared in ("rq:queues", "rq:workers"):
        for member in client.smembers(shared):
            if tag.encode() in member:
                client.srem(shared, member)


def test_an_outcome_writes_a_job_deleted_meanwhile_again_as_rqs_work_horse_does(tmp_path):
    """rq's work horse reports with the ``Job`` object its worker dequeued: a job deleted
    while it ran is written again, FINISHED, by ``_handle_success`` (``Job.save``). Shown
    here with rq's own ``SimpleWorker``; the adapter's ``complete`` with the claim's token
    does the same -- it neither refuses the report nor reads the job again."""
    _need_server()
    client = redis.Redis.from_url(_db_url(RQ_DB))
    tag = f"rdqrq{uuid.uuid4().hex[:10]}"
    try:
        queue = rq.Queue(tag, connection=client)
        job = queue.enqueue(_delete_own_job, job_id=f"{tag}-job", result_ttl=-1)
        rq.SimpleWorker([queue], connection=client, name=f"{tag}-w").work(
            burst=True, logging_level="WARNING"
        )
        again = Job.fetch(job.id, connection=client)
        assert (again.get_status(), job.id in queue.finished_job_registry) == (
            JobStatus.FINISHED,
            True,
        ), "rq's own worker no longer writes a job deleted while it ran: revisit this test"
    finally:
        _drop_tagged(client, tag)
        client.close()

    backend = RqBackend()
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    admin = redis.Redis.from_url(DSN)
    try:
        ns = server.create_namespace()
        with backend.open(server.dsn, ns) as storage:
            storage.enqueue(NewTask("t", "q", "h", b"p"))
            claim = storage.claim_due("q", 1, timedelta(seconds=5))[0]
            Job.fetch(Names(ns).job_id("t"), connection=admin).delete()
            storage.complete("t", claim.token)  # rq's horse: no refusal, no fresh read
            assert storage.get("t").status is Status.SUCCEEDED
            job_id = Names(ns).job_id("t")
            finished = rq.Queue(Names(ns).queue("q"), connection=admin).finished_job_registry
            assert job_id in finished
        server.drop_namespace(ns)
    finally:
        admin.close()
        server.close()


def test_a_job_deleted_while_a_worker_takes_it_is_still_handed_out(tmp_path, monkeypatch):
    """Once rq's worker has dequeued a job and its horse has prepared it, the horse runs
    the ``Job`` object it holds whatever happens to the job's hash. A claim is that job: the
    adapter hands it out even when the job is deleted right after
    ``prepare_job_execution`` (here by a patch of it), and drops nothing of its own."""
    _need_server()
    prepare = rq.Worker.prepare_job_execution

    def prepared_then_deleted(self, job, remove_from_intermediate_queue=False):
        prepare(self, job, remove_from_intermediate_queue)
        Job.fetch(job.id, connection=self.connection).delete()

    backend = RqBackend()
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    try:
        ns = server.create_namespace()
        with backend.open(server.dsn, ns) as storage:
            storage.enqueue(NewTask("t", "q", "h", b"p"))
            monkeypatch.setattr(rq.Worker, "prepare_job_execution", prepared_then_deleted)
            claims = storage.claim_due("q", 1, timedelta(seconds=5))
            monkeypatch.undo()
            assert [(c.task_id, c.task.status, c.task.payload) for c in claims] == [
                ("t", Status.IN_FLIGHT, b"p")
            ]
        server.drop_namespace(ns)
    finally:
        server.close()


class _Records(logging.Handler):
    """Keeps every record of the logger it is added to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_dead_letter_logs_and_carries_on_as_rqs_failure_path_does(tmp_path):
    """rq's failure path, ``Worker._finalize_failure``, logs the exception the job raised
    (``handle_exception``); when ``handle_job_failure`` cannot persist the failure it logs
    "failed to persist failure of job ..." and carries on. The adapter's ``dead_letter``
    takes that path: both of rq's records, and no error of the adapter's own (here the
    queue's FailedJobRegistry key holds a string, so rq's ``ZADD`` into it fails)."""
    _need_server()
    backend = RqBackend()
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    admin = redis.Redis.from_url(DSN)
    records = _Records()
    log = logging.getLogger("rq.worker")
    try:
        ns = server.create_namespace()
        with backend.open(server.dsn, ns) as storage:
            storage.enqueue(NewTask("t", "q", "h"))
            claim = storage.claim_due("q", 1, timedelta(seconds=5))[0]
            failed = FailedJobRegistry(Names(ns).queue("q"), connection=admin).key
            admin.set(failed, "not a sorted set")
            log.addHandler(records)
            try:
                storage.dead_letter("t", claim.token, ErrorInfo("app.Boom", "went wrong"))
            finally:
                log.removeHandler(records)
                admin.delete(failed)
        server.drop_namespace(ns)
    finally:
        admin.close()
        server.close()
    said = [r.getMessage() for r in records.records]
    assert any("exception raised while executing" in m and "app.Boom: went wrong" in m
               for m in said), said  # fmt: skip
    assert any("failed to persist failure of job" in m for m in said), said


@pytest.mark.parametrize(
    "error",
    [
        None,
        ErrorInfo("ValueError", "bad value"),
        ErrorInfo("app.errors.D\u00e9lai", "d\u00e9lai: \u8d85\u65f6", "Traceback:\n  x\r\nend\n"),
        ErrorInfo("E", "", ""),
        ErrorInfo("E", ""),
        ErrorInfo("a b", "m" * 100, "d" * 100),
    ],
)
def test_a_dead_letter_error_reads_back_from_rqs_formatting_of_it(error):
    """``dead_letter`` hands rq the error as the exception the job raised; rq records
    ``format_exc_info`` of it, and that text reads back as the error given."""
    from rdq_rq.storage import _decode_error, _raised
    from rq.job_lifecycle import format_exc_info

    assert _decode_error(format_exc_info(_raised(error))) == error


def test_a_worker_whose_scheduler_is_busy_does_not_hold_up_another_workers_claim(
    tmp_path, monkeypatch
):
    """rq's only lock around its scheduler is the queue's lock in Redis
    (``RQScheduler.acquire_locks``): a worker that does not get it goes on to dequeue. So a
    claim on one thread goes on while another thread's scheduler holds the lock and is
    still promoting (held here inside ``enqueue_scheduled_jobs``)."""
    _need_server()
    from rq.scheduler import RQScheduler

    entered, release = threading.Event(), threading.Event()
    promote = RQScheduler.enqueue_scheduled_jobs

    def held(self: RQScheduler) -> None:
        if threading.current_thread().name == "promoter":
            entered.set()
            release.wait(120)
        promote(self)

    monkeypatch.setattr(RQScheduler, "enqueue_scheduled_jobs", held)
    backend = RqBackend()
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    try:
        ns = server.create_namespace()
        with backend.open(server.dsn, ns) as storage, ThreadPoolExecutor(1) as other:
            storage.enqueue(NewTask("due", "q", "h"))
            promoter = threading.Thread(
                target=storage.claim_due, args=("q", 1, timedelta(seconds=5)), name="promoter"
            )
            promoter.start()
            try:
                assert entered.wait(60), "the promoter thread never reached rq's scheduler"
                claim = other.submit(storage.claim_due, "q", 1, timedelta(seconds=5))
                got = claim.result(timeout=60)
            finally:
                release.set()
                promoter.join(120)
            assert [c.task_id for c in got] == ["due"]
        server.drop_namespace(ns)
    finally:
        server.close()


#: The redis-py settings that decide retries and timeouts of a connection.
REDIS_SETTINGS = (
    "retry",
    "retry_on_error",
    "retry_on_timeout",
    "socket_timeout",
    "socket_connect_timeout",
    "socket_keepalive",
    "health_check_interval",
    "client_name",
)


def test_the_storage_connects_as_rqs_cli_does(tmp_path):
    """rq's CLI connects with ``redis.Redis.from_url(url)`` (``CliConfig.connection``) and
    leaves redis-py's retry and timeout settings as redis-py has them, but for the socket
    timeout its ``Worker`` raises when it is built. The adapter's client is made the same
    way: named ``rdq:<namespace>``, no setting of its own beside that."""
    _need_server()
    backend = RqBackend()
    server = backend.provision(ProvisionRequest(workdir=tmp_path, dsn=DSN))
    try:
        ns = server.create_namespace()
        with backend.open(server.dsn, ns) as storage:
            storage.enqueue(NewTask("t", "q", "h"))
            storage.claim_due("q", 1, timedelta(seconds=5))  # builds the thread's rq Worker
            ours = storage._client.connection_pool.connection_kwargs
            got = {key: ours.get(key) for key in REDIS_SETTINGS}
        reference = redis.Redis.from_url(dsns.parse(server.dsn).url, client_name=f"rdq:{ns}")
        rq.Worker([Names(ns).queue("q")], connection=reference, worker_ttl=16,
                  prepare_for_work=False)  # fmt: skip
        theirs = reference.connection_pool.connection_kwargs
        assert got == {key: theirs.get(key) for key in REDIS_SETTINGS}
        reference.close()
        server.drop_namespace(ns)
    finally:
        server.close()


# ---- the findings -----------------------------------------------------------------------------

#: A zombie: one of three workers is SIGSTOPped 2.5 s in, while it runs a task of 4-5 s,
#: for just past rq's 61 s heartbeat TTL (the harness holds the pause until another worker
#: has claimed the task): rq's maintenance in another worker's claim reclaims it, that
#: worker runs it from the start, and the zombie resumes, finishes the rest of its task (a
#: chaos handler counts running time) and reports -- while the other still runs it, or just
#: after. Seed 2 pauses w0 (before the kit's 4891daa the harness saw a reclaim made by a
#: worker whose journal sorts before the paused one's only after twice the pause). The
#: campaign runs 80 s: the reclaim lands about 64 s in (later when a loaded machine starts
#: the workers late), and at the drain a paused worker is resumed at once -- with 66 s, a
#: CI run beside the rest of the suite drained before rq reclaimed, and saw no zombie.
ZOMBIE = """
name = "{name}"
seed = {seed}
duration = "80s"

[workers]
count = 3
concurrency = 1
batch = 1
lease = "61s"
heartbeat_fraction = 0.3
max_attempts = 4
poll_interval = "100ms"
max_poll_interval = "400ms"
retry_base = "100ms"
retry_cap = "1s"

[workload]
tasks = 4
queue = "zombie"
spread = "0.5s"

[workload.handlers]
{handler}

[faults]
warmup = 2.5

[faults.pause]
count = 1
factor = [1.002, 1.004]

[limits]
deadline = "170s"
drain_timeout = "60s"
"""
#: The seeds the zombie campaigns may try: seed 2 alone (it pauses w0).
ZOMBIE_SEEDS = (2,)
#: F1: the zombie's task succeeds (its late complete is the stale outcome).
ZOMBIE_COMPLETE = 'slow = { kind = "ok", weight = 1, duration = ["4s", "5s"] }'
#: F2: the zombie's task fails once (its late reschedule re-enqueues the running task; the
#: copy, due 1 s later, is taken while a claim is live only when the zombie reports after
#: the reclaiming worker's own attempt ended and it claimed the task again: not every run).
ZOMBIE_RESCHEDULE = (
    'slow = { kind = "flaky", weight = 1, duration = ["4s", "5s"], failures = [1, 1] }'
)


def _kit_chaos(tmp_path: Path, name: str, handler: str, seed: int) -> tuple[str, str]:
    """Run the kit's chaos suite on the adapter with a zombie scenario: the failure text
    of its one test (the violations it found; ``""`` if it passed) and the run's output."""
    scenario = tmp_path / f"{name}.toml"
    scenario.write_text(ZOMBIE.format(name=name, handler=handler, seed=seed))
    junit = tmp_path / f"{name}.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
         "--rdq-backend=rq", f"--rdq-dsn={DSN}", "-m", "chaos",
         f"--rdq-chaos-scenario={scenario}", "-p", "no:cacheprovider", "-q",
         f"--junitxml={junit}", f"--basetemp={tmp_path / name}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert junit.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    failures = [
        (case.find("failure").get("message") or "") + (case.find("failure").text or "")
        for case in ET.parse(junit).iter("testcase")
        if case.find("failure") is not None
    ]
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    return "\n".join(failures), run.stdout[-6000:] + run.stderr[-2000:]


def _stale_success(failures: str) -> bool:
    """F1 in the kit's chaos run: a stale outcome accepted, under ``fencing``."""
    return "[fencing]" in failures and "a stale outcome accepted" in failures


def _stale_retry(failures: str) -> bool:
    """F2 in the kit's chaos run: the stale RETRYABLE_FAILURE accepted, under ``fencing``."""
    stale = re.search(r"RETRYABLE_FAILURE \[[^]]*\]\) was accepted at [^,]*, after", failures)
    return "[fencing]" in failures and stale is not None


def _zombie(
    tmp_path: Path, name: str, handler: str, wanted: str, shows: Callable[[str], bool]
) -> Proof[tuple[str, str]]:
    """The kit's chaos suite on a zombie scenario, one run per seed of
    :data:`ZOMBIE_SEEDS` until ``shows`` holds of its failure text: the proof, whose value
    is the last run's failure text and output."""

    def attempt(seed: int, number: int) -> AttemptResult[tuple[str, str]]:
        failures, said = _kit_chaos(
            tmp_path, name if number == 1 else f"{name}-{number}", handler, seed
        )
        rules = sorted(set(re.findall(r"\[([a-z-]+)\]", failures)) & set(RULES))
        return AttemptResult(shows(failures), (failures, said), {"rules": rules})

    return run_seeds(wanted, ZOMBIE_SEEDS, attempt)


def _kit_conformance(tmp_path: Path, test: str) -> tuple[str, str]:
    """Run one test of the kit's conformance suite on the adapter (``test``: its name with
    parameters): its failure text (``""`` if it passed) and the run's output."""
    junit = tmp_path / f"conformance-{len(test)}-{abs(hash(test))}.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
         "--rdq-backend=rq", f"--rdq-dsn={DSN}", "-k", test, "-p", "no:cacheprovider", "-q",
         f"--junitxml={junit}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert junit.is_file() and run.returncode in (0, 1), run.stdout[-3000:] + run.stderr
    failures = [
        (case.find("failure").get("message") or "") + (case.find("failure").text or "")
        for case in ET.parse(junit).iter("testcase")
        if case.find("failure") is not None
    ]
    return "\n".join(failures), run.stdout[-4000:]


def _reproducer(script: str, db: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FINDINGS / script)],
        env=dict(os.environ, RQ_REPRO_REDIS_URL=_db_url(db)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_findings(tmp_path):
    """F1, F2 and F3 of ``findings/rq/README.md``, all at once (the kit's runs wait out
    the adapter's 61 s heartbeat TTL, the reproducers rq's default 90 s; seven
    subprocesses, mostly asleep):

    - F1 (rule ``fencing``): a zombie's late success is accepted after rq reclaimed its
      task -- the kit's chaos campaign sees "a stale outcome accepted", its conformance
      test of a reclaimed token "complete was accepted"; the reproducer, real ``rq worker``
      processes frozen whole, sees the job FINISHED while the reclaiming worker still runs
      it;
    - F2 (rule ``fencing``; ``one-claim`` when the timing lets it show): a zombie's late
      failure is accepted, and rq re-enqueues the task another worker is running -- the
      kit sees the stale RETRYABLE_FAILURE accepted (and, in some runs, the second live
      claim it leads to), its conformance test "reschedule was accepted"; the reproducer
      sees two live executions in rq's StartedJobRegistry;
    - F3 (confirmed, upstream rq/rq#1716; no kit rule: the adapter dequeues with one queue
      per worker, which rq keeps in its intermediate list): a worker on two queues
      SIGKILLed between dequeue and STARTED loses the job -- the reproducer finds it in no
      list or registry after rq's maintenance ran past every TTL."""
    _need_server()
    stale = "test_stale_token_is_refused_and_changes_nothing[{}-reclaimed]"
    with ThreadPoolExecutor(max_workers=7) as pool:
        kit_f1 = pool.submit(
            _zombie, tmp_path, "rq-zombie-complete", ZOMBIE_COMPLETE,
            "F1 (fencing: a stale outcome accepted)", _stale_success,
        )  # fmt: skip
        kit_f2 = pool.submit(
            _zombie, tmp_path, "rq-zombie-reschedule", ZOMBIE_RESCHEDULE,
            "F2 (fencing: a stale RETRYABLE_FAILURE accepted)", _stale_retry,
        )  # fmt: skip
        conf_f1 = pool.submit(_kit_conformance, tmp_path, stale.format("complete"))
        conf_f2 = pool.submit(_kit_conformance, tmp_path, stale.format("reschedule"))
        repro_f1 = pool.submit(_reproducer, "01-stale-success.py", 11)
        repro_f2 = pool.submit(_reproducer, "02-stale-failure-double-run.py", 12)
        repro_f3 = pool.submit(_reproducer, "03-sigkill-multiqueue-lost.py", 13)

        for proof in (kit_f1.result(), kit_f2.result()):
            assert proof.shown, f"{proof.report()}\n{proof.value[1]}"
        for got, call in ((conf_f1, "complete"), (conf_f2, "reschedule")):
            text, said = got.result()
            assert "[fencing]" in text and f"reclaimed): {call} was accepted" in text, said

        out = repro_f1.result()
        assert out.returncode == 1, out.stdout + out.stderr
        assert "status finished" in out.stdout and "B's execution still live: True" in out.stdout
        assert "BUG PRESENT" in out.stdout, out.stdout
        out = repro_f2.result()
        assert out.returncode == 1, out.stdout + out.stderr
        assert "BUG PRESENT: one job is running on two workers at once" in out.stdout, out.stdout
        out = repro_f3.result()
        assert out.returncode == 1, out.stdout + out.stderr
        assert "2 queue(s), killed after prepared: status queued, in NOTHING" in out.stdout
        assert "2 queue(s), killed after dequeued: status queued, in NOTHING" in out.stdout
