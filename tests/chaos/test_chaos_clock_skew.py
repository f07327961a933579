"""The clock-skew fault: worker slots under libfaketime.

- the ``[faults.clock_skew]`` keys are validated, each bad value naming its key;
- the skews replay from the seed; a slot keeps its skew across respawns;
- a skewed process reads a skewed time of day, keeps true timers (sleeps work despite
  libfaketime #426) and journals **true** time, within milliseconds of the harness;
- without libfaketime the fault is skipped with a note that says so;
- no skewed worker outlives a SIGKILLed runner;
- the timeline marks each skewed worker; the counters count them;
- the ``storage-clock`` rule fails a history whose storage times run backwards in
  real-time order, naming the task and both workers, and passes a monotone one;
- a correct embedded backend (SQLite) passes the skew campaign. What skew means there:
  the store's clock is the clock of the process that writes, kept monotone by the
  database's clock floor, so the shared clock is the fastest clock that wrote lately
  (slower processes see it stand still until they catch up): leases expire early in real
  time when a fast worker writes, but one clock decides them, and fencing holds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rdq_compliance import run_summary
from rdq_compliance.chaos.checker import FinalState, check_storage_clock
from rdq_compliance.chaos.faults import clock_skew
from rdq_compliance.chaos.libfaketime import Skew, find_libfaketime, plan_skews, skew_env
from rdq_compliance.chaos.nemesis import Counters
from rdq_compliance.chaos.report import build_timeline, render_timeline
from rdq_compliance.chaos.scenario import ScenarioError, load_scenario, scenario_from_dict
from tests._skew_support import assert_clean, need_libfaketime, skew_campaign
from tests._waiting import HANG_S
from tests.chaos._chaos_support import wait_gone

# ---- the scenario keys ----------------------------------------------------------------------

BASE = {"duration": "5s", "workers": {"count": 4}}


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"workers": 5}, r"faults\.clock_skew\.workers: 5 skewed slots, but the fleet has 4"),
        ({"workers": -1}, r"faults\.clock_skew\.workers: expected an integer between 0"),
        ({"offset": "soon"}, r"faults\.clock_skew\.offset: expected an offset"),
        ({"offset": ["1s", "-1s"]}, r"faults\.clock_skew\.offset: min 1\.0s is greater"),
        ({"offset": ["1s"]}, r"faults\.clock_skew\.offset: expected \[min, max\]"),
        ({"offset": ["-2d", "1s"]}, r"faults\.clock_skew\.offset\[0\]: expected an offset"),
        ({"drift": [0, 1.1]}, r"faults\.clock_skew\.drift: a clock rate must be in \(0, 10\]"),
        ({"drift": "fast"}, r"faults\.clock_skew\.drift: expected one of numbers"),
        ({"workrs": 1}, r"unknown key 'faults\.clock_skew\.workrs'; accepted here: workers"),
    ],
)
def test_bad_clock_skew_keys_are_named(table: dict[str, object], match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        scenario_from_dict({**BASE, "faults": {"clock_skew": table}})


def test_clock_skew_keys_and_the_shipped_scenario() -> None:
    s = scenario_from_dict(
        {**BASE, "faults": {"clock_skew": {"workers": 2, "offset": ["-1.5s", "+250ms"]}}}
    )
    assert (s.faults.skewed_workers, s.faults.skew_offset) == (2, (-1.5, 0.25))
    assert s.faults.skew_drift == (1.0, 1.0)
    clock = load_scenario("clock")
    f = clock.faults
    assert f.skewed_workers == 3 and f.skew_offset == (-4.5, 4.5) and f.skew_drift == (0.9, 1.1)
    # offsets of several leases either way
    assert min(-f.skew_offset[0], f.skew_offset[1]) >= 4 * clock.workers.lease
    repo = Path(__file__).resolve().parents[2] / "chaos" / "clock.toml"
    assert repo.read_text() == Path(str(clock.source)).read_text()


# ---- the skews --------------------------------------------------------------------------------


def test_skews_replay_from_the_seed() -> None:
    a = plan_skews(14, 4, 3, (-4.5, 4.5), (0.9, 1.1))
    assert a == plan_skews(14, 4, 3, (-4.5, 4.5), (0.9, 1.1))
    assert a != plan_skews(15, 4, 3, (-4.5, 4.5), (0.9, 1.1))
    assert len({s.slot for s in a}) == 3 and all(0 <= s.slot < 4 for s in a)
    assert all(-4.5 <= s.offset <= 4.5 and 0.9 <= s.drift <= 1.1 for s in a)
    assert len(plan_skews(1, 2, 5, (0, 0), (1, 1))) == 2
    assert Skew(0, -4.5, 1.1).faketime == "-4.500 x1.1000"


def test_libfaketime_is_found_or_named_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RDQ_LIBFAKETIME", os.fspath(tmp_path / "nowhere.so.1"))
    assert find_libfaketime() is None
    monkeypatch.delenv("RDQ_LIBFAKETIME")
    library = need_libfaketime()
    assert library.name == "libfaketime.so.1" and library.is_file()


def test_without_libfaketime_the_skew_is_skipped_with_a_note(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clock_skew, "find_libfaketime", lambda: None)
    counters = Counters()
    scenario = load_scenario("clock")
    skews, library = clock_skew.skews_for(
        scenario.faults.of(clock_skew.FAMILY),
        scenario.seed,
        scenario.workers.count,
        counters.of(clock_skew.FAMILY),
        counters.notes,
    )
    assert skews == () and library is None
    (note,) = counters.notes
    assert "clock_skew x3: skipped, libfaketime is not installed" in note
    assert "apt-get install faketime libfaketime" in note


_PROBE = """
import json, time
from rdq_compliance.chaos.libfaketime import patch_sleep, true_time
base = float(__import__("sys").argv[1])
patch_sleep()
m = time.monotonic()
time.sleep(0.2)
slept = time.monotonic() - m
print(json.dumps({"wall": time.time(), "true": true_time(base)(), "slept": slept}))
"""


@pytest.mark.parametrize("skew", [Skew(0, -4.5, 1.0), Skew(1, 4.5, 1.1)], ids=str)
def test_a_skewed_process_reads_skewed_time_and_journals_true_time(skew: Skew) -> None:
    library = need_libfaketime()
    env = {**os.environ, **skew_env(skew, library)}
    base = time.time() - time.monotonic()
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, repr(base)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    after = time.time()
    seen = json.loads(out.stdout)
    # the time of day is off by the offset, plus the drift over the process's life, which
    # lies within the harness's before/after however long a busy machine makes it
    drifted = (skew.drift - 1) * (after - before)
    low, high = before + skew.offset + min(drifted, 0), after + skew.offset + max(drifted, 0)
    assert low - 0.01 <= seen["wall"] <= high + 0.01, (low, seen["wall"], high)
    # the journal's clock is true: within the harness's own before/after, to the ms
    assert before - 0.002 <= seen["true"] <= after + 0.002
    # timers are true: a 0.2 s sleep lasts 0.2 s of the real monotonic clock, not one timed
    # on the skewed time of day (off by the offset: none at -4.5 s, 4.7 s at +4.5 s)
    assert 0.19 <= seen["slept"] < 0.2 + abs(skew.offset) / 2


# ---- the timeline and the counters -----------------------------------------------------------


def test_the_timeline_marks_each_skewed_worker() -> None:
    events = [
        {"seq": 0, "proc": "harness", "t": 10.0, "type": "info", "op": "fault",
         "kind": "clock_skew", "target": "w1", "slot": 1, "offset": -4.5, "drift": 1.1},
        {"seq": 0, "proc": "w1", "t": 10.5, "type": "invoke", "op": "claim"},
        {"seq": 1, "proc": "w1", "t": 12.0, "type": "ok", "op": "claim", "claims": []},
    ]  # fmt: skip
    _, _, marks, _, _ = build_timeline(events)
    (mark,) = marks
    assert (mark.kind, mark.target, mark.t, mark.end) == ("skew", "w1", 10.0, 12.0)
    assert mark.label == "w1 clock skewed -4.500s, rate x1.1000 (libfaketime, slot 1)"
    page = render_timeline(events, [], {"counters": {"clock_skews": 1}})
    assert mark.label in page and "clock skewed (libfaketime)" in page
    c = Counters(clock_skews=4, skewed_slots={2: "+1.000s, rate x1.0000"})
    assert c.as_dict()["clock_skews"] == 4
    assert c.as_dict()["skewed_slots"] == {"2": "+1.000s, rate x1.0000"}
    # the end-of-run summary's fault line counts them too
    assert run_summary._faults({"total_kills": 1, "clock_skews": 4}) == (
        "1 worker kills, 4 clock-skewed workers"
    )


# ---- the storage-clock rule ------------------------------------------------------------------

S = 1_000_000  # µs


def _claim(proc: str, task: str, t: float, claimed_at: int, seq: int = 0) -> list[dict]:
    entry = {"task": task, "token": f"{task}-{proc}", "claimed_at": claimed_at,
             "lease_expires_at": claimed_at + S, "reclaimed": False, "attempt_no": 1}
    return [
        {"seq": seq, "proc": proc, "t": t, "type": "invoke", "op": "claim"},
        {"seq": seq + 1, "proc": proc, "t": t + 0.01, "type": "ok", "op": "claim",
         "claims": [entry]},
    ]  # fmt: skip


def _heartbeat(proc: str, task: str, t: float, expiry: int, seq: int) -> list[dict]:
    token = f"{task}-{proc}"
    return [
        {"seq": seq, "proc": proc, "t": t, "type": "invoke", "op": "heartbeat",
         "task": task, "token": token},
        {"seq": seq + 1, "proc": proc, "t": t + 0.01, "type": "ok", "op": "heartbeat",
         "task": task, "token": token, "lease_expires_at": expiry},
    ]  # fmt: skip


EMPTY = FinalState(tasks={}, dlq=[])


def test_storage_clock_names_a_clock_that_runs_backwards() -> None:
    # w0 (a clock 4.5 s fast) is answered at t=100.01; w1 begins at 100.2 and is stamped
    # 4.3 s earlier by "the storage"
    events = _claim("w0", "t1", 100.0, 104_500 * 1000) + _claim("w1", "t2", 100.2, 100_200_000)
    (v,) = check_storage_clock(events, EMPTY)
    assert v.rule == "storage-clock" and v.task == "t2" and set(v.workers) == {"w0", "w1"}
    assert v.message.startswith("[storage-clock]")
    assert "task 't2'" in v.message and "4300.000 ms before the claim of 't1' by w0" in v.message


def test_storage_clock_reads_heartbeats_too() -> None:
    events = (
        _claim("w0", "t1", 100.0, 100_000_000)
        + _heartbeat("w0", "t1", 100.3, 109_000_000, 2)  # stamped 108.0 (expiry - 1 s lease)
        + _claim("w1", "t2", 100.5, 100_500_000)
    )
    (v,) = check_storage_clock(events, EMPTY)
    assert "before the heartbeat of 't1' by w0" in v.message


def _claim_from_heartbeat(proc: str, task: str, t: float, beat: int, lease: int) -> list[dict]:
    """A claim made at ``t`` whose lease runs from the worker's last heartbeat (``beat``,
    before the claim) for ``lease``: a lease model of a library's own."""
    events = _claim(proc, task, t, int(t * S))
    events[1]["claims"][0]["lease_expires_at"] = beat + lease
    return events


def test_storage_clock_reads_a_heartbeat_by_the_backends_fixed_lease() -> None:
    # w0's claim at 100.0 holds until 100.5 + 2 s (its worker beat at 100.5 - 2 s before
    # the claim is not possible; at 99.5: 1.5 s of lease left); its heartbeat at 100.3 is
    # stamped 100.31 (expiry 102.31 - the fixed 2 s), w1's claim at 100.5 after it
    events = (
        _claim_from_heartbeat("w0", "t1", 100.0, 99_500_000, 2 * S)
        + _heartbeat("w0", "t1", 100.3, 102_310_000, 2)
        + _claim("w1", "t2", 100.5, 100_500_000)
    )
    fixed = FinalState(tasks={}, dlq=[], fixed_lease_us=2 * S)
    assert check_storage_clock(events, fixed) == []
    # read with the claim's own lease (1.5 s), the heartbeat looks stamped at 100.81
    (v,) = check_storage_clock(events, EMPTY)
    assert "before the heartbeat of 't1' by w0" in v.message
    # and a clock that does run backwards is still named with the fixed lease
    late = _claim_from_heartbeat("w0", "t1", 100.0, 99_500_000, 2 * S) + _claim(
        "w1", "t2", 100.2, 99_000_000
    )
    (v,) = check_storage_clock(late, fixed)
    assert v.task == "t2" and set(v.workers) == {"w0", "w1"}


@pytest.mark.parametrize(
    ("events", "why"),
    [
        (_claim("w0", "t1", 100.0, 100_000_000) + _claim("w1", "t2", 100.2, 100_200_000),
         "monotone"),
        (_claim("w0", "t1", 100.0, 100_050_000) + _claim("w1", "t2", 100.02, 100_000_000),
         "50 ms back: within the tolerance"),
        (_claim("w0", "t1", 100.0, 105_000_000) + _claim("w1", "t2", 100.005, 100_000_000),
         "concurrent in real time: no order"),
    ],
    ids=["monotone", "tolerance", "concurrent"],
)  # fmt: skip
def test_storage_clock_passes_one_clock(events: list[dict], why: str) -> None:
    assert check_storage_clock(events, EMPTY) == [], why


def _host_clock(host: str, uncertainty: float) -> dict:
    """The harness's measurement of a remote host's clock (``chaos.launcher.journal_clocks``)."""
    return {"seq": 0, "proc": "harness", "t": 99.0, "type": "info", "op": "host",
            "kind": "clock", "host": host, "offset": 0.0, "uncertainty": uncertainty}  # fmt: skip


def test_storage_clock_orders_calls_on_two_hosts_only_beyond_their_clocks_uncertainty() -> None:
    # w0 answered at 100.010, w1 began at 100.030 and was stamped 4.3 s earlier: 20 ms
    # apart in real time. One host: ordered (a finding). Hosts whose clocks were measured
    # within ±15 ms: the calls may have overlapped, so no order and no finding; within
    # ±5 ms (a margin of 2 + 10 ms < 20 ms) they are ordered again.
    events = _claim("w0", "t1", 100.0, 104_500 * 1000) + _claim("w1", "t2", 100.03, 100_200_000)
    (v,) = check_storage_clock(events, EMPTY)
    assert set(v.workers) == {"w0", "w1"}
    wide = [_host_clock("h0", 0.015), _host_clock("h1", 0.001)]
    assert check_storage_clock(wide + events, EMPTY) == []
    narrow = [_host_clock("h0", 0.005), _host_clock("h1", 0.001)]
    (v,) = check_storage_clock(narrow + events, EMPTY)
    assert v.rule == "storage-clock" and v.task == "t2"


# ---- a correct embedded backend ----------------------------------------------------------------


@pytest.mark.chaos
def test_sqlite_passes_the_skew_campaign(tmp_path: Path) -> None:
    from tests.chaos._chaos_support import start_session

    session = start_session("sqlite", tmp_path / "server")
    try:
        result, _ = skew_campaign(session, tmp_path / "out")
    finally:
        session.close()
    assert_clean(result)
    assert result.counters.clock_skews >= 3 and len(result.counters.skewed_slots) == 3
    harness = [
        json.loads(line)
        for line in (tmp_path / "out" / "history" / "harness.jsonl").read_text().splitlines()
    ]
    skews = [e for e in harness if e.get("op") == "fault" and e.get("kind") == "clock_skew"]
    assert len(skews) == result.counters.clock_skews
    by_slot: dict[int, set[tuple[float, float]]] = {}
    for e in skews:
        by_slot.setdefault(e["slot"], set()).add((e["offset"], e["drift"]))
    assert all(len(v) == 1 for v in by_slot.values()), by_slot  # a respawn keeps its skew
    # the skew took: a skewed worker's journal stays true (within the harness's span)
    t_first, t_last = harness[0]["t"], time.time()
    for path in (tmp_path / "out" / "history").glob("w*.jsonl"):
        for line in path.read_text().splitlines():
            assert t_first - 0.01 <= json.loads(line)["t"] <= t_last, path.name


def _skewed(p: psutil.Process) -> bool:
    try:
        return "libfaketime" in p.environ().get("LD_PRELOAD", "")
    except psutil.Error:
        return False


@pytest.mark.chaos
def test_no_skewed_worker_outlives_a_sigkilled_runner(tmp_path: Path) -> None:
    """``rdq-chaos run chaos/clock.toml`` SIGKILLed mid-run (one skewed worker SIGSTOPped):
    within seconds no process it started — skewed workers included — is left."""
    need_libfaketime()
    cli = Path(sys.executable).with_name("rdq-chaos")
    runner = subprocess.Popen(
        [str(cli), "run", "clock", "--backend", "sqlite", "--quiet", "--out", str(tmp_path)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        me = psutil.Process(runner.pid)
        end = time.monotonic() + 60
        skewed: list[psutil.Process] = []
        while len(skewed) < 3:
            if runner.poll() is not None:
                err = runner.stderr.read().decode() if runner.stderr else ""
                pytest.fail(f"the runner exited early ({runner.returncode}): {err[-2000:]}")
            assert time.monotonic() < end, "the skewed workers never started"
            time.sleep(0.1)
            skewed = [p for p in me.children(recursive=True) if _skewed(p)]
        os.kill(skewed[0].pid, signal.SIGSTOP)
        started = [p.pid for p in me.children(recursive=True)]
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(HANG_S)
        left = wait_gone(started, timeout=HANG_S)
        assert left == [], f"processes left after the runner died: {left}"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
