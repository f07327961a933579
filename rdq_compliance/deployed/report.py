"""A deployed campaign's report folder: ``results.json`` and ``report.md``.

``results.json`` holds everything: the system (name and version), the server and its
version, the profile (each setting's value, default and the docs line allowing it), the
scenario and seed, the plan and the faults as done (with the errors of those that could
not be), where the workers ran (a fleet's hosts, each with its measured clock), the
workers' exits, the drain, the counts by behaviour (planned, accepted, not enqueued) and
by final state, every planned job the client did not take with the reason, every execution
(its times as journalled, and in true time when its worker's clock was skewed), and
every verdict (rule, finding or gap, job, executions, workers, causes, the promise's id,
quote and link, the known-upstream issue that covers it, message), and the system's
known-upstream entries with what each covered. ``report.md`` says it for a reader: the
findings first (each with the promise it breaks, quoted and linked, the job, the
workers, the executions' times and the faults in play), then the findings confirmed
upstream (the issue linked) and the entries not seen, then the gaps (cited), then the
counts (the jobs not enqueued by reason, behaviour and key among them: never judged),
the faults and the exits. The folder also holds the workers' logs (``logs/``)
and probe journals (``probe/``). The DSN appears masked (:func:`rdq_core.masking.mask_dsn`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rdq_compliance.deployed.faults import true_time
from rdq_compliance.deployed.probe import Execution
from rdq_compliance.deployed.result import CampaignResult
from rdq_compliance.deployed.verdicts import Verdict
from rdq_core.masking import mask_dsn

__all__ = ["as_dict", "write"]


def _t(result: CampaignResult, t: float | None) -> float | None:
    """A time as seconds after the window opened (``t0``)."""
    return None if t is None else round(t - result.t0, 3)


def _execution(result: CampaignResult, x: Execution) -> dict[str, Any]:
    out = {
        "exec": x.exec, "job": x.job, "worker": x.worker, "pid": x.pid,
        "attempt": x.attempt, "started": _t(result, x.started), "ended": _t(result, x.ended),
        "outcome": x.outcome,
    }  # fmt: skip
    started, ended = _true(result, x)
    if started != x.started or ended != x.ended:  # read from a skewed clock
        out["true_started"], out["true_ended"] = _t(result, started), _t(result, ended)
    return out


def _true(result: CampaignResult, x: Execution) -> tuple[float, float | None]:
    """An execution's start and end in true time (a skewed worker's taken back)."""
    faults = result.faults
    ended = None if x.ended is None else true_time(x.worker, x.ended, faults)
    return true_time(x.worker, x.started, faults), ended


def _verdict(result: CampaignResult, v: Verdict) -> dict[str, Any]:
    runs = [x for x in result.executions if x.exec in v.executions]
    p = v.promise
    return {
        "rule": v.rule,
        "kind": v.kind,
        "job": v.job,
        "key": result.keys.get(v.job),
        "executions": [_execution(result, x) for x in runs],
        "workers": list(v.workers),
        "causes": list(v.causes),
        "promise": None if p is None else {"id": p.id, "quote": p.quote, "link": p.link},
        "known_upstream": None
        if v.upstream is None
        else {**v.upstream.as_json(), "mark": v.upstream.still_present()},
        "message": v.message,
    }


def _known_upstream(result: CampaignResult) -> list[dict[str, Any]]:
    """The system's known-upstream entries, each with what it covered in this campaign."""
    counts = Counter(id(v.upstream) for v in result.known)
    return [
        {
            **e.as_json(),
            "rules": list(e.rules),
            "pattern": e.pattern,
            "state": "still present" if counts[id(e)] else "not seen",
            "count": counts[id(e)],
        }
        for e in result.known_upstream
    ]


def as_dict(result: CampaignResult) -> dict[str, Any]:
    """Everything the campaign recorded, as ``results.json`` holds it (times of events are
    seconds after the window opened, ``t0`` the epoch time it opened)."""
    profile = result.profile
    nem = result.nemesis
    return {
        "system": result.system,
        "server": {
            "backend": result.server_backend,
            "origin": result.server_origin,
            "version": result.server_version,
            "dsn": result.dsn,
        },
        "profile": {
            "name": profile.name,
            "recovery_after": profile.recovery_after,
            "execution_limit": profile.execution_limit,
            "settings": [
                {
                    "name": s.name,
                    "value": s.value,
                    "default": s.default,
                    "allowed_by": s.allowed_by,
                    "changed": s.changed,
                }
                for s in profile.settings
            ],
        },
        "t0": result.t0,
        "plan": result.plan.as_dict(),
        "plan_lines": result.plan.lines(),
        "faults_done": [
            {
                "planned": asdict(d.planned),
                "kind": d.fault.kind,
                "start": _t(result, d.fault.start),
                "end": _t(result, d.fault.end),
                "targets": list(d.fault.targets),
                "part": d.fault.part,
                "pids": sorted(d.fault.pids) if d.fault.pids is not None else None,
                "offset": d.fault.offset,
                "late": round(d.late, 3),
                "took": round(d.took, 3),
                "detail": d.detail,
            }
            for d in nem.done
        ],
        "fault_errors": [
            {"planned": asdict(e.planned), "at": _t(result, e.at), "message": e.message}
            for e in nem.errors
        ],
        "healed": list(nem.healed),
        "workers": {
            "launch": result.launches,
            "exits": [
                {**asdict(e), "at": _t(result, e.at), "restarted": _t(result, e.restarted)}
                for e in result.exits
            ],
        },
        "accepted": [
            {
                "job": a.job,
                "key": result.keys.get(a.job),
                "at": _t(result, a.at),
                "retries": a.retries,
            }
            for a in result.accepted
        ],
        "refused": result.refused,
        "drain": {
            "bound": result.drain_bound,
            "ended_by": result.drain_ended_by,
            "ended": _t(result, result.drain.ended) if result.drain else None,
            "live": sorted(result.drain.live) if result.drain else [],
            "errors": result.drain_errors,
        },
        "final": {
            job: {"state": s.state, "words": s.words} for job, s in sorted(result.final.items())
        },
        "executions": [_execution(result, x) for x in result.executions],
        "torn": [asdict(t) for t in result.torn],
        "uncertainty": {"seconds": result.uncertainty, "why": result.uncertainty_note},
        "hosts": result.hosts,
        "host_losses": [
            {"worker": f.targets[0], "start": _t(result, f.start), "end": _t(result, f.end)}
            for f in result.host_losses
        ],
        "notes": result.notes,
        "counts": result.counts(),
        "verdicts": [_verdict(result, v) for v in result.verdicts],
        "known_upstream": _known_upstream(result),
        "error": result.error,
        "timings": result.timings,
    }


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.splitlines())


def _link(link: str) -> str:
    return f"<{link}>" if link.startswith(("http://", "https://")) else f"`{link}`"


def _verdict_md(result: CampaignResult, v: Verdict, n: int) -> list[str]:
    out = [f"### {n}. [{v.rule}] job `{v.job}` ({result.behaviour_of(v.job)})", ""]
    if v.promise is not None:
        verb = "breaks" if v.kind == "finding" else "is within"
        out += [f"It {verb} the promise `{v.promise.id}` ({_link(v.promise.link)}):", ""]
        out += [_quote(v.promise.quote), ""]
    else:
        out += ["No declared promise speaks to this rule.", ""]
    if v.upstream is not None:
        out += [
            f"Confirmed upstream: [{v.upstream.ref}]({v.upstream.url}) ({v.upstream.title}), "
            "still present.",
            "",
        ]
    out.append(f"- workers: {', '.join(v.workers) or 'none'}")
    for x in (x for x in result.executions if x.exec in v.executions):
        started, end = _true(result, x)
        ended = "no end line" if end is None else f"ended +{_t(result, end):.3f} s"
        skewed = " (true time; its clock was skewed)" if started != x.started else ""
        out.append(
            f"- execution `{x.exec[:12]}` on {x.worker} (pid {x.pid}, attempt {x.attempt}): "
            f"started +{_t(result, started):.3f} s, {ended}, {x.outcome or '-'}{skewed}"
        )
    causes = "; ".join(v.causes) or "none"
    out += [f"- faults in play: {causes}", "", "```text", v.message, "```", ""]
    return out


def _host_md(host: dict[str, object]) -> str:
    """One host of a fleet: its name and address, its workers, its measured clock."""
    offset, spread = host.get("offset"), host.get("uncertainty")
    clock = "not measured"
    if isinstance(offset, float) and isinstance(spread, float):
        clock = f"clock {offset * 1000:+.2f} ms ± {spread * 1000:.2f} ms"
    workers = host.get("workers")
    names = ", ".join(map(str, workers)) if isinstance(workers, list) else ""
    lost = "; lost during the campaign" if host.get("lost") else ""
    return f"{host.get('name')} ({host.get('url')}): workers {names or 'none'}; {clock}{lost}"


def markdown(result: CampaignResult) -> str:
    """``report.md``: findings, gaps, counts, faults, exits."""
    plan = result.plan
    out = [
        f"# Deployed campaign: {result.system}",
        "",
        f"- server: {result.server_backend}, {result.server_version or 'version not said'} "
        f"({result.server_origin}; `{result.dsn}`)",
        f"- profile: {result.profile.name}; scenario {plan.scenario.name}, seed {plan.seed}",
        f"- findings: {len(result.findings)}, confirmed upstream: {len(result.known)}, "
        f"gaps: {len(result.gaps)}",
        f"- jobs: {len(result.accepted)} of {len(plan.jobs)} planned accepted"
        + (
            f"; {len(result.refused)} not enqueued, never judged (see Counts)"
            if result.refused
            else ""
        ),
        f"- drain: {result.drain_ended_by}",
        f"- clock uncertainty: {result.uncertainty_note}",
        *[f"- host {_host_md(h)}" for h in result.hosts],
        *[
            f"- {f.targets[0]} ended with its lost host at +{_t(result, f.start):.3f} s; "
            "judged as killed then"
            for f in result.host_losses
        ],
        *[f"- {note}" for note in result.notes],
        "- times: +N s after the fault window opened; took "
        + ", ".join(f"{k} {v:g} s" for k, v in result.timings.items()),
        "",
    ]
    if result.error:
        out += [f"**Error:** {result.error}", ""]
    out += ["## Findings", ""]
    if not result.findings:
        out += ["None.", ""]
    for n, v in enumerate(result.findings, 1):
        out += _verdict_md(result, v, n)
    if result.known_upstream:
        out += [
            "## Confirmed upstream",
            "",
            "Findings the library's tracker already reports (known upstream, still present); "
            "they do not fail the campaign.",
            "",
        ]
        for n, v in enumerate(result.known, 1):
            out += _verdict_md(result, v, n)
        out += [
            f"- {e.ref} ({e.title}) <{e.url}>: not seen in this campaign" for e in result.not_seen()
        ]
        out.append("")
    out += ["## Gaps", ""]
    if not result.gaps:
        out += ["None.", ""]
    for n, v in enumerate(result.gaps, 1):
        out += _verdict_md(result, v, n)
    out += ["## Counts", ""]
    for what, counts in result.counts().items():
        out.append(f"- {what}: " + (", ".join(f"{k} {n}" for k, n in counts.items()) or "none"))
    out += [f"- {line}" for line in result.not_enqueued()]
    if result.torn:
        out.append(f"- torn probe lines: {len(result.torn)}")
    out += ["", "## Settings", ""]
    for s in result.profile.settings:
        line = f"- `{s.name}` = {s.value} (default {s.default})"
        out.append(line + (f"; allowed by: {s.allowed_by}" if s.changed else ""))
    out += ["", "## Plan", "", "```text", *plan.lines(), "```", "", "## Faults as done", ""]
    for d in result.nemesis.done:
        end = "never undone" if d.fault.end is None else f"+{_t(result, d.fault.end):.3f} s"
        out.append(
            f"- {d.planned.describe().strip()}: {d.fault.kind} of "
            f"{', '.join(d.fault.targets) or 'the server'} +{_t(result, d.fault.start):.3f} s "
            f"to {end} (late {d.late:.3f} s; {d.detail or 'done'})"
        )
    out += [f"- **error**: {e.message}" for e in result.nemesis.errors]
    out += ["", "## Worker exits", ""]
    for e in result.exits:
        again = (
            "not restarted"
            if e.restarted is None
            else f"restarted +{_t(result, e.restarted):.3f} s"
        )
        out.append(
            f"- {e.worker} (incarnation {e.incarnation}): status {e.code} at "
            f"+{_t(result, e.at):.3f} s, {e.cause}; {again}"
        )
    return "\n".join(out) + "\n"


def write(result: CampaignResult, secrets: Sequence[str] = ()) -> Path:
    """Write ``results.json`` and ``report.md`` into the result's folder; the folder.
    Each DSN of ``secrets`` that a library's error text may have quoted is written masked."""
    folder = result.outdir
    folder.mkdir(parents=True, exist_ok=True)

    def masked(text: str) -> str:
        for dsn in secrets:
            if mask_dsn(dsn) != dsn:
                text = text.replace(dsn, mask_dsn(dsn))
        return text

    data = json.dumps(as_dict(result), indent=2, default=str)
    (folder / "results.json").write_text(masked(data) + "\n", encoding="utf-8")
    (folder / "report.md").write_text(masked(markdown(result)), encoding="utf-8")
    return folder
