"""The report folder of a chaos campaign.

::

    <out>/
      history/*.jsonl     the journals (one per worker process, and harness.jsonl)
      results.json        summary: scenario, seed, backend, counters, tasks, violations
      seed.txt            the seed and the exact command that replays the run
      final-state.jsonl   every enqueued task as the storage holds it at the end
      timeline.html       workers as lanes, claims as bars, faults marked (open it)
      junit.xml           one testcase per checker rule (or one failed "checker" case
                          if the checker raised)
      logs/*.log          each worker process's stderr

The timeline is one self-contained HTML file (inline SVG and CSS, no script needed):
a bar per claim from the claim to its outcome report (or to the process's death, or
to the lease given up), coloured by how it ended; kills, pauses, server restarts,
server freezes, connection cuts, redrives and clock skews (a band along the lane of a
worker whose clock was skewed, labelled with its offset and rate) marked; the claims
of tasks named by a violation outlined in red. It scrolls horizontally for long runs.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

from rdq_compliance.chaos.checker import RULES, FinalState
from rdq_compliance.chaos.events import Event
from rdq_compliance.chaos.results import CampaignResult, replay_command
from rdq_core.model import Task, micros_from_utc

REPORT_OPS = ("complete", "reschedule", "dead_letter")


# ---- violations as data -------------------------------------------------------------------


def _violation_tasks(violations: Iterable[dict[str, Any]]) -> tuple[set[str], set[str]]:
    tasks: set[str] = set()
    tokens: set[str] = set()
    for v in violations:
        if isinstance(v.get("task"), str):
            tasks.add(v["task"])
        for t in v.get("tasks") or []:
            tasks.add(str(t))
        for t in v.get("tokens") or []:
            tokens.add(str(t))
    return tasks, tokens


# ---- results.json, seed.txt, final-state.jsonl --------------------------------------------


def results_data(result: CampaignResult, violations: list[dict[str, Any]]) -> dict[str, Any]:
    sc = result.scenario
    return {
        "scenario": sc.name,
        "scenario_file": str(sc.source) if sc.source else None,
        "seed": result.seed,
        "backend": result.backend,
        "server": result.server_origin,
        "verdict": (
            "violations" if violations else "checker-error" if result.checker_error else "pass"
        ),
        "checked": result.checked,
        "checker_error": result.checker_error,
        "violations": violations,
        "duration_s": round(result.duration, 3),
        "fault_phase_s": round(result.fault_phase, 3),
        "drain_s": round(result.drain_time, 3),
        "drained": result.drained,
        "tasks": result.tasks,
        "counters": result.counters.as_dict(),
        "workers": {
            "count": sc.workers.count,
            "concurrency": sc.workers.concurrency,
            "lease_s": sc.workers.lease,
            "left_running": result.workers_left,
        },
        "plan": [dataclasses.asdict(f) for f in result.plan.faults],
        "skipped_faults": list(result.plan.skipped),
        "notes": list(result.counters.notes),
    }


def _task_json(task: Task) -> dict[str, Any]:
    def us(dt: Any) -> int | None:
        return None if dt is None else micros_from_utc(dt)

    return {
        "id": task.id,
        "handler": task.handler,
        "status": task.status.value,
        "attempt_count": task.attempt_count,
        "redrive_count": task.redrive_count,
        "next_attempt_at": us(task.next_attempt_at),
        "lease_expires_at": us(task.lease_expires_at),
        "attempts": [
            {
                "no": a.attempt_no,
                "started_at": us(a.started_at),
                "finished_at": us(a.finished_at),
                "outcome": a.outcome.value,
                "error": a.error.type if a.error else None,
            }
            for a in task.attempts
        ],
    }


# ---- the timeline -------------------------------------------------------------------------


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


@dataclass
class Mark:
    t: float
    kind: str
    target: str
    label: str
    end: float | None = None


def _skew_label(target: str, e: Event) -> str:
    offset, drift = e.get("offset"), e.get("drift")
    off = f"{offset:+.3f}s" if isinstance(offset, (int, float)) else "?"
    rate = f"x{drift:.4f}" if isinstance(drift, (int, float)) else "x?"
    return f"{target} clock skewed {off}, rate {rate} (libfaketime, slot {e.get('slot', '?')})"


def _proc_key(name: str) -> tuple[int, str]:
    m = re.fullmatch(r"w(\d+)", name)
    return (int(m.group(1)), name) if m else (1 << 30, name)


def build_timeline(events: list[Event]) -> tuple[list[str], list[Bar], list[Mark], float, float]:
    """Lanes (proc names), claim bars, fault marks, and the time span of the history."""
    bars: dict[tuple[str, str], Bar] = {}
    deaths: dict[str, float] = {}
    last_t: dict[str, float] = {}
    marks: list[Mark] = []
    pauses: dict[str, Mark] = {}
    server_down: Mark | None = None
    frozen: Mark | None = None
    failing: Mark | None = None
    cut_off: dict[str, Mark] = {}  # partitions not healed yet, by their slots
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
        elif op == "self_kill":
            deaths[proc] = t
            marks.append(Mark(t, "kill", proc, f"{proc} SIGKILLed itself at {e.get('point')}"))
        elif op == "fault":
            kind, target = e.get("kind"), str(e.get("target", ""))
            if kind == "kill":
                if e.get("by") == "self":
                    continue  # marked at its self_kill event
                deaths.setdefault(target, t)
                what = f" (armed for {e['armed']})" if e.get("armed") else ""
                marks.append(Mark(t, "kill", target, f"harness SIGKILLed {target}{what}"))
            elif kind == "pause":
                pauses[target] = Mark(
                    t, "pause", target, f"{target} SIGSTOPped for {e.get('duration', '?')}s"
                )
                marks.append(pauses[target])
            elif kind == "resume" and target in pauses:
                pauses.pop(target).end = t
            elif kind == "kill_server":
                server_down = Mark(t, "server", "server", "server killed")
                marks.append(server_down)
            elif kind == "restart_server" and server_down is not None:
                server_down.end = t
                server_down.label = "server killed, then restarted"
                server_down = None
            elif kind == "pause_server":
                frozen = Mark(
                    t, "freeze", "server", f"server frozen for {e.get('duration', '?')}s"
                )
                marks.append(frozen)
            elif kind == "resume_server" and frozen is not None:
                frozen.end = t
                frozen.label += ", then resumed"
                frozen = None
            elif kind == "cut_connections":
                marks.append(Mark(t, "cut", "server", f"connections cut ({e.get('count', '?')})"))
            elif kind == "failover":
                lag = e.get("replica_lag") or 0
                failing = Mark(
                    t,
                    "failover",
                    "server",
                    "failover: primary SIGKILLed"
                    + (f" after its replica lagged {lag}s" if lag else ""),
                )
                marks.append(failing)
            elif kind == "promoted" and failing is not None:
                failing.end = t
                failing.label += f", replica promoted ({e.get('promoted', '?')})"
                failing = None
            elif kind == "partition":
                key = str(e.get("slots"))
                cut_off[key] = Mark(
                    t,
                    "partition",
                    target,
                    f"{target} partitioned from the server for {e.get('duration', '?')}s",
                )
                marks.append(cut_off[key])
            elif kind == "loss":
                key = str(e.get("slots"))
                cut_off[key] = Mark(
                    t,
                    "loss",
                    target,
                    f"{target} losing {e.get('percent', '?')}% of their packets for "
                    f"{e.get('duration', '?')}s",
                )
                marks.append(cut_off[key])
            elif kind == "heal" and str(e.get("slots")) in cut_off:
                mark = cut_off.pop(str(e.get("slots")))
                mark.end = t
                mark.label += ", then healed"
            elif kind == "clock_skew":
                marks.append(Mark(t, "skew", target, _skew_label(target, e)))
        elif op == "redrive" and typ == "ok":
            marks.append(
                Mark(t, "redrive", "harness", f"redrive of {len(e.get('tasks') or [])} dead tasks")
            )
    for bar in bars.values():
        if bar.end is None:
            death = deaths.get(bar.proc)
            if death is not None and death >= bar.start:
                bar.end, bar.outcome = death, "killed"
            else:
                bar.end = last_t.get(bar.proc, bar.start)
    for mark in marks:
        if mark.kind == "skew":
            mark.end = max(mark.t, deaths.get(mark.target, last_t.get(mark.target, t_max)))
        spans = ("pause", "server", "freeze", "failover", "partition", "loss")
        if mark.kind in spans and mark.end is None:
            mark.end = t_max
    lanes = sorted(procs, key=_proc_key)
    return lanes, list(bars.values()), marks, t_min, t_max


_COLOURS = {
    "succeeded": "#2e9d4f",
    "rescheduled": "#e0a21b",
    "dead": "#c0392b",
    "refused": "#8e44ad",
    "unknown": "#7f8c8d",
    "killed": "#34495e",
    "lost": "#95a5a6",
    "open": "#bdc3c7",
}

_CSS = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px} h2{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}
.pass{color:#2e9d4f;font-weight:bold} .fail{color:#c0392b;font-weight:bold}
.warn{color:#b9770e;font-weight:bold}
.wrap{display:flex;border:1px solid #ccc;max-height:80vh;overflow-y:auto}
.labels{flex:none;background:#fafafa;border-right:1px solid #ccc}
.scroll{overflow-x:auto;flex:1}
.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
pre{background:#f6f6f6;padding:6px;max-height:240px;overflow:auto;font-size:11px}
"""


def _pack(bars: list[Bar]) -> dict[int, int]:
    """Sub-row of each bar within its lane (greedy interval packing)."""
    rows_end: list[float] = []
    out: dict[int, int] = {}
    for i, bar in sorted(enumerate(bars), key=lambda ib: ib[1].start):
        for r, end in enumerate(rows_end):
            if end <= bar.start:
                rows_end[r] = bar.end or bar.start
                out[i] = r
                break
        else:
            rows_end.append(bar.end or bar.start)
            out[i] = len(rows_end) - 1
    return out


def _show(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return json.dumps(value)


def render_timeline(
    events: list[Event],
    violations: list[dict[str, Any]],
    summary: dict[str, Any],
) -> str:
    """The self-contained timeline HTML."""
    lanes, bars, marks, t_min, t_max = build_timeline(events)
    bad_tasks, bad_tokens = _violation_tasks(violations)
    span = max(t_max - t_min, 1.0)
    pps = min(80.0, 60000.0 / span)  # pixels per second: scrollable, bounded
    width = int(span * pps) + 40
    row_h, bar_h, pad = 7, 5, 6
    by_lane: dict[str, list[Bar]] = {lane: [] for lane in lanes}
    for bar in bars:
        by_lane.setdefault(bar.proc, []).append(bar)
    lane_y: dict[str, tuple[int, int]] = {}
    y = 24
    packed: dict[str, dict[int, int]] = {}
    for lane in lanes:
        packed[lane] = _pack(by_lane[lane])
        rows = max(packed[lane].values(), default=0) + 1
        height = rows * row_h + 2 * pad
        lane_y[lane] = (y, height)
        y += height
    total_h = y + 10

    def x(t: float) -> float:
        return round((t - t_min) * pps + 10, 1)

    svg: list[str] = []
    step = next(s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600) if s * pps >= 60)
    tick = 0.0
    while tick <= span:
        svg.append(
            f'<line x1="{x(t_min + tick)}" y1="18" x2="{x(t_min + tick)}" '
            f'y2="{total_h}" stroke="#eee"/>'
        )
        svg.append(
            f'<text x="{x(t_min + tick) + 2}" y="12" font-size="10" fill="#666">{tick:.0f}s</text>'
        )
        tick += step
    for i, lane in enumerate(lanes):
        ly, lh = lane_y[lane]
        fill = "#fbfbfb" if i % 2 else "#ffffff"
        svg.append(f'<rect x="0" y="{ly}" width="{width}" height="{lh}" fill="{fill}"/>')
    for mark in marks:
        if mark.kind == "server" and mark.end is not None:
            svg.append(
                f'<rect x="{x(mark.t)}" y="18" width="{max(2, x(mark.end) - x(mark.t))}" '
                f'height="{total_h - 18}" fill="#000" opacity="0.12">'
                f"<title>{html.escape(mark.label)}</title></rect>"
            )
        elif mark.kind == "freeze" and mark.end is not None:
            svg.append(
                f'<rect x="{x(mark.t)}" y="18" width="{max(2, x(mark.end) - x(mark.t))}" '
                f'height="{total_h - 18}" fill="#5dade2" opacity="0.22">'
                f"<title>{html.escape(mark.label)}</title></rect>"
            )
        elif mark.kind == "failover" and mark.end is not None:
            svg.append(
                f'<rect x="{x(mark.t)}" y="18" width="{max(2, x(mark.end) - x(mark.t))}" '
                f'height="{total_h - 18}" fill="#9b59b6" opacity="0.25">'
                f"<title>{html.escape(mark.label)}</title></rect>"
            )
        elif mark.kind in ("partition", "loss") and mark.end is not None:
            colour = "#e67e22" if mark.kind == "partition" else "#d35400"
            opacity = "0.30" if mark.kind == "partition" else "0.15"
            for lane in mark.target.split(","):
                if lane not in lane_y:
                    continue
                ly, lh = lane_y[lane]
                svg.append(
                    f'<rect x="{x(mark.t)}" y="{ly}" width="{max(2, x(mark.end) - x(mark.t))}" '
                    f'height="{lh}" fill="{colour}" opacity="{opacity}">'
                    f"<title>{html.escape(mark.label)}</title></rect>"
                )
        elif mark.kind == "skew" and mark.target in lane_y and mark.end is not None:
            ly, lh = lane_y[mark.target]
            svg.append(
                f'<rect x="{x(mark.t)}" y="{ly}" width="{max(2, x(mark.end) - x(mark.t))}" '
                f'height="3" fill="#9b59b6" opacity="0.8">'
                f"<title>{html.escape(mark.label)}</title></rect>"
            )
            svg.append(
                f'<text x="{x(mark.t) + 2}" y="{ly + lh - 2}" font-size="8" fill="#9b59b6">'
                f"{html.escape(mark.label.split(' clock skewed ')[-1].split(',')[0])}"
                f"<title>{html.escape(mark.label)}</title></text>"
            )
        elif mark.kind == "pause" and mark.target in lane_y and mark.end is not None:
            ly, lh = lane_y[mark.target]
            svg.append(
                f'<rect x="{x(mark.t)}" y="{ly}" width="{max(2, x(mark.end) - x(mark.t))}" '
                f'height="{lh}" fill="#f1c40f" opacity="0.35">'
                f"<title>{html.escape(mark.label)}</title></rect>"
            )
    for lane in lanes:
        ly, _ = lane_y[lane]
        for i, bar in enumerate(by_lane[lane]):
            row = packed[lane][i]
            bx = x(bar.start)
            bw = max(1.5, x(bar.end or bar.start) - bx)
            by = ly + pad + row * row_h
            bad = bar.task in bad_tasks or bar.token in bad_tokens
            stroke = ' stroke="#ff0000" stroke-width="1.5"' if bad else ""
            tip = (
                f"{bar.task} attempt {bar.attempt_no} on {bar.proc}: {bar.outcome}"
                f"{' (reclaimed an expired lease)' if bar.reclaimed else ''}; token "
                f"{bar.token[:8]}; {bar.start - t_min:.3f}s → {(bar.end or bar.start) - t_min:.3f}s"
                + ("; " + "; ".join(bar.notes) if bar.notes else "")
            )
            svg.append(
                f'<rect x="{bx}" y="{by}" width="{round(bw, 1)}" height="{bar_h}" '
                f'fill="{_COLOURS.get(bar.outcome, "#999")}"{stroke}>'
                f"<title>{html.escape(tip)}</title></rect>"
            )
    for mark in marks:
        if mark.kind == "kill":
            ly, lh = lane_y.get(mark.target, (18, total_h - 18))
            mx = x(mark.t)
            svg.append(
                f'<line x1="{mx}" y1="{ly}" x2="{mx}" y2="{ly + lh}" stroke="#e74c3c" '
                f'stroke-width="2"><title>{html.escape(mark.label)}</title></line>'
            )
            svg.append(f'<text x="{mx + 2}" y="{ly + 9}" font-size="9" fill="#e74c3c">✕</text>')
        elif mark.kind == "cut":
            svg.append(
                f'<line x1="{x(mark.t)}" y1="18" x2="{x(mark.t)}" y2="{total_h}" '
                f'stroke="#2980b9" stroke-dasharray="4 3"><title>'
                f"{html.escape(mark.label)}</title></line>"
            )
        elif mark.kind == "redrive":
            svg.append(
                f'<path d="M{x(mark.t) - 4},16 L{x(mark.t) + 4},16 L{x(mark.t)},22 Z" '
                f'fill="#16a085"><title>{html.escape(mark.label)}</title></path>'
            )
    labels = [
        f'<text x="6" y="{lane_y[lane][0] + lane_y[lane][1] / 2 + 4}" font-size="11">'
        f"{html.escape(lane)}</text>"
        for lane in lanes
    ]
    legend = "".join(
        f'<span><i style="background:{c}"></i>{k}</span>' for k, c in _COLOURS.items()
    ) + (
        '<span><i style="background:#f1c40f;opacity:.5"></i>paused</span>'
        '<span><i style="background:#e74c3c"></i>SIGKILL</span>'
        '<span><i style="background:#2980b9"></i>connections cut</span>'
        '<span><i style="background:#16a085"></i>redrive</span>'
        '<span><i style="background:#000;opacity:.2"></i>server down</span>'
        '<span><i style="background:#5dade2;opacity:.4"></i>server frozen</span>'
        '<span><i style="background:#9b59b6;opacity:.45"></i>failover</span>'
        '<span><i style="background:#e67e22;opacity:.5"></i>partitioned</span>'
        '<span><i style="background:#d35400;opacity:.25"></i>losing packets</span>'
        '<span><i style="background:#9b59b6"></i>clock skewed (libfaketime)</span>'
        '<span><i style="border:2px solid red;width:8px;height:6px"></i>task in a violation</span>'
    )
    verdict = summary.get("verdict", "?")
    cls = {"pass": "pass", "violations": "fail", "checker-error": "fail"}.get(verdict, "warn")
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_show(v))}</td></tr>"
        for k, v in (
            ("backend", summary.get("backend")),
            ("server", summary.get("server")),
            ("seed", summary.get("seed")),
            ("duration", f"{summary.get('duration_s')}s"),
            ("tasks", summary.get("tasks")),
            ("kills", summary.get("counters", {}).get("kills")),
            ("pauses", summary.get("counters", {}).get("pauses")),
            ("server restarts", summary.get("counters", {}).get("server_restarts")),
            ("server freezes", summary.get("counters", {}).get("server_pauses")),
            ("failovers", summary.get("counters", {}).get("failovers")),
            ("connection cuts", summary.get("counters", {}).get("connection_cuts")),
            ("partitions", summary.get("counters", {}).get("partitions")),
            ("clock skews", summary.get("counters", {}).get("clock_skews")),
            ("redrives", summary.get("counters", {}).get("redrives")),
        )
    )
    vrows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v.get(k, '')))}</td>"
            for k in ("rule", "task", "workers", "message")
        )
        + f"<td><pre>{html.escape(json.dumps(v.get('excerpt'), indent=1, default=str))}"
        "</pre></td></tr>"
        for v in violations
    )
    vtable = (
        "<h2>Violations</h2><table><tr><th>rule</th><th>task</th><th>workers</th>"
        f"<th>message</th><th>excerpt</th></tr>{vrows}</table>"
        if violations
        else "<h2>Violations</h2><p>none found</p>"
    )
    notes = summary.get("notes") or []
    notes_html = (
        ("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
        if notes
        else ""
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>rdq chaos: {html.escape(str(summary.get('scenario')))} on "
        f"{html.escape(str(summary.get('backend')))}</title><style>{_CSS}</style></head><body>"
        f"<h1>rdq chaos — {html.escape(str(summary.get('scenario')))} on "
        f"{html.escape(str(summary.get('backend')))}: "
        f"<span class='{cls}'>{html.escape(verdict)}</span></h1>"
        f"<table>{rows}</table>{vtable}{notes_html}"
        f"<h2>Timeline</h2><div class='legend'>{legend}</div>"
        "<p>One lane per worker process; one bar per claim, from the claim to its outcome "
        "report (or the process's death, or the lease given up). Hover for details.</p>"
        f"<div class='wrap'><div class='labels'><svg width='60' height='{total_h}'>"
        f"{''.join(labels)}</svg></div><div class='scroll'>"
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{total_h}'>"
        f"{''.join(svg)}</svg></div></div></body></html>\n"
    )


# ---- junit.xml ----------------------------------------------------------------------------


def render_junit(result: CampaignResult, violations: list[dict[str, Any]]) -> str:
    suite = f"rdq-chaos.{result.scenario.name}.{result.backend}"
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for v in violations:
        by_rule.setdefault(str(v.get("rule", "unknown")), []).append(v)
    rules = list(RULES)
    for rule in by_rule:
        if rule not in rules:
            rules.append(rule)
    cases: list[str] = []
    failures = 0
    if result.checker_error:
        failures += 1
        cases.append(
            f'<testcase classname={quoteattr(suite)} name="checker">'
            f"<failure message={quoteattr(result.checker_error)}/></testcase>"
        )
    else:
        for rule in rules:
            found = by_rule.get(rule, [])
            if found:
                failures += 1
                text = "\n".join(json.dumps(v, default=str) for v in found)
                first = str(found[0].get("message", rule))
                cases.append(
                    f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}>"
                    f"<failure message={quoteattr(first)}>{html.escape(text)}</failure>"
                    "</testcase>"
                )
            else:
                cases.append(f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}/>")
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name={quoteattr(suite)} tests="{len(cases)}" failures="{failures}" '
        f'errors="0" skipped="0" time="{result.duration:.3f}">\n'
        + "\n".join(cases)
        + "\n</testsuite>\n"
    )


# ---- the folder ---------------------------------------------------------------------------


def write_report(
    result: CampaignResult,
    events: list[Event],
    final: FinalState,
    *,
    command: str | None = None,
) -> dict[str, str]:
    """Write the report files into ``result.outdir``; their paths by name."""
    out = result.outdir
    out.mkdir(parents=True, exist_ok=True)
    violations = [v.as_json() for v in result.violations]
    summary = results_data(result, violations)
    files = {
        "history": out / "history",
        "results": out / "results.json",
        "seed": out / "seed.txt",
        "final_state": out / "final-state.jsonl",
        "timeline": out / "timeline.html",
        "junit": out / "junit.xml",
    }
    replay = command or replay_command(result.scenario, result.backend, result.seed)
    summary["replay"] = replay
    files["results"].write_text(json.dumps(summary, indent=2, default=str) + "\n")
    files["seed"].write_text(f"{result.seed}\n# replay this run:\n{replay}\n")
    with files["final_state"].open("w") as fh:
        for task in final.tasks.values():
            fh.write(json.dumps(_task_json(task), separators=(",", ":")) + "\n")
        for task_id in final.missing:
            fh.write(json.dumps({"id": task_id, "status": "MISSING"}) + "\n")
    files["timeline"].write_text(render_timeline(events, violations, summary))
    files["junit"].write_text(render_junit(result, violations))
    return {k: str(v) for k, v in files.items()}
