"""Replica failover: the forwarder that carries "the primary's
address", the scenario's ``[faults.failover]``, the plan's gate, the timeline mark, and
— on PostgreSQL and Redis from their local binaries — one campaign each with
asynchronous replication (the checker must find and name what the failover lost) and
with synchronous replication (it must find nothing); and no replica, forwarder or data
folder left behind, even by a SIGKILLed runner.

The campaigns need the servers' binaries: without them they are skipped, except under
``CI=true``, where a missing binary fails the test."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rdq_compliance import registry
from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.nemesis import plan_faults
from rdq_compliance.chaos.report import build_timeline
from rdq_compliance.chaos.scenario import ScenarioError, load_scenario, scenario_from_dict
from rdq_compliance.provision.backend import FAILOVER, ProvisionUnavailable
from rdq_compliance.provision.forwarder import Forwarder
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from tests._ports import closed_port
from tests._proof import AttemptResult, run_seeds
from tests._waiting import HANG_S
from tests.broken import catalogue
from tests.chaos._chaos_support import wait_gone

#: The settings a failover loses acknowledged work on, and what must catch it: the
#: catalogue's (bug class ``acknowledged-work-lost``).
_LOSSY = [
    (cfg, c)
    for cfg in catalogue.configurations()
    for c in cfg.catches
    if isinstance(c, catalogue.Campaign) and c.by == catalogue.relative(__file__)
]
#: backend -> (the asynchronous option, the synchronous option)
REPLICAS = {cfg.backend: (dict(cfg.options), dict(cfg.control)) for cfg, _ in _LOSSY}
#: backend -> the failover campaign that must catch the asynchronous pair
CAMPAIGNS = {cfg.backend: c for cfg, c in _LOSSY}


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def replicated_session(backend: str, options: dict[str, str], workdir: Path) -> Session:
    """A started session on a replicated server from the local binaries; skipped when
    there is none here — failed under CI, where the binaries must be installed."""
    try:
        session = Session(Settings(backend=backend, docker=False, options=options), workdir=workdir)
    except registry.UnknownBackend as exc:
        pytest.skip(f"backend {backend!r} not installed: {exc}")
    try:
        session.start()
    except ProvisionUnavailable as exc:
        if _in_ci():
            pytest.fail(f"CI=true, but no replicated {backend} server here: {exc}")
        pytest.skip(f"no replicated {backend} server here: {exc}")
    return session


# ---- the forwarder ----------------------------------------------------------------------


class EchoServer:
    """Answers every chunk with ``<name>:<chunk>``; records what it received."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.received = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1024):
                self.received += data
                conn.sendall(self.name + b":" + data)

    def close(self) -> None:
        self.sock.close()


def _ask(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(1024)


def test_the_forwarder_switches_closes_the_old_connections_and_holds() -> None:
    a, b = EchoServer(b"a"), EchoServer(b"b")
    forwarder = Forwarder(("127.0.0.1", a.port))
    try:
        first = socket.create_connection(("127.0.0.1", forwarder.port), timeout=HANG_S)
        assert _ask(first, b"x") == b"a:x"
        assert forwarder.switch(("127.0.0.1", b.port)) == 1
        assert first.recv(1024) == b"", "a connection to the old upstream stays open"
        second = socket.create_connection(("127.0.0.1", forwarder.port), timeout=HANG_S)
        assert _ask(second, b"y") == b"b:y"
        # held: nothing passes until the release, then all of it
        forwarder.hold()
        second.sendall(b"z")
        second.settimeout(0.3)  # held: nothing passes however long (load cannot change it)
        with pytest.raises(socket.timeout):
            second.recv(1024)
        forwarder.release()
        second.settimeout(HANG_S)
        assert second.recv(1024) == b"b:z"
        # held, then closed: what was held is discarded, never delivered
        forwarder.hold()
        second.sendall(b"lost")
        time.sleep(0.1)
        forwarder.close()
        time.sleep(0.2)
        assert b"lost" not in b.received
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", forwarder.port), timeout=1).recv(1)
    finally:
        forwarder.close()
        a.close()
        b.close()


def test_the_forwarder_refuses_while_its_upstream_is_down() -> None:
    forwarder = Forwarder(("127.0.0.1", closed_port()))
    try:
        client = socket.create_connection(("127.0.0.1", forwarder.port), timeout=HANG_S)
        assert client.recv(1024) == b"", "a client of a dead upstream is not closed at once"
    finally:
        forwarder.close()


# ---- scenario, plan, timeline ---------------------------------------------------------


def _scenario(faults: dict[str, object]) -> dict[str, object]:
    return {"duration": "5s", "faults": faults, "limits": {"deadline": "30s"}}


def test_failover_keys_are_checked_and_named() -> None:
    s = scenario_from_dict(_scenario({"failover": {"count": 2, "replica_lag": "250ms"}}))
    assert (s.faults.failovers, s.faults.failover_lag) == (2, 0.25)
    with pytest.raises(ScenarioError, match=r"faults\.failover\.replica_lag: expected a positive"):
        scenario_from_dict(_scenario({"failover": {"count": 1, "replica_lag": "soon"}}))
    with pytest.raises(ScenarioError, match=r"faults\.failover\.count"):
        scenario_from_dict(_scenario({"failover": {"count": -1}}))
    with pytest.raises(ScenarioError, match=r"faults\.failover.*\blag\b"):
        scenario_from_dict(_scenario({"failover": {"count": 1, "lag": "1s"}}))


def test_the_failover_is_planned_only_on_a_server_that_declares_it() -> None:
    scenario = load_scenario("failover")
    plan = plan_faults(scenario, frozenset({"kill_server"}), "the given server")
    assert not [f for f in plan.faults if f.kind == "failover"]
    (note,) = [n for n in plan.skipped if n.startswith("failover")]
    assert "does not support failover" in note and "pg_replica=async" in note
    plan = plan_faults(scenario, frozenset({FAILOVER}))
    (fault,) = [f for f in plan.faults if f.kind == "failover"]
    assert fault.duration == scenario.faults.failover_lag == 0.5
    assert scenario.faults.warmup <= fault.at < scenario.duration
    assert plan_faults(scenario, frozenset({FAILOVER})) == plan, "the same seed, another plan"


def test_a_failover_is_its_own_mark_on_the_timeline() -> None:
    events = [
        {"t": 10.0, "proc": "harness", "type": "info", "op": "fault", "kind": "failover",
         "target": "server", "replica_lag": 0.5},
        {"t": 12.5, "proc": "harness", "type": "info", "op": "fault", "kind": "promoted",
         "target": "server", "promoted": "node B"},
    ]  # fmt: skip
    _, _, marks, _, _ = build_timeline(events)
    (mark,) = marks
    assert (mark.kind, mark.t, mark.end) == ("failover", 10.0, 12.5)
    assert "lagged 0.5s" in mark.label and "node B" in mark.label


class FailingOverServer:
    """A fake replicated server: records failovers; ``broken`` makes them fail."""

    faults = frozenset({FAILOVER})

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.lags: list[float] = []

    def failover(self, replica_lag: float = 0.0) -> str:
        if self.broken:
            raise RuntimeError("pg_promote() did not finish")
        self.lags.append(replica_lag)
        return "node B"


class NoFleet:
    size = 1

    def exited(self) -> list:
        return []

    def lost_hosts(self) -> list:
        return []

    def workers(self) -> list:
        return []


@pytest.mark.parametrize("broken", [False, True])
def test_the_nemesis_journals_and_counts_a_failover(tmp_path: Path, broken: bool) -> None:
    from rdq_compliance.chaos.events import Journal, read_journal
    from rdq_compliance.chaos.journal_observer import LockedJournal
    from rdq_compliance.chaos.nemesis import Counters, FaultPlan, Nemesis, PlannedFault

    server = FailingOverServer(broken)
    now = [100.0]
    nemesis = Nemesis(
        FaultPlan((PlannedFault(1.0, "failover", duration=0.5),)),
        load_scenario("failover"),
        NoFleet(),  # type: ignore[arg-type]
        server,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "ns",
        LockedJournal(Journal(tmp_path / "harness.jsonl", "harness")),
        Counters(),
        clock=lambda: now[0],
    )
    nemesis.start()
    for step in range(20):
        now[0] = 100.0 + step * 0.1
        nemesis.tick()
    assert nemesis.finished
    events = [e for e in read_journal(tmp_path / "harness.jsonl") if e["op"] == "fault"]
    if broken:
        assert [e["kind"] for e in events] == ["failover"]
        assert nemesis.counters.failovers == 0
        (note,) = nemesis.counters.notes
        assert note.startswith("failover failed:") and "pg_promote() did not finish" in note
        return
    assert server.lags == [0.5] and nemesis.counters.failovers == 1
    assert [(e["kind"], e.get("replica_lag"), e.get("promoted")) for e in events] == [
        ("failover", 0.5, None),
        ("promoted", None, "node B"),
    ]
    assert nemesis.counters.as_dict()["failovers"] == 1


# ---- the campaigns ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(REPLICAS))
def test_asynchronous_failover_loses_acknowledged_work_and_the_checker_names_it(
    backend: str, tmp_path: Path
) -> None:
    from rdq_compliance.chaos.runner import run_campaign

    campaign = CAMPAIGNS[backend]
    assert campaign.fault == "failover"
    session = replicated_session(backend, REPLICAS[backend][0], tmp_path / "server")
    try:
        assert FAILOVER in session.server.faults
        scenario = load_scenario(catalogue.scenario(campaign))

        def attempt(seed: int, number: int) -> AttemptResult[CampaignResult]:
            out = tmp_path / ("r" if number == 1 else f"r-{number}")
            result = run_campaign(scenario.with_seed(seed), session=session, outdir=out)
            assert result.checked, f"{result.checker_error}; report folder: {out}"
            rules = sorted({v.rule for v in result.violations})
            caught = bool(set(rules) & set(campaign.rules))
            return AttemptResult(caught, result, {"report": out.name, "rules fired": rules})

        wanted = f"{backend}'s asynchronous pair caught under {' or '.join(campaign.rules)}"
        proof = run_seeds(wanted, (scenario.seed,), attempt)
    finally:
        session.close()
    result = proof.value
    where = f"report folder: {result.outdir}"
    assert result.counters.failovers == 1, f"{result.counters.notes}; {where}"
    proof.require()
    rules = {v.rule for v in result.violations}
    within = campaign.within or frozenset(campaign.rules)
    assert rules <= within, f"unexpected rules {rules - within}; {where}"
    (lost,) = [v for v in result.violations if v.rule == "outcome-recorded"][:1]
    assert f"[{lost.rule}]" in lost.message and "acknowledged" in lost.message
    assert lost.task and lost.task in lost.message, lost.message[:300]
    assert lost.workers and all(w in lost.message for w in lost.workers), lost.message[:300]
    print(
        f"\n{backend} async failover: {len(result.violations)} violations "
        f"({sorted(rules)}) in {result.duration:.1f}s; {proof.verdict()}\n{lost.message[:300]}"
    )


@pytest.mark.parametrize("backend", sorted(REPLICAS))
def test_synchronous_failover_loses_nothing(backend: str, tmp_path: Path) -> None:
    from rdq_compliance.chaos.runner import run_campaign

    session = replicated_session(backend, REPLICAS[backend][1], tmp_path / "server")
    try:
        result = run_campaign(load_scenario("failover"), session=session, outdir=tmp_path / "r")
    finally:
        session.close()
    where = f"report folder: {tmp_path / 'r'}"
    assert result.counters.failovers == 1, f"{result.counters.notes}; {where}"
    assert result.checked, f"{result.checker_error}; {where}"
    assert result.violations == [], [v.message[:300] for v in result.violations[:3]]
    assert result.tasks.get("succeeded") == load_scenario("failover").workload.tasks


def test_the_same_campaign_without_the_failover_passes_on_the_asynchronous_pair(
    tmp_path: Path,
) -> None:
    """The loss is the failover's: the async pair passes the campaign without it."""
    from rdq_compliance.chaos.runner import run_campaign

    scenario = load_scenario("failover")
    calm = replace(scenario, faults=scenario.faults.replace(failovers=0))
    session = replicated_session("redis", REPLICAS["redis"][0], tmp_path / "server")
    try:
        result = run_campaign(calm, session=session, outdir=tmp_path / "r")
    finally:
        session.close()
    assert result.checked and result.violations == [], [v.message for v in result.violations]


# ---- cleanup after a SIGKILLed runner ---------------------------------------------------

_RUNNER = """
import json, sys, time
from pathlib import Path
from rdq_compliance.provision.backend import ProvisionRequest
from rdq_compliance import registry
backend = registry.load_backend(sys.argv[1])
server = backend.provision(ProvisionRequest(
    workdir=Path(sys.argv[2]), options=json.loads(sys.argv[3]), allow_docker=False))
server.failover(0.1)
port = int(server.dsn.rsplit(":", 1)[1].split("/")[0])
pair = getattr(server, "pair", None)  # postgres: every node's folder, and a private root
if pair is not None:
    paths = [str(n.base) for n in pair.nodes()] + ([str(pair.root)] if pair.private_root else [])
else:  # redis: every node's data folder
    paths = [str(n.datadir) for n in server.local.nodes]
print(json.dumps({"pids": server.pids(), "port": port, "paths": paths}), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("backend", sorted(REPLICAS))
def test_a_sigkilled_runner_leaves_no_replica_forwarder_or_data(
    backend: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "server"
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, backend, str(workdir), json.dumps(REPLICAS[backend][0])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            err = proc.stderr.read() if proc.stderr else ""
            if "ProvisionUnavailable" in err and not _in_ci():
                pytest.skip(f"no replicated {backend} server here: {err[-300:]}")
            pytest.fail(f"the runner did not start a replicated {backend}: {err[-2000:]}")
        info = json.loads(line)
        assert len(info["pids"]) >= 2, info  # the new primary and its new replica
        paths = [Path(p) for p in info["paths"]]
        assert len(paths) >= 2 and all(p.is_dir() for p in paths), paths
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(HANG_S)
    left = wait_gone(info["pids"], timeout=HANG_S)
    assert not left, f"server processes left after the runner's SIGKILL: {left}"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", info["port"]), timeout=1).recv(1)
    deadline = time.monotonic() + HANG_S
    rest = paths
    while rest and time.monotonic() < deadline:
        rest = [p for p in paths if p.exists()]
        time.sleep(0.2)
    assert not rest, f"data folders left after the runner's SIGKILL: {rest}"


# ---- Redis WAIT: a write the replica did not confirm is not acknowledged ----------------


def test_redis_wait_refuses_to_acknowledge_a_write_the_replica_did_not_confirm(
    tmp_path: Path,
) -> None:
    from rdq_redis.connection import parse_dsn
    from rdq_redis.storage import RedisStorage

    from rdq_core.errors import BackendUnavailable, InvalidArgument
    from rdq_core.model import NewTask

    with pytest.raises(InvalidArgument, match=r"rdq_wait='many': expected an integer >= 0"):
        parse_dsn("redis://127.0.0.1:1/0?rdq_wait=many")
    with pytest.raises(InvalidArgument, match=r"rdq_wait_timeout='0': expected an integer >= 1"):
        parse_dsn("redis://127.0.0.1:1/0?rdq_wait=1&rdq_wait_timeout=0")
    assert parse_dsn("redis://127.0.0.1:1/0").wait_replicas == 0, "WAIT must be opt-in"
    session = replicated_session("redis", {"redis_replica": "wait"}, tmp_path / "server")
    try:
        server = session.server
        assert "rdq_wait_timeout=1000" in server.dsn, server.dsn
        dsn = server.dsn.replace("rdq_wait_timeout=1000", "rdq_wait_timeout=200")
        namespace = server.create_namespace()
        storage = RedisStorage(dsn, namespace)
        unconfirmed = RedisStorage(dsn.split("?")[0], namespace)  # the same, without WAIT
        # a linked replica confirms a write: given 10 s, as a loaded machine may need
        # (a fresh-clone CI run once saw no confirmation within 200 ms, link up)
        patient_dsn = dsn.replace("rdq_wait_timeout=200", "rdq_wait_timeout=10000")
        patient = RedisStorage(patient_dsn, namespace)
        try:
            assert patient.enqueue(NewTask(id="a", queue="q", handler="h"))
            server.replicated.link.hold()
            try:
                with pytest.raises(BackendUnavailable, match=r"0 of 1 replica\(s\) confirmed"):
                    storage.enqueue(NewTask(id="b", queue="q", handler="h"))
                # without WAIT the same write is acknowledged at once, replica or not
                assert unconfirmed.enqueue(NewTask(id="c", queue="q", handler="h"))
            finally:
                server.replicated.link.release()
        finally:
            storage.close()
            unconfirmed.close()
            patient.close()
    finally:
        session.close()
