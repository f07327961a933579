"""``benchmarks/deployed_campaigns.py``: the "kill to next run" figure it reads from a
campaign's ``results.json``, on crafted results with a worker whose clock was skewed and a
kill of one process of a worker: each execution is put in true time as the checker puts
it, and a kill interrupts only the executions of the processes it stopped."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # the benchmark imports it by this name
    spec.loader.exec_module(module)
    return module


_load("_figures")
bench = _load("deployed_campaigns")


def _fault(kind: str, start: float, end: float | None, targets: list[str], **kw: Any):
    return {"kind": kind, "start": start, "end": end, "targets": targets, "part": None,
            "pids": None, "offset": 0.0, **kw}  # fmt: skip


def _x(exec_: str, job: str, worker: str, pid: int, started: float, ended: float | None):
    outcome = None if ended is None else "failed"
    return {"exec": exec_, "job": job, "worker": worker, "pid": pid, "attempt": None,
            "started": started, "ended": ended, "outcome": outcome}  # fmt: skip


#: w2's clock reads 60 s ahead from +2 s on (its journal times are 60 s late). w1 is
#: killed at +10 while it runs j1, which w2 runs next at +15 (journalled +75); w2 is
#: killed at +20 while it runs j2 (started +10, journalled +70), which w1 runs next at
#: +23; one process (pid 300) of w3 is killed at +30: its run of j3 is interrupted and
#: rerun at +34, the run of j4 by w3's other process (pid 301) is not.
SKEWED: dict[str, Any] = {
    "faults_done": [
        _fault("clock-skew", 2.0, 50.0, ["w2"], offset=60.0),
        _fault("kill", 10.0, 11.0, ["w1"]),
        _fault("kill", 20.0, 21.0, ["w2"]),
        _fault("kill", 30.0, 31.0, ["w3"], part="horse", pids=[300]),
    ],
    "host_losses": [],
    "executions": [
        _x("a", "j1", "w1", 100, 5.0, None),
        _x("b", "j1", "w2", 200, 75.0, 76.0),
        _x("c", "j2", "w2", 200, 70.0, None),
        _x("d", "j2", "w1", 101, 23.0, 24.0),
        _x("e", "j3", "w3", 300, 28.0, None),
        _x("f", "j3", "w3", 302, 34.0, 35.0),
        _x("g", "j4", "w3", 301, 29.0, None),
        _x("h", "j4", "w3", 303, 40.0, 41.0),
    ],
}


def test_kill_to_next_run_is_measured_in_true_time() -> None:
    """j1: 15 - 10 = 5 s (not the 65 s its journal times give); j2: its run on the skewed
    worker started at +10 in true time, before the kill at +20 (its journal says +70, after
    it), so it was interrupted, rerun 3 s later; j3: 4 s; j4's process was not the one
    killed."""
    assert sorted(round(r, 3) for r in bench.recoveries(SKEWED)) == [3.0, 4.0, 5.0]


def test_without_the_skew_the_same_journal_times_say_otherwise() -> None:
    """The same executions on unskewed clocks: j1's next run is 65 s after the kill, and
    w2's run of j2 starts after the kill of w2, which interrupted nothing there."""
    plain = {**SKEWED, "faults_done": SKEWED["faults_done"][1:]}
    assert sorted(round(r, 3) for r in bench.recoveries(plain)) == [4.0, 65.0]


def test_a_lost_host_is_a_kill_of_its_worker() -> None:
    lost = {
        "faults_done": [],
        "host_losses": [{"worker": "w1", "start": 10.0, "end": 12.0}],
        "executions": [_x("a", "j1", "w1", 100, 5.0, None), _x("b", "j1", "w2", 200, 14.5, 15.0)],
    }
    assert bench.recoveries(lost) == [4.5]
