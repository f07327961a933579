"""A deployed scenario's plan: the same seed gives the same plan, another seed another;
what the system, the server or the places the workers run in cannot do is listed with
the reason, never dropped; on a fleet a partition takes a whole host and each clock skew
another host; a scenario file is read, and a bad one is one clear error."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from rdq_compliance.deployed.control import CoreSystem
from rdq_compliance.deployed.places import Reach
from rdq_compliance.deployed.plan import make_plan
from rdq_compliance.deployed.scenario import BUILTIN, EXAMPLE, ScenarioError, load_scenario
from rdq_compliance.deployed.system import Part, Profile
from rdq_compliance.provision.backend import FAULTS
from tests.deployed.toy_system import ToySystem

ALL = frozenset(FAULTS)
STANDARD = BUILTIN["standard"]


def _plan(seed: int, system=None, faults=ALL, profile="fast", scenario=STANDARD, reach=None):
    system = system or ToySystem(parts=(Part("main"), Part("child", 2, role="descendants")))
    return make_plan(
        scenario, seed, system=system, profile=system.profiles[profile], server_faults=faults,
        reach=reach,
    )  # fmt: skip


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    a, b, c = _plan(7), _plan(7), _plan(8)
    assert a == b and a.lines() == b.lines() and a.as_dict() == b.as_dict()
    assert a.faults != c.faults and a.jobs != c.jobs


def test_the_standard_plan_on_a_system_that_can_do_everything_it_asks() -> None:
    plan = _plan(3)
    # the toy has no hold: its 4 hold jobs succeed instead, counted and named
    assert plan.counts() == {"succeed": 34, "sleep": 8, "fail": 8, "retry": 6}
    assert [(s.behaviour, s.count) for s in plan.substituted] == [("hold", 4)]
    assert "toy==1.0 has no 'hold'" in plan.substituted[0].reason
    assert sum(1 for j in plan.jobs if j.delay > 0) == 12
    assert all(0 <= j.delay <= 10 for j in plan.jobs)
    # recovery_after 5 s in the toy's fast profile: sleep 7.5 s, pause 7.5 s
    assert {j.seconds for j in plan.jobs if j.behaviour == "sleep"} == {7.5}
    assert all(0.05 <= j.seconds <= 0.5 for j in plan.jobs if j.behaviour == "succeed")
    assert {j.retries for j in plan.jobs if j.behaviour in ("fail", "retry")} == {2}
    kinds = [f.kind for f in plan.faults]
    assert sorted(kinds) == sorted(
        ["kill"] * 3 + ["pause"] * 2 + ["part-kill"] * 2 + ["server-kill", "server-freeze", "cut"]
        + ["partition", "clock-skew"]
    )  # fmt: skip
    assert plan.not_run == () and plan.window == 40
    assert all(f.lasts == 7.5 for f in plan.faults if f.kind in ("pause", "partition"))
    assert all(f.part == "child" for f in plan.faults if f.kind == "part-kill")
    (skew,) = [f for f in plan.faults if f.kind == "clock-skew"]
    # 1.5 x recovery_after ahead, early in the window, until the workers stop
    assert skew.offset == 7.5 and skew.lasts == 0 and skew.at <= plan.window / 4
    assert "7.5 s ahead, until the workers stop" in skew.what()
    for f in plan.faults:
        assert 0 < f.at and f.at + f.lasts < plan.window
    for w in plan.workers:  # no two faults on one worker at once (a skew is no span)
        spans = sorted(
            (f.at, f.at + f.lasts) for f in plan.faults if f.worker == w and f.kind != "clock-skew"
        )
        assert all(b[0] > a[1] for a, b in itertools.pairwise(spans))


def test_what_cannot_run_is_listed_with_the_reason() -> None:
    plan = _plan(3, system=CoreSystem("sqlite"), faults=frozenset())
    reasons = {n.kind: (n.count, n.reason) for n in plan.not_run}
    assert (
        reasons["part-kill"][0] == 2 and "no part of role 'descendants'" in reasons["part-kill"][1]
    )
    assert reasons["server-kill"] == (
        1, "the server provisioned cannot kill_server and restart_server (it supports: none)"
    )  # fmt: skip
    assert reasons["server-freeze"][0] == 1 and "pause_server" in reasons["server-freeze"][1]
    assert reasons["cut"][0] == 1 and "cut_connections" in reasons["cut"][1]
    assert sorted(f.kind for f in plan.faults) == sorted(
        ["kill"] * 3 + ["pause"] * 2 + ["partition", "clock-skew"]
    )
    # the control takes no retry count per job: its fail and retry jobs ask for none
    assert {j.retries for j in plan.jobs} == {None}
    assert any("takes no retry count per job" in n for n in plan.notes)
    text = "\n".join(plan.lines())
    assert "not run: 2 part-kill" in text and "not run: 1 cut" in text
    assert "4 hold -> succeed" in text


def test_the_cut_comes_when_some_worker_is_free_of_faults() -> None:
    busy = dataclasses.replace(STANDARD, workers=2, kill=4, pause=3)
    for seed in range(40):
        plan = _plan(seed, scenario=busy)
        (cut,) = [f for f in plan.faults if f.kind == "cut"]
        # a worker is down from a kill to its restart (+ 2 s to start), stopped while paused
        hit = {
            f.worker
            for f in plan.faults
            if f.worker and f.at <= cut.at <= f.at + f.lasts + (2.0 if f.kind == "kill" else 0)
        }
        assert hit != set(plan.workers), (seed, cut, plan.lines())


def test_a_cut_that_cannot_reach_the_workers_connections_is_not_run() -> None:
    system = ToySystem(parts=(Part("main"), Part("child", 2, role="descendants")))
    system.connections_in_namespace = False  # type: ignore[attr-defined]
    plan = _plan(3, system=system)
    ((kind, count, reason),) = [(n.kind, n.count, n.reason) for n in plan.not_run]
    assert (kind, count) == ("cut", 1)
    assert reason == (
        "toy==1.0's connections do not carry the kit's namespace, so the server's "
        "cut_connections(namespace) would find none of them"
    )
    assert "cut" not in {f.kind for f in plan.faults}


def test_a_sleep_that_cannot_pass_the_stall_threshold_is_named() -> None:
    no_recovery = Profile("fast", recovery_after=None)
    tight = Profile("fast", recovery_after=5.0, execution_limit=9.0)
    plans = {}
    for profile, why in [
        (no_recovery, "declares no recovery_after"),
        (tight, "does not fit under 0.8 x the profile's execution_limit (9 s)"),
    ]:
        system = ToySystem(profiles={"fast": profile, "defaults": Profile("defaults")})
        plans[profile] = plan = _plan(1, system=system)
        assert "sleep" not in plan.counts()
        (sub,) = [s for s in plan.substituted if s.behaviour == "sleep"]
        assert sub.count == 8 and why in sub.reason
    # no recovery_after sizes no pause either; a tight limit leaves the pauses alone
    (pauses,) = [n for n in plans[no_recovery].not_run if n.kind == "pause"]
    assert pauses.count == 2 and "no recovery_after to size a pause by" in pauses.reason
    assert [f.kind for f in plans[tight].faults].count("pause") == 2


def test_a_long_pause_stretches_the_window() -> None:
    system = CoreSystem("sqlite")
    plan = _plan(5, system=system, profile="defaults")  # recovery 32 s: pauses of 48 s
    assert plan.window > 48 * 1.5 and any("stretched" in n for n in plan.notes)


def test_a_window_too_short_for_its_faults_is_an_error() -> None:
    crowded = dataclasses.replace(STANDARD, workers=1, kill=30)
    with pytest.raises(ScenarioError, match="do not fit in a window of 40 s"):
        _plan(1, scenario=crowded)


def test_a_scenario_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(EXAMPLE)
    s = load_scenario(path)
    assert (s.name, s.workers, s.succeed, s.succeed_seconds, s.cut, s.window) == (
        "mine", 2, 6, (0.05, 0.3), 1, 15
    )  # fmt: skip
    path.write_text('name = "quiet"\n[jobs]\nsleep = 2\n')
    quiet = load_scenario(path)
    assert (quiet.sleep, quiet.succeed, quiet.kill, quiet.window) == (2, 0, 0, STANDARD.window)
    assert load_scenario("smoke") is BUILTIN["smoke"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[jobs]\nsucced = 3\n", r"unknown key \[jobs\] 'succed' \(known: delayed, fail"),
        ("workers = 0\n", "workers: at least 1"),
        ("[faults]\nkill = -1\n", "kill: an integer >= 0, not -1"),
        ("[jobs]\nsucceed_seconds = [1, 0.5]\n", "succeed_seconds: .low, high. with"),
        ("[jobs]\nsucceed = 1\ndelayed = 2\n", "delayed: 2 of only 1 jobs"),
        ("name = [\n", "cannot be read as TOML"),
    ],
)
def test_a_bad_scenario_file_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(path)


def test_an_unknown_scenario_names_the_built_in_ones() -> None:
    built_in = r"neither a built-in one \(standard, smoke\) nor a file"
    with pytest.raises(ScenarioError, match=built_in):
        load_scenario("no-such-scenario")


def test_a_partition_or_a_skew_the_places_cannot_do_is_not_run_with_their_reason() -> None:
    reach = Reach(cannot={"partition": "no namespaces here", "clock-skew": "no libfaketime"})
    plan = _plan(3, reach=reach)
    reasons = {n.kind: (n.count, n.reason) for n in plan.not_run}
    assert reasons == {"partition": (1, "no namespaces here"), "clock-skew": (1, "no libfaketime")}
    assert not {"partition", "clock-skew"} & {f.kind for f in plan.faults}
    text = "\n".join(plan.lines())
    assert "not run: 1 partition: no namespaces here" in text
    assert "not run: 1 clock-skew: no libfaketime" in text


def test_on_a_fleet_a_partition_takes_its_whole_host_and_each_skew_another_host() -> None:
    """Six workers on two hosts: a partition of a host leaves every worker of the host
    free of other faults meanwhile, and names the host; two skews land on two hosts; a
    third has no host left and is listed as not run."""
    six = dataclasses.replace(STANDARD, workers=6, partition=2, clock_skew=3)
    hosts = {f"w{i}": f"h{i % 2}" for i in range(1, 7)}
    for seed in range(20):
        plan = _plan(seed, scenario=six, reach=Reach(hosts))
        parts = [f for f in plan.faults if f.kind == "partition"]
        assert len(parts) == 2
        for cut in parts:
            assert cut.host == hosts[cut.worker] and f"(host {cut.host}, all its workers)" in (
                cut.what()
            )
            on_host = {w for w, h in hosts.items() if h == cut.host}
            for f in plan.faults:
                if f is cut or f.kind == "clock-skew" or f.worker not in on_host:
                    continue
                assert f.at > cut.at + cut.lasts or f.at + f.lasts < cut.at, (seed, f, cut)
        skews = [f for f in plan.faults if f.kind == "clock-skew"]
        assert sorted(f.host for f in skews) == ["h0", "h1"]
        ((count, why),) = [(n.count, n.reason) for n in plan.not_run if n.kind == "clock-skew"]
        assert count == 1 and why == "a clock jumps once: only 2 hosts to skew"
