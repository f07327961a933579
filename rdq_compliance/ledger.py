"""The expected-failure ledger: a backend's known gaps, declared, never hidden
(``contract.md#7-the-ledger``).

An entry maps a **rule id** (every suite test that says it checks the rule: its docstring
opens ``Rule <id>``) or a **test id** (a test's name ``test_x``, its name with parameters
``test_x[param]``, or its node id ``path/test_mod.py::test_x[param]``, or the tail of one
such as ``test_mod.py::test_x``) to the reason the backend is known to fail it. Entries
come from the backend object (:attr:`Backend.expected_failures
<rdq_compliance.provision.backend.Backend.expected_failures>`) and from
``[tool.rdq.expected-failures]`` / ``[tool.rdq.<backend>.expected-failures]`` in
``pyproject.toml``; for one test, a test-id entry wins over a rule entry.

The tests an entry covers still run. A failure is reported as an expected failure with
the reason. Strictness (either way the ledger must change): a test under a test-id entry
that passes fails the run; a rule entry is strict as a whole — its tests that the gap does
not touch may pass, but once none of them fails the entry is stale and the run fails
(:meth:`rdq_compliance.run_summary.Summary.stale_rule_entries`); a failure that names a
rule no rule entry names — instead of the entry's or beside it — is a failure too (a new
regression must not hide behind an old gap:
:func:`rdq_compliance.pytest_report.not_covered`). An entry that is neither a known rule
id nor any test's id is a usage error listing the close matches. Pure: no pytest here;
the plugin applies what :meth:`Ledger.entry_for` says.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rdq_compliance.rules import RULES
from rdq_core.errors import InvalidArgument

__all__ = ["Entry", "Ledger", "TestRef", "close_matches", "test_names"]


@dataclass(frozen=True)
class TestRef:
    """How the ledger sees one test: its ids and the rules it declares."""

    __test__ = False  # not a pytest test class

    nodeid: str
    name: str
    function: str
    rules: tuple[str, ...] = ()

    def matches(self, key: str) -> bool:
        """Whether ``key`` is one of this test's ids."""
        if key in (self.nodeid, self.name, self.function):
            return True
        return "::" in key and f"/{self.nodeid}".endswith(f"/{key}")


@dataclass(frozen=True)
class Entry:
    """One known gap: the rule or test id, the reason, and where it was declared."""

    key: str
    reason: str
    source: str
    is_rule: bool

    def describe(self) -> str:
        what = f"rule {self.key}" if self.is_rule else self.key
        return f"{what}: {self.reason} (expected-failure ledger, {self.source})"


class Ledger:
    """The entries of every source, checked against the rules and tests the kit knows."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self.entries: tuple[Entry, ...] = tuple(entries)

    @classmethod
    def from_sources(cls, sources: Iterable[tuple[str, Mapping[str, str]]]) -> Ledger:
        """Entries from ``(where declared, {id: reason})`` pairs; later sources override."""
        merged: dict[str, Entry] = {}
        for where, table in sources:
            for key, reason in table.items():
                if not isinstance(reason, str) or not reason.strip():
                    raise InvalidArgument(
                        f"expected-failure ledger ({where}): {key!r} needs a reason, "
                        f"a non-empty string (got {reason!r})"
                    )
                merged[key] = Entry(key, reason.strip(), where, key in RULES)
        return cls(merged.values())

    def __bool__(self) -> bool:
        return bool(self.entries)

    def check(self, tests: Iterable[TestRef], more_names: Iterable[str] = ()) -> None:
        """Raise ``InvalidArgument`` naming every entry that is neither a rule id nor one
        of ``tests``' ids (``more_names``: test names known though not collected in this
        run), with the close matches of each."""
        tests = list(tests)
        names = test_names(tests, more_names)
        problems = []
        for entry in self.entries:
            if entry.is_rule or entry.key in names or any(t.matches(entry.key) for t in tests):
                continue
            close = close_matches(entry.key, names | set(RULES))
            hint = f"; close matches: {', '.join(close)}" if close else ""
            problems.append(
                f"{entry.key!r} ({entry.source}) is neither a rule id nor a test of this run{hint}"
            )
        if problems:
            raise InvalidArgument(
                "expected-failure ledger: "
                + "; ".join(problems)
                + ". An entry is a rule id (see rdq_compliance.rules.RULES) or a test id "
                "(test_name, test_name[param] or path/test_mod.py::test_name[param])."
            )

    def entry_for(self, test: TestRef) -> Entry | None:
        """The entry covering ``test``: a test-id entry first, else one of its rules'."""
        for entry in self.entries:
            if not entry.is_rule and test.matches(entry.key):
                return entry
        for entry in self.entries:
            if entry.is_rule and entry.key in test.rules:
                return entry
        return None


def test_names(tests: Iterable[TestRef], more_names: Iterable[str] = ()) -> set[str]:
    """Every name (with and without parameters) of ``tests``, and ``more_names``."""
    names = set(more_names)
    for t in tests:
        names.update((t.name, t.function))
    return names


def close_matches(key: str, candidates: Iterable[str]) -> list[str]:
    """The up to three ``candidates`` closest to a mistyped ``key``."""
    return difflib.get_close_matches(key, sorted(candidates), n=3, cutoff=0.6)
