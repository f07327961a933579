"""The checker's rule families each state the rules they decide, and together they are
the checker's ``RULES``. (Import directions across the whole project — no circle, the
checker imported, never looked up — are checked in ``tests/test_architecture.py``.)"""

from __future__ import annotations

import rdq_compliance.chaos.checker as checker


def test_each_rule_family_states_its_rules() -> None:
    """Every rule module's docstring names the rules it decides; together, in order,
    they are the checker's RULES."""
    from rdq_compliance.chaos.checker import (
        endings,
        exclusion,
        numbering,
        outcomes,
        storage_clock,
    )

    ids: list[str] = []
    for family in (exclusion, numbering, outcomes, endings, storage_clock):
        for rule in family.RULE_IDS:
            assert f"``{rule}``" in (family.__doc__ or ""), (family.__name__, rule)
        ids.extend(family.RULE_IDS)
    assert ids == list(checker.RULES)
