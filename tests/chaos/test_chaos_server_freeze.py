"""The nemesis's server freeze: while the server is paused nothing the harness does talks
to it (a call would hang until the resume, and the resume would never come), the worker
faults go on, and the server is always resumed — at its time, or at the drain. On real
servers (PostgreSQL and Redis from their local binaries), the freeze is the one fault
that exposes a storage which takes an unanswered report as applied
(``acks_timed_out_reports`` of ``tests.broken.postgres`` and ``tests.broken.redis``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from rdq_compliance.chaos.events import Journal, read_journal
from rdq_compliance.chaos.journal_observer import LockedJournal
from rdq_compliance.chaos.nemesis import Counters, FaultPlan, Nemesis, PlannedFault
from rdq_compliance.chaos.report import build_timeline
from rdq_compliance.chaos.scenario import load_scenario
from rdq_compliance.provision.backend import UnsupportedFault
from tests.broken import catalogue
from tests.chaos._chaos_support import SMOKE


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeServer:
    """Records what the harness asked of it, and fails the test on a call while frozen."""

    clock: FakeClock
    frozen: bool = False
    calls: list[tuple[float, str]] = field(default_factory=list)
    fail_resumes: int = 0

    def pause(self) -> None:
        assert not self.frozen, "paused twice"
        self.frozen = True
        self.calls.append((self.clock.now, "pause"))

    def resume(self) -> None:
        if self.fail_resumes:
            self.fail_resumes -= 1
            raise RuntimeError("docker unpause: daemon busy")
        self.frozen = False
        self.calls.append((self.clock.now, "resume"))

    def cut_connections(self, namespace: str) -> int:
        assert not self.frozen, "cut_connections sent to a frozen server"
        self.calls.append((self.clock.now, "cut"))
        return 2

    def kill(self) -> None:
        raise UnsupportedFault("not in this test")


@dataclass
class FakeStorage:
    server: FakeServer

    def dlq_list(self, queue, filt, cursor, limit):  # the redrive's listing
        assert not self.server.frozen, "dlq_list sent to a frozen server"
        self.server.calls.append((self.server.clock.now, "dlq_list"))

        class Empty:
            tasks = ()
            next_cursor = None

        return Empty()


class NoFleet:
    size = 1

    def exited(self) -> list:
        return []

    def lost_hosts(self) -> list:
        return []

    def workers(self) -> list:
        return []

    def in_slot(self, slot: int) -> None:
        return None


def _nemesis(tmp_path: Path, faults: list[PlannedFault], server: FakeServer) -> Nemesis:
    journal = LockedJournal(Journal(tmp_path / "harness.jsonl", "harness"))
    return Nemesis(
        FaultPlan(tuple(faults)),
        load_scenario(SMOKE),
        NoFleet(),  # type: ignore[arg-type]
        server,  # type: ignore[arg-type]
        FakeStorage(server),  # type: ignore[arg-type]
        "ns",
        journal,
        Counters(),
        clock=server.clock,
    )


def test_faults_that_talk_to_the_server_wait_for_the_resume(tmp_path):
    clock = FakeClock()
    server = FakeServer(clock)
    nem = _nemesis(
        tmp_path,
        [
            PlannedFault(1.0, "server_pause", duration=3.0),
            PlannedFault(2.0, "cut_connections"),
            PlannedFault(2.5, "redrive"),
        ],
        server,
    )
    nem.start()
    polls: list[float] = []
    for step in range(80):  # 8 s of fake time in 0.1 s ticks
        clock.now = 100.0 + step * 0.1
        nem.tick()
        if not nem.server_frozen:
            polls.append(clock.now)
    assert nem.finished
    kinds = [k for _, k in server.calls]
    assert kinds == ["pause", "resume", "cut", "dlq_list"], server.calls
    (paused_at,) = [t for t, k in server.calls if k == "pause"]
    (resumed_at,) = [t for t, k in server.calls if k == "resume"]
    assert paused_at == pytest.approx(101.0) and resumed_at == pytest.approx(104.0)
    assert nem.counters.server_pauses == nem.counters.server_resumes == 1
    events = list(read_journal(tmp_path / "harness.jsonl"))
    faults = [e["kind"] for e in events if e["op"] == "fault"]
    assert faults == ["pause_server", "resume_server", "cut_connections"]
    (pause,) = [e for e in events if e.get("kind") == "pause_server"]
    assert pause["target"] == "server" and pause["duration"] == 3.0
    _, _, marks, _, _ = build_timeline(events)
    (freeze,) = [m for m in marks if m.kind == "freeze"]
    assert freeze.end is not None and freeze.end > freeze.t
    assert freeze.label == "server frozen for 3.0s, then resumed"


def test_the_drain_resumes_a_frozen_server_and_a_failed_resume_is_retried(tmp_path):
    clock = FakeClock()
    server = FakeServer(clock, fail_resumes=1)
    nem = _nemesis(tmp_path, [PlannedFault(0.5, "server_pause", duration=30.0)], server)
    nem.start()
    clock.now = 101.0
    nem.tick()
    assert server.frozen and nem.server_frozen
    nem.stop_faults()  # the first resume fails: the server must not stay frozen
    assert server.frozen and not nem.finished
    assert any("resume_server failed: " in n for n in nem.counters.notes)
    clock.now = 102.0
    nem.tick()
    assert not server.frozen and nem.finished
    assert nem.counters.server_resumes == 1


# ---- the fault on real servers: the bug only a freeze exposes ------------------------------

#: The variants only a freeze exposes, and what must catch them: the catalogue's.
FROZEN = catalogue.cases(catalogue.Campaign, by=catalogue.relative(__file__))


@pytest.mark.parametrize(("variant", "campaign"), FROZEN, ids=[v.store for v, _ in FROZEN])
def test_only_the_server_freeze_exposes_a_timed_out_report_taken_as_applied(
    variant: catalogue.Variant,
    campaign: catalogue.Campaign,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The variant passes the same campaign without the freeze, and fails it with one (in
    one of at most ``FAULTED_TRIES`` runs, each with the next seed),
    naming the rule (``fencing``: the acknowledged outcome names a claim the history ended
    LEASE_EXPIRED and reclaimed; or ``outcome-recorded``), a task whose report it took as
    applied, and the workers."""
    from tests.chaos._chaos_support import broken_workers, calm_then_faulted, start_session

    assert campaign.fault == "server_pause" and campaign.victims_env
    server = variant.store
    victims = broken_workers(monkeypatch, tmp_path, campaign.victims_env)
    session = start_session(variant.dotted, tmp_path / "server")
    try:
        if "pause_server" not in session.server.faults:
            pytest.fail(f"the {server} server the kit started cannot be paused")
        frozen = load_scenario(catalogue.scenario(campaign))
        calm = replace(frozen, faults=frozen.faults.replace(server_pauses=0))
        proof = calm_then_faulted(
            session,
            frozen,
            calm,
            tmp_path,
            victims,
            f"{variant.dotted} caught under {' or '.join(campaign.rules)}",
            lambda r: any(v.rule in campaign.rules for v in r.violations),
        )
    finally:
        session.close()
    result = proof.require().value
    where = f"report folder: {result.outdir}; {proof.report()}"
    assert result.counters.server_pauses == 2, result.counters.notes
    taken = set(victims.read_text().split()) if victims.exists() else set()
    assert taken, f"no report hung past {1.0}s during the freezes; {where}"
    # The acknowledged report is in no history: the claim it names ended LEASE_EXPIRED
    # and was reclaimed ("fencing": accepted after the reclaim), or the task's history
    # lacks it altogether ("outcome-recorded").
    found = [v for v in result.violations if v.rule in campaign.rules]
    others = {v.rule for v in result.violations} - set(campaign.within or campaign.rules)
    assert not others, f"unexpected rules {others}; {where}"
    v = found[0]
    assert v.task in taken and v.task in v.message, f"{v.message[:400]}; victims {sorted(taken)}"
    assert v.workers and all(w in v.message for w in v.workers), v.message[:400]
    assert f"[{v.rule}]" in v.message and "acknowledged" in v.message, v.message[:400]
    print(
        f"\n{server}: {len(found)} violation(s) ({sorted({x.rule for x in found})}) of "
        f"{len(taken)} reports taken as applied; campaign {result.duration:.1f}s; "
        f"{proof.verdict()}\n" + v.message.split("\n")[0]
    )
