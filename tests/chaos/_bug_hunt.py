"""The bug classes the standard chaos suite hunts (``contract.md#8-bug-classes``): the
cases, one run, and how long each bug took to be found.

Used by ``test_chaos_finds_bugs.py`` (and so by ``benchmarks/chaos_bugs.py``, which runs
that test). A case is a broken multi-process backend of :mod:`tests.broken.sqlite` and the
checker rules that must name it (:mod:`tests.broken.catalogue`: its campaigns on the
standard scenario). :func:`hunt` provisions a private SQLite server, runs a scenario (the
standard one, unchanged, by default) through
:func:`~rdq_compliance.chaos.runner.run_campaign` and measures:

- **found after**: seconds from the campaign's start (``result.started_at``) to the
  moment the history first shows the bug, for the earliest violation of an expected
  rule — the checker only judges after the drain, but this is when the evidence was
  there. Per violation, that moment is (from the journals, whose times and the SQLite
  storage clock are the same host clock):

  - ``fencing``: the first acknowledged heartbeat or outcome of one of its tokens made
    after a later claim of the task (the stale call that got through); else as below;
  - ``drain-timeout``, ``drain-complete``: when the task left stuck became claimable
    and was never claimed again — its final ``lease_expires_at`` if IN_FLIGHT, its
    ``next_attempt_at`` if PENDING (``final-state.jsonl``);
  - ``no-loss``: the lease end of the task's last claim (heartbeats included): from then
    on it should have been reclaimed, and it was gone;
  - any other rule: when the last of its claim tokens was handed out (the second of two
    overlapping claims, the reclaim that stole a lease, ...);
  - when none of these is known: the end of the fault phase;

- **run time**: the whole campaign (enqueue, faults, drain, check, report), i.e. when
  the verdict is known.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.events import OK, Event, read_history
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import Scenario, load_scenario
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from tests.broken import catalogue
from tests.broken import sqlite as broken

MODULE = broken.__name__

#: Rules about a task left stuck: their moment is when it became claimable.
_STUCK_RULES = frozenset({"drain-timeout", "drain-complete"})
_REPORTS = frozenset({"heartbeat", "complete", "reschedule", "dead_letter"})


@dataclass(frozen=True)
class BugCase:
    """One bug class (its id): its broken backend and the rules that must name it."""

    bug_class: str
    attr: str  # attribute of tests.broken.sqlite
    rules: tuple[str, ...]  # the run must report at least one of these (first: the main one)
    breaks: str

    @property
    def backend_name(self) -> str:
        return f"{MODULE}:{self.attr}"


#: The sqlite variants the standard chaos suite must catch: the catalogue's.
CASES: tuple[BugCase, ...] = tuple(
    BugCase(variant.bug_class, variant.name, campaign.rules, variant.title)
    for variant, campaign in catalogue.cases(catalogue.Campaign, "sqlite", by=catalogue.STANDARD)
)


def case(bug_class: str) -> BugCase:
    return next(c for c in CASES if c.bug_class == bug_class)


# ---- when the history first shows a violation --------------------------------------------------


@dataclass
class _Timeline:
    """What the journals say about claims and acknowledged calls, with wall times."""

    minted: dict[str, float] = field(default_factory=dict)  # token -> claim ok time
    lease_end: dict[str, float] = field(default_factory=dict)  # token -> lease end (s)
    claims: dict[str, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))
    acks: dict[str, list[tuple[float, str]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, events: Iterable[Event]) -> _Timeline:
        tl = cls()
        for ev in events:
            if ev.get("type") != OK:
                continue
            op, t = ev.get("op"), float(ev.get("t", 0.0))
            if op == "claim":
                for c in ev.get("claims") or ():
                    token, task = c.get("token"), c.get("task")
                    if isinstance(token, str) and isinstance(task, str):
                        tl.minted.setdefault(token, t)
                        if isinstance(c.get("lease_expires_at"), int):
                            tl.lease_end[token] = c["lease_expires_at"] / 1e6
                        tl.claims[task].append((t, token))
            elif op in _REPORTS and isinstance(ev.get("token"), str):
                tl.acks[str(ev.get("task"))].append((t, ev["token"]))
                end = ev.get("lease_expires_at")
                if op == "heartbeat" and isinstance(end, int):
                    token = ev["token"]
                    tl.lease_end[token] = max(tl.lease_end.get(token, 0.0), end / 1e6)
        return tl

    def stale_ack(self, task: str, tokens: Iterable[str]) -> float | None:
        """The first acknowledged call of one of ``tokens`` made after a later claim."""
        mine = set(tokens)
        claims = sorted(self.claims.get(task, ()))
        best: float | None = None
        for t, token in self.acks.get(task, ()):
            if token not in mine or token not in self.minted:
                continue
            born = self.minted[token]
            if any(born < ct < t for ct, other in claims if other != token) and (
                best is None or t < best
            ):
                best = t
        return best

    def moment(self, v: Any, fallback: float, final: Mapping[str, dict[str, Any]]) -> float:
        tokens = [t for t in getattr(v, "tokens", ()) if t in self.minted]
        task = getattr(v, "task", None)
        if v.rule in _STUCK_RULES:
            row = final.get(task or "", {})
            due = row.get("lease_expires_at") or row.get("next_attempt_at")
            return due / 1e6 if isinstance(due, int) else fallback
        if v.rule == "no-loss":
            claims = sorted(self.claims.get(task, ())) if task else []
            if claims and claims[-1][1] in self.lease_end:
                return self.lease_end[claims[-1][1]]
            return fallback
        if v.rule == "fencing" and task:
            stale = self.stale_ack(task, getattr(v, "tokens", ()))
            if stale is not None:
                return stale
        return max((self.minted[t] for t in tokens), default=fallback)


def final_state(result: CampaignResult) -> dict[str, dict[str, Any]]:
    """The report's ``final-state.jsonl`` by task id (a task ``get()`` no longer found
    has status ``MISSING``)."""
    path = result.outdir / "final-state.jsonl"
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row["id"]: row for row in rows if isinstance(row, dict) and "id" in row}


@dataclass(frozen=True)
class Found:
    """The earliest violation of one rule, and when the history first showed it."""

    rule: str
    violation: Any
    at: float  # seconds since the epoch
    after: float  # seconds after the campaign started


def first_found(result: CampaignResult, rules: Iterable[str] | None = None) -> dict[str, Found]:
    """Per rule (of ``rules``, or every rule reported), its earliest violation."""
    wanted = None if rules is None else set(rules)
    events = read_history((result.outdir / "history").glob("*.jsonl"))
    tl = _Timeline.of(events)
    final = final_state(result)
    fallback = result.started_at + result.fault_phase
    out: dict[str, Found] = {}
    for v in result.violations:
        if wanted is not None and v.rule not in wanted:
            continue
        at = tl.moment(v, fallback, final)
        if v.rule not in out or at < out[v.rule].at:
            out[v.rule] = Found(v.rule, v, at, at - result.started_at)
    return out


# ---- one hunt ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hunt:
    case: BugCase
    result: CampaignResult
    found: dict[str, Found]  # the expected rules that fired, by rule
    by_rule: Mapping[str, int]  # every rule reported, with its count
    wall: float  # seconds, provisioning included

    @property
    def first(self) -> Found | None:
        """The earliest violation of an expected rule."""
        return min(self.found.values(), key=lambda f: f.at, default=None)

    def row(self) -> dict[str, str]:
        """One line of the report table."""
        first = self.first
        r = self.result
        return {
            "class": self.case.bug_class,
            "variant": self.case.attr,
            "rule fired": first.rule if first else "NOT FOUND",
            "violations": f"{len(r.violations)} ("
            + ", ".join(f"{k} {n}" for k, n in sorted(self.by_rule.items()))
            + ")",
            "found after": f"{first.after:.1f} s" if first else "-",
            "run time": f"{r.duration:.1f} s"
            + ("" if r.drained else f" (drain timed out after {r.drain_time:.0f} s)"),
        }


def hunt(bug: BugCase, workdir: Path, scenario: Scenario | None = None) -> Hunt:
    """Run ``scenario`` (default: the built-in standard one) against ``bug``'s backend on a
    fresh SQLite server under ``workdir``. Worker processes must be able to import
    :mod:`tests.broken.sqlite` (the checkout root on ``PYTHONPATH``:
    :func:`tests._paths.pythonpath`)."""
    scenario = scenario or load_scenario("standard")
    backend = getattr(broken, bug.attr)
    start = time.monotonic()
    settings = Settings(backend=bug.backend_name, docker=False)
    with Session(settings, backend=backend, workdir=workdir / "server") as session:
        result = run_campaign(scenario, session=session, outdir=workdir / "report")
    counts: dict[str, int] = defaultdict(int)
    for v in result.violations:
        counts[v.rule] += 1
    return Hunt(bug, result, first_found(result, bug.rules), dict(counts), time.monotonic() - start)


def run_line(result: CampaignResult, rules: Iterable[str]) -> dict[str, str]:
    """One run's figures, as ``benchmarks/partition_bug.py`` prints them: the earliest
    violation of one of ``rules`` (when the history first showed it), every violation by
    rule, the run's time."""
    found = first_found(result, rules)
    first = min(found.values(), key=lambda f: f.at, default=None)
    counts: dict[str, int] = defaultdict(int)
    for v in result.violations:
        counts[v.rule] += 1
    shown = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
    return {
        "rule fired": first.rule if first else "none (pass)",
        "violations": f"{len(result.violations)}{f' ({shown})' if shown else ''}",
        "found after": f"{first.after:.1f} s" if first else "-",
        "run time": f"{result.duration:.1f} s",
    }
