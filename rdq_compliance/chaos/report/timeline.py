"""The timeline of a campaign's history: one lane per worker process, a :class:`Bar` per
claim, a :class:`~rdq_compliance.chaos.faults.family.Mark` per fault.

A bar runs from the claim to its outcome report (or to the process's death, or to the
lease given up), and says how it ended. The fault marks are drawn by the fault family
that journaled them (:meth:`~rdq_compliance.chaos.faults.family.FaultFamily.draw`); a
mark that lasts and was never closed (a pause not resumed before the history ends) runs
to the end of the history, a ``strip`` (a skewed clock) to its worker's death.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rdq_compliance.chaos.events import Event
from rdq_compliance.chaos.faults.combined import Families
from rdq_compliance.chaos.faults.family import SPANS, Mark, TimelineDraft
from rdq_compliance.chaos.faults.registry import BUILTIN

__all__ = ["REPORT_OPS", "Bar", "Mark", "build_timeline", "lane_hosts"]

REPORT_OPS = ("complete", "reschedule", "dead_letter")


@dataclass
class Bar:
    proc: str
    task: str
    token: str
    start: float
    end: float | None = None
    outcome: str = "open"  # succeeded|rescheduled|dead|refused|unknown|killed|lost|open
    attempt_no: int | None = None
    reclaimed: bool = False
    lease_expires_at: int | None = None
    notes: list[str] = field(default_factory=list)


def _proc_key(name: str) -> tuple[int, str]:
    m = re.fullmatch(r"w(\d+)", name)
    return (int(m.group(1)), name) if m else (1 << 30, name)


def lane_hosts(events: list[Event]) -> dict[str, str]:
    """Each worker's host, from the harness's ``host``/``placed`` events (a campaign whose
    workers ran on several hosts); empty when every worker ran on the runner's machine."""
    out: dict[str, str] = {}
    for e in events:
        if e.get("op") == "host" and e.get("kind") == "placed":
            target, host = e.get("target"), e.get("host")
            if isinstance(target, str) and isinstance(host, str):
                out[target] = host
    return out if set(out.values()) - {"local"} else {}


def build_timeline(
    events: list[Event], families: Families = BUILTIN
) -> tuple[list[str], list[Bar], list[Mark], float, float]:
    """Lanes (proc names), claim bars, fault marks, and the time span of the history."""
    bars: dict[tuple[str, str], Bar] = {}
    draft = TimelineDraft()
    last_t: dict[str, float] = {}
    procs: set[str] = set()
    times = [e["t"] for e in events if isinstance(e.get("t"), (int, float))]
    t_min = min(times, default=0.0)
    t_max = max(times, default=1.0)
    for e in sorted(events, key=lambda e: (e.get("t", 0.0), e.get("seq", 0))):
        proc, op, typ, t = e.get("proc", "?"), e.get("op"), e.get("type"), e.get("t", 0.0)
        if proc != "harness":
            procs.add(proc)
            last_t[proc] = t
        if op == "claim" and typ == "ok":
            for c in e.get("claims") or []:
                bars[(proc, c["token"])] = Bar(
                    proc,
                    c["task"],
                    c["token"],
                    t,
                    attempt_no=c.get("attempt_no"),
                    reclaimed=bool(c.get("reclaimed")),
                    lease_expires_at=c.get("lease_expires_at"),
                )
        elif op in REPORT_OPS and typ in ("ok", "fail", "info"):
            bar = bars.get((proc, e.get("token", "")))
            if bar is not None:
                bar.end = t
                if typ == "ok":
                    bar.outcome = {
                        "complete": "succeeded",
                        "reschedule": "rescheduled",
                        "dead_letter": "dead",
                    }[op]
                elif typ == "fail":
                    bar.outcome = "refused"
                    bar.notes.append(f"{op} refused (stale)")
                else:
                    bar.outcome = "unknown"
                    bar.notes.append(f"{op}: {e.get('error', 'unknown')}")
        elif op == "heartbeat" and typ == "fail":
            bar = bars.get((proc, e.get("token", "")))
            if bar is not None:
                bar.notes.append("late heartbeat refused")
        elif op == "lease_lost":
            bar = bars.get((proc, e.get("token", "")))
            if bar is not None:
                bar.notes.append("lease lost")
                if bar.end is None:
                    bar.end, bar.outcome = t, "lost"
        elif (family := families.drawer(e)) is not None:
            family.draw(e, draft)
    deaths = draft.deaths
    for bar in bars.values():
        if bar.end is None:
            death = deaths.get(bar.proc)
            if death is not None and death >= bar.start:
                bar.end, bar.outcome = death, "killed"
            else:
                bar.end = last_t.get(bar.proc, bar.start)
    for mark in draft.marks:
        style = families.styles.get(mark.kind)
        shape = style.shape if style is not None else None
        if shape == "strip":
            mark.end = max(mark.t, deaths.get(mark.target, last_t.get(mark.target, t_max)))
        elif shape in SPANS and mark.end is None:
            mark.end = t_max
    hosts = lane_hosts(events)
    first_seen = dict.fromkeys(hosts[p] for p in sorted(hosts, key=_proc_key))
    order = {h: i for i, h in enumerate(first_seen)}
    lanes = sorted(
        procs, key=lambda p: (order.get(hosts.get(p, ""), len(order)), _proc_key(p))
    )
    return lanes, list(bars.values()), draft.marks, t_min, t_max
