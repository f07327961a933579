"""Scenario files: the shipped ones load; every bad key or value is named in the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdq_compliance.chaos.nemesis import plan_faults
from rdq_compliance.chaos.scenario import (
    ScenarioError,
    load_scenario,
    parse_duration,
    scenario_from_dict,
)
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
)
from tests.chaos._chaos_support import SMOKE, STANDARD

ALL_FAULTS = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})


def test_standard_suite_meets_the_bar():
    s = load_scenario(STANDARD)
    assert s.workers.count >= 8
    assert s.workload.tasks >= 2000
    assert s.faults.kills >= 20
    assert all(
        s.faults.sigkill.get(p, 0) > 0
        for p in ("after_claim", "in_handler", "before_report", "after_report")
    )
    assert s.faults.pauses >= 5 and s.faults.pause_factor[0] > 1
    # pauses that wake the worker around its lease's expiry, racing the reclaim
    lo, hi = s.faults.near_lease_factor
    assert s.faults.near_lease >= 5 and lo < 1 < hi
    assert s.faults.server_restarts == 1 and s.faults.connection_cuts >= 1
    assert s.faults.server_pauses >= 1 and s.faults.server_pause_factor[0] > 1
    assert s.faults.redrive_interval
    assert s.limits.deadline < 180


def test_compact_suite_keeps_every_fault_kind_of_the_standard_one():
    """The compact scenario (for servers too slow for the standard one) is smaller but
    injects every fault kind the standard one does, and keeps poison tasks, so a run still
    goes redrive -> lease expiry -> reclaim."""
    standard, compact = load_scenario(STANDARD), load_scenario("compact")
    assert compact.workload.tasks < standard.workload.tasks
    assert compact.workers.count < standard.workers.count
    kinds = ("after_claim", "in_handler", "before_report", "after_report", "random")
    assert all(compact.faults.sigkill.get(p, 0) > 0 for p in kinds)
    assert compact.faults.pauses > 0 and compact.faults.pause_factor[0] > 1
    assert compact.faults.near_lease > 0
    assert compact.faults.server_restarts == 1 and compact.faults.connection_cuts >= 1
    assert compact.faults.server_pauses == standard.faults.server_pauses
    assert compact.faults.redrive_interval
    (poison,) = [h for h in compact.workload.handlers if h.name == "poison"]
    assert poison.abandon and poison.times > compact.workers.max_attempts
    share = poison.weight / sum(h.weight for h in compact.workload.handlers)
    assert share * compact.workload.tasks >= 5
    assert (STANDARD.parent / "compact.toml").read_text() == (
        Path(load_scenario("compact").source).read_text()
    )


def test_shipped_scenarios_load():
    for path in [SMOKE, *sorted((STANDARD.parent).glob("*.toml"))]:
        s = load_scenario(path)
        assert s.name and s.duration > 0 and s.source == Path(path).resolve()


@pytest.mark.parametrize(
    ("text", "expected"),
    [(1.5, 1.5), ("500ms", 0.5), ("1.5s", 1.5), ("2m", 120.0), ("1h", 3600.0), (3, 3.0)],
)
def test_durations(text, expected):
    assert parse_duration(text, "k") == pytest.approx(expected)


BASE = {"duration": "5s"}


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({}, r"duration: required"),
        ({**BASE, "bogus": 1}, r"unknown key 'bogus'; accepted here: name, seed, duration"),
        ({**BASE, "workers": {"count": 0}}, r"workers\.count: expected an integer between 1"),
        ({**BASE, "workers": {"count": "8"}}, r"workers\.count: expected an integer, got str"),
        ({**BASE, "workers": {"lease": "fast"}}, r"workers\.lease: expected a positive duration"),
        ({**BASE, "workers": {"leese": "1s"}}, r"unknown key 'workers\.leese'"),
        ({**BASE, "workers": {"heartbeat_fraction": 1}}, r"workers\.heartbeat_fraction"),
        ({**BASE, "workload": {"queue": "Bad Q"}}, r"workload\.queue: expected a queue name"),
        (
            {**BASE, "workload": {"handlers": {"weird": {"weight": 1}}}},
            r"workload\.handlers\.weird \(no 'kind' key\): the behaviour must be one of ok",
        ),
        (
            {**BASE, "workload": {"handlers": {"ok": {"weight": 1, "failures": 2}}}},
            r"unknown key 'workload\.handlers\.ok\.failures'; accepted here: kind, weight",
        ),
        (
            {**BASE, "workload": {"handlers": {"ok": {"duration": ["2s", "1s"]}}}},
            r"min 2\.0s is greater than max 1\.0s",
        ),
        ({**BASE, "workload": {"handlers": {"ok": {"weight": 0}}}}, r"weight > 0"),
        (
            {**BASE, "faults": {"sigkill": {"midway": 1}}},
            r"unknown key 'faults\.sigkill\.midway'; accepted here: after_claim, in_handler",
        ),
        (
            {**BASE, "faults": {"pause": {"count": 1, "factor": 0.5}}},
            r"faults\.pause\.factor: expected one of numbers or \[min, max\]",
        ),
        ({**BASE, "faults": {"pause": {"count": 1, "factor": 1.0}}}, r"must outlast the lease"),
        ({**BASE, "faults": {"pause": {"count": -1}}}, r"faults\.pause\.count"),
        (
            {**BASE, "faults": {"server_pause": {"count": 1, "factor": [1.0, 2.0]}}},
            r"faults\.server_pause\.factor: a server freeze must outlast the lease",
        ),
        (
            {**BASE, "faults": {"server_pause": {"count": 1, "for": "3s"}}},
            r"unknown key 'faults\.server_pause\.for'; accepted here: count, factor",
        ),
        ({**BASE, "limits": {"deadline": "2s"}}, r"limits\.deadline \(2\.0s\) must be longer"),
        ({**BASE, "seed": -1}, r"seed: expected an integer"),
    ],
)
def test_bad_scenarios_name_the_key(data, match):
    with pytest.raises(ScenarioError, match=match):
        scenario_from_dict(data)


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("duration = \n")
    with pytest.raises(ScenarioError, match=r"bad\.toml: not valid TOML"):
        load_scenario(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text('duration = "5s"\n[worker]\ncount = 2\n')
    with pytest.raises(ScenarioError, match=r"typo\.toml: unknown key 'worker'"):
        load_scenario(typo)


# ---- the fault plan ------------------------------------------------------------------------


def test_plan_is_deterministic_per_seed():
    s = load_scenario(STANDARD)
    a = plan_faults(s, ALL_FAULTS, durable=True)
    assert a == plan_faults(s, ALL_FAULTS, durable=True)
    b = plan_faults(s.with_seed(s.seed + 1), ALL_FAULTS, durable=True)
    assert a.faults != b.faults
    assert sorted(f.kind for f in a.faults) == sorted(f.kind for f in b.faults)


def test_plan_has_the_scenarios_faults_in_the_window():
    s = load_scenario(STANDARD)
    plan = plan_faults(s, ALL_FAULTS, durable=True)
    kinds = [f.kind for f in plan.faults]
    assert kinds.count("kill") == s.faults.kills
    assert kinds.count("pause") == s.faults.pauses + s.faults.near_lease
    near = [f for f in plan.faults if f.kind == "pause" and f.point == "near_lease"]
    assert len(near) == s.faults.near_lease > 0
    lease = s.workers.lease
    assert all(0.9 * lease <= f.duration <= 1.4 * lease for f in near)
    assert kinds.count("server_restart") == 1
    assert kinds.count("server_pause") == s.faults.server_pauses
    assert kinds.count("cut_connections") == s.faults.connection_cuts
    assert kinds.count("redrive") == int(s.duration // s.faults.redrive_interval)
    points = [f.point for f in plan.faults if f.kind == "kill"]
    for point, n in s.faults.sigkill.items():
        assert points.count(point) == n
    assert [f.at for f in plan.faults] == sorted(f.at for f in plan.faults)
    for f in plan.faults:
        assert s.faults.warmup <= f.at <= s.duration
        if f.kind in ("pause", "server_pause"):
            if f.point != "near_lease":
                assert f.duration > s.workers.lease  # past the lease
            assert f.at + f.duration <= s.duration
        if f.slot is not None:
            assert 0 <= f.slot < s.workers.count
    assert plan.skipped == ()


def test_plan_is_gated_on_the_servers_faults():
    s = load_scenario(STANDARD)
    plan = plan_faults(s, frozenset(), "the sqlite server")
    kinds = {f.kind for f in plan.faults}
    assert kinds == {"kill", "pause", "redrive"}
    assert len(plan.skipped) == 3
    assert (
        "server_restart x1: skipped, the sqlite server does not support kill_server"
        in (plan.skipped[0])
    )
    assert plan.skipped[1] == (
        "server_pause x1: skipped, the sqlite server does not support pause_server"
    )
    assert "cut_connections" in plan.skipped[2]
    only_cuts = plan_faults(s, frozenset({CUT_CONNECTIONS}), durable=True)
    assert "cut_connections" in {f.kind for f in only_cuts.faults}
    assert "server_restart" not in {f.kind for f in only_cuts.faults}


def test_server_kills_are_planned_only_on_a_durable_backend():
    """A server that can be killed but keeps nothing would lose acknowledged work by
    design: no server restart is planned, and the note says why (rule ``durability``)."""
    s = load_scenario(STANDARD)
    plan = plan_faults(
        s, ALL_FAULTS, "the redis server (given DSN)", durability="appendonly no on 127.0.0.1"
    )
    assert "server_restart" not in {f.kind for f in plan.faults}
    assert {"kill", "pause", "cut_connections", "redrive"} <= {f.kind for f in plan.faults}
    assert plan.skipped == (
        "server_restart x1: skipped, the backend does not declare durable (appendonly no on "
        "127.0.0.1): a kill and restart of the redis server (given DSN) would lose "
        "acknowledged work by design",
    )
    durable = plan_faults(s, ALL_FAULTS, "the redis server (given DSN)", durable=True)
    assert [f.kind for f in durable.faults].count("server_restart") == 1
    # the rest of the schedule does not depend on durability
    rest = [f for f in durable.faults if f.kind != "server_restart"]
    assert len(rest) == len(plan.faults)
