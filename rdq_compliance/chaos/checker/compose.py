"""Every rule at once: :func:`check`, the composition of the rule families (Jepsen's
``compose``), and :data:`RULES`, the rule ids it decides.

Everything here is derived from the rules' declarations: each rule family module
(:data:`FAMILIES`) declares its rules as :class:`~rdq_compliance.chaos.checker.engine.CheckerRule`
values, and a :class:`Composition` of them gives the rule list, the checks to run (each
once, in the order of the first rule that names it) and the public checks by name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

import rdq_compliance.chaos.checker.endings as endings
import rdq_compliance.chaos.checker.exclusion as exclusion
import rdq_compliance.chaos.checker.numbering as numbering
import rdq_compliance.chaos.checker.outcomes as outcomes
import rdq_compliance.chaos.checker.storage_clock as storage_clock
from rdq_compliance.chaos.checker.engine import Check, CheckerRule, History, run
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Violation

#: The rule families, in the order their rules are listed and their violations reported.
FAMILIES: tuple[ModuleType, ...] = (exclusion, numbering, outcomes, endings, storage_clock)


def declared_in(module: ModuleType) -> tuple[CheckerRule, ...]:
    """The rules ``module`` declares: its module-level
    :class:`~rdq_compliance.chaos.checker.engine.CheckerRule` values, in the order they
    are defined."""
    return tuple(dict.fromkeys(v for v in vars(module).values() if isinstance(v, CheckerRule)))


@dataclass(frozen=True)
class Composition:
    """Checker rules composed, in order (each id once)."""

    rules: tuple[CheckerRule, ...]

    def __post_init__(self) -> None:
        ids = [r.id for r in self.rules]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"checker rules declared twice: {twice}")
        names: dict[str, Check] = {}
        for c in self.checks:
            if names.setdefault(c.name, c) is not c:
                raise ValueError(f"two checks are named {c.name!r}")

    @classmethod
    def of(cls, modules: Iterable[ModuleType]) -> Composition:
        """The rules the ``modules`` declare, module by module."""
        return cls(tuple(r for m in modules for r in declared_in(m)))

    @property
    def checks(self) -> tuple[Check, ...]:
        """Every rule's checks, each once, in the order of the first rule naming it."""
        return tuple(dict.fromkeys(c for r in self.rules for c in r.checks))

    @property
    def texts(self) -> dict[str, str]:
        """Rule id -> what the rule says."""
        return {r.id: r.text for r in self.rules}

    @property
    def exports(self) -> dict[str, Check]:
        """The public checks by name (``check_fencing``, ...)."""
        return {c.name: c for c in self.checks}

    def check(self, events: History, final: FinalState) -> list[Violation]:
        """Run every check over a history and the final state (see :func:`check`)."""
        return run(events, final, *self.checks)


#: The checker: every rule of :data:`FAMILIES`.
CHECKER = Composition.of(FAMILIES)
#: Every checker rule's declaration, in order.
DECLARED: tuple[CheckerRule, ...] = CHECKER.rules
#: Every check, in the order their violations are reported.
ALL: tuple[Check, ...] = CHECKER.checks
#: The rules this checker decides, by id, with what each says.
RULES: dict[str, str] = CHECKER.texts
#: The public checks by name, as the package exports them.
CHECKS: dict[str, Check] = CHECKER.exports


def check(events: History, final: FinalState) -> list[Violation]:
    """Run every rule over a history and the final state; ``[]`` means the run passed.

    ``events`` is the whole history (all journals, e.g. from
    :func:`~rdq_compliance.chaos.events.read_history`) or its index. Linear in the
    number of events (plus a per-task sort of its claims).
    """
    return CHECKER.check(events, final)
