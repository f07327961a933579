"""rq 3.0.0 as a deployed system (``rdq_rq.deployed``): its declaration is complete, and
its real ``rq worker`` processes, on a private redis-server the kit's local rung starts,
do what the declaration says: the states map as declared, the probe journals every
execution where rq ran it, and a SIGKILL of a work horse or of a whole worker leaves
what rq documents."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest
import redis
from rdq_rq.deployed import PROMISES, RqSystem
from rq import Queue, Worker

from rdq_compliance import registry
from rdq_compliance.deployed import verdicts
from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.probe import Execution, read_probe
from rdq_compliance.deployed.system import (
    JobSpec,
    JobState,
    declaration_problems,
    load_system,
)
from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable, Server
from rdq_compliance.provision.process import ManagedProcess
from tests._waiting import HANG_S

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX only")

RULE_IDS = [r.id for r in verdicts.RULES]
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None]) -> T:
    """Poll ``check`` until it returns something true; a hang after :data:`HANG_S`."""
    deadline = time.monotonic() + HANG_S
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"hang: {what} did not happen within {HANG_S:g} s")
        time.sleep(0.1)


# ---- the declaration -----------------------------------------------------------------------


def test_the_declaration_is_complete() -> None:
    assert declaration_problems(RqSystem(), RULE_IDS) == []


def test_the_system_is_registered_as_rq() -> None:
    system = load_system("rq")
    assert isinstance(system, RqSystem) and system.name == "rq==3.0.0"


def test_a_rule_no_promise_forbids_is_named() -> None:
    system = RqSystem()
    system.promises = tuple(
        dataclasses.replace(p, forbids=p.forbids - {"stuck"}) for p in system.promises
    )
    assert declaration_problems(system, RULE_IDS) == ["rq==3.0.0: no promise forbids 'stuck'"]


def test_every_promise_links_the_pinned_release() -> None:
    for p in PROMISES:
        assert p.link.startswith("https://github.com/rq/rq/blob/v3.0.0/docs/"), p.id


def test_the_profiles_say_what_they_change_and_what_follows() -> None:
    defaults, fast = RqSystem.profiles["defaults"], RqSystem.profiles["fast"]
    assert not [s for s in defaults.settings if s.changed]
    changed = {s.name: (s.value, s.default) for s in fast.settings if s.changed}
    assert changed == {
        "--maintenance-interval": ("1", "600"),
        "--worker-ttl": ("16", "420"),
        "--job-monitoring-interval": ("1", "30"),
    }
    assert all(s.allowed_by for s in fast.settings if s.changed)
    # p = maintenance interval + dequeue wait (worker_ttl - 15): defaults 600 + 405, fast
    # 1 + 1; recovery = max(monitoring + 60 + p, p + 60 + p) + 1
    assert (defaults.recovery_after, fast.recovery_after) == (2071.0, 65.0)
    assert defaults.execution_limit == fast.execution_limit == 180.0


# ---- real workers on a private server ------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    workdir = Path(tempfile.mkdtemp(prefix="rdq-test-rq-"))
    try:
        provisioned = registry.load_backend("redis").provision(
            ProvisionRequest(workdir=workdir, allow_docker=False)
        )
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local redis-server: {exc}")
    try:
        yield provisioned
    finally:
        provisioned.close()


@pytest.fixture
def system(server: Server, tmp_path: Path) -> Iterator[RqSystem]:
    rq_system = RqSystem()
    rq_system.bind(server.dsn, server.create_namespace(), str(tmp_path), "fast")
    try:
        yield rq_system
    finally:
        rq_system.close()


class Fleet:
    """``rq worker`` processes started from the system's launch, each in its own process
    group behind the kit's watchdog; every one is stopped at the end."""

    def __init__(self, system: RqSystem, dsn: str, probe: Path, logs: Path) -> None:
        self.system, self.probe, self.logs = system, probe, logs
        self.procs: dict[str, ManagedProcess] = {}
        self.queue = Queue(system.queue_name, connection=redis.Redis.from_url(dsn))

    def start(self, name: str) -> ManagedProcess:
        launch = self.system.worker(name, "fast", str(self.probe))
        proc = ManagedProcess(
            launch.argv,
            log_path=self.logs / f"{name}.log",
            cwd=Path(launch.cwd) if launch.cwd else None,
            env={**os.environ, **launch.env},
            grace=2.0,
        ).start()
        self.procs[name] = proc
        # ready: rq registered the worker's birth on the queue (its own registry)
        proc.wait_ready(
            lambda: proc.pid in {w.pid for w in Worker.all(queue=self.queue)},
            timeout=HANG_S,
            what=f"rq worker {name}",
        )
        return proc

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.queue.connection.close()


@contextlib.contextmanager
def fleet(system: RqSystem, dsn: str, tmp_path: Path, *names: str) -> Iterator[Fleet]:
    workers = Fleet(system, dsn, tmp_path / "probe.jsonl", tmp_path)
    try:
        for name in names:
            workers.start(name)
        yield workers
    finally:
        workers.stop()


def executions(probe: Path) -> list[Execution]:
    return read_probe(probe).executions() if probe.exists() else []


def settle(system: RqSystem, ids: Sequence[str]) -> dict[str, JobState]:
    """The final states once every job is finished or failed for good."""

    def check() -> dict[str, JobState] | None:
        states = dict(system.final_states(ids))
        return (
            states
            if all(s.state in ("finished", "failed-for-good") for s in states.values())
            else None
        )

    return wait_for(f"jobs {list(ids)} settling", check)


def by_job(xs: Sequence[Execution]) -> dict[str, list[Execution]]:
    out: dict[str, list[Execution]] = {}
    for x in xs:
        out.setdefault(x.job, []).append(x)
    return out


def test_every_behaviour_runs_as_declared(server: Server, system: RqSystem, tmp_path: Path) -> None:
    specs = [
        JobSpec("ok", "succeed"),
        JobSpec("nap", "sleep", seconds=2.0),
        JobSpec("bad", "fail", retries=0),
        JobSpec("bad1", "fail", retries=1),
        JobSpec("again", "retry", retries=2),
        JobSpec("later", "succeed", delay=2.0),
    ]
    with fleet(system, server.dsn, tmp_path, "w1", "w2") as workers:
        enqueued = time.time()
        ids = system.enqueue(specs)
        accepted = [verdicts.Accepted(ids[s.key], enqueued, s.retries) for s in specs]
        states = settle(system, list(ids.values()))
        drained = time.time()
        leaders = {p.pid for p in workers.procs.values()}
    assert set(ids) == {s.key for s in specs}
    assert all(job == f"{system.namespace}-{key}" for key, job in ids.items())
    got = {key: (states[ids[key]].state, states[ids[key]].words) for key in ids}
    assert got["ok"] == ("finished", "finished")
    assert got["nap"] == ("finished", "finished")
    assert got["later"] == ("finished", "finished")
    assert got["bad"][0] == "failed-for-good" and "FAILED: " in got["bad"][1]
    assert got["bad"][1].endswith(f"ProbeFailure: probe: job {ids['bad']} told to fail")
    assert got["bad1"][0] == "failed-for-good" and "retries_left=0" in got["bad1"][1]
    assert got["again"] == ("failed-for-good", "failed; number_of_retries=2; MAX_RETRIES_EXCEEDED")

    runs = by_job(executions(tmp_path / "probe.jsonl"))
    outcomes = {key: [(x.attempt, x.outcome) for x in runs[ids[key]]] for key in ids}
    assert outcomes == {
        "ok": [(0, "succeeded")],
        "nap": [(0, "succeeded")],
        "later": [(0, "succeeded")],
        "bad": [(0, "failed")],
        "bad1": [(0, "failed"), (1, "failed")],
        "again": [(0, "retry-asked"), (1, "retry-asked"), (2, "retry-asked")],
    }
    every = [x for xs in runs.values() for x in xs]
    assert {x.worker for x in every} <= {"w1", "w2"}
    assert not {x.pid for x in every} & leaders, "a job ran in a worker's main process"
    assert runs[ids["nap"]][0].ended - runs[ids["nap"]][0].started >= 2.0  # type: ignore[operator]
    # rq scores a due time in whole seconds (truncated): up to 1 s before the delay ends
    assert runs[ids["later"]][0].started >= enqueued + 2.0 - 1.0
    found = verdicts.judge(
        every, [], accepted, states, PROMISES,
        verdicts.Drain(drained, frozenset({"w1", "w2"})), execution_limit=180.0,
    )  # fmt: skip
    assert found == [], [v.message for v in found]


def test_a_killed_work_horse_fails_its_job_or_retries_it(
    server: Server, system: RqSystem, tmp_path: Path
) -> None:
    """rq's worker sees its horse die at once: the job fails ("Work-horse terminated
    unexpectedly", rq/worker/worker_classes.py#L139-L151), or is re-enqueued while its
    Retry has retries left (handle_job_failure, docs/docs/exceptions.md "Retrying Failed
    Jobs"; the horse-killed handler's docs suggest ``job.retries_left = 0`` to stop that)."""
    probe = tmp_path / "probe.jsonl"
    with fleet(system, server.dsn, tmp_path, "w1", "w2"):
        # 6 s: past the kills, sent as soon as both starts are seen (two idle workers
        # fetch them at once; one 0.1 s poll)
        ids = system.enqueue(
            [JobSpec("h0", "sleep", seconds=6.0), JobSpec("h1", "sleep", seconds=6.0, retries=1)]
        )
        first = wait_for(
            "both jobs starting", lambda: len(executions(probe)) >= 2 and executions(probe)
        )
        faults = []
        for x in first[:2]:
            at = time.time()
            os.kill(x.pid, signal.SIGKILL)
            faults.append(Fault("kill", at, None, (x.worker,), "horse", frozenset({x.pid})))
        states = settle(system, list(ids.values()))
        drained = time.time()
    h0, h1 = states[ids["h0"]], states[ids["h1"]]
    assert h0.state == "failed-for-good"
    assert "Work-horse terminated unexpectedly; waitpid returned 9 (signal 9)" in h0.words
    assert h1 == JobState("finished", "finished; retries_left=0")
    runs = by_job(executions(probe))
    assert [(x.attempt, x.outcome) for x in runs[ids["h0"]]] == [(0, None)]
    assert [(x.attempt, x.outcome) for x in runs[ids["h1"]]] == [(0, None), (1, "succeeded")]
    accepted = [verdicts.Accepted(ids["h0"], 0.0, None), verdicts.Accepted(ids["h1"], 0.0, 1)]
    found = verdicts.judge(
        [x for xs in runs.values() for x in xs], faults, accepted, states, PROMISES,
        verdicts.Drain(drained, frozenset({"w1", "w2"})), execution_limit=180.0,
    )  # fmt: skip
    assert found == [], [v.message for v in found]


def test_a_killed_worker_s_job_is_collected_by_another_worker(
    server: Server, system: RqSystem, tmp_path: Path
) -> None:
    """The job of a worker SIGKILLed whole (main, horse, scheduler) stays ``started`` until
    its heartbeat's score lapses (61 s under ``fast``); then the idle worker's maintenance
    fails it with AbandonedJobError (docs/docs/results.md "Dealing with Interruptions"), or
    re-enqueues it while its Retry has retries left (rq/registry.py#L310-L322), within the
    profile's recovery_after."""
    probe = tmp_path / "probe.jsonl"
    fast = RqSystem.profiles["fast"]
    assert fast.recovery_after is not None
    with fleet(system, server.dsn, tmp_path, "w1", "w2", "w3") as workers:
        # 8 s: past the kills, sent as soon as both starts are seen (one 0.1 s poll)
        ids = system.enqueue(
            [JobSpec("k0", "sleep", seconds=8.0), JobSpec("k1", "sleep", seconds=8.0, retries=1)]
        )
        first = wait_for(
            "both jobs starting", lambda: len(executions(probe)) >= 2 and executions(probe)
        )
        victims = {x.worker for x in first[:2]}
        if len(victims) < 2:
            pytest.fail(f"both jobs went to one worker ({victims}): rq runs one job at a time")
        faults = []
        for name in sorted(victims):
            at = time.time()
            workers.procs[name].kill()
            faults.append(Fault("kill", at, None, (name,)))
        killed = max(f.start for f in faults)
        assert {s.state for s in system.final_states(list(ids.values())).values()} == {"running"}
        states = settle(system, list(ids.values()))
        drained = time.time()
        (survivor,) = set(workers.procs) - victims
    k0, k1 = states[ids["k0"]], states[ids["k1"]]
    assert k0.state == "failed-for-good"
    assert "FAILED: Moved to FailedJobRegistry, due to AbandonedJobError" in k0.words
    assert k1 == JobState("finished", "finished; retries_left=0")
    runs = by_job(executions(probe))
    assert [(x.attempt, x.outcome) for x in runs[ids["k0"]]] == [(0, None)]
    again = runs[ids["k1"]]
    assert [(x.worker, x.attempt, x.outcome) for x in again[1:]] == [(survivor, 1, "succeeded")]
    # the heartbeat (every 1 s) scored the execution 61 s ahead, in whole seconds: not
    # collected before 59 s after the kill; the profile says by when it is
    assert killed + 59.0 <= again[1].started <= killed + fast.recovery_after
    accepted = [verdicts.Accepted(ids["k0"], 0.0, None), verdicts.Accepted(ids["k1"], 0.0, 1)]
    found = verdicts.judge(
        [x for xs in runs.values() for x in xs], faults, accepted, states, PROMISES,
        verdicts.Drain(drained, frozenset({survivor})), execution_limit=180.0,
    )  # fmt: skip
    assert found == [], [v.message for v in found]


def test_a_password_goes_to_rq_s_environment_not_its_argv(server: Server, tmp_path: Path) -> None:
    host, port = server.network_address()
    secret = "s3cret-rq-test"
    dsn = f"redis://:{secret}@{host}:{port}/0"
    redis.Redis.from_url(server.dsn).config_set("requirepass", secret)
    admin = redis.Redis.from_url(dsn)
    rq_system = RqSystem()
    try:
        rq_system.bind(dsn, server.create_namespace(), str(tmp_path), "fast")
        launch = rq_system.worker("w1", "fast", str(tmp_path / "probe.jsonl"))
        assert not [a for a in launch.argv if secret in a], "the password is in rq's argv"
        assert secret in launch.env["RQ_REDIS_URL"]
        with fleet(rq_system, dsn, tmp_path, "w1"):
            ids = rq_system.enqueue([JobSpec("one", "succeed")])
            assert settle(rq_system, list(ids.values()))[ids["one"]].state == "finished"
    finally:
        rq_system.close()
        admin.config_set("requirepass", "")
        admin.close()


def test_bad_input_is_a_clear_error(system: RqSystem) -> None:
    """What the system cannot express is refused by it; what rq refuses, rq refuses: a job
    id it does not take (rq/job.py#L86-L87), a Retry of fewer than one retry (rq's
    ``Retry(max=0)`` raises when the job asks for it, so the system enqueues the job)."""
    with pytest.raises(ValueError, match=r"rq==3.0.0 cannot run behaviour 'hold'"):
        system.enqueue([JobSpec("h", "hold")])
    with pytest.raises(ValueError, match=r"^Job ID must only contain letters, numbers, unde"):
        system.enqueue([JobSpec("a b", "succeed")])
    with pytest.raises(ValueError, match=r"^max: please enter a value greater than 0$"):
        system.enqueue([JobSpec("f", "fail", retries=-1)])
    assert list(system.enqueue([JobSpec("r", "retry")])) == ["r"]
    with pytest.raises(ValueError, match=r"no profile 'slow' \(known: \['defaults', 'fast'\]\)"):
        system.worker("w1", "slow", "/p")
    with pytest.raises(RuntimeError, match="call bind"):
        RqSystem().enqueue([JobSpec("x")])
