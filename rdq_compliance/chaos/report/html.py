"""The timeline page of a campaign (``timeline.html``): one self-contained HTML file
(inline SVG and CSS, no script needed).

The verdict and the run's counts (a row per fault family's count), the violations (one
a known-upstream entry covers marked ``known upstream, still present: owner/name#N
(title)`` and linked to its issue), the known-upstream entries, the notes, then the
timeline (:mod:`rdq_compliance.chaos.report.timeline`): a lane per
worker process, a bar per claim from the claim to its outcome report (or to the
process's death, or to the lease given up), coloured by how it ended; each fault drawn
as its family's :class:`~rdq_compliance.chaos.faults.family.Style` says (a band across
the lanes while the server was down, frozen or failing over; a band on the lanes of a
paused or partitioned worker; a strip along a skewed worker's lane, labelled with its
offset; a cross where a worker was SIGKILLed; a dashed line where connections were cut;
a flag at a redrive), with the families' legend entries; the claims of tasks named by a
violation outlined in red. It scrolls horizontally for long runs.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from xml.sax.saxutils import quoteattr

from rdq_compliance.chaos.events import Event
from rdq_compliance.chaos.faults.combined import Families
from rdq_compliance.chaos.faults.display import report_rows
from rdq_compliance.chaos.faults.family import Mark, Style
from rdq_compliance.chaos.faults.registry import BUILTIN
from rdq_compliance.chaos.report.coverage_html import coverage_section
from rdq_compliance.chaos.report.timeline import Bar, build_timeline, lane_hosts

__all__ = ["render_timeline"]


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


#: Shapes drawn under the claim bars, and over them (see ``faults.family.SHAPES``).
_UNDER = ("band", "lanes", "strip")


class _Canvas:
    """Where the marks are drawn: the x of a time, the y and height of each lane."""

    def __init__(
        self, x: Callable[[float], float], lane_y: Mapping[str, tuple[int, int]], total_h: int
    ) -> None:
        self.x = x
        self.lane_y = lane_y
        self.total_h = total_h

    def width(self, mark: Mark) -> float:
        assert mark.end is not None
        return max(2, self.x(mark.end) - self.x(mark.t))

    def draw(self, mark: Mark, style: Style) -> list[str]:
        x, lane_y, total_h = self.x, self.lane_y, self.total_h
        title = f"<title>{html.escape(mark.label)}</title>"
        shape, colour, opacity = style.shape, style.colour, style.opacity
        if shape == "band" and mark.end is not None:
            return [
                f'<rect x="{x(mark.t)}" y="18" width="{self.width(mark)}" '
                f'height="{total_h - 18}" fill="{colour}" opacity="{opacity}">{title}</rect>'
            ]
        if shape == "lanes" and mark.end is not None:
            out = []
            for lane in mark.target.split(","):
                if lane not in lane_y:
                    continue
                ly, lh = lane_y[lane]
                out.append(
                    f'<rect x="{x(mark.t)}" y="{ly}" width="{self.width(mark)}" '
                    f'height="{lh}" fill="{colour}" opacity="{opacity}">{title}</rect>'
                )
            return out
        if shape == "strip" and mark.target in lane_y and mark.end is not None:
            ly, lh = lane_y[mark.target]
            return [
                f'<rect x="{x(mark.t)}" y="{ly}" width="{self.width(mark)}" '
                f'height="3" fill="{colour}" opacity="{opacity}">{title}</rect>',
                f'<text x="{x(mark.t) + 2}" y="{ly + lh - 2}" font-size="8" fill="{colour}">'
                f"{html.escape(mark.tag)}{title}</text>",
            ]
        if shape == "line":
            ly, lh = lane_y.get(mark.target, (18, total_h - 18))
            mx = x(mark.t)
            return [
                f'<line x1="{mx}" y1="{ly}" x2="{mx}" y2="{ly + lh}" stroke="{colour}" '
                f'stroke-width="2">{title}</line>',
                f'<text x="{mx + 2}" y="{ly + 9}" font-size="9" fill="{colour}">✕</text>',
            ]
        if shape == "rule":
            return [
                f'<line x1="{x(mark.t)}" y1="18" x2="{x(mark.t)}" y2="{total_h}" '
                f'stroke="{colour}" stroke-dasharray="4 3">{title}</line>'
            ]
        if shape == "flag":
            return [
                f'<path d="M{x(mark.t) - 4},16 L{x(mark.t) + 4},16 L{x(mark.t)},22 Z" '
                f'fill="{colour}">{title}</path>'
            ]
        return []


def render_timeline(
    events: list[Event],
    violations: list[dict[str, Any]],
    summary: dict[str, Any],
    families: Families = BUILTIN,
) -> str:
    """The self-contained timeline HTML."""
    lanes, bars, marks, t_min, t_max = build_timeline(events, families)
    hosts = lane_hosts(events)  # lanes grouped by host when the fleet spanned hosts
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
    host_y: list[tuple[str, int]] = []  # (host, y of its header)
    for lane in lanes:
        host = hosts.get(lane)
        if host is not None and (not host_y or host_y[-1][0] != host):
            host_y.append((host, y))
            y += 16
        packed[lane] = _pack(by_lane[lane])
        rows = max(packed[lane].values(), default=0) + 1
        height = rows * row_h + 2 * pad
        lane_y[lane] = (y, height)
        y += height
    total_h = y + 10

    def x(t: float) -> float:
        return round((t - t_min) * pps + 10, 1)

    canvas = _Canvas(x, lane_y, total_h)
    styled = [(m, families.styles[m.kind]) for m in marks if m.kind in families.styles]
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
    for host, hy in host_y:
        svg.append(
            f'<rect x="0" y="{hy}" width="{width}" height="16" fill="#e8eef7"/>'
            f'<text x="6" y="{hy + 12}" font-size="11" font-weight="bold">host '
            f"{html.escape(host)}</text>"
        )
    for mark, style in styled:
        if style.shape in _UNDER:
            svg += canvas.draw(mark, style)
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
    for mark, style in styled:
        if style.shape not in _UNDER:
            svg += canvas.draw(mark, style)
    labels = [
        f'<text x="6" y="{lane_y[lane][0] + lane_y[lane][1] / 2 + 4}" font-size="11">'
        f"{html.escape(lane)}</text>"
        for lane in lanes
    ] + [
        f'<text x="4" y="{hy + 12}" font-size="10" font-weight="bold">{html.escape(host)}</text>'
        for host, hy in host_y
    ]
    legend = (
        "".join(f'<span><i style="background:{c}"></i>{k}</span>' for k, c in _COLOURS.items())
        + "".join(f'<span><i style="{e.css}"></i>{e.label}</span>' for e in families.legend())
        + '<span><i style="border:2px solid red;width:8px;height:6px"></i>task in a violation'
        "</span>"
    )
    verdict = summary.get("verdict", "?")
    failing = ("violations", "checker-error", "not-exercised")
    cls = "pass" if verdict == "pass" else "fail" if verdict in failing else "warn"
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_show(v))}</td></tr>"
        for k, v in (
            ("backend", summary.get("backend")),
            ("server", summary.get("server")),
            ("seed", summary.get("seed")),
            *_fleet_row(summary),
            ("duration", f"{summary.get('duration_s')}s"),
            ("tasks", summary.get("tasks")),
            *report_rows(summary.get("counters", {}), families),
        )
    )
    vrows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v.get(k, '')))}</td>"
            for k in ("rule", "task", "workers", "message")
        )
        + _known_cell(v)
        + f"<td><pre>{html.escape(json.dumps(v.get('excerpt'), indent=1, default=str))}"
        "</pre></td></tr>"
        for v in violations
    )
    vtable = (
        "<h2>Violations</h2><table><tr><th>rule</th><th>task</th><th>workers</th>"
        f"<th>message</th><th>known upstream</th><th>excerpt</th></tr>{vrows}</table>"
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
        f"<table>{rows}</table>{vtable}{_upstream_list(summary)}{coverage_section(summary)}"
        f"{notes_html}"
        f"<h2>Timeline</h2><div class='legend'>{legend}</div>"
        "<p>One lane per worker process; one bar per claim, from the claim to its outcome "
        "report (or the process's death, or the lease given up). Hover for details.</p>"
        f"<div class='wrap'><div class='labels'><svg width='60' height='{total_h}'>"
        f"{''.join(labels)}</svg></div><div class='scroll'>"
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{total_h}'>"
        f"{''.join(svg)}</svg></div></div></body></html>\n"
    )


def _known_cell(violation: dict[str, Any]) -> str:
    """A violation's known-upstream mark, linked to the issue (empty: it fails the run)."""
    known = violation.get("known_upstream")
    if not known:
        return "<td></td>"
    return (
        f"<td class='warn'><a href={quoteattr(str(known['url']))}>"
        f"{html.escape(str(known['mark']))}</a></td>"
    )


def _upstream_list(summary: dict[str, Any]) -> str:
    """The known-upstream entries that covered the campaign, each with what it says."""
    entries = summary.get("known_upstream") or []
    if not entries:
        return ""
    items = "".join(
        f"<li><a href={quoteattr(str(e['url']))}>{html.escape(str(e['issue']))}</a> "
        f"({html.escape(str(e['title']))}): {html.escape(str(e['says']))}; "
        f"{int(e['violations'])} violation(s)</li>"
        for e in entries
    )
    return f"<h2>Known upstream</h2><ul>{items}</ul>"


def _fleet_row(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The hosts a remote fleet ran on, with their measured clocks (none: this machine)."""
    hosts = (summary.get("workers") or {}).get("hosts") or []
    if not hosts:
        return []
    return [
        (
            "workers on",
            "; ".join(
                f"{h.get('name')} ({h.get('url')}, clock {float(h.get('offset') or 0) * 1000:+.2f}"
                f" ± {float(h.get('uncertainty') or 0) * 1000:.2f} ms)"
                for h in hosts
            ),
        )
    ]
