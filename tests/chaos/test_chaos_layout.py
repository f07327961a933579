"""The checker's rule families each state the rules they decide, and together they are
the checker's ``RULES``. (Import directions across the whole project — no circle, the
checker imported, never looked up — are checked in ``tests/test_architecture.py``.)"""

from __future__ import annotations

import rdq_compliance.chaos.checker as checker
from rdq_compliance.chaos.checker import compose


def test_each_rule_family_states_its_rules() -> None:
    """Every rule module's docstring names the rules it decides; together, in order,
    they are the checker's RULES."""
    ids: list[str] = []
    for family in compose.FAMILIES:
        declared = compose.declared_in(family)
        assert declared, family.__name__
        for rule in declared:
            assert f"``{rule.id}``" in (family.__doc__ or ""), (family.__name__, rule.id)
        ids.extend(rule.id for rule in declared)
    assert ids == list(checker.RULES)
