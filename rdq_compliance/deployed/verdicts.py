"""The deployed checker: verdicts over what a deployed campaign recorded.

It reads (a) the probe's executions (:mod:`rdq_compliance.deployed.probe`), (b) the
nemesis's faults (:mod:`rdq_compliance.deployed.faults`), (c) the accepted jobs (an
enqueue the library's client acknowledged, :class:`Accepted`) and (d) each job's final
state as the library reports it (:class:`~rdq_compliance.deployed.system.JobState`), with
the drain's end and the workers alive then (:class:`Drain`). :func:`judge` returns
:class:`Verdict` values under the rules of :data:`~rdq_compliance.deployed.rules.RULES`
(the contract's section 9).

Every time is compared in true time: a probe line's time from a skewed clock is taken
back by the skew's offset first, and two times closer than ``uncertainty`` seconds are
never ordered (nothing is judged on an order the clocks cannot tell).

An execution with no end line ran until the first kill that hit its process, else until
the drain's end.

Each verdict is a **finding** or a **gap**. The causes in play (the faults that touched
the workers concerned while it happened, and ``over-limit`` when an execution had run
past its time limit) are matched against the system's promises: a promise that
``tolerates`` the rule under one of those causes makes it a gap (within the documented
model), citing it; otherwise a promise that ``forbids`` the rule makes it a finding,
citing it; a rule no promise speaks to is a finding that cites none.

A finding that one of the system's known-upstream entries covers (:func:`mark_known`: its
rule among the entry's, the entry's pattern found in its message) stays a finding,
marked ``known upstream, still present: owner/name#N (title)``: the library's tracker
already reports it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from rdq_compliance.deployed.faults import Fault, true_time
from rdq_compliance.deployed.probe import Execution
from rdq_compliance.deployed.rules import (
    HANDED_OUT_WHILE_HELD,
    LOST,
    NEVER_RAN,
    RAN_AFTER_DONE,
    RULES,
    STUCK,
    SUPERSEDED_OUTCOME,
)
from rdq_compliance.deployed.system import JobState, Promise
from rdq_compliance.known_upstream import KnownUpstream
from rdq_compliance.rule import Rule

__all__ = [
    "RULES",
    "SETTLED",
    "Accepted",
    "Drain",
    "Verdict",
    "judge",
    "mark_known",
    "settled_unseen",
]

#: The final state each probe outcome makes, when it is the job's last word.
_MAKES = {"succeeded": "finished", "failed": "failed-for-good", "retry-asked": "failed-for-good",
          "held": "held"}  # fmt: skip
_UNKNOWN = JobState("unknown", "(not reported)")
#: The final states that end a job: the library has settled it.
SETTLED = frozenset({"finished", "failed-for-good", "held"})


@dataclass(frozen=True)
class Accepted:
    """A job whose enqueue the library's client acknowledged at ``at`` (true time): the
    retries it asked (``None``: the library's default) and its own time limit in seconds
    (``None``: the profile's)."""

    job: str
    at: float
    retries: int | None = None
    limit: float | None = None


@dataclass(frozen=True)
class Drain:
    """The end of the campaign's drain (true time) and the workers alive then."""

    ended: float
    live: frozenset[str]


@dataclass(frozen=True)
class Verdict:
    """A rule broken for one job: the executions and workers involved, whether it is a
    ``finding`` or a ``gap``, the promise it cites, the causes in play, and what was seen.
    :attr:`message` words it, ``[rule-id]`` first."""

    rule: str
    job: str
    kind: Literal["finding", "gap"]
    executions: tuple[str, ...]
    workers: tuple[str, ...]
    promise: Promise | None
    causes: tuple[str, ...]
    detail: str
    #: The known-upstream entry that covers this finding (:func:`mark_known`), if one does.
    upstream: KnownUpstream | None = None

    @property
    def message(self) -> str:
        if self.upstream is not None:
            return f"{self.plain}; {self.upstream.still_present()} <{self.upstream.url}>"
        return self.plain

    @property
    def plain(self) -> str:
        """The message without the known-upstream mark (what an entry's pattern searches)."""
        if self.promise is None:
            why = "finding: no declared promise speaks to it"
        elif self.kind == "finding":
            why = f"finding: breaks promise {self.promise.id!r} ({self.promise.link})"
        else:
            why = f"gap: within promise {self.promise.id!r} ({self.promise.link})"
        causes = f"; causes in play: {'; '.join(self.causes)}" if self.causes else ""
        workers = ", ".join(self.workers) or "none"
        text = f"job {self.job!r}, workers {workers}: {self.detail}{causes} -- {why}"
        return _BY_ID[self.rule].message(text)


_BY_ID = {r.id: r for r in RULES}


@dataclass(frozen=True)
class _Run:
    """An execution in true time; ``until``: its end, or when it stopped without one."""

    x: Execution
    start: float
    end: float | None
    until: float

    def describe(self) -> str:
        end = f"{self.end:.3f} {self.x.outcome}" if self.end is not None else "no end"
        return f"{self.x.exec} on {self.x.worker} (pid {self.x.pid}) {self.start:.3f}-{end}"


class _Judge:
    def __init__(
        self,
        faults: Sequence[Fault],
        promises: Sequence[Promise],
        drain: Drain,
        limit: float | None,
        uncertainty: float,
    ) -> None:
        self.faults = faults
        self.promises = promises
        self.drain = drain
        self.limit = limit
        self.u = uncertainty
        self.out: list[Verdict] = []

    def run(self, x: Execution) -> _Run:
        start = true_time(x.worker, x.started, self.faults)
        end = None if x.ended is None else true_time(x.worker, x.ended, self.faults)
        if end is not None:
            return _Run(x, start, end, end)
        kills = [f.start for f in self.faults if f.stops(x.worker, x.pid) and f.start >= start]
        return _Run(x, start, None, min(kills, default=self.drain.ended))

    def causes(self, workers: Iterable[str] | None, a: float, b: float) -> list[Fault]:
        """The faults that touched ``workers`` (``None``: any worker) during ``[a, b]``."""
        ws = None if workers is None else set(workers)
        return [
            f
            for f in self.faults
            if f.during(a - self.u, b + self.u)
            and (ws is None or f.kind in ("server-kill", "server-freeze") or ws & set(f.targets))
        ]

    def report(
        self,
        rule: Rule,
        job: str,
        runs: Sequence[_Run],
        faults: Iterable[Fault],
        detail: str,
        over_limit: bool = False,
    ) -> None:
        kinds = {f.kind for f in faults} | ({"over-limit"} if over_limit else set())
        kind: Literal["finding", "gap"] = "finding"
        promise = next(
            (p for p in self.promises if kinds & set(p.tolerates.get(rule.id, ()))), None
        )
        if promise is not None:
            kind = "gap"
        else:
            promise = next((p for p in self.promises if rule.id in p.forbids), None)
        words = [f.describe() for f in faults]
        if over_limit:
            words.append("an execution ran past its time limit")
        workers = tuple(dict.fromkeys(r.x.worker for r in runs))
        execs = tuple(r.x.exec for r in runs)
        causes = tuple(dict.fromkeys(words))
        self.out.append(Verdict(rule.id, job, kind, execs, workers, promise, causes, detail))

    def over(self, first: _Run, handed: float, limit: float | None) -> bool:
        """Whether ``first`` had run past ``limit`` when its job was handed out at ``handed``."""
        return limit is not None and handed >= first.start + limit - self.u


def mark_known(verdicts: Sequence[Verdict], entries: Sequence[KnownUpstream]) -> list[Verdict]:
    """``verdicts`` with each finding that an entry covers marked with it (the first entry,
    in declaration order, whose rules hold the finding's rule and whose pattern, if any,
    is found in its message). Gaps are never marked: they are within the documented
    model already."""
    out = []
    for v in verdicts:
        entry = None
        if v.kind == "finding":
            entry = next(
                (
                    e for e in entries
                    if v.rule in e.rules
                    and (e.pattern is None or re.search(e.pattern, v.plain) is not None)
                ),
                None,
            )  # fmt: skip
        out.append(v if entry is None else dataclasses.replace(v, upstream=entry))
    return out


def _runs_list(runs: Sequence[_Run]) -> str:
    return "; ".join(r.describe() for r in runs) or "none"


def judge(
    executions: Iterable[Execution],
    faults: Sequence[Fault],
    accepted: Sequence[Accepted],
    final: Mapping[str, JobState],
    promises: Sequence[Promise],
    drain: Drain,
    *,
    execution_limit: float | None = None,
    uncertainty: float = 0.0,
) -> list[Verdict]:
    """Every verdict over one deployed campaign, rule by rule (:data:`RULES` order), job
    by job. ``execution_limit``: the profile's time limit of an execution, seconds;
    ``uncertainty``: how far apart two times must be to be ordered, seconds."""
    if uncertainty < 0 or math.isnan(uncertainty):
        raise ValueError("uncertainty is a number of seconds >= 0")
    j = _Judge(faults, promises, drain, execution_limit, uncertainty)
    by_job: dict[str, list[_Run]] = defaultdict(list)
    for x in executions:
        by_job[x.job].append(j.run(x))
    for runs in by_job.values():
        runs.sort(key=lambda r: (r.start, r.x.exec))
    jobs = {a.job: a for a in accepted}
    order = list(dict.fromkeys([*jobs, *by_job]))
    for job in order:
        _lost(j, job, jobs.get(job), by_job.get(job, []), final.get(job, _UNKNOWN))
    for job in order:
        _never_ran(j, job, jobs.get(job), by_job.get(job, []), final.get(job, _UNKNOWN))
    for job in order:
        _ran_after_done(j, job, jobs.get(job), by_job.get(job, []), final.get(job, _UNKNOWN))
    for job in order:
        _handed_out(j, job, jobs.get(job), by_job.get(job, []))
    for job in order:
        _superseded(j, job, jobs.get(job), by_job.get(job, []), final.get(job, _UNKNOWN))
    for job in order:
        _stuck(j, job, jobs.get(job), by_job.get(job, []), final.get(job, _UNKNOWN))
    return j.out


def _workers(runs: Sequence[_Run]) -> list[str] | None:
    """The workers that ran a job; ``None`` (any worker) when none did."""
    return [r.x.worker for r in runs] or None


def _lost(j: _Judge, job: str, acc: Accepted | None, runs: list[_Run], final: JobState) -> None:
    if acc is None or final.state in ("finished", "failed-for-good", "held", "running"):
        return
    if any(r.x.outcome == "succeeded" for r in runs):
        return
    faults = j.causes(_workers(runs), acc.at, j.drain.ended)
    where = "still waiting" if final.state == "waiting" else "unknown to the library"
    j.report(
        LOST, job, runs, faults,
        f"accepted at {acc.at:.3f}, {where} at the end of the drain ({j.drain.ended:.3f}; "
        f"the library says {final.words!r}); executions: {_runs_list(runs)}",
    )  # fmt: skip


def settled_unseen(
    executions: Iterable[Execution], accepted: Sequence[Accepted], final: Mapping[str, JobState]
) -> list[Accepted]:
    """The accepted jobs the library settled (finished, failed for good or held) with no
    execution of them journalled: the probe never saw them start."""
    seen = {x.job for x in executions}
    return [
        a for a in accepted
        if a.job not in seen and final.get(a.job, _UNKNOWN).state in SETTLED
    ]  # fmt: skip


def _never_ran(
    j: _Judge, job: str, acc: Accepted | None, runs: list[_Run], final: JobState
) -> None:
    """A job the library settled that the probe never saw start: nothing the library did
    with it ran the handler, so the state it reports stands on no execution."""
    if acc is None or runs or final.state not in SETTLED:
        return
    faults = j.causes(None, acc.at, j.drain.ended)
    j.report(
        NEVER_RAN, job, runs, faults,
        f"accepted at {acc.at:.3f}, {final.state} by the end of the drain ({j.drain.ended:.3f}; "
        f"the library says {final.words!r}), yet no execution of it was journalled: the "
        "library settled it without the probe's handler ever starting it",
    )  # fmt: skip


def _done_by(acc: Accepted | None, runs: list[_Run], final: JobState) -> _Run | None:
    """The execution whose end the final state confirms: the one of the attempt the
    library says it kept (:attr:`JobState.attempt`) whose outcome makes that state; else
    the first success of a finished job, the first hold of a held one, and for a job
    failed for good the failure that used its last retry (the retries asked, else its
    last failure; an attempt the library ran twice counts once)."""
    ended = sorted((r for r in runs if r.end is not None), key=lambda r: (r.end, r.x.exec))
    if final.attempt is not None:
        kept = [
            r for r in ended
            if r.x.attempt == final.attempt and r.x.outcome is not None
            and _MAKES[r.x.outcome] == final.state
        ]  # fmt: skip
        if kept:
            return kept[0]
    if final.state in ("finished", "held"):
        want = "succeeded" if final.state == "finished" else "held"
        return next((r for r in ended if r.x.outcome == want), None)
    if final.state != "failed-for-good":
        return None
    failures = []
    counted: set[int] = set()
    for r in ended:
        if r.x.outcome not in ("failed", "retry-asked"):
            continue
        if r.x.attempt is not None:  # an attempt run twice (a duplicate) used one retry
            if r.x.attempt in counted:
                continue
            counted.add(r.x.attempt)
        failures.append(r)
    if not failures:
        return None
    if acc is not None and acc.retries is not None:
        return failures[acc.retries] if len(failures) > acc.retries else None
    return failures[-1]


#: What the handler did, in words, for each probe outcome that makes its job done.
_DID = {"succeeded": "its handler returned", "held": "its handler asked to hold the job"}


def _first_done(runs: list[_Run]) -> _Run | None:
    """The execution that ended first with an outcome that makes its job done
    (``succeeded`` or ``held``), whatever the final state says."""
    ended = [r for r in runs if r.end is not None and r.x.outcome in _DID]
    return min(ended, key=lambda r: (r.until, r.x.exec), default=None)


def _ran_after_done(
    j: _Judge, job: str, acc: Accepted | None, runs: list[_Run], final: JobState
) -> None:
    """Runs that start after the job was done: after the end of the execution the final
    state confirms (:func:`_done_by`), or of the first one that succeeded or was held
    (:func:`_first_done`) when that one ended earlier."""
    confirmed = _done_by(acc, runs, final)
    first = _first_done(runs)
    done = confirmed
    if first is not None and (confirmed is None or first.until < confirmed.until):
        done = first
    if done is None or done.end is None:
        return
    later = [r for r in runs if r is not done and r.start > done.end + j.u]
    if not later:
        return
    ws = {done.x.worker, *(r.x.worker for r in later)}
    faults = j.causes(ws, done.start, max(r.start for r in later))
    for r in later:
        faults += [f for f in _held_through(j, acc, r, done.start) if f not in faults]
    if done is confirmed:
        what = f"recorded {final.state} ({final.words!r}) by {done.describe()}"
    else:
        assert done.x.outcome is not None
        what = (
            f"{done.describe()} ({_DID[done.x.outcome]}; final state {final.state} "
            f"({final.words!r}))"
        )
    j.report(
        RAN_AFTER_DONE, job, [done, *later], faults,
        f"{what}, then ran again: {_runs_list(later)}",
    )  # fmt: skip


#: Faults a worker can hold a job through and run it after: a whole worker paused, or
#: cut off from the server. Its heartbeats stop, the library hands the job out again, and
#: the worker runs the copy it holds (fetched or prefetched) once it is back.
_HELD_THROUGH = frozenset({"pause", "cut", "partition"})


def _held_through(j: _Judge, acc: Accepted | None, later: _Run, since: float) -> list[Fault]:
    """The faults ``later``'s worker held the job through: of a kind in
    :data:`_HELD_THROUGH`, begun after the job was accepted and no later than ``since``
    (the start of the run ``later`` repeats: the worker had the job before that run
    began), and over before ``later`` started (a cut is an instant)."""
    begin = acc.at if acc is not None else float("-inf")
    return [
        f
        for f in j.causes([later.x.worker], begin, later.start)
        if f.kind in _HELD_THROUGH
        and begin - j.u <= f.start <= since + j.u
        and (f.start if f.kind == "cut" and f.end is None else f.until) <= later.start + j.u
    ]


def _limit(j: _Judge, acc: Accepted | None) -> float | None:
    return acc.limit if acc is not None and acc.limit is not None else j.limit


def _handed_out(j: _Judge, job: str, acc: Accepted | None, runs: list[_Run]) -> None:
    limit = _limit(j, acc)
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            span_end = min(a.until, b.until)
            if not (b.start < span_end - j.u):
                continue
            faults = j.causes([a.x.worker], a.start, span_end)
            faults += [
                f for f in j.causes([b.x.worker], a.start, span_end)
                if f.kind == "clock-skew" and f not in faults
            ]  # fmt: skip
            faults += [f for f in _held_through(j, acc, b, a.start) if f not in faults]
            over = j.over(a, b.start, limit)
            j.report(
                HANDED_OUT_WHILE_HELD, job, [a, b], faults,
                f"{b.describe()} started while {a.describe()} ran (until {a.until:.3f})",
                over_limit=over,
            )  # fmt: skip


def _superseded(
    j: _Judge, job: str, acc: Accepted | None, runs: list[_Run], final: JobState
) -> None:
    makers = [r for r in runs if r.x.outcome is not None and _MAKES[r.x.outcome] == final.state]
    if not makers:
        return
    superseding: dict[str, list[_Run]] = {}
    for x in makers:
        assert x.end is not None
        superseding[x.x.exec] = [
            y for y in runs if y is not x and x.start + j.u < y.start < x.end - j.u
        ]
    if not all(superseding.values()):
        return  # some execution that made the final state was never superseded
    limit = _limit(j, acc)
    involved: list[_Run] = []
    faults: list[Fault] = []
    over = False
    for x in makers:
        assert x.end is not None
        faults += [f for f in j.causes([x.x.worker], x.start, x.end) if f not in faults]
        first = min(y.start for y in superseding[x.x.exec])
        over = over or j.over(x, first, limit)
        involved += [r for r in (x, *superseding[x.x.exec]) if r not in involved]
    said = "; ".join(
        f"{x.describe()} superseded by {', '.join(y.x.exec for y in superseding[x.x.exec])}"
        for x in makers
    )
    j.report(
        SUPERSEDED_OUTCOME, job, involved, faults,
        f"final state {final.state} ({final.words!r}) comes only from executions whose job "
        f"was handed out again before they ended: {said}",
        over_limit=over,
    )  # fmt: skip


def _stuck(j: _Judge, job: str, acc: Accepted | None, runs: list[_Run], final: JobState) -> None:
    if final.state != "running":
        return
    live = [
        r for r in runs
        if r.x.worker in j.drain.live and r.start <= j.drain.ended + j.u
        and r.until >= j.drain.ended - j.u
    ]  # fmt: skip
    if live:
        return
    since = runs[0].start if runs else (acc.at if acc is not None else j.drain.ended)
    faults = j.causes(_workers(runs), since, j.drain.ended)
    alive = ", ".join(sorted(j.drain.live)) or "none"
    j.report(
        STUCK, job, runs, faults,
        f"still running ({final.words!r}) at the end of the drain ({j.drain.ended:.3f}) with no "
        f"live worker running it (alive: {alive}); executions: {_runs_list(runs)}",
    )  # fmt: skip
