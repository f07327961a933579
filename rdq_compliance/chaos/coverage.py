"""What a campaign exercised: SPI calls by operation, fault window and outcome, and the
checker rules that saw the calls they judge.

A campaign can pass a rule it never exercised: a clock-skew run whose skewed workers never
heartbeat passes ``storage-clock`` whatever the backend's clock. :func:`coverage` reads
the journals and counts every call:

- **operations** (:data:`OPS`): the SPI calls, with ``reclaim`` a claim call that took at
  least one expired lease (it is also counted as a ``claim``); ``purge``, ``list`` and
  ``stats`` are not journaled by campaigns and count 0;
- **outcome**: ``ok``, ``fail`` (refused, e.g. ``StaleClaim``) or ``unknown`` (``info``:
  a timeout, a lost connection, a process that died in the call);
- **fault windows** (:data:`WINDOWS`), from the harness's ``fault`` events; a call is
  counted in every window it falls in, and in ``calm`` when it falls in none:

  ``worker paused``    made (by any worker) while a worker is paused
  ``after a pause``    a paused worker's late call on a claim it made before its pause,
                       answered after its resume
  ``partitioned``      made (by any worker) while a worker is cut off (partition or loss)
  ``after a cut``      a cut worker's late call on a claim it made before the cut,
                       answered after the heal
  ``server frozen``    between ``pause_server`` and ``resume_server``
  ``server down``      between ``kill_server`` and ``restart_server``
  ``failover``         between ``failover`` and ``promoted``
  ``connections cut``  in flight when the harness cut the server's connections
  ``skewed worker``    made by a worker whose clock is skewed

Each checker rule declares what exercises it (:data:`NEEDS`: some of these calls ended ok
or refused); :func:`unexercised` lists the rules that saw none, and a scenario's faults say
in which windows their rules must be exercised (``FaultFamily.exercises``), so that a run
that never got there fails instead of passing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rdq_compliance.chaos.events import FAIL, INFO, INVOKE, OK, Event

__all__ = [
    "NEEDS",
    "OPS",
    "WINDOWS",
    "Coverage",
    "Need",
    "Requirement",
    "coverage",
    "unexercised",
]

OPS = (
    "enqueue", "claim", "reclaim", "extend", "complete", "reschedule", "dead_letter",
    "redrive", "purge", "list", "stats",
)  # fmt: skip
CALM = "calm"
WINDOWS = (
    CALM, "worker paused", "after a pause", "partitioned", "after a cut", "server frozen",
    "server down", "failover", "connections cut", "skewed worker",
)  # fmt: skip
OUTCOMES = ("ok", "fail", "unknown")
#: Journal op -> SPI operation.
_OP_OF = {
    "enqueue": "enqueue",
    "claim": "claim",
    "heartbeat": "extend",
    "complete": "complete",
    "reschedule": "reschedule",
    "dead_letter": "dead_letter",
    "redrive": "redrive",
}
_OUTCOME_OF = {OK: "ok", FAIL: "fail", INFO: "unknown"}
#: Time windows opened and closed by harness fault events: (opening kind, closing kind).
_SPANS = {
    "server frozen": ("pause_server", "resume_server"),
    "server down": ("kill_server", "restart_server"),
    "failover": ("failover", "promoted"),
}


@dataclass(frozen=True)
class Need:
    """What exercises a rule: a call of one of ``ops`` that ended ok or refused (a call
    of unknown outcome tells the checker nothing certain)."""

    ops: tuple[str, ...]
    what: str  # in words, for the report

    def met(self, cov: Coverage, window: str | None = None) -> bool:
        return any(
            cov.count(op, window, outcome) for op in self.ops for outcome in ("ok", "fail")
        )


_REPORTS = ("complete", "reschedule", "dead_letter", "extend")
#: Checker rule -> what exercises it.
NEEDS: dict[str, Need] = {
    "one-claim": Need(("claim",), "claim"),
    "lease-respected": Need(("reclaim",), "reclaim"),
    "reclaim-expired": Need(("reclaim",), "reclaim"),
    "lease-expired-recorded": Need(("reclaim",), "reclaim"),
    "fencing": Need(_REPORTS, "outcome report or heartbeat"),
    "outcome-recorded": Need(("complete", "reschedule", "dead_letter"), "outcome report"),
    "storage-clock": Need(("claim", "extend"), "claim or heartbeat"),
    "history-numbering": Need(("reclaim", "reschedule", "dead_letter"), "new-attempt"),
    "claim-due-only": Need(("reschedule",), "reschedule"),
    "terminal-final": Need(("complete", "dead_letter"), "complete or dead-letter"),
    "dlq-complete": Need(("dead_letter",), "dead-letter"),
    "redrive": Need(("redrive",), "redrive"),
    "execution-count": Need(("claim",), "claim"),
    "no-loss": Need(("enqueue",), "enqueue"),
    "drain-complete": Need(("enqueue",), "enqueue"),
}


@dataclass
class Coverage:
    """Calls by (operation, window, outcome)."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def count(self, op: str, window: str | None = None, outcome: str | None = None) -> int:
        """Calls of ``op`` in ``window`` with ``outcome`` (``None``: any). With no window
        every call counts once, though it may fall in several windows."""
        w = "*" if window is None else window
        return sum(
            n
            for (o, win, out), n in self.counts.items()
            if o == op and win == w and (outcome is None or out == outcome)
        )

    def add(self, op: str, windows: Iterable[str], outcome: str) -> None:
        for w in (*windows, "*"):
            key = (op, w, outcome)
            self.counts[key] = self.counts.get(key, 0) + 1

    def table(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{op: {window: {outcome: n}}}`` for every op and window (zeros included), plus
        ``"all"`` per op."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for op in OPS:
            row: dict[str, dict[str, int]] = {}
            for w in (*WINDOWS, "all"):
                key = "*" if w == "all" else w
                row[w] = {o: self.counts.get((op, key, o), 0) for o in OUTCOMES}
            out[op] = row
        return out


def _windows_of(events: list[Event]) -> tuple[list[tuple[str, float, float]], dict[str, Any]]:
    """The time windows (name, start, end) and the per-worker facts: paused and cut spans
    by worker, skewed workers, connection-cut instants."""
    harness = sorted((e for e in events if e.get("op") == "fault"), key=lambda e: e["t"])
    end = max((e["t"] for e in events), default=0.0) + 1.0
    spans: list[tuple[str, float, float]] = []
    open_at: dict[str, float] = {}
    for ev in harness:
        kind = ev.get("kind")
        for name, (opening, closing) in _SPANS.items():
            if kind == opening:
                open_at.setdefault(name, ev["t"])
            elif kind == closing and name in open_at:
                spans.append((name, open_at.pop(name), ev["t"]))
    spans += [(name, t, end) for name, t in open_at.items()]
    per: dict[str, Any] = {"paused": defaultdict(list), "cut": defaultdict(list)}
    per["skewed"] = {e["target"] for e in harness if e.get("kind") == "clock_skew"}
    per["cuts"] = [e["t"] for e in harness if e.get("kind") == "cut_connections"]
    since: dict[tuple[str, str], float] = {}
    for ev in harness:
        kind = ev.get("kind")
        targets = ev.get("targets") or [ev.get("target")]
        for w in targets:
            if kind == "pause":
                since[("paused", w)] = ev["t"]
            elif kind in ("resume", "kill") and ("paused", w) in since:
                per["paused"][w].append((since.pop(("paused", w)), ev["t"]))
            elif kind in ("partition", "loss"):
                since[("cut", w)] = ev["t"]
            elif kind == "heal" and ("cut", w) in since:
                per["cut"][w].append((since.pop(("cut", w)), ev["t"]))
    for (what, w), t in since.items():
        per[what][w].append((t, end))
    return spans, per


def coverage(events: list[Event]) -> Coverage:
    """Count every journaled SPI call of a campaign (see the module docstring)."""
    spans, per = _windows_of(events)
    cov = Coverage()
    open_calls: dict[tuple[str, str, Any], list[float]] = defaultdict(list)
    claimed_at: dict[tuple[str, str], float] = {}  # (worker, token) -> when it claimed
    paused_spans = [s for spans_ in per["paused"].values() for s in spans_]
    cut_spans = [s for spans_ in per["cut"].values() for s in spans_]

    def late(proc: str, token: Any, t: float, which: str) -> bool:
        """The call about a claim ``proc`` made before one of its pauses (or cuts) that
        was answered after that pause (or cut) ended."""
        start = claimed_at.get((proc, token))
        return start is not None and any(a >= start and b <= t for a, b in per[which][proc])

    for ev in sorted(events, key=lambda e: (e.get("proc", ""), e.get("seq", 0))):
        op = _OP_OF.get(ev.get("op", ""))
        if op is None:
            continue
        proc, token = ev.get("proc", ""), ev.get("token")
        key = (proc, op, token)
        if ev.get("type") == INVOKE:
            open_calls[key].append(ev["t"])
            continue
        if ev.get("type") not in _OUTCOME_OF:
            continue
        begun = open_calls[key].pop(0) if open_calls[key] else ev["t"]
        t = ev["t"]
        windows = [name for name, a, b in spans if a <= begun <= b or a <= t <= b]
        if any(a <= begun <= b for a, b in paused_spans):
            windows.append("worker paused")
        if late(proc, token, t, "paused"):
            windows.append("after a pause")
        if any(a <= begun <= b for a, b in cut_spans):
            windows.append("partitioned")
        if late(proc, token, t, "cut"):
            windows.append("after a cut")
        if any(begun <= c <= t for c in per["cuts"]):
            windows.append("connections cut")
        if proc in per["skewed"]:
            windows.append("skewed worker")
        outcome = _OUTCOME_OF[ev["type"]]
        cov.add(op, windows or [CALM], outcome)
        if op == "claim" and ev["type"] == OK:
            claims = ev.get("claims") or []
            for c in claims:
                claimed_at[(proc, c.get("token"))] = begun
            if any(c.get("reclaimed") for c in claims):
                cov.add("reclaim", windows or [CALM], outcome)
    for (_proc, op, _token), begun in open_calls.items():
        for _ in begun:  # never answered: the process died in the call
            cov.add(op, [CALM], "unknown")
    return cov


@dataclass(frozen=True)
class Requirement:
    """A fault's promise: ``rule`` is exercised in ``window`` (a :data:`WINDOWS` name, or
    ``"all"``), by a call of ``ops`` (default: what :data:`NEEDS` says of the rule)."""

    rule: str
    window: str
    ops: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.rule not in NEEDS:
            raise ValueError(f"no calls are known to exercise rule {self.rule!r}: add it to NEEDS")
        if self.window not in (*WINDOWS, "all"):
            raise ValueError(f"unknown fault window {self.window!r}: one of {WINDOWS} or 'all'")
        unknown = set(self.ops or ()) - set(OPS)
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}: use those of {OPS}")

    @property
    def need(self) -> Need:
        base = NEEDS[self.rule]
        return base if self.ops is None else Need(self.ops, " or ".join(self.ops))

    def met(self, cov: Coverage) -> bool:
        return self.need.met(cov, None if self.window == "all" else self.window)

    def describe(self) -> str:
        where = "anywhere" if self.window == "all" else f"in the {self.window!r} window"
        return f"{self.need.what} call (ok or refused) {where}"


def unexercised(
    cov: Coverage, rules: Iterable[str], required: Iterable[Requirement] = ()
) -> tuple[list[str], list[Requirement]]:
    """``(the rules that saw none of the calls they need, the requirements not met)``."""
    idle = [r for r in rules if r in NEEDS and not NEEDS[r].met(cov)]
    return idle, [r for r in dict.fromkeys(required) if not r.met(cov)]
