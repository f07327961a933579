"""The timeline page's coverage section: each checker rule's verdict (violated, passed,
not exercised) and the calls of the campaign by operation and fault window, from
``results.json``'s ``rules``, ``unmet`` and ``coverage``."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["coverage_section"]

_CLASS = {"violated": "fail", "not exercised (required)": "fail", "not exercised": "warn"}


def coverage_section(summary: dict[str, Any]) -> str:
    """The HTML of the section ("" when the summary has no coverage)."""
    table = summary.get("coverage")
    if not table:
        return ""
    verdicts = summary.get("rules") or {}
    rule_rows = "".join(
        f"<tr><td>{html.escape(rule)}</td>"
        f"<td class='{_class(state)}'>{html.escape(state)}</td></tr>"
        for rule, state in verdicts.items()
    )
    unmet = "".join(f"<li>{html.escape(m)}</li>" for m in summary.get("unmet_messages") or [])
    windows = [
        w
        for w in next(iter(table.values()))
        if w == "all" or any(sum(row[w].values()) for row in table.values())
    ]
    head = "".join(f"<th>{html.escape(w)}</th>" for w in windows)
    body = "".join(
        f"<tr><td>{html.escape(op)}</td>"
        + "".join(f"<td>{_cell(row[w])}</td>" for w in windows)
        + "</tr>"
        for op, row in table.items()
    )
    return (
        "<h2>Coverage</h2>"
        + (f"<p class='fail'>Required and not exercised:</p><ul>{unmet}</ul>" if unmet else "")
        + f"<table><tr><th>rule</th><th>verdict</th></tr>{rule_rows}</table>"
        "<p>Calls by operation and fault window: ok · refused · unknown (a call falls in "
        "every window it overlaps; <i>all</i> counts each call once).</p>"
        f"<table><tr><th>operation</th>{head}</tr>{body}</table>"
    )


def _class(state: str) -> str:
    """A verdict's colour: a rule violated (also beside known-upstream violations) fails;
    one whose every violation is known upstream warns, never passes."""
    if state.startswith("violated"):
        return "fail"
    if state.startswith("known upstream"):
        return "warn"
    return _CLASS.get(state, "pass")


def _cell(counts: dict[str, int]) -> str:
    if not any(counts.values()):
        return "—"
    return " · ".join(str(counts.get(k, 0)) for k in ("ok", "fail", "unknown"))
