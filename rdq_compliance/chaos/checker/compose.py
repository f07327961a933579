"""Every rule at once: :func:`check`, the composition of the rule families (Jepsen's
``compose``), and :data:`RULES`, the rule ids it decides."""

from __future__ import annotations

import rdq_compliance.chaos.checker.endings as endings
import rdq_compliance.chaos.checker.exclusion as exclusion
import rdq_compliance.chaos.checker.numbering as numbering
import rdq_compliance.chaos.checker.outcomes as outcomes
import rdq_compliance.chaos.checker.storage_clock as storage_clock
from rdq_compliance.chaos.checker.engine import History, Rule, run
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Violation
from rdq_compliance.rules import RULES as _RULE_TEXTS

#: Every rule, in the order their violations are reported.
ALL: tuple[Rule, ...] = (
    exclusion.MUTUAL_EXCLUSION,
    exclusion.RECLAIM_AFTER_EXPIRY,
    exclusion.EXPIRIES_RECORDED,
    numbering.NUMBERING,
    numbering.EXECUTIONS,
    outcomes.FENCED,
    outcomes.OUTCOMES,
    endings.NOTHING_LOST,
    endings.DRAINED,
    endings.DLQ,
    endings.TERMINAL,
    endings.FINAL_STATUS,
    storage_clock.STORAGE_CLOCK_RULE,
)

#: The rules this checker decides, by id, with what each says (from ``rdq_compliance.rules``).
RULES: dict[str, str] = {
    rule: _RULE_TEXTS[rule]
    for family in (exclusion, numbering, outcomes, endings, storage_clock)
    for rule in family.RULE_IDS
}


def check(events: History, final: FinalState) -> list[Violation]:
    """Run every rule over a history and the final state; ``[]`` means the run passed.

    ``events`` is the whole history (all journals, e.g. from
    :func:`~rdq_compliance.chaos.events.read_history`) or its index. Linear in the
    number of events (plus a per-task sort of its claims).
    """
    return run(events, final, *ALL)
