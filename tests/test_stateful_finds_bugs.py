"""The stateful machine finds every SPEC §5 bug class, from scratch, and shrinks it.

For each deliberately broken backend of ``tests/rdq_broken_backends.py`` (one per SPEC §5
class and a few more), the machine of :mod:`rdq_compliance.stateful` runs **from
scratch** — no ``@example``, no example database, the ``ci`` profile's programs with a
bigger budget (``stateful_hunt.HUNT_EXAMPLES``), seed 0 — until it fails, and hypothesis
shrinks the failing program. The test checks that

(a) the machine fails, with a :class:`~rdq_compliance.stateful.StatefulViolation`
    (not a crash of the machine, not a ``Flaky``);
(b) the violation names the rule that class breaks;
(c) the broken code path actually ran (the broken store recorded a victim);
(d) the shrunk program has a few steps (``<= stateful_hunt.MAX_SHRUNK_STEPS``) and is
    printed (hypothesis's ``state.<rule>(...)`` lines).

The redrive → lease-expiry → reclaim numbering bug (§5.4, the original incident) is
found like the others: by generated programs, not a hand-written one.

The figures (examples and seconds to the first failure, shrunk length) are recorded as
test properties and in BENCHMARKS.md ("Stateful machine: bug classes found", produced
by ``python benchmarks/stateful_bugs.py``). Cost: about 2-5 s per class on an idle
machine (most of it shrinking), ~2 min in all.
"""

from __future__ import annotations

import pytest
import rdq_broken_backends as broken
import stateful_hunt as sh

from rdq_compliance.rules import RULES

pytestmark = pytest.mark.stateful


def test_every_broken_backend_is_hunted_or_excused():
    exposed = {n for n, v in vars(broken).items() if isinstance(v, broken.MemoryBackend)}
    hunted = {c.variant for c in sh.CASES}
    missing = sorted(exposed - hunted - set(sh.NOT_HUNTED))
    assert not missing, f"broken backends neither hunted nor excused: {missing}"
    unknown = {r for c in sh.CASES for r in c.rules} - set(RULES)
    assert not unknown, f"cases name rule ids rules.py does not define: {unknown}"


@pytest.mark.parametrize("case", sh.CASES, ids=str)
def test_machine_finds_and_shrinks_the_bug(case: sh.Case, record_property):
    hunt = sh.hunt(case)
    record_property("examples_to_find", hunt.examples_to_find)
    record_property("seconds_to_find", hunt.seconds_to_find)
    record_property("shrunk_steps", hunt.shrunk_steps)
    record_property("seconds_total", round(hunt.seconds_total, 2))
    where = f"{case.variant} ({case.bug_class})\n{hunt.describe()}"

    assert hunt.found, f"the machine did not find the bug in {sh.HUNT_EXAMPLES} examples: {where}"
    assert hunt.rule in case.rules, f"the violation names [{hunt.rule}], not {case.rules}: {where}"
    assert hunt.victims, f"the broken code path never ran: {where}"
    assert hunt.shrunk_steps is not None and hunt.shrunk_steps <= sh.MAX_SHRUNK_STEPS, (
        f"shrunk to {hunt.shrunk_steps} steps (at most {sh.MAX_SHRUNK_STEPS}): {where}"
    )
    assert any(line.startswith(("state.", "(claims_")) for line in hunt.program), (
        f"hypothesis printed no program: {where}"
    )
