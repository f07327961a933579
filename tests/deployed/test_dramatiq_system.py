"""dramatiq 2.2.1 deployed (``rdq_dramatiq.deployed``): its declaration, then two workers
started with the system's own argv (dramatiq's CLI, profile ``fast``) on a Redis, fed by
the actor's own ``send_with_options``: every behaviour, read back through the probe's
journal and the system's final states; then one worker process SIGKILLed mid-message.

What dramatiq 2.2.1 does on that SIGKILL, as this test holds it:

- the CLI's parent logs ``Worker with PID <pid> exited unexpectedly (code -9). Shutting
  down...``, SIGTERMs its other worker processes and exits with code 1, ``RET_KILLED``
  (cli.py L674-L708 at v2.2.1; changelog 1.4.0 "Dramatiq now shuts itself down if any of
  the workers die unexpectedly"; Bogdanp/dramatiq#505, closed): the whole worker is gone;
- the message stays in the dead process's ack set ("running" in the system's words) until
  the heartbeat of that process's broker is ``heartbeat_timeout`` old; then the other
  worker's dispatch runs maintenance (every dispatch under ``fast``) and requeues it
  (brokers/redis/dispatch.lua L106-L131), and it runs again with the same ``retries`` count (a
  redelivery is not a retry).

Needs the Redis at ``RDQ_REDIS_DSN`` (default ``redis://127.0.0.1:6379/0``); the campaign
lives in a namespace of its own, dropped at the end.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import TypeVar

import pytest
import redis
from rdq_dramatiq.deployed import PROMISES, TAG, DramatiqSystem

from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.probe import Execution, read_probe
from rdq_compliance.deployed.system import (
    GROUP,
    JobSpec,
    JobState,
    declaration_problems,
    load_system,
)
from rdq_compliance.deployed.verdicts import RULES, Accepted, Drain, judge
from rdq_compliance.provision.backend import ProvisionRequest, Server
from rdq_compliance.provision.process import ManagedProcess
from rdq_compliance.registry import load_backend
from rdq_core.errors import InvalidArgument
from tests._waiting import HANG_S

DSN = os.environ.get("RDQ_REDIS_DSN") or "redis://127.0.0.1:6379/0"
RULE_IDS = [r.id for r in RULES]
#: The ``fast`` profile's heartbeat_timeout (seconds).
HEARTBEAT_S = 5.0
FINAL = ("finished", "failed-for-good")
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None]) -> T:
    """``probe()``'s first true answer, polled until it comes (``HANG_S``: a hang guard)."""
    deadline = time.monotonic() + HANG_S
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {HANG_S:.0f}s for {what}")
        time.sleep(0.1)


def test_the_declaration_is_complete_and_cites_the_pinned_release() -> None:
    system = load_system(
        "dramatiq",
        found=lambda: {"dramatiq": EntryPoint("dramatiq", "rdq_dramatiq.deployed:DramatiqSystem",
                                              GROUP)},
    )  # fmt: skip
    assert isinstance(system, DramatiqSystem)
    assert declaration_problems(system, RULE_IDS) == []
    assert system.name == "dramatiq==2.2.1" and system.server == "redis"
    assert all(p.link.startswith(f"{TAG}/") for p in system.promises)
    fast = system.profiles["fast"]
    changed = {s.name for s in fast.settings if s.changed}
    assert {"heartbeat_timeout", "maintenance_chance", "min_backoff", "max_backoff"} <= changed
    assert all(TAG in s.allowed_by for s in fast.settings if s.changed)
    assert fast.recovery_after == HEARTBEAT_S + 1.0
    assert system.profiles["defaults"].recovery_after > 60.0


def test_the_defaults_start_the_cli_with_its_own_defaults(tmp_path: Path) -> None:
    system = DramatiqSystem()
    system.bind("redis://127.0.0.1:6379/0?rdq_note=x", "ns1", str(tmp_path), "defaults")
    launch = system.worker("w1", "defaults", "/tmp/p")
    assert launch.argv[1:] == ("rdq_dramatiq.deployed_jobs:setup_broker",)
    assert launch.env == {
        "RDQ_DRAMATIQ_URL": "redis://127.0.0.1:6379/0?client_name=rdq%3Ans1",
        "RDQ_DRAMATIQ_NAMESPACE": "rdq:{ns1",
        "RDQ_PROBE_PATH": "/tmp/p",
        "RDQ_PROBE_WORKER": "w1",
    }
    fast = system.worker("w1", "fast", "/tmp/p").env
    assert fast["RDQ_DRAMATIQ_HEARTBEAT_TIMEOUT"] == "5000"
    assert fast["RDQ_DRAMATIQ_MAINTENANCE_CHANCE"] == "1000000"
    system.close()


def test_bad_input_is_refused_clearly_without_the_password() -> None:
    system = DramatiqSystem()
    with pytest.raises(InvalidArgument, match="call bind"):
        system.worker("w1", "fast", "/p")
    dsn = "redis://:s3cret@127.0.0.1:6379/0?dramatiq_heartbeat_timeout=5"
    with pytest.raises(InvalidArgument, match=r"profiles.*\['dramatiq_heartbeat_timeout'\]") as e:
        system.bind(dsn, "n", "/", "fast")
    assert "s3cret" not in str(e.value)
    with pytest.raises(InvalidArgument, match=r"unknown profile 'quick'.*'defaults', 'fast'"):
        system.bind("redis://:s3cret@127.0.0.1:6379/0", "n", "/", "quick")


def test_an_enqueue_the_server_did_not_take_raises_the_clients_error() -> None:
    """No Redis listens on port 1: ``send_with_options`` raises redis's ``ConnectionError``
    and the system raises it as it came (the campaign records it as the job's refusal)."""
    system = DramatiqSystem()
    system.bind("redis://127.0.0.1:1/0", "n", "/", "fast")
    try:
        with pytest.raises(redis.ConnectionError, match=r"127\.0\.0\.1:1\b"):
            system.enqueue([JobSpec("a")])
    finally:
        system.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    server = load_backend("redis").provision(
        ProvisionRequest(workdir=tmp_path / "server", dsn=DSN, allow_docker=False)
    )
    try:
        yield server
    finally:
        server.close()


def _journal(paths: list[Path]) -> dict[str, list[Execution]]:
    by_job: dict[str, list[Execution]] = {}
    for x in read_probe([p for p in paths if p.exists()]).executions():
        by_job.setdefault(x.job, []).append(x)
    return by_job


def test_two_workers_run_every_behaviour_and_a_killed_worker_process_s_message_comes_back(
    server: Server, tmp_path: Path
) -> None:
    namespace = server.create_namespace()
    system = DramatiqSystem()
    system.bind(server.dsn, namespace, str(tmp_path), "fast")
    redis_client = redis.Redis.from_url(server.dsn)
    heartbeats = f"rdq:{{{namespace}:__heartbeats__"  # the broker's namespace: the kit's prefix
    probes = {name: tmp_path / f"{name}.probe" for name in ("w1", "w2")}
    workers: dict[str, ManagedProcess] = {}
    try:
        for name, probe in probes.items():
            launch = system.worker(name, "fast", str(probe))
            assert launch.argv[1:] == ("rdq_dramatiq.deployed_jobs:setup_broker", "--processes",
                                       "2", "--threads", "2")  # fmt: skip
            assert Path(launch.argv[0]).name == "dramatiq"
            workers[name] = ManagedProcess(
                launch.argv, log_path=tmp_path / f"{name}.log", env={**os.environ, **launch.env},
                cwd=tmp_path,
            ).start()  # fmt: skip
        # every worker process polls, so its broker's heartbeat is in Redis: 2 x 2 processes
        wait_for("4 worker processes' heartbeats", lambda: redis_client.zcard(heartbeats) >= 4)
        for w in workers.values():
            assert len(w.pids()) == 3, f"{w}: the parent and 2 worker processes, {w.pids()}"

        # ---- every behaviour, no fault ----
        specs = [
            JobSpec("ok"), JobSpec("ok2"), JobSpec("later", delay=1.5),
            JobSpec("nap", "sleep", seconds=0.5), JobSpec("fail0", "fail", retries=0),
            JobSpec("fail1", "fail", retries=1), JobSpec("retry1", "retry", retries=1),
        ]  # fmt: skip
        sent_at = time.time()
        ids = system.enqueue(specs)
        assert set(ids) == {s.key for s in specs} and len(set(ids.values())) == len(specs)
        far = system.enqueue([JobSpec("far", delay=3600)])["far"]

        def all_final() -> Mapping[str, JobState] | None:
            states = system.final_states(list(ids.values()))
            return states if all(v.state in FINAL for v in states.values()) else None

        final = wait_for("every job final", all_final)
        state = {key: final[ids[key]] for key in ids}
        for key in ("ok", "ok2", "later", "nap"):
            assert (state[key].state, state[key].words) == ("finished", "result stored"), key
        for key in ("fail0", "fail1"):
            assert state[key].state == "failed-for-good"
            assert "result: actor raised ProbeFailure" in state[key].words
            assert "also dead-lettered on default.XQ" in state[key].words
        assert state["retry1"].state == "failed-for-good"
        assert "actor raised Retry" in state["retry1"].words
        assert "dead-lettered on default.XQ" in state["retry1"].words

        # a job delayed an hour is waiting, held by a worker until its eta; an id dramatiq
        # never saw has no record
        waiting = system.final_states([far, "no-such-message"])
        assert waiting[far].state == "waiting"
        assert waiting[far].words.startswith("delayed on default.DQ, held until its eta by broker")
        assert waiting["no-such-message"].state == "unknown"

        runs = _journal(list(probes.values()))
        assert set(runs) == set(ids.values())
        outcomes = {k: [(x.attempt, x.outcome) for x in runs[ids[k]]] for k in ids}
        assert outcomes == {
            "ok": [(0, "succeeded")], "ok2": [(0, "succeeded")], "later": [(0, "succeeded")],
            "nap": [(0, "succeeded")], "fail0": [(0, "failed")],
            "fail1": [(0, "failed"), (1, "failed")],
            "retry1": [(0, "retry-asked"), (1, "retry-asked")],
        }  # fmt: skip
        pids = {name: set(w.pids()) for name, w in workers.items()}
        for x in (x for xs in runs.values() for x in xs):
            assert x.pid in pids[x.worker], f"{x} ran outside its worker's processes {pids}"
        assert runs[ids["later"]][0].started >= sent_at + 1.5  # the delay was kept
        nap = runs[ids["nap"]][0]
        assert nap.ended is not None and nap.ended - nap.started >= 0.5
        for key in ("fail1", "retry1"):  # the retry waited min_backoff (1000 ms) at least
            first, second = runs[ids[key]]
            assert first.ended is not None and second.started - first.ended >= 1.0, key

        # ---- one worker process SIGKILLed mid-message ----
        long_sent_at = time.time()
        # 5 s: past the kill, sent as soon as the job's start is seen (one 0.1 s poll)
        key = system.enqueue([JobSpec("long", "sleep", seconds=5.0)])["long"]
        start = wait_for("the long job's start", lambda: _journal(list(probes.values())).get(key))
        victim, pid = start[0].worker, start[0].pid
        survivor = "w2" if victim == "w1" else "w1"
        doomed = workers[victim].pids()
        held = system.final_states([key])[key]
        assert held.state == "running" and "fetched from default by broker" in held.words
        holder = held.words.split("by broker ")[1].split(",")[0]
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        last_heartbeat = redis_client.zscore(heartbeats, holder) / 1000.0
        # dramatiq still counts the message as fetched by the dead process's broker
        assert system.final_states([key])[key].words == held.words
        # the whole CLI goes: its parent stops the other worker process and exits 1
        assert workers[victim].wait(HANG_S) == 1
        assert workers[victim].pids() == []
        assert not [p for p in doomed if Path(f"/proc/{p}").exists()]
        log = (tmp_path / f"{victim}.log").read_text()
        assert f"Worker with PID {pid} exited unexpectedly (code -9). Shutting down..." in log
        wait_for(
            "the killed message finished elsewhere",
            lambda: system.final_states([key])[key].state == "finished",
        )
        first, second = _journal(list(probes.values()))[key]
        assert (first.worker, first.pid, first.ended, first.attempt) == (victim, pid, None, 0)
        assert (second.worker, second.attempt, second.outcome) == (survivor, 0, "succeeded")
        # it came back only once the dead broker's heartbeat was heartbeat_timeout old
        assert second.started >= last_heartbeat + HEARTBEAT_S
        print(f"killed {victim} pid {pid} at {killed_at:.3f}; last heartbeat "
              f"{last_heartbeat:.3f}; redelivered to {survivor} after "
              f"{second.started - killed_at:.3f} s")  # fmt: skip

        # the checker finds nothing to say about the killed message (one unfinished
        # execution on the killed process, then one success elsewhere) nor any other but
        # the job still delayed by an hour: waiting, never run
        every = [*ids.values(), key, far]
        accepted = [
            *(Accepted(j, sent_at) for j in [*ids.values(), far]), Accepted(key, long_sent_at)
        ]  # fmt: skip
        executions = [x for xs in _journal(list(probes.values())).values() for x in xs]
        kill = Fault("kill", killed_at, None, (victim,), part="worker", pids=frozenset({pid}))
        verdicts = judge(
            executions, [kill], accepted,
            system.final_states(every), PROMISES, Drain(time.time(), frozenset({survivor})),
            execution_limit=system.profiles["fast"].execution_limit,
        )  # fmt: skip
        assert [(v.rule, v.job, v.kind) for v in verdicts] == [("lost", far, "finding")]
        message = verdicts[0].message
        assert message.startswith("[lost] ") and f"job {far!r}" in message
        assert "delayed on default.DQ" in message and "dramatiq-ack-after-processing" in message
    finally:
        for w in workers.values():
            w.kill()
            w.stop()
        system.close()
        redis_client.close()
        server.drop_namespace(namespace)


def test_a_sigkilled_parent_leaves_its_worker_processes_working(
    server: Server, tmp_path: Path
) -> None:
    """The part ``main`` SIGKILLed: the CLI's worker processes are orphaned and go on
    fetching and running messages (Bogdanp/dramatiq#788, open)."""
    namespace = server.create_namespace()
    system = DramatiqSystem()
    system.bind(server.dsn, namespace, str(tmp_path), "fast")
    redis_client = redis.Redis.from_url(server.dsn)
    probe = tmp_path / "w1.probe"
    launch = system.worker("w1", "fast", str(probe))
    worker = ManagedProcess(
        launch.argv, log_path=tmp_path / "w1.log", env={**os.environ, **launch.env}, cwd=tmp_path
    ).start()
    try:
        heartbeats = f"rdq:{{{namespace}:__heartbeats__"
        wait_for("2 worker processes' heartbeats", lambda: redis_client.zcard(heartbeats) >= 2)
        children = set(worker.pids()) - {worker.pid}
        assert len(children) == 2
        os.kill(worker.pid, signal.SIGKILL)
        assert worker.wait(HANG_S) == -signal.SIGKILL
        assert set(worker.pids()) == children  # orphaned, still under the kit's watchdog
        job = system.enqueue([JobSpec("after")])["after"]
        wait_for("the job run", lambda: system.final_states([job])[job].state == "finished")
        [run] = _journal([probe])[job]
        assert run.pid in children and run.outcome == "succeeded"
    finally:
        worker.kill()
        assert worker.pids() == []
        worker.stop()
        system.close()
        redis_client.close()
        server.drop_namespace(namespace)
