"""What a rule reports, and what the checker answers.

A rule reports a :class:`Finding`, always made by :func:`finding`: the rule (its
declaration), the task, the claims involved (from which the workers, the tokens, the
events to show and the event to centre on follow) and what was seen. :func:`violations`
turns the findings of a check into :class:`Violation` objects, each with its message
(``[rule] what the rule says: what was seen``, :meth:`rdq_compliance.rule.Rule.message`)
and its timeline excerpt; :meth:`Violation.as_json` is the form the report writes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rdq_compliance.chaos.checker.format import excerpt, format_event, task_events
from rdq_compliance.chaos.checker.index import HistoryIndex, JournalClaim
from rdq_compliance.rule import Rule

__all__ = ["Finding", "Violation", "finding", "violations"]


@dataclass(frozen=True)
class Violation:
    """One broken rule: the rule id (see :mod:`rdq_compliance.rules`), the task, the
    workers (process names) and claim tokens involved, the message (``[rule] what the
    rule says: what was seen``) and the events of that task around it."""

    rule: str
    task: str | None
    workers: tuple[str, ...]
    tokens: tuple[str, ...]
    message: str
    excerpt: tuple[dict[str, Any], ...] = ()

    def __str__(self) -> str:
        lines = [self.message]
        if self.excerpt:
            lines.append(f"  timeline of task {self.task!r} (wall time, process, type, op):")
            lines.extend("    " + format_event(ev) for ev in self.excerpt)
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """Every field as JSON data (tuples as lists; an event value JSON cannot hold,
        as its ``str``)."""
        data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self), default=str))
        return data


@dataclass(frozen=True)
class Finding:
    """A violation before it is worded: see :func:`finding`."""

    rule: Rule
    task: str | None
    workers: tuple[str, ...]
    tokens: tuple[str, ...]
    detail: str
    focus: frozenset[str]  # the tokens whose events the excerpt shows (none: every event)
    anchor: int | None  # the event the violation is about (the excerpt centres on it)

    def violation(self, excerpt: tuple[dict[str, Any], ...]) -> Violation:
        head = f"task {self.task!r}" if self.task is not None else "the run"
        if self.workers:
            head += f"; workers {', '.join(self.workers)}"
        if self.tokens:
            head += f"; tokens {', '.join(self.tokens)}"
        return Violation(
            rule=self.rule.id,
            task=self.task,
            workers=self.workers,
            tokens=self.tokens,
            message=self.rule.message(f"{head}: {self.detail}"),
            excerpt=excerpt,
        )


def uniq(items: Iterable[str]) -> tuple[str, ...]:
    """``items`` without repeats, in first-seen order."""
    return tuple(dict.fromkeys(items))


def finding(
    rule: Rule,
    task: str | None,
    claims: Sequence[JournalClaim],
    detail: str,
    *,
    workers: Iterable[str] | None = None,
    anchor: int | None = None,
    whole_timeline: bool = False,
) -> Finding:
    """A finding of ``rule`` about ``task``, involving ``claims`` (in storage order).

    Its workers are the claims' processes (or ``workers``, when others are involved
    too), its tokens the claims' tokens; its excerpt shows the events of those tokens
    (every event of the task with ``whole_timeline``) and centres on ``anchor``, by
    default the last claim's event.
    """
    tokens = uniq(c.token for c in claims)
    return Finding(
        rule=rule,
        task=task,
        workers=uniq(c.proc for c in claims) if workers is None else uniq(workers),
        tokens=tokens,
        detail=detail,
        focus=frozenset() if whole_timeline else frozenset(tokens),
        anchor=anchor if anchor is not None else claims[-1].event if claims else None,
    )


def violations(ix: HistoryIndex, found: Sequence[Finding]) -> list[Violation]:
    """The findings worded, each with its timeline excerpt (one more pass over the
    history, only for the tasks named)."""
    positions = task_events(ix, {f.task for f in found if f.task is not None})
    return [
        f.violation(
            ()
            if f.task is None
            else excerpt(
                ix,
                positions[f.task],
                f.task,
                workers=f.workers,
                focus=f.focus,
                anchor=f.anchor,
            )
        )
        for f in found
    ]
