"""The one-screen summary at the end of a kit run: pure bookkeeping over test outcomes.

The pytest layer feeds it one :class:`Outcome` per test report (on the xdist controller,
from the reports the workers sent: everything it needs travels in
``report.user_properties``) and prints :meth:`Summary.lines`:

- the backend, the server(s) it ran on, their version and how each was provisioned;
- tests passed / failed / errors / skipped / expected-failed / unexpectedly passed, by
  suite (conformance, stateful, chaos, and the user's own tests);
- violations by rule, naming the tests;
- the expected failures of the ledger and every strict entry whose test passed;
- every failure a known-upstream entry covers (``known upstream, still present: ...``)
  and every such entry that no longer reproduces;
- every skip, grouped by reason (nothing is skipped silently);
- the faults the chaos campaign injected and where its report folder is.

At most :data:`MAX_LINES` lines: long lists are cut with ``... and N more`` and a pointer
to where the rest is (``-rs``, the JUnit XML).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from rdq_compliance import known_upstream as ku
from rdq_compliance.chaos.faults.display import summary_words
from rdq_compliance.rules import CONTRACT

__all__ = ["MAX_LINES", "SUITES", "Outcome", "Summary"]

#: The suites, in the order the summary lists them.
SUITES = ("conformance", "stateful", "chaos", "own tests")
#: Result categories, in table order.
CATEGORIES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
#: The longest summary, in lines (one screen).
MAX_LINES = 25

# The user_properties names the pytest layer uses (also visible in JUnit XML).
PROP_RULES = "rdq.rules"  # the rules a test declares it checks
PROP_RULE = "rdq.rule"  # a rule a failure violated (one property per rule)
PROP_EXPECTED = "rdq.expected-failure"  # the ledger entry covering the test
PROP_UPSTREAM = "rdq.known-upstream"  # a known-upstream entry's judgement of the test (JSON)
PROP_FAULTS = "rdq.faults"  # the chaos campaign's fault counters (JSON)
PROP_CHAOS_REPORT = "rdq.chaos-report"  # the chaos campaign's report folder
PROP_NOT_EXERCISED = "rdq.not-exercised"  # checker rules the campaign did not exercise (JSON)
PROP_SERVER = "rdq.server"  # the provisioned server (JSON), on one report per process


@dataclass(frozen=True)
class Outcome:
    """What one report says about one test. ``category`` is one of :data:`CATEGORIES`,
    or ``None`` for a report that does not decide the test's result (a passing setup or
    teardown)."""

    nodeid: str
    suite: str
    category: str | None
    reason: str = ""
    strict_xpass: bool = False
    properties: tuple[tuple[str, str], ...] = ()
    #: a passing test failed because a known-upstream entry naming it saw nothing
    upstream_gone: bool = False

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.properties if k == name]


@dataclass
class _Test:
    suite: str
    category: str | None = None
    reason: str = ""
    strict_xpass: bool = False
    violated: list[str] = field(default_factory=list)
    expected: str = ""
    upstream: list[dict[str, object]] = field(default_factory=list)
    upstream_gone: bool = False

    @property
    def ledger_verdict(self) -> bool:
        """Failed because the ledger says so (an entry's test passed), not a rule."""
        return self.strict_xpass or self.upstream_gone

    def still_present(self) -> list[dict[str, object]]:
        """The known-upstream records of failures an entry covered (the test reported as
        known upstream, or failed by what no entry covers beside them)."""
        return [r for r in self.upstream if r.get("state") == ku.STATE_PRESENT]


_RANK = {None: 0, "passed": 1, "xpassed": 1, "skipped": 2, "xfailed": 2, "failed": 3, "error": 4}


class Summary:
    """Outcomes gathered during a run, rendered in one screen at its end."""

    def __init__(self, backend: str, settings_line: str) -> None:
        self.backend = backend
        self.settings_line = settings_line
        self._tests: dict[str, _Test] = {}
        self._servers: list[dict[str, str]] = []
        self._faults: list[dict[str, object]] = []
        self._chaos_reports: list[str] = []
        self._not_exercised: list[str] = []
        self._stale: dict[str, int] = {}
        self._gone: list[ku.Stale] = []

    # ---- gathering ----------------------------------------------------------------------

    def add(self, outcome: Outcome) -> None:
        test = self._tests.setdefault(outcome.nodeid, _Test(outcome.suite))
        if _RANK[outcome.category] > _RANK[test.category] or (
            outcome.category is not None and test.category is None
        ):
            test.category = outcome.category
            test.reason = outcome.reason
            test.strict_xpass = outcome.strict_xpass
            test.upstream_gone = outcome.upstream_gone
        for rule in outcome.values(PROP_RULE):
            if rule not in test.violated:
                test.violated.append(rule)
        for reason in outcome.values(PROP_EXPECTED):
            test.expected = reason
        records = [json.loads(raw) for raw in outcome.values(PROP_UPSTREAM)]
        if records:
            test.upstream = records
        for raw in outcome.values(PROP_SERVER):
            server = json.loads(raw)
            if server not in self._servers:
                self._servers.append(server)
        for raw in outcome.values(PROP_FAULTS):
            counters = json.loads(raw)
            if counters not in self._faults:
                self._faults.append(counters)
        for folder in outcome.values(PROP_CHAOS_REPORT):
            if folder not in self._chaos_reports:
                self._chaos_reports.append(folder)
        for raw in outcome.values(PROP_NOT_EXERCISED):
            for rule in json.loads(raw):
                if rule not in self._not_exercised:
                    self._not_exercised.append(rule)

    @property
    def ran(self) -> bool:
        """Whether any test was reported (else there is nothing to summarise)."""
        return any(t.category is not None for t in self._tests.values())

    def counts(self) -> dict[str, Counter[str]]:
        """Tests by suite and category."""
        out: dict[str, Counter[str]] = {}
        for test in self._tests.values():
            if test.category is not None:
                out.setdefault(test.suite, Counter())[test.category] += 1
        return out

    def violations(self) -> dict[str, list[str]]:
        """Failed tests by the rule they violated. A test that errored in set-up or
        tear-down is counted only when its error named a rule (see :meth:`errors`)."""
        out: dict[str, list[str]] = {}
        for nodeid, test in self._tests.items():
            if test.ledger_verdict or test.category not in ("failed", "error"):
                continue
            if test.category == "error" and not test.violated:
                continue
            for rule in test.violated or ["(no rule named)"]:
                out.setdefault(rule, []).append(nodeid)
        return out

    def errors(self) -> list[str]:
        """Tests that errored outside their check (set-up or tear-down) without naming
        a rule: no rule was judged by them, so they are no violation of one."""
        return [
            nodeid
            for nodeid, test in self._tests.items()
            if test.category == "error" and not test.violated and not test.ledger_verdict
        ]

    # ---- rendering ----------------------------------------------------------------------

    def lines(self) -> list[str]:
        """The summary, at most :data:`MAX_LINES` lines (long sections are cut, each
        keeping its first lines and saying how many more there are and where)."""
        head = [*self._server_lines(), *self._table()]
        tail = self._chaos_lines()
        budget = MAX_LINES - len(head) - len(tail)
        sections = [
            (lines, what)
            for lines, what in (self._violations(), self._ledger(), self._skips())
            if lines
        ]
        body: list[str] = []
        for n, (lines, what) in enumerate(sections):
            room = max(budget // (len(sections) - n), 2)  # a fair share; unused room moves on
            kept = _cut(lines, room, what)
            body.extend(kept)
            budget -= len(kept)
        return [*head, *body, *tail][:MAX_LINES]

    def _server_lines(self) -> list[str]:
        if not self._servers:
            return [f"rdq: {self.backend}: no server was provisioned ({self.settings_line})"]
        lines = []
        for server in self._servers[:3]:
            version = server.get("version") or "version not declared by the backend"
            lines.append(f"rdq: {self.backend} server: {server['origin']} [{version}]")
            if server.get("swept"):
                lines.append(f"  before the run: {server['swept']}")
        if len(self._servers) > 3:
            lines.append(f"  ... and {len(self._servers) - 3} more servers (one per process)")
        lines.append(f"  settings: {self.settings_line}")
        return lines

    def _table(self) -> list[str]:
        counts = self.counts()
        head = f"  {'suite':<12}" + "".join(f"{c:>9}" for c in CATEGORIES)
        rows = [head]
        for suite in SUITES:
            if suite in counts:
                cells = "".join(f"{counts[suite][c]:>9}" for c in CATEGORIES)
                rows.append(f"  {suite:<12}{cells}")
        if len(rows) == 1:
            rows.append("  no test ran")
        return rows

    def _violations(self) -> tuple[list[str], str]:
        found = self.violations()
        errors = self.errors()
        unjudged = (
            [
                f"  not judged: {len(errors)} tests errored in set-up or tear-down, no rule "
                f"checked ({_names(errors)})"
            ]
            if errors
            else []
        )
        if not found:
            return ["  violations by rule: none", *unjudged], ""
        failed = len({n for nodeids in found.values() for n in nodeids})
        lines = [f"  violations by rule ({failed} failed tests):"]
        for rule, nodeids in sorted(found.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"    {rule}: {len(nodeids)} ({_names(nodeids)})")
        lines.append(f"    what each rule forbids: {CONTRACT}, section 4")
        return [*lines, *unjudged], "rules (see the failures above, or rdq.rule in the JUnit XML)"

    def stale_rule_entries(self, rule_keys: Iterable[str]) -> dict[str, int]:
        """Rule entries of the ledger that covered tests of this run, none of which failed
        (every one passed): rule -> how many tests it covered. Remembered for the
        summary."""
        covered: dict[str, list[str]] = {}
        for test in self._tests.values():
            key = _entry_key(test.expected)
            if key is not None and test.category in ("xfailed", "xpassed"):
                covered.setdefault(key, []).append(test.category)
        self._stale = {
            key: len(covered[key])
            for key in rule_keys
            if covered.get(key) and "xfailed" not in covered[key]
        }
        return self._stale

    def stale_upstream(self) -> list[ku.Stale]:
        """Known-upstream entries whose behaviour this run did not see (see
        :func:`rdq_compliance.known_upstream.stale`). Remembered for the summary."""
        self._gone = ku.stale(
            (nodeid.rpartition("::")[2], record)
            for nodeid, test in self._tests.items()
            for record in test.upstream
        )
        return self._gone

    def _ledger(self) -> tuple[list[str], str]:
        known = [(n, t) for n, t in self._tests.items() if t.still_present()]
        xfailed = [
            (n, t)
            for n, t in self._tests.items()
            if t.category == "xfailed" and not t.still_present()
        ]
        fixed = [(n, t) for n, t in self._tests.items() if t.strict_xpass]
        stale = self._stale
        if not xfailed and not fixed and not stale and not known and not self._gone:
            return [], ""
        lines = []
        if known:
            lines.append(f"  known upstream (failures, not passes): {len(known)}")
            for nodeid, test in known:
                for r in test.still_present():
                    n = int(str(r.get("count", 1)))
                    times = f" ({n} violations)" if n > 1 else ""
                    lines.append(
                        f"    {_short(nodeid)}: known upstream, still present: {r['issue']} "
                        f"({r['title']}){times}"
                    )
        for gone in self._gone:
            lines.append(f"  {gone.line()}")
        if xfailed:
            lines.append(f"  expected failures (ledger): {len(xfailed)}")
            for nodeid, test in xfailed:
                lines.append(f"    {_short(nodeid)}: {test.expected or test.reason}")
        for key, n in sorted(stale.items()):
            lines.append(
                f"  ledger rule entry {key!r}: all {n} of its tests PASSED (strict: the gap "
                "is fixed; remove the entry)"
            )
        if fixed:
            lines.append(
                f"  ledger entries whose test PASSED (strict: fix the ledger): {len(fixed)}"
            )
            for nodeid, test in fixed:
                lines.append(f"    {_short(nodeid)}: {test.expected or test.reason}")
        return lines, "entries (see -rxX)"

    def _skips(self) -> tuple[list[str], str]:
        by_reason: dict[str, list[str]] = {}
        for nodeid, test in self._tests.items():
            if test.category == "skipped":
                by_reason.setdefault(test.reason or "(no reason given)", []).append(nodeid)
        if not by_reason:
            return [], ""
        total = sum(len(v) for v in by_reason.values())
        lines = [f"  skipped: {total}"]
        for reason, nodeids in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"    {len(nodeids)} x {reason} ({_names(nodeids)})")
        return lines, "reasons (see -rs)"

    def _chaos_lines(self) -> list[str]:
        lines = []
        for counters in self._faults:
            lines.append(f"  chaos faults injected: {_faults(counters)}")
        if self._not_exercised:
            lines.append(
                "  chaos rules not exercised (no call they judge; not passed): "
                + ", ".join(self._not_exercised)
            )
        for folder in self._chaos_reports:
            lines.append(f"  chaos report: {folder}")
        return lines


def _faults(counters: dict[str, object]) -> str:
    return ", ".join(summary_words(counters)) or "none"


def _entry_key(expected: str | None) -> str | None:
    """The ledger key of a test's ``rdq.expected-failure`` property (``reason [key]``)."""
    if not expected or not expected.endswith("]") or " [" not in expected:
        return None
    return expected.rsplit(" [", 1)[1][:-1]


def _short(nodeid: str) -> str:
    return nodeid.rpartition("/")[2]


def _names(nodeids: Iterable[str], shown: int = 2) -> str:
    nodeids = list(nodeids)
    names = [n.rpartition("::")[2] for n in nodeids[:shown]]
    more = len(nodeids) - shown
    return ", ".join(names) + (f", +{more}" if more > 0 else "")


def _cut(lines: list[str], budget: int, what: str) -> list[str]:
    if len(lines) <= budget:
        return lines
    kept = lines[: max(budget - 1, 1)]
    return [*kept, f"    ... and {len(lines) - len(kept)} more {what}"]
