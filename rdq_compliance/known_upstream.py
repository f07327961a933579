"""Known-upstream ledger entries: a behaviour of the library under test that a public
issue tracks, covered until the fix lands (``contract.md#7-the-ledger``).

An entry names the issue (``repository`` as ``owner/name``, a positive ``number``: the
issue is ``https://github.com/owner/name/issues/N``), a short ``title``, and what it
covers, with the matching of the expected-failure ledger (:mod:`rdq_compliance.ledger`):

- ``tests``: test ids (``test_x``, ``test_x[param]``, a node id or its tail): a failure
  of one of these tests;
- ``rules``: rule ids: a failure whose rules (those its message names as ``[id]``, else
  the rules its test declares) are all among them; with ``tests`` it narrows their
  failures, alone it covers every test that declares one of the rules;
- ``pattern``: a regular expression searched in the failure's message (a chaos
  violation's message, for the chaos campaign); it narrows ``tests`` or ``rules``, never
  covers anything alone.

A covered failure stays in every report, marked ``known upstream, still present:
owner/name#N (title)`` (:meth:`KnownUpstream.still_present`); it is never a pass. The run
fails on every failure no entry covers, and when the behaviour is gone
(:meth:`KnownUpstream.gone`): a test an entry names by id that ran without a covered
failure; a rule of an entry none of whose tests in the run failed as the entry covers.
Pure: the pytest layer (:mod:`rdq_compliance.pytest_report`) and the chaos test apply
what :meth:`Scope.judge` says; :func:`stale` decides over the records of a whole run.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdq_compliance.ledger import TestRef, close_matches, test_names
from rdq_compliance.rules import RULES
from rdq_core.errors import InvalidArgument

__all__ = [
    "STATE_GONE",
    "STATE_NOT_SEEN",
    "STATE_PRESENT",
    "Failure",
    "Judgement",
    "KnownUpstream",
    "Scope",
    "Stale",
    "check",
    "entries_from",
    "stale",
]

#: The keys of an entry (a TOML table, or a mapping given in code).
KEYS = ("repository", "number", "title", "tests", "rules", "pattern")
#: The longest title (one line: it follows the issue in every report).
TITLE_MAX = 100
#: A GitHub repository: the owner (a user or organisation name) and the repository name.
_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
_URL = re.compile(
    r"(?:https?://)?github\.com/(?P<repo>[^/\s]+/[^/\s#]+?)(?:\.git)?/?"
    r"(?:(?:issues|pull)/(?P<number>\d+))?/?$"
)
_WITH_NUMBER = re.compile(r"(?P<repo>[^\s#]+/[^\s#]+)#(?P<number>\d+)")

#: A record's state: the entry covered a failure of the test; the entry names the test
#: by id and the test ran without one (the run fails); a rule entry saw none in this test.
STATE_PRESENT = "still present"
STATE_GONE = "gone"
STATE_NOT_SEEN = "not seen"


@dataclass(frozen=True)
class KnownUpstream:
    """One behaviour a public issue tracks: see the module docstring. Built in code as
    ``KnownUpstream("rq/rq", 1716, "title", tests=(...), rules=(...), pattern=r"...")``;
    checked when the run starts (:func:`entries_from`), not when built."""

    repository: str
    number: int
    title: str
    tests: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    pattern: str | None = None
    #: where the entry was declared (set by :func:`entries_from`)
    source: str = ""

    @property
    def ref(self) -> str:
        """``owner/name#N``."""
        return f"{self.repository}#{self.number}"

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repository}/issues/{self.number}"

    @property
    def label(self) -> str:
        """``owner/name#N (title)``."""
        return f"{self.ref} ({self.title})"

    def still_present(self) -> str:
        return f"known upstream, still present: {self.label}"

    def gone(self) -> str:
        return (
            f"known upstream {self.ref} no longer reproduces: remove the entry (the fix may "
            "have landed)"
        )

    # ---- matching -----------------------------------------------------------------------

    def in_scope(self, test: TestRef) -> bool:
        """Whether a failure of ``test`` may be one this entry covers."""
        if self.tests:
            return any(test.matches(key) for key in self.tests)
        return any(rule in test.rules for rule in self.rules)

    def scope_rules(self, test: TestRef) -> tuple[str, ...]:
        """For an entry by rules alone: its rules ``test`` declares (each judged across
        the run by :func:`stale`); ``()`` for an entry naming tests."""
        return () if self.tests else tuple(r for r in self.rules if r in test.rules)

    def covers(self, test: TestRef, failure: Failure) -> tuple[str, ...] | None:
        """The rules under which this entry covers ``failure`` of ``test`` (``()`` when
        it names no rule), or ``None`` when it does not cover it."""
        if not self.in_scope(test):
            return None
        seen: tuple[str, ...] = ()
        if self.rules:
            named = failure.rules or tuple(r for r in test.rules if r in self.rules)
            if not named or any(r not in self.rules for r in named):
                return None
            seen = named
        if self.pattern is not None and re.search(self.pattern, failure.text) is None:
            return None
        return seen

    def as_json(self) -> dict[str, Any]:
        return {
            "issue": self.ref,
            "url": self.url,
            "title": self.title,
            "source": self.source,
        }


@dataclass(frozen=True)
class Failure:
    """One failure to judge: the rules it names (``()``: none named) and its message."""

    rules: tuple[str, ...]
    text: str


@dataclass
class Judgement:
    """What the entries in scope of one test made of its failures."""

    scope: Scope
    #: failure index -> the entry that covers it (the first in declaration order)
    covered: dict[int, KnownUpstream] = field(default_factory=dict)
    #: failure index -> the rules under which its entry covers it
    rules: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: failure indexes no entry covers
    uncovered: list[int] = field(default_factory=list)

    def count(self, entry: KnownUpstream) -> int:
        return sum(1 for e in self.covered.values() if e is entry)

    def state(self, entry: KnownUpstream) -> str:
        if self.count(entry):
            return STATE_PRESENT
        return STATE_GONE if entry.tests else STATE_NOT_SEEN

    def gone(self) -> list[KnownUpstream]:
        """Entries naming this test by id that covered none of its failures."""
        return [e for e in self.scope.entries if self.state(e) == STATE_GONE]

    def present(self) -> list[KnownUpstream]:
        return [e for e in self.scope.entries if self.count(e)]

    def records(self) -> list[str]:
        """One JSON record per entry in scope (the ``rdq.known-upstream`` property), for
        the run's verdict (:func:`stale`) and its summary."""
        out = []
        for entry in self.scope.entries:
            seen: list[str] = []
            for i, e in self.covered.items():
                if e is entry:
                    seen += [r for r in self.rules[i] if r not in seen]
            record = {
                **entry.as_json(),
                "state": self.state(entry),
                "count": self.count(entry),
                "scope": list(entry.scope_rules(self.scope.test)),
                "seen": seen,
            }
            out.append(json.dumps(record, sort_keys=True))
        return out


@dataclass(frozen=True)
class Scope:
    """The entries that may cover failures of one test."""

    test: TestRef
    entries: tuple[KnownUpstream, ...] = ()

    @classmethod
    def of(cls, test: TestRef, entries: Iterable[KnownUpstream]) -> Scope:
        return cls(test, tuple(e for e in entries if e.in_scope(test)))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def judge(self, failures: Sequence[Failure]) -> Judgement:
        """Which entry covers each failure (none: the failure fails the run)."""
        out = Judgement(self)
        for i, failure in enumerate(failures):
            for entry in self.entries:
                rules = entry.covers(self.test, failure)
                if rules is not None:
                    out.covered[i], out.rules[i] = entry, rules
                    break
            else:
                out.uncovered.append(i)
        return out


# ---- declaring ------------------------------------------------------------------------------


def entries_from(
    where: str,
    declared: Iterable[object],
    *,
    rule_ids: Collection[str] = RULES,
    rules_name: str = "rdq_compliance.rules.RULES",
) -> tuple[KnownUpstream, ...]:
    """The entries of one source (``where``: the backend, or a pyproject table), each a
    :class:`KnownUpstream` or a mapping of :data:`KEYS`; every bad one is named in one
    ``InvalidArgument`` that says what to write instead. ``rule_ids`` are the rules an
    entry may name (``rules_name`` says where they are listed): the contract's rules, or
    the deployed checker's."""
    out: list[KnownUpstream] = []
    problems: list[str] = []
    for n, item in enumerate(declared, 1):
        fields = _fields(item)
        name = _name(n, where, fields)
        if isinstance(fields, str):
            problems.append(f"{name}: {fields}")
            continue
        found = _problems(fields, rule_ids, rules_name)
        if found:
            problems.append(f"{name}: " + "; ".join(found))
            continue
        out.append(
            KnownUpstream(
                repository=fields["repository"],
                number=fields["number"],
                title=fields["title"].strip(),
                tests=tuple(fields.get("tests") or ()),
                rules=tuple(fields.get("rules") or ()),
                pattern=fields.get("pattern"),
                source=where,
            )
        )
    if problems:
        raise InvalidArgument("known-upstream ledger: " + "\n".join(problems))
    return tuple(out)


def _fields(item: object) -> dict[str, Any] | str:
    if isinstance(item, KnownUpstream):
        return {k: getattr(item, k) for k in KEYS}
    if isinstance(item, Mapping):
        unknown = [str(k) for k in item if k not in KEYS]
        if unknown:
            return (
                f"unknown key(s) {', '.join(map(repr, unknown))}: an entry's keys are "
                + ", ".join(KEYS)
            )
        return dict(item)
    return (
        f'{item!r} is not an entry: write KnownUpstream("owner/name", N, "title", '
        "tests=(...) or rules=(...)), or a table with repository, number, title and tests "
        "or rules"
    )


def _name(n: int, where: str, fields: dict[str, Any] | str) -> str:
    if isinstance(fields, str):
        return f"entry {n} of {where}"
    given = [f"{k} {fields[k]!r}" for k in ("repository", "number", "title") if k in fields]
    return f"entry {n} of {where}" + (f" ({', '.join(given)})" if given else "")


def _problems(fields: Mapping[str, Any], rule_ids: Collection[str], rules_name: str) -> list[str]:
    out: list[str] = []
    out += _repository_problems(fields.get("repository"), fields.get("number"))
    out += _number_problems(fields.get("number"))
    title = fields.get("title")
    if not isinstance(title, str) or not title.strip():
        out.append(
            f"title {'is missing' if title is None else repr(title)}: write the issue's "
            'title, or a few words of it, as a non-empty string (title = "delayed messages '
            'run twice")'
        )
    elif len(title.strip()) > TITLE_MAX or "\n" in title.strip():
        out.append(
            f"title is {len(title.strip())} characters over {title.count(chr(10)) + 1} "
            f"line(s): write one line of at most {TITLE_MAX} (the issue says the rest)"
        )
    tests = _ids("tests", fields.get("tests"), out)
    rules = _ids("rules", fields.get("rules"), out)
    for rule in rules:
        if rule not in rule_ids:
            close = difflib.get_close_matches(rule, list(rule_ids), n=3, cutoff=0.6)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            out.append(f"rule {rule!r} is not a rule id ({rules_name}){hint}")
    pattern = fields.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            out.append(
                f"pattern {pattern!r}: write a regular expression as a non-empty string, or "
                "leave the key out"
            )
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                out.append(f"pattern {pattern!r} is not a regular expression: {exc}")
    if not tests and not rules and not out:
        narrows = " (a pattern only narrows them)" if pattern else ""
        out.append(
            "it covers nothing: name the tests whose failure it covers "
            '(tests = ["test_name"]) or the rules (rules = ["no-loss"]), or both' + narrows
        )
    return out


def _repository_problems(repo: object, number: object) -> list[str]:
    if isinstance(repo, str) and _REPOSITORY.fullmatch(repo):
        return []
    hint = 'write the repository as owner/name (repository = "rq/rq")'
    if isinstance(repo, str):
        url, pair = _URL.search(repo.strip()), _WITH_NUMBER.fullmatch(repo.strip())
        found = url or pair
        if found is not None and _REPOSITORY.fullmatch(found.group("repo")):
            hint = f'write repository = "{found.group("repo")}"'
            if found.group("number") and number is None:
                hint += f" and number = {found.group('number')}"
    said = "is missing" if repo is None else f"{repo!r} is not owner/name"
    return [f"repository {said}: {hint}"]


def _number_problems(number: object) -> list[str]:
    if isinstance(number, int) and not isinstance(number, bool) and number > 0:
        return []
    if number is None:
        return ["number is missing: write the issue's number (number = 1716)"]
    if isinstance(number, str) and number.strip().lstrip("#").isdigit():
        return [f"number {number!r}: write it as an integer (number = {number.strip('# ')})"]
    return [f"number {number!r}: write the issue's number, a positive integer (number = 1716)"]


def _ids(key: str, value: object, out: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        out.append(f'{key} {value!r}: write a list of ids ({key} = ["{value}"])')
        return ()
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        out.append(f"{key}: {bad!r} are not ids: each id is a non-empty string")
        return ()
    return tuple(value)


def check(
    entries: Iterable[KnownUpstream], tests: Iterable[TestRef], more_names: Iterable[str] = ()
) -> None:
    """Raise ``InvalidArgument`` naming every test id of ``entries`` that is none of
    ``tests``' ids nor one of ``more_names`` (test names known though not collected in
    this run), with the close matches of each."""
    tests = list(tests)
    names = test_names(tests, more_names)
    problems = []
    for entry in entries:
        for key in entry.tests:
            if key in names or any(t.matches(key) for t in tests):
                continue
            close = close_matches(key, names)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            problems.append(
                f"{entry.ref} ({entry.source}): test {key!r} is not a test of this run{hint}"
            )
    if problems:
        raise InvalidArgument(
            "known-upstream ledger: "
            + "; ".join(problems)
            + ". A test id is test_name, test_name[param] or path/test_mod.py::test_name[param]."
        )


# ---- the run's verdict -----------------------------------------------------------------------


@dataclass(frozen=True)
class Stale:
    """An entry whose behaviour a run did not see: the message, and where."""

    issue: str
    source: str
    where: str

    def line(self) -> str:
        return (
            f"known upstream {self.issue} no longer reproduces: remove the entry (the fix may "
            f"have landed); {self.where} (known-upstream ledger, {self.source})"
        )


def stale(records: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Stale]:
    """From ``(test name, record)`` pairs of a whole run: every entry naming a test that
    ran without a covered failure, and every rule of an entry by rules none of whose
    tests in the run failed as the entry covers."""
    out: list[Stale] = []
    by_rule: dict[tuple[str, str, str], list[bool]] = {}
    for test, record in records:
        issue, source = str(record["issue"]), str(record.get("source", ""))
        if record["state"] == STATE_GONE:
            out.append(Stale(issue, source, f"{test} ran without it"))
        for rule in record.get("scope") or ():
            by_rule.setdefault((issue, source, rule), []).append(rule in record["seen"])
    for (issue, source, rule), seen in by_rule.items():
        if not any(seen):
            out.append(
                Stale(issue, source, f"rule {rule}: none of its {len(seen)} tests failed as "
                      "the entry covers")
            )  # fmt: skip
    return out
