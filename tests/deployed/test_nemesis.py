"""The deployed nemesis and the fleet it acts on, on real process trees: a part kill
SIGKILLs one process of the part found by role (killing the leader ends the worker,
whose remnants the supervisor stops); a whole-worker kill and pause act on
every process of the tree; a killed worker is started again by the supervisor and the
kill's span ends then; a worker that exits on its own is restarted under its name, its
exit recorded; a fault that finds nothing to act on is an error, never a silent no-op;
a mid-job kill or pause waits until its worker runs a job and strikes it running (a stop
that finds the job just ended is undone, and the fault waits on), or is an error once
its latest start passed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from rdq_compliance import registry
from rdq_compliance.deployed.fleet import Fleet
from rdq_compliance.deployed.nemesis import Nemesis
from rdq_compliance.deployed.plan import PlannedFault
from rdq_compliance.deployed.probe import Execution, read_probe
from rdq_compliance.provision.backend import ProvisionRequest
from tests._waiting import HANG_S
from tests.deployed.tree_system import TreeSystem


class _NoServer:
    """A server no fault of these plans reaches."""

    faults = frozenset()


def _wait(what: str, cond: Callable[[], object]) -> None:
    deadline = time.monotonic() + HANG_S
    while not cond():
        assert time.monotonic() < deadline, f"hang: {what}"
        time.sleep(0.05)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    system = TreeSystem(tmp_path)
    f = Fleet(system, "fast", ("w1", "w2"), tmp_path / "out", restart_after=1.0, grace=2.0)  # type: ignore[arg-type]
    f.start()
    try:
        for w in ("w1", "w2"):
            _wait(f"{w}'s two children", lambda w=w: len(f.slots[w].process.pids()) == 3)  # type: ignore[union-attr]
        yield f
    finally:
        f.stop()


def test_part_kill_pause_and_kill_act_on_the_processes_they_name(fleet: Fleet) -> None:
    leader1 = fleet.slots["w1"].process.pid  # type: ignore[union-attr]
    children1 = psutil.Process(leader1).children()
    tree2 = sorted(fleet.slots["w2"].process.pids())  # type: ignore[union-attr]
    plan = [
        PlannedFault("part-kill", 0.2, worker="w1", part="child", pick=0.99),
        PlannedFault("pause", 0.2, 0.6, worker="w2"),
        PlannedFault("kill", 1.5, 1.0, worker="w1"),
    ]
    nemesis = Nemesis(plan, fleet, _NoServer(), "ns", TreeSystem(Path()).parts)  # type: ignore[arg-type]
    result = nemesis.run(time.time(), 3.0)
    assert result.errors == []
    part, pause, kill = sorted(result.done, key=lambda d: d.planned.at + d.planned.lasts)
    # the part kill: one child, the last in pid order, and nothing else
    victim = max(c.pid for c in children1)
    assert part.fault.kind == "kill" and part.fault.part == "child"
    assert part.fault.pids == frozenset({victim}) and part.fault.end == part.fault.start
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == "zombie"
    # the pause: every process of w2's tree, from SIGSTOP to SIGCONT
    assert pause.detail == f"pids {', '.join(map(str, tree2))}"
    assert pause.fault.end is not None and pause.fault.end - pause.fault.start >= 0.6
    assert all(psutil.Process(p).status() != psutil.STATUS_STOPPED for p in tree2)
    # the kill: w1's whole tree (the leader survived the part kill), restarted 1 s later
    assert kill.fault.targets == ("w1",) and kill.fault.pids is None
    (exit_,) = [e for e in fleet.exits if e.worker == "w1"]
    assert (exit_.incarnation, exit_.code, exit_.cause) == (1, -9, "killed by the nemesis")
    assert kill.fault.end == exit_.restarted and kill.fault.end - kill.fault.start >= 1.0
    assert leader1 not in psutil.pids() or psutil.Process(leader1).status() == "zombie"
    assert fleet.slots["w1"].incarnation == 2 and "w1" in fleet.live()


def test_a_worker_that_exits_on_its_own_is_restarted_under_its_name(
    fleet: Fleet, tmp_path: Path
) -> None:
    children = psutil.Process(fleet.slots["w2"].process.pid).children()  # type: ignore[union-attr]
    TreeSystem(tmp_path).flag("w2").touch()
    _wait("w2's restart", lambda: any(e.restarted for e in fleet.exits))
    (exit_,) = fleet.exits
    assert (exit_.worker, exit_.incarnation, exit_.code, exit_.cause) == ("w2", 1, 3, "on its own")
    assert sorted(exit_.remnants) == sorted(c.pid for c in children)  # stopped after it
    assert exit_.restarted is not None and exit_.restarted - exit_.at >= 1.0
    assert fleet.slots["w2"].incarnation == 2 and fleet.live() == {"w1", "w2"}


def test_a_kill_of_the_leader_part_ends_the_worker(fleet: Fleet) -> None:
    tree = sorted(fleet.slots["w1"].process.pids())  # type: ignore[union-attr]
    leader = fleet.slots["w1"].process.pid  # type: ignore[union-attr]
    plan = [PlannedFault("part-kill", 0.0, worker="w1", part="main", pick=0.5)]
    nemesis = Nemesis(plan, fleet, _NoServer(), "ns", TreeSystem(Path()).parts)  # type: ignore[arg-type]
    (done,) = nemesis.run(time.time(), 0.5).done
    # its pid, and with it the worker's tree, which the supervisor stops before it
    # starts the worker again
    (exit_,) = fleet.exits
    assert exit_.cause == "killed by the nemesis (its leader part)" and exit_.code == -9
    assert done.fault.part == "main" and done.fault.pids == frozenset(tree)
    assert sorted(exit_.remnants) == sorted(set(tree) - {leader})
    assert done.detail.startswith(f"pid {leader} of 1 main process(es)")
    assert done.fault.end == exit_.restarted and fleet.slots["w1"].incarnation == 2


def test_a_fault_that_finds_nothing_is_an_error(tmp_path: Path) -> None:
    from tests.backends.postgres._pg_support import require_server

    dsn = require_server()
    server = registry.load_backend("postgres").provision(ProvisionRequest(tmp_path, dsn=dsn))
    # a namespace nothing is connected to any more (a server may connect ahead to a new one)
    namespace = server.create_namespace()
    server.drop_namespace(namespace)
    fleet = Fleet(TreeSystem(tmp_path), "fast", ("w1",), tmp_path / "out")  # type: ignore[arg-type]
    try:
        plan = [
            PlannedFault("cut", 0.0),
            PlannedFault("kill", 0.0, 1.0, worker="w1"),
            PlannedFault("pause", 0.0, 1.0, worker="w1"),
        ]
        result = Nemesis(plan, fleet, server, namespace, ()).run(time.time(), 0.5)
    finally:
        server.close()
    assert result.done == []
    messages = sorted(e.message for e in result.errors)
    assert len(messages) == 3
    assert "the cut closed 0 connections: nothing was connected to cut" in messages[0]
    assert "no live process of worker w1 to pause" in messages[2]
    assert "no live worker w1 to kill" in messages[1]


class _CutServer:
    """A server whose cut closes every connection of the namespace: here, two."""

    faults = frozenset({"cut"})

    def cut_connections(self, namespace: str) -> int:
        return 2


def test_a_cut_names_a_paused_worker_whose_connections_it_closed_too(fleet: Fleet) -> None:
    plan = [
        PlannedFault("pause", 0.0, 1.0, worker="w2"),
        PlannedFault("cut", 0.5),
    ]
    result = Nemesis(plan, fleet, _CutServer(), "ns", ()).run(time.time(), 1.5)  # type: ignore[arg-type]
    assert result.errors == []
    (cut,) = [d for d in result.done if d.planned.kind == "cut"]
    (pause,) = [d for d in result.done if d.planned.kind == "pause"]
    assert pause.fault.start < cut.fault.start < pause.fault.end  # w2 was stopped then
    assert cut.fault.targets == ("w1", "w2"), cut.fault.targets


def test_a_mid_job_kill_and_pause_wait_for_a_job_and_strike_it_running(
    fleet: Fleet, tmp_path: Path
) -> None:
    system = TreeSystem(tmp_path)
    plan = [
        PlannedFault("kill", 0.0, 1.0, worker="w1"),
        PlannedFault("pause", 0.0, 0.5, worker="w2"),
    ]
    nemesis = Nemesis(plan, fleet, _NoServer(), "ns", system.parts, mid_job=True)  # type: ignore[arg-type]
    t0 = time.time()
    ran: list[object] = []
    thread = threading.Thread(target=lambda: ran.append(nemesis.run(t0, 60.0)))
    thread.start()
    try:
        # both faults are due at once; each waits for its worker's job, given after t0
        system.give("w2", "job-a")
        _wait("w2's pause over", lambda: [d for d in nemesis.result.done if d.caught])
        assert fleet.exits == []  # w1 runs no job: its kill waits
        system.release("w2")  # job-a ends after the pause
        system.give("w1", "job-b")
        thread.join(HANG_S)
    finally:
        nemesis.stop.set()
        thread.join()
    (result,) = ran
    assert result.errors == []  # type: ignore[attr-defined]
    kill, pause = sorted(result.done, key=lambda d: d.planned.kind)  # type: ignore[attr-defined]

    def runs() -> dict[str, Execution]:
        return {x.job: x for x in read_probe(fleet.probe_paths()).executions()}

    _wait("job-a's end", lambda: runs()["job-a"].ended)
    # the pause: SIGSTOP while job-a ran, SIGCONT before it ended
    a = runs()["job-a"]
    assert pause.caught == ("job-a",) and "mid-job after" in pause.detail
    assert t0 < a.started < pause.fault.start
    assert pause.fault.end is not None and a.ended is not None and a.ended > pause.fault.end
    # the kill: job-b killed with its handler running (no end line), then the restart
    b = runs()["job-b"]
    assert kill.caught == ("job-b",) and kill.detail.endswith(", then killed")
    assert t0 < b.started < kill.fault.start and b.ended is None
    (exit_,) = fleet.exits
    assert (exit_.worker, exit_.cause) == ("w1", "killed by the nemesis")
    assert kill.fault.end == exit_.restarted


def test_a_mid_job_kill_ends_a_job_in_a_process_group_of_its_own_while_stopped(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job runs in a child in a process group of its own that ignores SIGHUP (rq's
    work horse): killed after its parent, it would be continued by the kernel (its group
    newly orphaned with a stopped member) and go on writing; the mid-job kill kills it
    first, still stopped."""
    system = TreeSystem(tmp_path)
    written: list[int] = []  # the size of its beats once its tree was stopped
    pause = fleet.pause

    def pause_and_measure(name: str) -> list[int]:
        pids = pause(name)
        written.append(system.beats(name).stat().st_size)
        return pids

    killed_first: list[tuple[int, str]] = []  # a pid killed alone, and its leader's state
    kill_pid = fleet.kill_pid

    def kill_pid_and_look(name: str, pid: int) -> float | None:
        killed_first.append((pid, psutil.Process(leader).status()))
        return kill_pid(name, pid)

    monkeypatch.setattr(fleet, "pause", pause_and_measure)
    monkeypatch.setattr(fleet, "kill_pid", kill_pid_and_look)
    leader = fleet.slots["w1"].process.pid  # type: ignore[union-attr]
    system.give("w1", "job-h", own_group=True)
    plan = [PlannedFault("kill", 0.0, 1.0, worker="w1")]
    result = Nemesis(plan, fleet, _NoServer(), "ns", (), mid_job=True).run(time.time(), 60.0)  # type: ignore[arg-type]
    assert result.errors == []
    (kill,) = result.done
    assert kill.caught == ("job-h",)
    (run,) = read_probe(fleet.probe_paths()).executions()
    assert run.ended is None and run.pid != leader
    assert killed_first == [(run.pid, psutil.STATUS_STOPPED)]  # before its stopped parent
    assert system.beats("w1").stat().st_size == written[-1]  # not a line once stopped


def test_a_mid_job_fault_whose_worker_runs_no_job_in_time_is_an_error(fleet: Fleet) -> None:
    plan = [PlannedFault("pause", 0.0, 1.0, worker="w1")]
    nemesis = Nemesis(plan, fleet, _NoServer(), "ns", (), mid_job=True)  # type: ignore[arg-type]
    result = nemesis.run(time.time(), 1.5)
    assert result.done == [] and not fleet.slots["w1"].paused
    (error,) = result.errors
    assert error.message == (
        "pause at +0 s (SIGSTOP worker w1 for 1 s): not started: worker w1 was running no "
        "job (or was down or under another fault) from +0 s to +0.500 s, the latest start "
        "that keeps its 1 s in the window"
    )


class _Flickering:
    """A fleet of one worker whose journal shows a job that has ended by the time the
    worker is stopped to look, then one that still runs."""

    def __init__(self) -> None:
        self.looks = [("j1",), (), ("j2",), ("j2",)]  # cheap, synced, cheap, synced
        self.synced: list[bool] = []
        self.calls: list[str] = []
        self.paused = False

    def live(self) -> frozenset[str]:
        return frozenset() if self.paused else frozenset({"w1"})

    def running(self, name: str, *, synced: bool = False) -> tuple[str, ...]:
        self.synced.append(synced)
        return self.looks.pop(0)

    def pause(self, name: str) -> list[int]:
        self.calls.append("pause")
        self.paused = True
        return [101]

    def resume(self, name: str) -> list[int]:
        self.calls.append("resume")
        self.paused = False
        return [101]

    def heal(self) -> list[str]:
        return []


def test_a_stop_that_finds_the_job_ended_is_undone_and_the_fault_waits_on() -> None:
    fleet = _Flickering()
    plan = [PlannedFault("pause", 0.0, 0.2, worker="w1")]
    result = Nemesis(plan, fleet, _NoServer(), "ns", (), mid_job=True).run(time.time(), 5.0)  # type: ignore[arg-type]
    assert result.errors == [] and fleet.looks == []
    assert fleet.synced == [False, True, False, True]
    assert fleet.calls == ["pause", "resume", "pause", "resume"]  # a stop undone; the pause
    (done,) = result.done
    assert done.caught == ("j2",)
    assert done.detail.endswith("; 1 stop(s) to look found no job and were undone at once")
