"""The worker fleet: real processes that work, die when told, and never outlive the kit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from rdq_compliance.chaos.events import read_journal
from rdq_compliance.chaos.fleet import Fleet
from rdq_compliance.chaos.runner import worker_template
from rdq_compliance.chaos.scenario import load_scenario
from rdq_core.model import NewTask, Status
from tests._waiting import HANG_S
from tests.chaos._chaos_support import SMOKE, gone, wait_gone

MIB = 1024 * 1024


def _wait(predicate, what, timeout=HANG_S):
    """Until ``predicate()``: ``timeout`` is a hang guard, not a bound on the kit."""
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def fleet_env(chaos_session, tmp_path):
    spec = chaos_session.create_namespace()
    storage = chaos_session.open(spec)
    scenario = load_scenario(SMOKE)
    fleets = []

    def make(size):
        fleet = Fleet(
            worker_template(scenario, spec),
            size,
            history_dir=tmp_path / "history",
            control_dir=tmp_path / "control",
            log_dir=tmp_path / "logs",
        )
        fleets.append(fleet)
        return fleet

    try:
        yield storage, scenario, make
    finally:
        for fleet in fleets:
            fleet.stop(grace=2.0)
        storage.close()
        chaos_session.drop_namespace(spec)


def _enqueue(storage, queue, n, kind="ok", seconds=0.05, prefix="t"):
    for i in range(n):
        payload = json.dumps({"kind": kind, "s": seconds}).encode()
        storage.enqueue(NewTask(f"{prefix}{i:04d}", queue, f"chaos.{kind}", payload))


def test_worker_processes_work_and_stay_small(fleet_env):
    """Each worker process stays under 100 MiB resident while it works."""
    storage, scenario, make = fleet_env
    queue = scenario.workload.queue
    _enqueue(storage, queue, 120, seconds=0.03)
    _enqueue(storage, queue, 6, seconds=0.8, prefix="slow")  # heartbeats too
    fleet = make(2)
    fleet.start()
    peak = 0
    end = time.monotonic() + 60
    while time.monotonic() < end:
        for w in fleet.workers():
            try:
                peak = max(peak, psutil.Process(w.pid).memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        stats = storage.stats(queue)
        if stats.succeeded == 126:
            break
        time.sleep(0.1)
    assert storage.stats(queue).succeeded == 126
    assert 0 < peak < 100 * MIB, f"a worker process used {peak / MIB:.1f} MiB resident"
    for w in fleet.workers():
        assert psutil.Process(w.pid).memory_info().rss < 100 * MIB
    fleet.stop(grace=5.0)
    assert fleet.pids() == []
    events = [e for w in fleet.retired for e in read_journal(fleet.history_dir / f"{w.name}.jsonl")]
    assert sum(1 for e in events if e["op"] == "complete" and e["type"] == "ok") == 126


def test_kill_pause_arm_and_replace(fleet_env):
    storage, scenario, make = fleet_env
    queue = scenario.workload.queue
    fleet = make(2)
    fleet.start()
    w0, w1 = fleet.workers()
    assert (w0.name, w1.name) == ("w0", "w1")
    # SIGKILL a worker: it is gone at once; a fresh process takes its slot
    fleet.kill(w0)
    assert gone(w0.pid)
    new = fleet.spawn(w0.slot)
    assert new.name == "w2" and new.slot == 0 and new.running
    # pause and resume
    fleet.pause(w1)
    _wait(lambda: psutil.Process(w1.pid).status() == psutil.STATUS_STOPPED, "SIGSTOP")
    fleet.resume(w1)
    _wait(lambda: psutil.Process(w1.pid).status() != psutil.STATUS_STOPPED, "SIGCONT")
    # a worker armed for a point SIGKILLs itself there, after journaling it. The worker
    # reads its control file between loop turns, so a task claimed in the turn under way
    # when it was armed may still run: one task at a time until a claim kills it.
    fleet.pause(new)  # keep the tasks for w1
    fleet.arm(w1, "after_claim")
    end = time.monotonic() + HANG_S
    sent: list[str] = []
    while w1.running:
        assert time.monotonic() < end, f"timed out waiting for the self-kill ({sent} run)"
        if not sent or storage.get(sent[-1]).status.terminal:
            _enqueue(storage, queue, 1, seconds=0.01, prefix=f"t{len(sent)}-")
            sent.append(f"t{len(sent)}-0000")
        time.sleep(0.05)
    exits = fleet.exited()
    assert [(x.worker.name, x.returncode, x.armed) for x in exits] == [
        ("w1", -signal.SIGKILL, "after_claim")
    ]
    events = list(read_journal(fleet.history_dir / "w1.jsonl"))
    assert [(e["type"], e["op"]) for e in events[-2:]] == [("ok", "claim"), ("info", "self_kill")]
    assert events[-1]["point"] == "after_claim" and events[-1]["task"] == sent[-1]
    assert storage.get(sent[-1]).status is Status.IN_FLIGHT  # claimed, never finished
    fleet.resume(new)
    fleet.replace(w1)
    assert {w.name for w in fleet.workers()} == {"w2", "w3"}
    fleet.stop(grace=5.0)
    assert fleet.pids() == []


RUNNER = """
import sys
from pathlib import Path
from rdq_compliance.chaos.runner import provision_and_run
from rdq_compliance.chaos.scenario import load_scenario
from rdq_compliance.settings import Settings
provision_and_run(load_scenario(sys.argv[1]), settings=Settings(sys.argv[2], docker=False),
                  outdir=Path(sys.argv[3]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_nothing_outlives_a_sigkilled_runner(backend, tmp_path):
    """SIGKILL the runner mid-run (with one worker SIGSTOPped): within seconds no worker,
    watchdog or server process it started is left."""
    if backend == "postgres":
        local = pytest.importorskip("rdq_postgres.local")
        try:
            local.find_postgres({})
        except Exception as exc:
            pytest.skip(f"no local PostgreSQL binaries: {exc}")
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(SMOKE), backend, str(tmp_path / "out")],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        me = psutil.Process(runner.pid)

        def workers():
            try:
                kids = me.children(recursive=True)
            except psutil.NoSuchProcess:
                return []
            return [p for p in kids if "worker_main" in " ".join(_cmdline(p))]

        end = time.monotonic() + 60
        while len(workers()) < 4:
            if runner.poll() is not None:
                err = runner.stderr.read().decode() if runner.stderr else ""
                if "no postgres server" in err.lower() or "ProvisionUnavailable" in err:
                    pytest.skip(f"no local {backend} server: {err[-300:]}")
                pytest.fail(f"the runner exited early ({runner.returncode}): {err[-2000:]}")
            assert time.monotonic() < end, "the fleet never started"
            time.sleep(0.1)
        time.sleep(1.0)  # let the run get going
        os.kill(workers()[0].pid, signal.SIGSTOP)  # a paused worker must die too
        started = [p.pid for p in me.children(recursive=True)]
        # 4 workers and their watchdogs (+ the server's tree); the nemesis's first kill
        # is due about now, so one worker may be between death and replacement.
        assert len(started) >= 6 and len(workers()) >= 3, _describe(started)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(HANG_S)
        left = wait_gone(started, timeout=HANG_S)
        assert left == [], f"processes left running after the runner died: {_describe(left)}"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _describe(pids: list[int]) -> str:
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} {p.status()} {' '.join(p.cmdline())[:100]}")
        except psutil.Error:
            out.append(str(pid))
    return "; ".join(out)


def test_fleet_pids_are_gone_after_stop(fleet_env):
    _storage, _scenario, make = fleet_env
    fleet = make(3)
    fleet.start()
    pids = fleet.pids()
    assert len(pids) == 6  # 3 workers, 3 watchdogs
    fleet.pause(fleet.workers()[0])
    fleet.stop(grace=3.0)
    assert wait_gone(pids, HANG_S) == []
    assert fleet.pids() == []
