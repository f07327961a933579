"""The control: rdq's own worker loop deployed as a system, run through whole campaigns.

On a correct backend a campaign ends with no finding: every job the client accepted is
settled, and every verdict is a gap, within a promise that tolerates its rule under a
fault that was in play (a worker SIGSTOPped past its lease leaves a run the next worker
overlaps; a worker killed between its handler's end and its report runs the job again).
The smoke scenario runs on SQLite and on the shared PostgreSQL server (given by DSN: its
server faults are listed as not run, the connection cut runs); the standard scenario
runs once on a private PostgreSQL server of the local rung, where every planned fault
runs. On this machine a worker is partitioned in a network namespace of its own and its
clock skewed by libfaketime: a campaign with both does them, and the checker takes the
skewed worker's journal times (an hour ahead) back. On a backend whose claim ignores the
lease, the same harness reports a ``handed-out-while-held`` finding naming the job and
both workers (``test_cli.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rdq_compliance.chaos.libfaketime import find_libfaketime
from rdq_compliance.deployed import verdicts
from rdq_compliance.deployed.campaign import run_campaign
from rdq_compliance.deployed.control import PROFILES, CoreSystem
from rdq_compliance.deployed.faults import true_time
from rdq_compliance.deployed.result import CampaignResult
from rdq_compliance.deployed.scenario import BUILTIN, load_scenario
from rdq_compliance.deployed.system import declaration_problems
from rdq_compliance.provision import netns
from tests._ci import missing
from tests.test_self_contained import anchors

RULE_IDS = [r.id for r in verdicts.RULES]


def _no_finding(result: CampaignResult) -> None:
    """No finding, nothing the nemesis could not do, every accepted job settled, and every
    gap within a promise that tolerates its rule, with the faults in play named."""
    assert result.findings == [], "\n".join(v.message for v in result.findings)
    assert result.nemesis.errors == [] and result.error is None
    assert result.torn == []
    assert result.drain_ended_by == "every accepted job was finished, failed for good or held"
    assert len(result.accepted) == len(result.plan.jobs) and result.refused == {}
    for v in result.gaps:
        assert v.promise is not None and v.rule in v.promise.tolerates, v.message
        assert v.causes, v.message
    done = sorted((d.planned for d in result.nemesis.done), key=lambda f: f.at)
    assert done == list(result.plan.faults)  # every planned fault was done
    killed = [d for d in result.nemesis.done if d.fault.kind == "kill"]
    restarts = [e for e in result.exits if e.cause == "killed by the nemesis"]
    assert len(restarts) == len(killed)
    assert all(d.fault.end in {e.restarted for e in restarts} for d in killed)


def _report(result: CampaignResult) -> dict:
    data = json.loads((result.outdir / "results.json").read_text())
    assert data["system"] == result.system and data["plan"]["seed"] == result.plan.seed
    assert len(data["verdicts"]) == len(result.verdicts)
    assert (result.outdir / "report.md").read_text().startswith("# Deployed campaign: rdq==")
    return data


def test_the_controls_declaration_is_complete_and_cites_the_contract() -> None:
    system = CoreSystem("sqlite")
    assert declaration_problems(system, RULE_IDS) == []
    contract = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text()
    words = " ".join(contract.replace("**", "").replace("`", "").split())
    for promise in system.promises:
        page, _, anchor = promise.link.partition("#")
        assert page == "docs/contract.md" and anchor in anchors(contract), promise.link
        for piece in promise.quote.split("[...]"):  # the quote is the contract's words
            assert " ".join(piece.split()) in words, piece
    fast = PROFILES["fast"]
    assert [s.name for s in fast.settings if s.changed] == [
        "lease", "poll_interval", "max_poll_interval"
    ]  # fmt: skip
    assert not any(s.changed for s in PROFILES["defaults"].settings)


def test_smoke_on_sqlite(tmp_path: Path) -> None:
    system = CoreSystem("sqlite")
    result = run_campaign(system, PROFILES["fast"], BUILTIN["smoke"], 11, out=tmp_path / "r")
    _no_finding(result)
    not_run = {n.kind for n in result.plan.not_run}
    assert not_run == {"part-kill", "server-kill", "server-freeze", "cut"}
    assert sorted(f.kind for f in result.plan.faults) == ["kill", "pause"]
    data = _report(result)
    assert data["counts"]["final state"] == {"failed-for-good": 4, "finished": 9}
    assert sorted(data["workers"]["launch"]) == ["w1", "w2"]


def test_smoke_on_the_shared_postgres_server_hides_the_password(tmp_path: Path) -> None:
    from tests.backends.postgres._pg_support import require_server

    dsn = require_server()
    if "@" not in dsn or ":" in dsn.split("://", 1)[1].split("@", 1)[0]:
        pytest.skip(f"the DSN {dsn.split('@')[-1]!r} has no user without a password to add one to")
    secret = "RdqDeployedS3cret"
    user_at = dsn.split("://", 1)[1].split("@", 1)[0]
    with_secret = dsn.replace(f"{user_at}@", f"{user_at}:{secret}@", 1)  # trust auth: unused
    system = CoreSystem("postgres")
    out = tmp_path / "r"
    result = run_campaign(system, PROFILES["fast"], BUILTIN["smoke"], 12, out=out, dsn=with_secret)
    _no_finding(result)
    reasons = {n.kind: n.reason for n in result.plan.not_run}
    assert set(reasons) == {"part-kill", "server-kill", "server-freeze"}
    assert "(it supports: cut_connections)" in reasons["server-kill"]
    (cut,) = [d for d in result.nemesis.done if d.planned.kind == "cut"]
    assert cut.detail.endswith("connection(s) closed")
    data = _report(result)
    assert data["server"]["dsn"] == with_secret.replace(secret, "***")
    for path in out.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path


def test_standard_on_a_private_postgres_server_runs_every_fault(
    tmp_path: Path, no_docker: None
) -> None:
    from rdq_postgres.local import REQUIRED_BINARIES

    from rdq_compliance.provision.binaries import BinaryNotFound, find_binaries

    try:
        find_binaries(REQUIRED_BINARIES)
    except BinaryNotFound as exc:
        missing(f"no local PostgreSQL binaries for the local rung: {exc}")
    system = CoreSystem("postgres")
    result = run_campaign(system, PROFILES["fast"], BUILTIN["standard"], 3, out=tmp_path / "r")
    _no_finding(result)
    assert result.server_origin.startswith("local")
    # a partition needs network namespaces here, a clock skew libfaketime: where this
    # machine lacks them the plan says so, with the reason
    lacking = {"part-kill": 2}
    if netns.unavailable():
        lacking["partition"] = 1
    if find_libfaketime() is None:
        lacking["clock-skew"] = 1
    assert {n.kind: n.count for n in result.plan.not_run} == lacking
    kinds = sorted(d.planned.kind for d in result.nemesis.done)
    ran = [k for k in ("partition", "clock-skew") if k not in lacking]
    assert kinds == sorted(
        ["kill"] * 3 + ["pause"] * 2 + ["server-kill", "server-freeze", "cut", *ran]
    )
    data = _report(result)
    assert data["counts"]["accepted by behaviour"] == {
        "fail": 8, "retry": 6, "sleep": 8, "succeed": 34
    }  # fmt: skip
    assert data["plan"]["substituted"] == [
        {"behaviour": "hold", "count": 4, "reason": f"{system.name} has no 'hold'"}
    ]


#: Two workers on this machine, a partition and a clock an hour ahead (720 x the fast
#: profile's recovery_after of 5 s), jobs due over the window.
PARTITION_AND_SKEW = """\
name = "partition-and-skew"
workers = 2
window = 14
drain_margin = 20

[jobs]
succeed = 10
succeed_seconds = [0.05, 0.3]
sleep = 1
retry = 1
delayed = 8
max_delay = 10

[faults]
kill = 1
partition = 1
clock_skew = 1
skew_factor = 720
"""


def test_a_partition_and_a_skew_on_this_machine(tmp_path: Path) -> None:
    from tests.backends.postgres._pg_support import require_server

    why = netns.unavailable() or (
        "no libfaketime here (apt-get install libfaketime)" if find_libfaketime() is None else ""
    )
    if why:
        missing(f"a worker cannot be partitioned or skewed on this machine: {why}")
    scenario = tmp_path / "s.toml"
    scenario.write_text(PARTITION_AND_SKEW)
    result = run_campaign(
        CoreSystem("postgres"), PROFILES["fast"], load_scenario(scenario), 1,
        out=tmp_path / "r", dsn=require_server(),
    )  # fmt: skip
    _no_finding(result)
    (cut,) = [d for d in result.nemesis.done if d.fault.kind == "partition"]
    (skew,) = [d for d in result.nemesis.done if d.fault.kind == "clock-skew"]
    assert cut.fault.targets == (cut.planned.worker,) and cut.planned.host is None
    assert skew.fault.targets == (skew.planned.worker,) and skew.fault.offset == 3600.0
    assert any("network namespace of its own" in n for n in result.notes)
    assert any("under libfaketime" in n for n in result.notes)
    assert result.drain is not None
    opened = result.t0 - result.timings["enqueue"]
    skewed = [x for x in result.executions if x.worker == skew.planned.worker]
    assert any(x.started > result.drain.ended + 1800 for x in skewed), "no skewed journal time"
    for x in result.executions:  # in true time: within the campaign
        t = true_time(x.worker, x.started, result.nemesis.faults)
        assert opened - result.uncertainty <= t <= result.drain.ended + result.uncertainty, x
