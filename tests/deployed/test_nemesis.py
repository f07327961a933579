"""The deployed nemesis and the fleet it acts on, on real process trees: a part kill
SIGKILLs one process of the part found by role (killing the leader ends the worker,
whose remnants the supervisor stops); a whole-worker kill and pause act on
every process of the tree; a killed worker is started again by the supervisor and the
kill's span ends then; a worker that exits on its own is restarted under its name, its
exit recorded; a fault that finds nothing to act on is an error, never a silent no-op."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from rdq_compliance import registry
from rdq_compliance.deployed.fleet import Fleet
from rdq_compliance.deployed.nemesis import Nemesis
from rdq_compliance.deployed.plan import PlannedFault
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
