"""A deployed system's known-upstream entries: the findings its library's tracker
already reports (:class:`~rdq_compliance.known_upstream.KnownUpstream`).

A system lists them in its optional ``known_upstream`` attribute. In a deployed campaign
an entry covers findings by the deployed checker's rule ids (``rules``, at least one)
and an optional regular expression searched in the verdict's message (``pattern``); it
names no test (a campaign has none). A covered finding is reported as confirmed upstream
and does not fail the campaign (:func:`rdq_compliance.deployed.verdicts.mark_known`); an
entry that covered nothing is reported as not seen in that campaign, and fails nothing:
a campaign's faults are drawn by its seed, so one campaign without the behaviour does not
show the fix has landed.
"""

from __future__ import annotations

from collections.abc import Sequence

from rdq_compliance.deployed.system import DeployedSystem
from rdq_compliance.known_upstream import KnownUpstream, entries_from
from rdq_core.errors import InvalidArgument

__all__ = ["known_upstream_of", "problems"]


def known_upstream_of(system: DeployedSystem, rules: Sequence[str]) -> tuple[KnownUpstream, ...]:
    """``system``'s known-upstream entries, checked against ``rules`` (the deployed
    checker's rule ids); a bad entry raises ``InvalidArgument`` naming it and what to
    write instead."""
    declared = tuple(getattr(system, "known_upstream", ()) or ())
    where = f"{system.name}'s known_upstream"
    entries = entries_from(
        where, declared, rule_ids=tuple(rules), rules_name="the deployed checker's rules"
    )
    bad = [
        f"{e.ref}: names tests {list(e.tests)}; a deployed campaign has no tests: name the "
        f"deployed rules it covers (rules = [...], from {', '.join(rules)})"
        for e in entries
        if e.tests
    ]
    if bad:
        raise InvalidArgument(f"known-upstream ledger: {where}: " + "; ".join(bad))
    return entries


def problems(system: DeployedSystem, rules: Sequence[str]) -> list[str]:
    """What is wrong with ``system``'s known-upstream entries (empty when nothing is)."""
    try:
        known_upstream_of(system, rules)
    except InvalidArgument as exc:
        return [str(exc)]
    return []
