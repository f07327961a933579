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
- **fault windows**: the windows the campaign's fault families declare they open
  (``FaultFamily.windows``, read from the harness's ``fault`` events; the shapes are in
  :mod:`rdq_compliance.chaos.faults.windows`), by default the built-in families'
  (:data:`WINDOWS`), ordered by rank; a call is counted in every window it falls in, and
  in ``calm`` when it falls in none.

Each checker rule declares what exercises it (its ``needs``, collected in :data:`NEEDS`:
some of these calls ended ok or refused); :func:`unexercised` lists the rules that saw
none, and a scenario's faults say in which windows their rules must be exercised
(``FaultFamily.exercises``), so that a run that never got there fails instead of passing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdq_compliance.chaos.events import FAIL, INFO, INVOKE, OK, Event
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.faults.windows import NEEDS, Call, Requirement, Window, ordered
from rdq_compliance.rule import OPS, Need, Rule

__all__ = [
    "NEEDS",
    "OPS",
    "WINDOWS",
    "Coverage",
    "Need",
    "Requirement",
    "coverage",
    "unexercised",
    "window_names",
]

CALM = "calm"
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


def window_names(windows: Iterable[Window]) -> tuple[str, ...]:
    """``calm``, then the names of ``windows`` by rank."""
    return (CALM, *(name for w in ordered(windows) for name in w.names))


#: The windows of the built-in fault families (``calm`` first).
WINDOWS = window_names(BUILTIN.windows())


@dataclass
class Coverage:
    """Calls by (operation, window, outcome), in ``windows``."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    windows: tuple[str, ...] = WINDOWS

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
            for w in (*self.windows, "all"):
                key = "*" if w == "all" else w
                row[w] = {o: self.counts.get((op, key, o), 0) for o in OUTCOMES}
            out[op] = row
        return out


def coverage(events: list[Event], windows: Sequence[Window] | None = None) -> Coverage:
    """Count every journaled SPI call of a campaign (see the module docstring), in the
    fault ``windows`` (default: the built-in families', ``BUILTIN.windows()``)."""
    declared = ordered(BUILTIN.windows() if windows is None else windows)
    faults = sorted((e for e in events if e.get("op") == "fault"), key=lambda e: e["t"])
    end = max((e["t"] for e in events), default=0.0) + 1.0
    trackers = [w.track(faults, end) for w in declared]
    cov = Coverage(windows=window_names(declared))
    open_calls: dict[tuple[str, str, Any], list[float]] = defaultdict(list)
    claimed_at: dict[tuple[str, str], float] = {}  # (worker, token) -> when it claimed

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
        call = Call(proc, token, begun, ev["t"], claimed_at.get((proc, token)))
        windows_in = [name for track in trackers for name in track(call)]
        outcome = _OUTCOME_OF[ev["type"]]
        cov.add(op, windows_in or [CALM], outcome)
        if op == "claim" and ev["type"] == OK:
            claims = ev.get("claims") or []
            for c in claims:
                claimed_at[(proc, c.get("token"))] = begun
            if any(c.get("reclaimed") for c in claims):
                cov.add("reclaim", windows_in or [CALM], outcome)
    for (_proc, op, _token), begun in open_calls.items():
        for _ in begun:  # never answered: the process died in the call
            cov.add(op, [CALM], "unknown")
    return cov


def unexercised(
    cov: Coverage, rules: Iterable[str | Rule], required: Iterable[Requirement] = ()
) -> tuple[list[str], list[Requirement]]:
    """``(the rules that saw none of the calls they need, the requirements not met)``.

    ``rules``: rule ids (what exercises each is in :data:`NEEDS`) or declarations (each
    says it); a rule no call exercises is never idle."""
    idle = []
    for rule in rules:
        rule_id, needs = (rule, NEEDS.get(rule)) if isinstance(rule, str) else (rule.id, rule.needs)
        if isinstance(needs, Need) and not needs.met(cov):
            idle.append(rule_id)
    return idle, [r for r in dict.fromkeys(required) if not r.met(cov)]
