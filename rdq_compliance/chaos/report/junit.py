"""``junit.xml`` of a campaign: one testcase per checker rule (the rule's violations as
its failure; skipped when the campaign made none of the calls it judges, failed when a
fault that happened required them; when a known-upstream entry covers every violation
of the rule, skipped as ``known-upstream`` with the mark ``known upstream, still present:
owner/name#N (title)`` and the violations), or one failed ``checker`` case if the checker
raised; and one failed case per known-upstream entry that named the campaign and covered
none of its violations (``known upstream owner/name#N no longer reproduces: ...``)."""

from __future__ import annotations

import html
import json
from typing import Any
from xml.sax.saxutils import quoteattr

from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.checker import RULES

__all__ = ["render_junit"]


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
        required = {r.rule: m for r, m in zip(result.unmet, result.unmet_messages(), strict=True)}
        for rule in rules:
            found = by_rule.get(rule, [])
            if not found and rule in required:
                failures += 1
                cases.append(
                    f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}>"
                    f"<failure message={quoteattr(required[rule])}/></testcase>"
                )
            elif not found and rule in result.not_exercised:
                cases.append(
                    f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}>"
                    '<skipped message="not exercised: the campaign made none of the calls '
                    'this rule judges"/></testcase>'
                )
            elif found and all("known_upstream" in v for v in found):
                text = "\n".join(json.dumps(v, default=str) for v in found)
                marks = "; ".join(dict.fromkeys(v["known_upstream"]["mark"] for v in found))
                cases.append(
                    f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}>"
                    f'<skipped type="known-upstream" message={quoteattr(marks)}>'
                    f"{html.escape(text)}</skipped></testcase>"
                )
            elif found:
                failures += 1
                text = "\n".join(json.dumps(v, default=str) for v in found)
                first = str(
                    next(v for v in found if "known_upstream" not in v).get("message", rule)
                )
                cases.append(
                    f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}>"
                    f"<failure message={quoteattr(first)}>{html.escape(text)}</failure>"
                    "</testcase>"
                )
            else:
                cases.append(f"<testcase classname={quoteattr(suite)} name={quoteattr(rule)}/>")
    for entry in result.upstream.gone() if result.upstream is not None else []:
        failures += 1
        name = quoteattr(f"known upstream {entry.ref}")
        cases.append(
            f"<testcase classname={quoteattr(suite)} name={name}>"
            f"<failure message={quoteattr(entry.gone())}/></testcase>"
        )
    skipped = sum("<skipped" in c for c in cases)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name={quoteattr(suite)} tests="{len(cases)}" failures="{failures}" '
        f'errors="0" skipped="{skipped}" time="{result.duration:.3f}">\n'
        + "\n".join(cases)
        + "\n</testsuite>\n"
    )
