"""Network partitions: the scenario keys, the plan's gating, the nemesis's partition and
heal, the namespaces (a cut-off call hangs, the heal resumes it, nothing is left after a
SIGKILLed owner), and on real servers: a correct backend passes ``chaos/partition.toml``,
and the partition is the fault that exposes a heartbeat timed out and taken as applied
(``hb_timeout_taken_as_extended`` of ``tests.broken.postgres`` and ``tests.broken.redis``)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rdq_compliance.chaos.events import Journal, read_journal
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.nemesis import Counters, FaultPlan, Nemesis, PlannedFault, plan_faults
from rdq_compliance.chaos.report import build_timeline
from rdq_compliance.chaos.scenario import ScenarioError, load_scenario, scenario_from_dict
from rdq_compliance.provision import netns
from tests._waiting import HANG_S
from tests.broken import catalogue
from tests.chaos._chaos_support import SMOKE

PARTITION = "partition"


def _needs_netns() -> None:
    why = netns.unavailable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


# ---- the scenario and the plan --------------------------------------------------------------


def _with(faults: dict) -> dict:
    return {"name": "x", "duration": 10, "workers": {"count": 3}, "faults": faults}


def test_partition_keys_are_checked():
    s = scenario_from_dict(_with({"partition": {"count": 2, "workers": 2, "factor": [2, 3]}}))
    assert (s.faults.partitions, s.faults.partition_workers) == (2, 2)
    assert s.faults.partition_factor == (2.0, 3.0)
    with pytest.raises(ScenarioError, match=r"faults\.partition\.factor: a partition must outlast"):
        scenario_from_dict(_with({"partition": {"count": 1, "factor": 1.0}}))
    with pytest.raises(ScenarioError, match=r"faults\.partition\.workers \(4\) must be at most"):
        scenario_from_dict(_with({"partition": {"count": 1, "workers": 4}}))
    with pytest.raises(ScenarioError, match=r"'faults\.partition\.loss'"):
        scenario_from_dict(_with({"partition": {"count": 1, "loss": 5}}))


def test_the_plan_leaves_partitions_out_with_the_reason_and_replays_them():
    scenario = load_scenario(PARTITION)
    skipped = plan_faults(scenario, frozenset(), no_network="network partitions need root")
    assert not [f for f in skipped.faults if f.kind == "partition"]
    assert skipped.skipped == ("partition x5: skipped, network partitions need root",)
    plan = plan_faults(scenario, frozenset(), no_network=None)
    again = plan_faults(scenario, frozenset(), no_network=None)
    cuts = [f for f in plan.faults if f.kind == "partition"]
    assert plan == again and len(cuts) == 5
    lease = scenario.workers.lease
    for f in cuts:
        assert f.width == 2 and 2.0 * lease <= f.duration <= 3.0 * lease
        assert f.at + f.duration <= scenario.duration
    other = plan_faults(scenario.with_seed(1), frozenset(), no_network=None)
    assert other.faults != plan.faults


# ---- the nemesis ----------------------------------------------------------------------------


class FakeNetwork:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.fail_heals = 0

    def span(self, slots) -> list[int]:
        return sorted(set(slots))

    def partition(self, slots) -> None:
        self.calls.append(("partition", tuple(slots)))

    def lose(self, slots) -> None:
        self.calls.append(("lose", tuple(slots)))

    def heal(self, slots) -> None:
        if self.fail_heals:
            self.fail_heals -= 1
            raise RuntimeError("nft: busy")
        self.calls.append(("heal", tuple(slots)))


class Worker:
    def __init__(self, name: str, slot: int) -> None:
        self.name, self.slot = name, slot
        self.running, self.paused, self.armed, self.pid = True, False, None, 100 + slot


class ThreeWorkers:
    size = 3
    history_dir = Path("/nonexistent")

    def __init__(self) -> None:
        self.slots = [Worker(f"w{i}", i) for i in range(3)]

    def exited(self) -> list:
        return []

    def lost_hosts(self) -> list:
        return []

    def journal_path(self, worker: Worker) -> Path:
        return self.history_dir / f"{worker.name}.jsonl"

    def workers(self) -> list:
        return list(self.slots)

    def in_slot(self, slot: int) -> Worker:
        return self.slots[slot]


def test_the_nemesis_partitions_slots_heals_them_and_marks_the_timeline(tmp_path):
    now = [100.0]
    network = FakeNetwork()
    network.fail_heals = 1
    journal = LockedJournal(Journal(tmp_path / "harness.jsonl", "harness"))
    nem = Nemesis(
        FaultPlan((PlannedFault(1.0, "partition", 2, None, 2.5, 2),)),
        load_scenario(SMOKE),
        ThreeWorkers(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "ns",
        journal,
        Counters(),
        clock=lambda: now[0],
        network=network,
    )
    nem.start()
    for step in range(60):
        now[0] = 100.0 + step * 0.1
        nem.tick()
    assert nem.finished
    assert network.calls == [("partition", (0, 2)), ("heal", (0, 2))]
    failed = "heal of slots [0, 2] failed: RuntimeError: nft: busy"
    assert any(failed in n for n in nem.counters.notes), nem.counters.notes
    c = nem.counters
    assert (c.partitions, c.partitioned_workers, c.heals) == (1, 2, 1)
    events = list(read_journal(tmp_path / "harness.jsonl"))
    kinds = [(e["kind"], e["targets"]) for e in events if e["op"] == "fault"]
    assert kinds == [("partition", ["w0", "w2"]), ("heal", ["w0", "w2"])]
    _, _, marks, _, _ = build_timeline(events)
    (mark,) = [m for m in marks if m.kind == "partition"]
    assert mark.target == "w0,w2" and mark.end is not None and mark.end > mark.t
    assert mark.label == "w0,w2 partitioned from the server for 2.5s, then healed"


# ---- the namespaces -------------------------------------------------------------------------


def _echo_server() -> socket.socket:
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return

            def echo(c: socket.socket = conn) -> None:
                with c:
                    while data := c.recv(100):
                        c.sendall(data)

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv


_CLIENT = """
import socket, sys, time
hang_s = float(sys.argv[2])
s = socket.create_connection(("10.199.1.1", int(sys.argv[1])), timeout=hang_s)
s.sendall(b"a"); print(s.recv(10).decode(), flush=True)
sys.stdin.readline()  # partitioned now
s.settimeout(1.0); s.sendall(b"b")  # partitioned: no answer comes, however long
try:
    s.recv(10); print("answered", flush=True)
except TimeoutError:
    print("hang", flush=True)
except OSError as exc:
    print("reset", exc, flush=True)
sys.stdin.readline()  # healed now
# TCP retransmits on a back-off that grew with the partition: the wait ends when it does
s.settimeout(hang_s); print(s.recv(10).decode(), flush=True)
"""


def _links_of(owner: int, listing: str) -> list[str]:
    """The links of ``listing`` (``ip -o link``) named as ``owner``'s Topology names its
    veth ends (``rdq<owner>r<i>``, ``rdq<owner>w<i>``); another owner's are not."""
    return re.findall(rf"\b(rdq{owner}[rw]\d+)\b", listing)


def _machine_links(owner: int) -> list[str]:
    """``owner``'s veth ends in the machine's namespace (there should be none)."""
    return _links_of(
        owner, subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    )


def test_only_the_owners_own_links_are_named():
    listing = (
        "7: rdq1234w0@if6: <BROADCAST,UP> mtu 1500\n"
        "9: rdq123r1@if8: <BROADCAST,UP> mtu 1500\n"
        "11: rdqs123m0@if10: <BROADCAST,UP> mtu 1500\n"
    )
    assert _links_of(123, listing) == ["rdq123r1"]
    assert _links_of(1234, listing) == ["rdq1234w0"]
    assert _links_of(12, listing) == []


def test_a_partition_hangs_a_connection_both_ways_and_the_heal_resumes_it():
    _needs_netns()
    srv = _echo_server()
    port = srv.getsockname()[1]
    with netns.Topology(2, ("127.0.0.1", port)) as topo:
        assert set(netns.namespaces(os.getpid())) == {
            f"rdq-{os.getpid()}-{role}" for role in ("r", "w0", "w1", "h")
        }
        assert _machine_links(os.getpid()) == [], "a veth end in the machine's namespace"
        client = subprocess.Popen(
            [*topo.command_prefix(1), sys.executable, "-c", _CLIENT, str(port), str(HANG_S)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert client.stdout is not None and client.stdin is not None
        assert client.stdout.readline().strip() == "a"
        topo.partition([1])
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "hang"  # not a reset, not an answer
        topo.heal([1])
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "b"  # the same connection resumes
        client.wait(HANG_S)
    srv.close()
    assert netns.namespaces(os.getpid()) == []


_OWNER = """
import sys, time
from rdq_compliance.provision import netns
t = netns.Topology(3, ("127.0.0.1", 9)).open()
print("up", flush=True)
time.sleep(60)
"""


def test_a_sigkilled_owner_leaves_no_namespace_and_no_veth():
    _needs_netns()
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "up"
        assert len(netns.namespaces(owner.pid)) == 5  # router, 3 workers, harness
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    end = time.monotonic() + HANG_S
    while netns.namespaces(owner.pid) and time.monotonic() < end:
        time.sleep(0.1)
    assert netns.namespaces(owner.pid) == [], "the reaper left namespaces behind"
    assert _machine_links(owner.pid) == []


def test_sqlite_is_embedded_so_the_partition_does_not_apply(tmp_path):
    from rdq_compliance.chaos.faults.worker_network import worker_network
    from tests.chaos._chaos_support import start_session

    session = start_session("sqlite", tmp_path / "server")
    try:
        network, why = worker_network(session.server, 2, "sqlite")
    finally:
        session.close()
    assert network is None
    # the store's reason, whatever this machine lacks (root, ip, nft)
    assert "SQLite is embedded" in why, why


# ---- on real servers ------------------------------------------------------------------------


#: The variants only a partition exposes, and what must catch them: the catalogue's.
CUT_OFF = catalogue.cases(catalogue.Campaign, by=catalogue.relative(__file__))


@pytest.mark.parametrize("server", ["postgres", "redis", "mongo"])
def test_a_correct_backend_passes_the_partition_campaign(server: str, tmp_path: Path) -> None:
    """Mongo is the local rung's SecantusDB (a MongoDB wire-protocol stand-in) here."""
    _needs_netns()
    from rdq_compliance.chaos.runner import run_campaign
    from tests.chaos._chaos_support import start_session

    session = start_session(server, tmp_path / "server")
    try:
        result = run_campaign(load_scenario(PARTITION), session=session, outdir=tmp_path / "run")
    finally:
        session.close()
    where = f"report folder: {tmp_path / 'run'}; notes {result.counters.notes}"
    assert result.counters.partitions == result.counters.heals == 5, where
    assert result.checked and result.violations == [], [str(v)[:300] for v in result.violations]
    assert result.drained and result.workers_left == [], where
    events = list(read_journal(tmp_path / "run" / "history" / "harness.jsonl"))
    assert [e["kind"] for e in events if e["op"] == "fault"].count("partition") == 5
    assert netns.namespaces(os.getpid()) == []


@pytest.mark.parametrize(("variant", "campaign"), CUT_OFF, ids=[v.store for v, _ in CUT_OFF])
def test_only_a_partition_exposes_a_timed_out_heartbeat_taken_as_applied(
    variant: catalogue.Variant,
    campaign: catalogue.Campaign,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_property: Callable[[str, object], None],
) -> None:
    """The variant passes the campaign without its partitions and fails it with them (in
    one of at most ``FAULTED_TRIES`` runs, each with the next seed),
    naming the rule (``lease-respected`` / ``one-claim``: a reclaim while the history says
    the previous holder's lease was extended), a task whose heartbeat it took as applied,
    and both workers."""
    _needs_netns()
    from rdq_compliance.chaos.campaign_result import CampaignResult
    from tests.chaos._bug_hunt import run_line
    from tests.chaos._chaos_support import broken_workers, calm_then_faulted, start_session

    assert campaign.fault == "partition" and campaign.victims_env
    server = variant.store
    victims = broken_workers(monkeypatch, tmp_path, campaign.victims_env)
    session = start_session(variant.dotted, tmp_path / "server")
    try:
        cut = load_scenario(catalogue.scenario(campaign))
        calm = replace(cut, faults=cut.faults.replace(partitions=0))

        def record(run: str, r: CampaignResult) -> None:  # benchmarks/partition_bug.py's line
            record_property(run, json.dumps(run_line(r, campaign.rules)))

        def caught(r: CampaignResult) -> bool:
            return any(v.rule in campaign.rules for v in r.violations)

        wanted = f"{variant.dotted} caught under {' or '.join(campaign.rules)}"
        proof = calm_then_faulted(
            session, cut, calm, tmp_path, victims, wanted, caught, lambda r: record("calm", r)
        )
        record("faulted", proof.value)
    finally:
        session.close()
    result = proof.require().value
    where = f"report folder: {result.outdir}; {proof.report()}"
    assert result.counters.partitions == 5, result.counters.notes
    taken = set(victims.read_text().split()) if victims.exists() else set()
    assert taken, f"no heartbeat hung past 0.4s during the partitions; {where}"
    found = [v for v in result.violations if v.rule in campaign.rules]
    others = {v.rule for v in result.violations} - set(campaign.within or campaign.rules)
    assert not others, f"unexpected rules {others}; {where}"
    beside = [x for x in result.violations if x.rule not in campaign.rules]
    assert all(x.task in taken for x in beside), (
        "a violation beside the campaign's rules on a task whose heartbeat was not taken "
        f"as applied: {[x.message[:300] for x in beside if x.task not in taken]}; {where}"
    )
    v = next((x for x in found if x.task in taken), found[0])
    assert v.task in taken and v.task in v.message, f"{v.message[:400]}; victims {sorted(taken)}"
    assert len(v.workers) >= 2 and all(w in v.message for w in v.workers), v.message[:400]
    assert f"[{v.rule}]" in v.message
    print(
        f"\n{server}: {len(found)} violation(s) ({sorted({x.rule for x in found})}) of "
        f"{len(taken)} heartbeats taken as applied; campaign {result.duration:.1f}s; "
        f"{proof.verdict()}\n" + v.message.split("\n")[0]
    )


def test_dsn_via_rewrites_url_dsns_and_says_why_it_cannot():
    from rdq_compliance.provision.backend import UnsupportedFault, url_address, url_via

    pg = "postgresql://postgres:pw@127.0.0.1:5432/test?sslmode=disable"
    assert url_address(pg) == ("127.0.0.1", 5432)
    assert url_via(pg, "10.199.3.1", 5432) == (
        "postgresql://postgres:pw@10.199.3.1:5432/test?sslmode=disable"
    )
    assert url_via("redis://127.0.0.1:6379/0", "10.199.0.1", 6379) == "redis://10.199.0.1:6379/0"
    assert url_via("mysql://root@127.0.0.1:3306/test", "h", 1) == "mysql://root@h:1/test"
    for bad in ("host=127.0.0.1 port=5432 dbname=test", "memory:", "/tmp/rdq-sqlite",
                "mongodb://a:1,b:2/?replicaSet=rs", "redis://127.0.0.1/0"):  # fmt: skip
        with pytest.raises(UnsupportedFault, match=r"one host and an explicit port|not a URL"):
            url_address(bad)


def test_the_mongo_uri_through_a_relay_connects_directly():
    pytest.importorskip("pymongo")
    from rdq_mongo.server import MongoServer

    server = MongoServer.__new__(MongoServer)  # no deployment needed to rewrite a URI
    server.dsn = "mongodb://127.0.0.1:27017/?replicaSet=rs0&directConnection=false"
    assert server.dsn_via("10.199.1.1", 27017) == (
        "mongodb://10.199.1.1:27017/?replicaSet=rs0&directConnection=true"
    )


class _Relayed:
    """A storage stand-in that connects to its DSN's address when opened."""

    def __init__(self, dsn: str) -> None:
        from urllib.parse import urlsplit

        url = urlsplit(dsn)
        self.dsn = dsn
        self.netns = os.stat("/proc/thread-self/ns/net").st_ino
        self.sock = socket.create_connection((url.hostname, url.port), timeout=HANG_S)

    def echo(self, data: bytes) -> tuple[bytes, int]:
        self.sock.sendall(data)
        return self.sock.recv(10), os.stat("/proc/thread-self/ns/net").st_ino

    def close(self) -> None:
        self.sock.close()


def test_the_harness_storage_runs_in_its_own_namespace_through_its_relay():
    _needs_netns()
    from rdq_compliance.chaos.faults.worker_network import WorkerNetwork

    srv = _echo_server()
    port = srv.getsockname()[1]

    class Given:
        dsn = f"x://127.0.0.1:{port}/db"

        def dsn_via(self, host: str, p: int) -> str:
            return f"x://{host}:{p}/db"

    with netns.Topology(1, ("127.0.0.1", port)) as topo:
        network = WorkerNetwork(topo, Given())  # type: ignore[arg-type]
        storage = network.harness_storage(_Relayed)  # type: ignore[arg-type]
        ours = os.stat("/proc/self/ns/net").st_ino
        harness = os.stat(f"/run/netns/{topo.harness.namespace}").st_ino
        assert storage.dsn == f"x://10.199.1.1:{port}/db"  # type: ignore[attr-defined]
        assert storage.netns == harness != ours  # type: ignore[attr-defined]
        assert storage.echo(b"ping") == (b"ping", harness)  # type: ignore[attr-defined]
        topo.partition([0])  # a worker's partition does not cut the harness off
        assert storage.echo(b"again") == (b"again", harness)  # type: ignore[attr-defined]
        storage.close()
        with pytest.raises(ValueError, match=r"worker slots are 0\.\.0"):
            topo.partition([1])  # the harness's slot is not a worker slot
    srv.close()


def test_loss_is_planned_applied_healed_and_marked(tmp_path):
    s = scenario_from_dict(
        _with({"loss": {"count": 1, "workers": 1, "percent": 40, "factor": [1.0, 1.0]}})
    )
    assert (s.faults.losses, s.faults.loss_workers, s.faults.loss_percent) == (1, 1, 40)
    with pytest.raises(ScenarioError, match=r"faults\.loss\.percent: expected an integer between"):
        scenario_from_dict(_with({"loss": {"count": 1, "percent": 100}}))
    skipped = plan_faults(s, frozenset())
    assert skipped.skipped == (
        "loss x1: skipped, the campaign built no network namespaces for its workers",
    )
    (planned,) = plan_faults(s, frozenset(), no_network=None).faults
    assert planned.kind == "loss" and planned.width == 1
    now = [100.0]
    network = FakeNetwork()
    journal = LockedJournal(Journal(tmp_path / "harness.jsonl", "harness"))
    nem = Nemesis(
        FaultPlan((PlannedFault(0.5, "loss", 1, None, 1.0, 1),)),
        s,
        ThreeWorkers(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "ns",
        journal,
        Counters(),
        clock=lambda: now[0],
        network=network,
    )
    nem.start()
    for step in range(30):
        now[0] = 100.0 + step * 0.1
        nem.tick()
    assert network.calls == [("lose", (1,)), ("heal", (1,))]
    assert (nem.counters.losses, nem.counters.partitions, nem.counters.heals) == (1, 0, 1)
    _, _, marks, _, _ = build_timeline(list(read_journal(tmp_path / "harness.jsonl")))
    (mark,) = [m for m in marks if m.kind == "loss"]
    assert mark.label == "w1 losing 40% of their packets for 1.0s, then healed"


_LOSSY = """
import socket, sys
port, window = int(sys.argv[1]), float(sys.argv[3])
def attempt():
    try:
        s = socket.create_connection(("10.199.0.1", port), timeout=window)
        s.sendall(b"x"); s.recv(1); s.close(); return 1
    except OSError:
        return 0
print(sum(attempt() for _ in range(int(sys.argv[2]))), flush=True)
"""


def test_loss_drops_a_share_of_the_packets_and_the_heal_ends_it():
    _needs_netns()
    srv = _echo_server()
    port = srv.getsockname()[1]

    def successes(topo: netns.Topology, n: int, window: float = HANG_S / 10) -> int:
        """Round trips of ``n`` that complete within ``window`` s each (on a healthy link
        a hang guard; under loss a short window, which load can only make fewer pass)."""
        out = subprocess.run(
            [*topo.command_prefix(0), sys.executable, "-c", _LOSSY, str(port), str(n),
             str(window)],
            capture_output=True, text=True, timeout=n * window + HANG_S, check=True,
        )  # fmt: skip
        return int(out.stdout)

    with netns.Topology(1, ("127.0.0.1", port), loss_percent=90) as topo:
        assert successes(topo, 5) == 5
        topo.lose([0])
        lossy = successes(topo, 10, window=0.3)  # a round trip survives 90% loss ~1% of the time
        topo.heal([0])
        assert successes(topo, 5) == 5
    srv.close()
    assert lossy <= 3, f"{lossy} of 10 round trips survived 90% loss"
    with pytest.raises(netns.NetnsError, match="loss_percent must be between 0 and 100"):
        netns.Topology(1, ("127.0.0.1", port), loss_percent=101)
