"""How rules run over a history: what a :class:`Rule` is, and :func:`run`.

A rule is a set of checks: **per task** (given the run's :class:`Context` and one task's
:class:`View`, they add their findings to a list) and/or **whole-run** (given the
context, they return findings). :func:`run` indexes the history once, builds each
claimed task's view once and runs every per-task check of every rule on it before
dropping it, then the whole-run checks, and words the findings as violations, in the
order of the rules given.

Memory is proportional to claims and tokens. The cyclic garbage collector is paused
while checking: nothing here makes cycles, and rescanning a history of a million dicts
would cost more than the check.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, violations
from rdq_compliance.chaos.checker.index import HistoryIndex, index_history
from rdq_compliance.chaos.checker.view import Context, View, build_view
from rdq_compliance.chaos.events import Event

#: What the checker reads: the whole history (every journal), or its index.
History = Sequence[Event] | HistoryIndex

PerTask = Callable[[Context, View, list[Finding]], None]
Whole = Callable[[Context], list[Finding]]


@dataclass(frozen=True)
class Rule:
    """A rule's checks: per task (on its view, built once for all rules) and/or whole-run."""

    per_task: tuple[PerTask, ...] = ()
    whole: tuple[Whole, ...] = ()


def run(events: History, final: FinalState, *rules: Rule) -> list[Violation]:
    """The violations of ``rules`` in ``events`` and ``final``, rule by rule."""
    # The checker makes no reference cycles, but allocates many small objects next to a
    # history of a million dicts: the cyclic collector would rescan that history again
    # and again (several times the checker's own cost). It is off while checking.
    enabled = gc.isenabled()
    gc.disable()
    try:
        ix = events if isinstance(events, HistoryIndex) else index_history(events)
        ctx = Context(ix, final)
        found: list[list[Finding]] = [[] for _ in rules]
        per_task = [(fn, found[i]) for i, r in enumerate(rules) for fn in r.per_task]
        if per_task:
            # One task at a time: its view is built, checked by every rule, and dropped.
            for task_id, record in ix.tasks.items():
                if record.claims:
                    view = build_view(ctx, task_id, record)
                    for fn, out in per_task:
                        fn(ctx, view, out)
        for i, r in enumerate(rules):
            for whole in r.whole:
                found[i].extend(whole(ctx))
        return violations(ix, [f for out in found for f in out])
    finally:
        if enabled:
            gc.enable()
