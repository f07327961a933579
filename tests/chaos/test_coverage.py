"""``chaos.coverage`` on crafted journals: every call counted by operation, fault window
and outcome; a rule that saw none of the calls it needs is "not exercised", and so is a
rule a fault requires in a window that saw none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from rdq_compliance.chaos.coverage import NEEDS, OPS, WINDOWS, Requirement, coverage, unexercised
from rdq_compliance.chaos.faults.family import Counts, FaultFamily
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.faults.windows import Window


class History:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.seq: dict[str, int] = {}

    def ev(self, proc: str, t: float, type_: str, op: str, **fields: Any) -> None:
        seq = self.seq.get(proc, 0)
        self.seq[proc] = seq + 1
        self.events.append({"seq": seq, "proc": proc, "t": t, "type": type_, "op": op, **fields})

    def call(self, proc: str, t: float, op: str, result: str = "ok", **fields: Any) -> None:
        token = fields.pop("token", None)
        extra = {} if token is None else {"token": token}
        self.ev(proc, t, "invoke", op, **extra)
        self.ev(proc, t + 0.01, result, op, **extra, **fields)

    def fault(self, t: float, kind: str, target: str = "server", **fields: Any) -> None:
        self.ev("harness", t, "info", "fault", kind=kind, target=target, **fields)


def claims(*tokens: str, reclaimed: bool = False) -> list[dict[str, Any]]:
    return [{"task": f"t-{k}", "token": k, "reclaimed": reclaimed} for k in tokens]


def test_calls_are_counted_by_window_and_outcome():
    h = History()
    h.call("harness", 0.0, "enqueue", task="t-A")
    h.call("w1", 1.0, "claim", claims=claims("A"))
    h.fault(2.0, "pause", "w1")
    h.call("w0", 3.0, "claim", claims=claims("B", reclaimed=True))  # w1's task, taken
    h.fault(4.0, "resume", "w1")
    h.call("w1", 5.0, "complete", "fail", token="A", error="stale")  # the zombie's report
    h.call("w0", 6.0, "complete", token="B")
    h.fault(7.0, "pause_server")
    h.call("w0", 7.5, "heartbeat", "info", token="B")
    h.fault(8.0, "resume_server")
    h.fault(0.5, "clock_skew", "w2", offset=3.0)
    h.call("w2", 9.0, "heartbeat", token="C")
    cov = coverage(h.events)
    table = cov.table()
    assert set(table) == set(OPS) and set(table["claim"]) == {*WINDOWS, "all"}
    assert table["enqueue"]["calm"]["ok"] == 1
    assert table["claim"]["calm"]["ok"] == 1 and table["claim"]["worker paused"]["ok"] == 1
    assert table["reclaim"]["worker paused"]["ok"] == 1 and table["reclaim"]["calm"]["ok"] == 0
    assert table["complete"]["after a pause"]["fail"] == 1  # late: claimed before the pause
    assert table["complete"]["worker paused"]["fail"] == 0
    assert table["complete"]["calm"]["ok"] == 1
    assert table["extend"]["server frozen"]["unknown"] == 1
    assert table["extend"]["skewed worker"]["ok"] == 1
    assert table["claim"]["all"]["ok"] == 2 and cov.count("claim") == 2
    assert table["purge"]["all"] == {"ok": 0, "fail": 0, "unknown": 0}


def test_calls_are_counted_in_the_cut_server_failover_and_connection_windows():
    h = History()
    h.call("harness", 0.0, "enqueue", task="t-A")
    h.call("w1", 1.0, "claim", claims=claims("A"))
    h.fault(2.0, "partition", "w1", targets=["w1"])
    h.call("w0", 3.0, "claim", claims=claims("B", reclaimed=True))  # w1's task, taken
    h.fault(6.0, "heal", "w1", targets=["w1"])
    h.call("w1", 7.0, "complete", "fail", token="A", error="stale")  # the cut worker's report
    h.fault(8.0, "kill_server")
    h.call("w0", 8.5, "heartbeat", "info", token="B")
    h.fault(9.0, "restart_server")
    h.fault(10.0, "failover")
    h.call("w0", 10.5, "complete", token="B")
    h.fault(11.0, "promoted")
    h.call("harness", 12.0, "enqueue", task="t-C")
    h.fault(12.005, "cut_connections")  # while that enqueue was in flight
    h.fault(13.0, "kill_server")  # never restarted: down to the end of the run
    h.call("w0", 13.5, "claim", claims=claims("C"))
    table = coverage(h.events).table()
    assert table["claim"]["calm"]["ok"] == 1
    assert table["claim"]["partitioned"]["ok"] == 1 and table["reclaim"]["partitioned"]["ok"] == 1
    assert table["complete"]["after a cut"]["fail"] == 1  # late: claimed before the cut
    assert table["complete"]["partitioned"]["fail"] == 0
    assert table["extend"]["server down"]["unknown"] == 1
    assert table["complete"]["failover"]["ok"] == 1 and table["complete"]["calm"]["ok"] == 0
    assert table["enqueue"]["connections cut"]["ok"] == 1 and table["enqueue"]["calm"]["ok"] == 1
    assert table["claim"]["server down"]["ok"] == 1
    assert table["claim"]["all"]["ok"] == 3


def test_a_call_never_answered_is_unknown():
    h = History()
    h.ev("w0", 1.0, "invoke", "complete", token="A")  # SIGKILLed in the call
    assert coverage(h.events).count("complete", None, "unknown") == 1


def test_a_rule_with_no_calls_is_not_exercised_and_a_required_window_is_named():
    h = History()
    h.call("harness", 0.0, "enqueue", task="t-A")
    h.call("w0", 1.0, "claim", claims=claims("A"))
    h.call("w0", 2.0, "complete", token="A")
    h.fault(0.5, "clock_skew", "w1", offset=3.0)  # a skewed worker that never called
    skewed_heartbeat = Requirement("storage-clock", "skewed worker", ("extend",))
    anywhere = Requirement("one-claim", "all")
    idle, missing = unexercised(coverage(h.events), list(NEEDS), [skewed_heartbeat, anywhere])
    assert "lease-respected" in idle and "reclaim-expired" in idle and "redrive" in idle
    assert "one-claim" not in idle and "fencing" not in idle and "storage-clock" not in idle
    assert missing == [skewed_heartbeat]
    want = "extend call (ok or refused) in the 'skewed worker' window"
    assert skewed_heartbeat.describe() == want


@dataclass(frozen=True)
class QuirkSettings:
    quirks: int = 0


@dataclass
class QuirkCounts(Counts):
    quirked: int = 0


class Quirk(FaultFamily[QuirkSettings, QuirkCounts]):
    """A family declaring whatever windows it is given, and whose ``quirk`` faults
    require ``fencing`` in the window ``requires`` (if given)."""

    name = "quirk"
    marks = ("quirk",)
    exercises: ClassVar[Mapping[str, tuple[Requirement, ...]]] = {}

    def __init__(self, *windows: Window, requires: str | None = None) -> None:
        self.windows = windows
        if requires is not None:
            self.exercises = {"quirk": (Requirement("fencing", requires),)}

    def parse(self, faults: Table) -> QuirkSettings:
        return QuirkSettings()

    def new_counts(self) -> QuirkCounts:
        return QuirkCounts()


def test_a_requirement_names_a_known_rule_window_and_operation():
    with pytest.raises(ValueError, match="rule 'one-clam'"):
        Requirement("one-clam", "all")
    # the window: one the composed families open (checked when they are composed)
    with pytest.raises(ValueError, match="fault window 'paused'"):
        BUILTIN.plus(Quirk(requires="paused"))
    assert BUILTIN.plus(Quirk(requires="partitioned")).requirements(["quirk"]) == [
        Requirement("fencing", "partitioned")
    ]
    with pytest.raises(ValueError, match=r"operations \['heartbeat'\]"):
        Requirement("fencing", "all", ("heartbeat",))
