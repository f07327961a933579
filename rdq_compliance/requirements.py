"""The names the ``rdq_requires`` and ``rdq_requires_fault`` markers accept
(``contract.md#5-capabilities``).

A test that needs more than a backend declares is skipped with the reason; a name the
kit does not know is an error, never a silent skip (``rdq_requires("multi_proces")``
would otherwise skip on every backend, for ever). The known names:

- capabilities: the boolean fields of :class:`rdq_core.model.Capabilities`, the names
  for which :meth:`~rdq_core.model.Capabilities.has` reads a declared flag (any other
  name it looks up in the backend's ``extra`` set, so a typo would simply be "not
  declared");
- faults: :data:`rdq_compliance.provision.FAULTS`.

Pure functions over marker names and arguments; the pytest plugin applies
:func:`check` to every collected test, before ``-k``/``-m`` deselect any.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from rdq_compliance.provision.backend import FAULTS
from rdq_core.model import Capabilities

#: The capability names ``rdq_requires`` accepts.
CAPABILITIES: frozenset[str] = frozenset(
    f.name for f in dataclasses.fields(Capabilities) if isinstance(f.default, bool)
)

#: Marker name -> (what its arguments name, the names it accepts).
MARKERS: dict[str, tuple[str, frozenset[str]]] = {
    "rdq_requires": ("capability", CAPABILITIES),
    "rdq_requires_fault": ("fault", FAULTS),
}

#: How many tests an error names per unknown name before it says "and N more".
_MAX_TESTS = 3


def unknown(marker: str, names: Sequence[object]) -> str | None:
    """What is wrong with ``@pytest.mark.<marker>(*names)``: the unknown names and the
    known ones, or ``None`` (also for a marker that is not one of :data:`MARKERS`)."""
    if marker not in MARKERS:
        return None
    kind, known = MARKERS[marker]
    bad = [n for n in names if not isinstance(n, str) or n not in known]
    if not bad:
        return None
    return (
        f"{marker}: unknown {kind} {', '.join(repr(n) for n in bad)}; "
        f"known {kind} names: {', '.join(sorted(known))}"
    )


def check(marks: Iterable[tuple[str, str, Sequence[object]]]) -> str | None:
    """One error message for every unknown name in ``(test id, marker, arguments)``
    triples, naming the tests that use it; ``None`` if every name is known."""
    tests: dict[str, list[str]] = {}
    for nodeid, marker, names in marks:
        problem = unknown(marker, names)
        if problem is not None and nodeid not in tests.setdefault(problem, []):
            tests[problem].append(nodeid)
    if not tests:
        return None
    lines = []
    for problem, ids in tests.items():
        more = len(ids) - _MAX_TESTS
        used = ", ".join(ids[:_MAX_TESTS]) + (f" and {more} more" if more > 0 else "")
        lines.append(f"rdq: {problem} (used by {used})")
    return "\n".join(lines)
