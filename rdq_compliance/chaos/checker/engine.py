"""How rules run over a history: what a :class:`Check` and a :class:`CheckerRule` are,
and :func:`run`.

A check (one public function of the checker, ``check_fencing``, ...: see :func:`runs`)
is a set of functions: **per task** (given the run's :class:`Context` and one task's
:class:`View`, they add their findings to a list) and/or **whole-run** (given the
context, they return findings). :func:`run` indexes the history once, builds each
claimed task's view once and runs every per-task function of every check on it before
dropping it, then the whole-run ones, and words the findings as violations, in the
order of the checks given.

A checker rule is declared once, as a :class:`CheckerRule` value in its module: its id,
its text, the checks that decide it and what exercises it. One check may decide several
rules (``check_mutual_exclusion`` reports ``one-claim`` and ``lease-respected``): each of
them names it.

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
from rdq_compliance.rule import Need, NoNeed, Rule

#: What the checker reads: the whole history (every journal), or its index.
History = Sequence[Event] | HistoryIndex

PerTask = Callable[[Context, View, list[Finding]], None]
Whole = Callable[[Context], list[Finding]]


#: What a public check is called with.
Signature = Callable[[History, FinalState], list[Violation]]


@dataclass(frozen=True)
class Check:
    """A public check of the checker (made by :func:`runs`): its ``name`` and docstring,
    and its functions, per task (on the task's view, built once for all checks) and/or
    whole-run. Calling it runs it alone over a history and a final state."""

    name: str
    doc: str
    per_task: tuple[PerTask, ...] = ()
    whole: tuple[Whole, ...] = ()

    def __post_init__(self) -> None:
        if not self.per_task and not self.whole:
            raise ValueError(f"the check {self.name} runs nothing")
        # a check reads as the function it stands for
        object.__setattr__(self, "__name__", self.name)
        object.__setattr__(self, "__doc__", self.doc)

    def __call__(self, events: History, final: FinalState) -> list[Violation]:
        return run(events, final, self)

    def __repr__(self) -> str:
        return f"<check {self.name}>"


def runs(
    *, per_task: tuple[PerTask, ...] = (), whole: tuple[Whole, ...] = ()
) -> Callable[[Signature], Check]:
    """Make the decorated function a :class:`Check`: its name and docstring (which say
    what it checks; its body is not run) with these functions. ``check(events, final)``
    runs them alone."""

    def make(declared: Signature) -> Check:
        return Check(declared.__name__, declared.__doc__ or "", per_task, whole)

    return make


@dataclass(frozen=True, kw_only=True)
class CheckerRule(Rule):
    """A rule the checker decides: a :class:`~rdq_compliance.rule.Rule` with the
    ``checks`` that decide it (in the order their violations are reported), which must
    say what exercises it (``needs``: a :class:`~rdq_compliance.rule.Need`, or a
    :class:`~rdq_compliance.rule.NoNeed` with the reason)."""

    checks: tuple[Check, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.needs, Need | NoNeed):
            raise TypeError(
                f"checker rule {self.id!r} must say what exercises it: needs=Need(...), "
                "or NoNeed(why) if no call does"
            )
        if not self.checks or not all(isinstance(c, Check) for c in self.checks):
            raise TypeError(f"checker rule {self.id!r} needs the checks that decide it")


def run(events: History, final: FinalState, *checks: Check) -> list[Violation]:
    """The violations ``checks`` find in ``events`` and ``final``, check by check."""
    # The checker makes no reference cycles, but allocates many small objects next to a
    # history of a million dicts: the cyclic collector would rescan that history again
    # and again (several times the checker's own cost). It is off while checking.
    enabled = gc.isenabled()
    gc.disable()
    try:
        ix = events if isinstance(events, HistoryIndex) else index_history(events)
        ctx = Context(ix, final)
        found: list[list[Finding]] = [[] for _ in checks]
        per_task = [(fn, found[i]) for i, c in enumerate(checks) for fn in c.per_task]
        if per_task:
            # One task at a time: its view is built, checked by every check, and dropped.
            for task_id, record in ix.tasks.items():
                if record.claims:
                    view = build_view(ctx, task_id, record)
                    for fn, out in per_task:
                        fn(ctx, view, out)
        for i, c in enumerate(checks):
            for whole in c.whole:
                found[i].extend(whole(ctx))
        return violations(ix, [f for out in found for f in out])
    finally:
        if enabled:
            gc.enable()
