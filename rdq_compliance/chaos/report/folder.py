"""The report folder of a campaign: :func:`write_report` (the layout is in
:mod:`rdq_compliance.chaos.report`), and ``results.json``'s content,
:func:`results_data`."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rdq_compliance.chaos.campaign_result import CampaignResult, replay_command
from rdq_compliance.chaos.checker import RULES as CHECKER_RULES
from rdq_compliance.chaos.checker import FinalState
from rdq_compliance.chaos.events import Event
from rdq_compliance.chaos.report.html import render_timeline
from rdq_compliance.chaos.report.junit import render_junit
from rdq_compliance.known_upstream import STATE_NOT_SEEN, STATE_PRESENT
from rdq_core.model import Task, micros_from_utc

__all__ = ["known_upstream_data", "marked", "results_data", "rule_verdicts", "write_report"]


def results_data(result: CampaignResult, violations: list[dict[str, Any]]) -> dict[str, Any]:
    """``results.json``'s content. A violation a known-upstream entry covers carries
    ``known_upstream`` (the issue, its URL and title, and the mark ``known upstream, still
    present: owner/name#N (title)``); the verdict is ``known-upstream`` when every
    violation is so covered and nothing else failed, never ``pass``."""
    sc = result.scenario
    failing = [v for v in violations if "known_upstream" not in v]
    return {
        "scenario": sc.name,
        "scenario_file": str(sc.source) if sc.source else None,
        "seed": result.seed,
        "backend": result.backend,
        "server": result.server_origin,
        "verdict": (
            "violations"
            if failing
            else "checker-error"
            if result.checker_error
            else "not-exercised"
            if result.unmet
            else "known-upstream"
            if violations
            else "pass"
        ),
        "checked": result.checked,
        "checker_error": result.checker_error,
        "violations": violations,
        "known_upstream": known_upstream_data(result),
        "duration_s": round(result.duration, 3),
        "enqueue_s": round(result.enqueue_time, 3),
        "fault_phase_s": round(result.fault_phase, 3),
        "drain_s": round(result.drain_time, 3),
        "check_s": round(result.check_time, 3),
        "drained": result.drained,
        "tasks": result.tasks,
        "counters": result.counters.as_dict(),
        "workers": {
            "count": sc.workers.count,
            "concurrency": sc.workers.concurrency,
            "lease_s": sc.workers.lease,
            "left_running": result.workers_left,
            "hosts": result.hosts,
        },
        "plan": [dataclasses.asdict(f) for f in result.plan.faults],
        "skipped_faults": list(result.plan.skipped),
        "notes": list(result.counters.notes),
        "rules": rule_verdicts(result, violations),
        "unmet": [dataclasses.asdict(r) for r in result.unmet],
        "unmet_messages": result.unmet_messages(),
        "coverage": result.coverage.table() if result.coverage is not None else None,
    }


def rule_verdicts(result: CampaignResult, violations: list[dict[str, Any]]) -> dict[str, str]:
    """Each checker rule's verdict: ``violated``, ``not exercised (required)`` (a fault
    that happened promised calls it judges, and none came), ``known upstream, still
    present: owner/name#N (title)`` (every violation of it is one a known-upstream entry
    covers; after ``violated; `` when only some are), ``not exercised`` (it saw none of
    the calls it judges) or ``passed``."""
    broken = {str(v.get("rule")) for v in violations if "known_upstream" not in v}
    known: dict[str, list[str]] = {}
    for v in violations:
        if "known_upstream" in v and v["known_upstream"]["mark"] not in known.get(v["rule"], []):
            known.setdefault(str(v["rule"]), []).append(v["known_upstream"]["mark"])
    required = {r.rule for r in result.unmet}
    out: dict[str, str] = {}
    for rule in CHECKER_RULES:
        if rule in broken:
            out[rule] = "; ".join(["violated", *known.get(rule, [])])
        elif rule in known:
            out[rule] = "; ".join(known[rule])
        elif rule in required:
            out[rule] = "not exercised (required)"
        elif rule in result.not_exercised:
            out[rule] = "not exercised"
        else:
            out[rule] = "passed"
    return out


def known_upstream_data(result: CampaignResult) -> list[dict[str, Any]]:
    """Each known-upstream entry that covers the campaign's test: the issue, its state
    (``still present``, ``gone``: it named the campaign and covered nothing, ``not
    seen``: an entry by rules that covered nothing here) and what the report says."""
    if result.upstream is None:
        return []
    out = []
    for entry in result.upstream.scope.entries:
        state = result.upstream.state(entry)
        said = entry.still_present() if state == STATE_PRESENT else entry.gone()
        out.append(
            {
                **entry.as_json(),
                "state": state,
                "violations": result.upstream.count(entry),
                "says": said if state != STATE_NOT_SEEN else "no violation it covers here",
            }
        )
    return out


def marked(result: CampaignResult) -> list[dict[str, Any]]:
    """The violations as JSON, each a known-upstream entry covers with its mark."""
    out = []
    for i, v in enumerate(result.violations):
        data = v.as_json()
        entry = result.known(i)
        if entry is not None:
            data["known_upstream"] = {**entry.as_json(), "mark": entry.still_present()}
        out.append(data)
    return out


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
    violations = marked(result)
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
    files["timeline"].write_text(
        render_timeline(events, violations, summary, result.scenario.faults.families)
    )
    files["junit"].write_text(render_junit(result, violations))
    return {k: str(v) for k, v in files.items()}
