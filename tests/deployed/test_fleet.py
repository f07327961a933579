"""Deployed campaigns with their workers on an SSH fleet (``rdq-chaos deployed run
--fleet``): each worker on a host of the fleet, started from the system's launch under
the kit's watchdog there, its probe journal mirrored back; a partition cuts a whole host
from the server and a clock skew moves a whole host's clock.

The hosts are :mod:`rdq_compliance.provision.ssh_hosts`' test hosts (network namespaces
of this machine, each with a real OpenSSH ``sshd``, reached over its veth pair), the
server the shared PostgreSQL one, reached from a host through a relay on the machine's
end of its pair. What is checked:

- the kit's control (rdq's worker loop on PostgreSQL) on three hosts: every planned
  fault is done (a kill, a pause, a cut, a partition of a host, a host's clock an hour
  ahead), none is an error; every worker's journals come back; the partition names the
  workers of its host; the skewed host's journal times are an hour ahead and the
  checker takes them back (each lies in the campaign in true time); the uncertainty
  comes from the measured clocks; no finding; nothing is left on the hosts;
- the control broken (a claim that ignores the lease) on two hosts: a
  ``handed-out-while-held`` finding naming both workers, with no fault in play;
- the nemesis's part kill, whole-worker pause and kill of a worker on a host act on the
  processes of its tree there, and the supervisor starts a killed worker again;
- a worker whose host drops is started again on a host left, its exit saying why.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from rdq_compliance import registry
from rdq_compliance.chaos.fleet_hosts import FleetHosts, load_fleet
from rdq_compliance.chaos.libfaketime import find_libfaketime
from rdq_compliance.deployed.campaign import run_campaign
from rdq_compliance.deployed.control import PROFILES, CoreSystem
from rdq_compliance.deployed.faults import true_time
from rdq_compliance.deployed.fleet import Fleet
from rdq_compliance.deployed.nemesis import Nemesis
from rdq_compliance.deployed.plan import PlannedFault
from rdq_compliance.deployed.scenario import load_scenario
from rdq_compliance.provision import ssh_hosts
from rdq_compliance.provision.backend import ProvisionRequest
from tests._ci import missing
from tests._paths import pythonpath
from tests._ssh_hosts import wait_no_workers
from tests._waiting import HANG_S
from tests.deployed.broken_control import NO_FAULTS, reclaim_ignores_lease_postgres
from tests.deployed.tree_system import TreeSystem

pytest.importorskip("asyncssh", reason="the ssh extra (asyncssh) is not installed")

from rdq_compliance.deployed.remote_places import RemotePlaces

#: Three workers on three hosts; a clock skew of 720 x recovery_after (the fast profile's
#: 5 s): an hour ahead, so a journal time not taken back is plain to see.
FLEET = """\
name = "fleet"
workers = 3
window = 16
drain_margin = 20

[jobs]
succeed = 12
succeed_seconds = [0.05, 0.3]
sleep = 2
fail = 1
retry = 2
delayed = 10
max_delay = 12

[faults]
kill = 1
pause = 1
cut = 1
partition = 1
clock_skew = 1
skew_factor = 720
"""
#: The seed whose plan skews w2's host early and partitions another one (w1's).
SEED = 2
HOUR = 3600.0


@pytest.fixture(scope="module")
def dsn() -> str:
    from tests.backends.postgres._pg_support import require_server

    return require_server()


@pytest.fixture(scope="module")
def fleet(dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    tuple[ssh_hosts.SshHosts, FleetHosts]
]:  # fmt: skip
    """Three SSH test hosts relaying to the shared server, and their checked hosts file
    (the checkout on the workers' path, this machine's libfaketime for clock skews)."""
    why = ssh_hosts.unavailable()
    if why:
        missing(f"no SSH test hosts here: {why}")
    library = find_libfaketime()
    if library is None:
        missing("no libfaketime here to skew a host's clock with (apt-get install libfaketime)")
    parts = urlsplit(dsn)
    relay = (parts.hostname or "127.0.0.1", parts.port or 5432)
    workdir = tmp_path_factory.mktemp("hosts")
    extra = {"env": {"PYTHONPATH": pythonpath(None)}, "faketime": str(library)}
    with ssh_hosts.SshHosts(3, workdir, relays=[relay]) as hosts:
        path = hosts.write_fleet_toml(workdir / "hosts.toml", sys.executable, extra)
        yield hosts, load_fleet(path)


def test_the_control_on_three_hosts_with_a_partition_and_a_skew(
    fleet: tuple[ssh_hosts.SshHosts, FleetHosts], dsn: str, tmp_path: Path
) -> None:
    hosts, fleet_hosts = fleet
    scenario_file = tmp_path / "fleet.toml"
    scenario_file.write_text(FLEET)
    result = run_campaign(
        CoreSystem("postgres"), PROFILES["fast"], load_scenario(scenario_file), SEED,
        out=tmp_path / "r", dsn=dsn, fleet=fleet_hosts,
    )  # fmt: skip
    left = wait_no_workers(hosts, HANG_S)
    where = f"report folder {tmp_path / 'r'}"
    # every planned fault done, none an error
    assert result.nemesis.errors == [] and result.error is None, where
    done = sorted((d.planned for d in result.nemesis.done), key=lambda f: f.at)
    assert done == list(result.plan.faults), where
    assert sorted(f.kind for f in done) == sorted(
        ["kill", "pause", "cut", "partition", "clock-skew"]
    ), result.plan.lines()
    placed = {h["name"]: h["workers"] for h in result.hosts}
    assert placed == {"h0": ["w1"], "h1": ["w2"], "h2": ["w3"]}, result.hosts
    (cut,) = [d for d in result.nemesis.done if d.fault.kind == "partition"]
    assert cut.planned.host == "h0" and cut.fault.targets == ("w1",)
    assert cut.fault.end is not None and cut.fault.end > cut.fault.start
    (skew,) = [d for d in result.nemesis.done if d.fault.kind == "clock-skew"]
    assert skew.planned.host == "h1" and skew.fault.targets == ("w2",)
    assert skew.fault.offset == HOUR
    assert result.drain is not None and skew.fault.until > result.drain.ended
    # the journals came back: every incarnation's, and every worker ran jobs
    for worker, starts in {e.worker: e.incarnation for e in result.exits}.items():
        for n in range(1, starts + 1):
            assert (tmp_path / "r" / "probe" / f"{worker}.{n}.jsonl").is_file(), (worker, n)
    assert {x.worker for x in result.executions} == {"w1", "w2", "w3"}
    assert result.torn == []
    # the skewed host's times are an hour ahead, and taken back into the campaign
    u = result.uncertainty
    opened = result.t0 - result.timings["enqueue"]  # the first job was enqueued after it
    late = [x for x in result.executions if x.worker == "w2" and x.started - HOUR > opened]
    assert late, "no execution on the skewed host after its skew"
    for x in late:  # as journalled: an hour ahead of anything the harness saw
        assert x.started > result.drain.ended + HOUR / 2, x
    for x in result.executions:  # in true time: within the campaign
        t = true_time(x.worker, x.started, result.nemesis.faults)
        assert opened - u <= t <= result.drain.ended + u, (x, t)
    # the uncertainty: from the measured clocks
    worst = max(float(h["uncertainty"]) for h in result.hosts)  # type: ignore[arg-type]
    assert u == pytest.approx(0.05 + 2 * worst, abs=1e-6)
    assert "measured against the harness's" in result.uncertainty_note
    assert result.findings == [], "\n".join(v.message for v in result.findings)
    assert left == {}, f"processes left on the hosts: {left}"


def test_the_broken_control_on_the_fleet_is_found_handing_a_held_job_out(
    fleet: tuple[ssh_hosts.SshHosts, FleetHosts], dsn: str, tmp_path: Path
) -> None:
    hosts, fleet_hosts = fleet
    scenario_file = tmp_path / "no-faults.toml"
    scenario_file.write_text(NO_FAULTS)
    result = run_campaign(
        reclaim_ignores_lease_postgres(), PROFILES["fast"], load_scenario(scenario_file), 1,
        out=tmp_path / "r", dsn=dsn, fleet=fleet_hosts,
    )  # fmt: skip
    left = wait_no_workers(hosts, HANG_S)
    assert result.error is None and result.nemesis.errors == []
    assert {h["name"]: h["workers"] for h in result.hosts if h["workers"]} == {
        "h0": ["w1"], "h1": ["w2"]
    }  # fmt: skip
    held = [v for v in result.findings if v.rule == "handed-out-while-held"]
    assert held, [v.message for v in result.verdicts]
    v = held[0]
    assert set(v.workers) == {"w1", "w2"} and v.causes == ()
    assert f"workers {', '.join(v.workers)}:" in v.message
    assert left == {}, f"processes left on the hosts: {left}"


def test_the_nemesis_acts_on_a_workers_tree_on_its_host(
    fleet: tuple[ssh_hosts.SshHosts, FleetHosts], dsn: str, tmp_path: Path
) -> None:
    """A part kill, a whole-worker pause and a whole-worker kill, each done by the
    worker's watchdog on its host (the hosts share this machine's kernel, so psutil sees
    the processes the test checks)."""
    hosts, fleet_hosts = fleet
    server = registry.load_backend("postgres").provision(ProvisionRequest(tmp_path, dsn=dsn))
    system = TreeSystem(tmp_path)
    places = RemotePlaces(fleet_hosts, server, "postgres", tmp_path / "out", ("w1", "w2"))
    f = Fleet(system, "fast", ("w1", "w2"), tmp_path / "out", grace=2.0, places=places)  # type: ignore[arg-type]
    try:
        f.start()
        for w in ("w1", "w2"):
            _until(f"{w}'s two children", lambda w=w: len(f.slots[w].process.pids()) == 3)  # type: ignore[union-attr]
        leader1 = f.slots["w1"].process.pid  # type: ignore[union-attr]
        children1 = psutil.Process(leader1).children()
        tree2 = sorted(f.slots["w2"].process.pids())  # type: ignore[union-attr]
        plan = [
            PlannedFault("part-kill", 0.2, worker="w1", part="child", pick=0.99),
            PlannedFault("pause", 0.2, 0.6, worker="w2"),
            PlannedFault("kill", 1.5, 1.0, worker="w1"),
        ]
        result = Nemesis(plan, f, server, "ns", system.parts).run(time.time(), 3.0)
        assert result.errors == []
        part, pause, kill = sorted(result.done, key=lambda d: d.planned.at + d.planned.lasts)
        victim = max(c.pid for c in children1)
        assert part.fault.pids == frozenset({victim}) and part.fault.part == "child"
        assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == "zombie"
        assert pause.detail == f"pids {', '.join(map(str, tree2))}"
        assert pause.fault.end is not None and pause.fault.end - pause.fault.start >= 0.6
        assert all(psutil.Process(p).status() != psutil.STATUS_STOPPED for p in tree2)
        (exit_,) = [e for e in f.exits if e.worker == "w1"]
        assert (exit_.incarnation, exit_.code, exit_.cause) == (1, -9, "killed by the nemesis")
        assert kill.fault.end == exit_.restarted
        assert f.slots["w1"].incarnation == 2 and "w1" in f.live()
        assert {places.host_of("w1"), places.host_of("w2")} == {"h0", "h1"}
    finally:
        f.stop()
        places.close()
        server.close()
    assert wait_no_workers(hosts, HANG_S) == {}


def _until(what: str, cond: Callable[[], object]) -> None:
    deadline = time.monotonic() + HANG_S
    while not cond():
        assert time.monotonic() < deadline, f"hang: {what}"
        time.sleep(0.05)


def test_a_worker_whose_host_drops_is_started_again_on_another_host(
    dsn: str, tmp_path: Path
) -> None:
    """Host h1's link goes down under w2: its connection is lost (3 keepalives
    unanswered), w2's exit says so, and the supervisor starts w2 again on h0."""
    if ssh_hosts.unavailable():
        missing(f"no SSH test hosts here: {ssh_hosts.unavailable()}")
    parts = urlsplit(dsn)
    relay = (parts.hostname or "127.0.0.1", parts.port or 5432)
    extra = {"env": {"PYTHONPATH": pythonpath(None)}}
    with ssh_hosts.SshHosts(2, tmp_path / "hosts", relays=[relay]) as hosts:
        path = hosts.write_fleet_toml(tmp_path / "hosts.toml", sys.executable, extra)
        server = registry.load_backend("postgres").provision(ProvisionRequest(tmp_path, dsn=dsn))
        system = TreeSystem(tmp_path)
        places = RemotePlaces(load_fleet(path), server, "postgres", tmp_path / "out", ("w1", "w2"))
        f = Fleet(system, "fast", ("w1", "w2"), tmp_path / "out", grace=2.0, places=places)  # type: ignore[arg-type]
        try:
            f.start()
            assert places.host_of("w2") == "h1"
            down = ["ip", "netns", "exec", hosts.hosts[1].namespace, "ip", "link", "set",
                    ssh_hosts.HOST_LINK, "down"]  # fmt: skip
            subprocess.run(down, check=True)
            _until("w2 started again", lambda: any(e.restarted for e in f.exits))
            (exit_,) = f.exits
            assert (exit_.worker, exit_.cause) == ("w2", "its host h1 was lost")
            assert places.host_of("w2") == "h0" and f.live() == {"w1", "w2"}
        finally:
            f.stop()
            places.close()
            server.close()
