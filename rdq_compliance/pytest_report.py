"""What a kit run reports, for humans and for CI: the pytest half of
:mod:`rdq_compliance.run_summary` and :mod:`rdq_compliance.ledger`.

The plugin registers one :class:`Reporting` per run (when a backend is selected). It

- tags every suite test with the rules it checks (``rdq.rules``, from the docstring's
  ``Rule <id>``), shown after the verdict in ``-v`` output and as a property in JUnit XML;
- applies the expected-failure ledger: a covered test gets a strict ``xfail`` whose
  reason is the entry's, and one that fails under another rule than its entry's is
  reported as a failure;
- applies the known-upstream entries (:mod:`rdq_compliance.known_upstream`): a failure
  one covers is reported as an expected failure whose reason says ``known upstream, still
  present: owner/name#N (title)``, each entry's judgement of the test goes in
  ``rdq.known-upstream``, and a test an entry names that ran without a covered failure
  fails, saying the entry no longer reproduces; a test that judges its failures one by
  one (the chaos campaign, through the ``rdq_known_upstream`` fixture: :meth:`Reporting.
  scope_for`) records its judgement itself;
- puts the rule each failure violated in ``rdq.rule`` (one property per rule: the ids the
  failure message names as ``[id]``, else the rules the test declares);
- sends the provisioned server's description to the summary on one report per process,
  so it reaches the xdist controller with the reports;
- prints the one-screen summary at the end of the run.

Everything the summary needs travels in ``report.user_properties``, which xdist
serialises from the workers to the controller.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Generator
from pathlib import Path

import pytest

import rdq_compliance.suite
from rdq_compliance import known_upstream as ku
from rdq_compliance import rules
from rdq_compliance import run_summary as s
from rdq_compliance.ledger import Entry, Ledger, TestRef
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings, describe
from rdq_core.errors import InvalidArgument

__all__ = ["KEY", "Reporting"]

SUITE_DIR = Path(rdq_compliance.suite.__file__).resolve().parent
_ENTRY = pytest.StashKey[Entry]()
_RULES = pytest.StashKey[tuple[str, ...]]()
_SCOPE = pytest.StashKey[ku.Scope]()
_JUDGED = pytest.StashKey[bool]()
_XPASS_STRICT = "[XPASS(strict)]"
_GONE = "known upstream "


class Reporting:
    """The run's reporting plugin (see the module docstring)."""

    def __init__(
        self,
        config: pytest.Config,
        settings: Settings,
        ledger: Ledger,
        upstream: tuple[ku.KnownUpstream, ...] = (),
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.upstream = upstream
        self.summary = s.Summary(str(settings.backend), describe(settings))
        self._server: str | None = None
        self._server_sent = False
        self._ledger_checked = False
        self._swept: str | None = None

    @classmethod
    def for_run(cls, config: pytest.Config, settings: Settings, backend: object) -> Reporting:
        """The plugin for a run of ``backend`` (whose ``expected_failures`` and
        ``known_upstream`` come first, then the pyproject tables')."""
        sources = [
            (f"backend {settings.backend!r}", dict(getattr(backend, "expected_failures", {})))
        ]
        if settings.expected_failures:
            where = settings.sources.get("expected-failures", "pyproject.toml")
            sources.append((where, dict(settings.expected_failures)))
        declared = [
            (f"backend {settings.backend!r}", tuple(getattr(backend, "known_upstream", ()) or ())),
            *settings.known_upstream,
        ]
        try:
            ledger = Ledger.from_sources(sources)
            upstream = tuple(e for where, d in declared for e in ku.entries_from(where, d))
        except InvalidArgument as exc:
            raise pytest.UsageError(f"rdq: {exc}") from None
        return cls(config, settings, ledger, upstream)

    def swept(self, line: str) -> None:
        """What the sweep of the server given by DSN did before the session's server was
        provisioned (the plugin's probe of the DSN, in this process)."""
        self._swept = line

    def server_ready(self, session: Session) -> None:
        """Called once the session's server is provisioned (in this process)."""
        server = session.server
        facts = {"origin": server.origin, "version": getattr(server, "version", None) or ""}
        swept = session.swept.summary() if session.swept is not None else None
        if swept or self._swept:
            facts["swept"] = swept or self._swept or ""
        self._server = json.dumps(facts)
        self._server_sent = False

    # ---- collection ---------------------------------------------------------------------

    def annotate(self, items: list[pytest.Item]) -> None:
        """Tag the suite's tests with their rules and apply the ledger (before any
        ``-k``/``-m`` deselection, so the ledger is checked against every test)."""
        refs = []
        for item in items:
            declared = _declared(item)
            item.stash[_RULES] = declared
            if declared:
                item.user_properties.append((s.PROP_RULES, ", ".join(declared)))
            function = getattr(item, "originalname", item.name)
            ref = TestRef(item.nodeid, item.name, function, declared)
            refs.append(ref)
            entry = self.ledger.entry_for(ref) if self.ledger else None
            if entry is not None:
                item.stash[_ENTRY] = entry
                # A test entry is strict per test; a rule entry is strict as a whole (see
                # pytest_sessionfinish): a test of the rule the gap does not touch may pass.
                item.add_marker(
                    pytest.mark.xfail(reason=entry.describe(), strict=not entry.is_rule)
                )
                item.user_properties.append((s.PROP_EXPECTED, f"{entry.reason} [{entry.key}]"))
            scope = ku.Scope.of(ref, self.upstream)
            if scope:
                item.stash[_SCOPE] = scope
        # An xdist worker leaves the check to the controller (a usage error raised in a
        # worker's collection would reach the user as an xdist crash, its message lost).
        if not hasattr(self.config, "workerinput"):
            try:
                self._check(refs)
            except InvalidArgument as exc:
                raise pytest.UsageError(f"rdq: {exc}") from None

    def _check(self, refs: list[TestRef]) -> None:
        if self.ledger:
            self.ledger.check(refs, more_names=_suite_test_names())
        if self.upstream:
            ku.check(self.upstream, refs, more_names=_suite_test_names())

    def scope_for(self, item: pytest.Item) -> ku.Scope:
        """The known-upstream entries that may cover failures of ``item``, for a test that
        judges its failures itself (:meth:`ku.Scope.judge`) and records the judgement's
        :meth:`~ku.Judgement.records` as ``rdq.known-upstream`` properties: its failure is
        then left as the test raised it, and only an entry that named it and saw nothing
        is applied here."""
        item.stash[_JUDGED] = True
        function = getattr(item, "originalname", item.name)
        ref = TestRef(item.nodeid, item.name, function, item.stash.get(_RULES, ()))
        return item.stash.get(_SCOPE, ku.Scope(ref))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        """On the xdist controller, check the ledger against what a worker collected."""
        if not (self.ledger or self.upstream) or self._ledger_checked:
            return
        self._ledger_checked = True
        refs = [_ref_of_nodeid(nodeid) for nodeid in ids]
        try:
            self._check(refs)
        except InvalidArgument as exc:
            pytest.exit(f"rdq: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)

    def _rule_entries(self) -> set[str]:
        """The rule ids the ledger has entries for."""
        return {e.key for e in self.ledger.entries if e.is_rule} if self.ledger else set()

    # ---- running --------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.when == "setup" and self._server is not None and not self._server_sent:
            report.user_properties.append((s.PROP_SERVER, self._server))
            self._server_sent = True
        entry = item.stash.get(_ENTRY, None)
        named = rules.named_in(_crash_text(report)) if report.longrepr else ()
        if entry is not None and hasattr(report, "wasxfail") and report.skipped:
            problem = not_covered(entry, report.when, named, self._rule_entries())
            if problem is not None:
                del report.wasxfail
                report.outcome = "failed"
                report.sections.append(
                    (
                        "rdq expected-failure ledger",
                        f"this test is in the ledger ({entry.describe()}), but {problem}: "
                        "reported as a failure",
                    )
                )
        scope = item.stash.get(_SCOPE, None)
        if scope is not None and report.when == "call":
            self._known_upstream(item, report, scope, named)
        if report.failed and not _ledger_verdict(report):
            # A set-up or tear-down error is not a verdict on the rules the test checks
            # (a server that went away, a bad option, a broken fixture): it is tagged with
            # a rule only when its own message names one.
            declared = item.stash.get(_RULES, ()) if report.when == "call" else ()
            for rule in named or declared:
                item.user_properties.append((s.PROP_RULE, rule))
                report.user_properties.append((s.PROP_RULE, rule))
        return report

    def _known_upstream(
        self, item: pytest.Item, report: pytest.TestReport, scope: ku.Scope, named: tuple[str, ...]
    ) -> None:
        """Apply the known-upstream entries in ``scope`` to ``item``'s call report."""
        if report.skipped and not hasattr(report, "wasxfail"):
            return  # skipped while running: nothing was judged
        if item.stash.get(_JUDGED, False):
            records = [json.loads(v) for k, v in report.user_properties if k == s.PROP_UPSTREAM]
        else:
            failing = report.skipped or (report.failed and not _strict_xpass(report))
            crash = _crash_text(report) if failing else ""
            judgement = scope.judge([ku.Failure(named, crash)] if failing else [])
            said = judgement.records()
            for record in said:  # the item's: the teardown report carries it to JUnit
                item.user_properties.append((s.PROP_UPSTREAM, record))
                report.user_properties.append((s.PROP_UPSTREAM, record))
            records = [json.loads(r) for r in said]
            if judgement.covered:
                entry = judgement.covered[0]
                first = crash.strip().splitlines()[0] if crash.strip() else ""
                report.outcome = "skipped"
                report.wasxfail = entry.still_present() + (f"; it failed: {first}" if first else "")
        gone = [
            ku.Stale(r["issue"], r["source"], f"{item.name} ran without it").line()
            for r in records
            if r["state"] == ku.STATE_GONE
        ]
        if not gone:
            return
        if report.failed:
            report.sections.append(("rdq known-upstream ledger", "\n".join(gone)))
            return
        reason = getattr(report, "wasxfail", "")
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        report.outcome = "failed"
        folders = [
            f"report folder: {v}" for k, v in report.user_properties if k == s.PROP_CHAOS_REPORT
        ]
        report.longrepr = "\n".join([*gone, *folders] + ([f"and: {reason}"] if reason else []))

    @pytest.hookimpl(wrapper=True)
    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> Generator[None, object, object]:
        """In ``-v`` output, the verdict is followed by the rules the test checks."""
        result = yield
        if config.get_verbosity() < 1 or not isinstance(result, tuple) or len(result) != 3:
            return result
        category, letter, word = result
        declared = [v for k, v in report.user_properties if k == s.PROP_RULES]
        if not word or not declared:
            return result
        label = _rule_label(str(declared[0]))
        if isinstance(word, tuple):
            return category, letter, (f"{word[0]} ({label})", word[1])
        return category, letter, f"{word} ({label})"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.summary.add(_outcome(report))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A rule entry none of whose tests failed any more is stale: the run fails (the
        ledger must never hide a fix). Decided where every report arrives (the xdist
        controller, or the only process); the summary names the entry."""
        if hasattr(self.config, "workerinput") or not (self.ledger or self.upstream):
            return
        rule_keys = [e.key for e in self.ledger.entries if e.is_rule]
        stale = self.summary.stale_rule_entries(rule_keys)
        gone = self.summary.stale_upstream()
        if (stale or gone) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if hasattr(self.config, "workerinput") or not self.summary.ran:
            return
        terminalreporter.write_sep("=", "rdq summary")
        for line in self.summary.lines():
            terminalreporter.write_line(line)


KEY = pytest.StashKey[Reporting]()


def _declared(item: pytest.Item) -> tuple[str, ...]:
    if SUITE_DIR not in Path(str(item.path)).resolve().parents:
        return ()
    function = getattr(item, "function", None)
    try:
        return rules.declared_by(getattr(function, "__doc__", None))
    except KeyError as exc:
        raise pytest.UsageError(f"rdq: suite test {item.nodeid}: {exc.args[0]}") from None


def _suite_test_names() -> set[str]:
    """The names of every test function of the suite, read from its source (so a ledger
    entry naming a test that ``-k`` or a path left out is still known)."""
    names = set()
    for path in SUITE_DIR.glob("test_*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def _ref_of_nodeid(nodeid: str) -> TestRef:
    name = nodeid.rpartition("::")[2]
    return TestRef(nodeid, name, name.partition("[")[0])


def _crash_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(longrepr, tuple):
        return str(longrepr[2])
    return str(longrepr)


def _strict_xpass(report: pytest.TestReport) -> bool:
    return isinstance(report.longrepr, str) and report.longrepr.startswith(_XPASS_STRICT)


def _upstream_gone(report: pytest.TestReport) -> bool:
    """A test that passed, failed because a known-upstream entry that names it saw
    nothing (see :meth:`Reporting._known_upstream`)."""
    return isinstance(report.longrepr, str) and report.longrepr.startswith(_GONE)


def _ledger_verdict(report: pytest.TestReport) -> bool:
    """A failure that is the ledger's verdict on a passing test, no rule's."""
    return _strict_xpass(report) or _upstream_gone(report)


def _rule_label(declared: str, shown: int = 2) -> str:
    ids = [r.strip() for r in declared.split(",")]
    more = len(ids) - shown
    return "rule " + ", ".join(ids[:shown]) + (f" +{more} more" if more > 0 else "")


def _suite_of(report: pytest.TestReport) -> str:
    keywords = report.keywords
    if "chaos" in keywords:
        return "chaos"
    if "stateful" in keywords:
        return "stateful"
    if "rdq_conformance" in keywords:
        return "conformance"
    return "own tests"


def _outcome(report: pytest.TestReport) -> s.Outcome:
    wasxfail = getattr(report, "wasxfail", None)
    reason = ""
    if report.passed:
        category = None
        if report.when == "call":
            category = "xpassed" if wasxfail is not None else "passed"
    elif report.failed:
        category = "failed" if report.when == "call" else "error"
    elif wasxfail is not None:
        category, reason = "xfailed", str(wasxfail)
    else:
        category = "skipped"
        reason = _crash_text(report).removeprefix("Skipped: ")
    return s.Outcome(
        nodeid=report.nodeid,
        suite=_suite_of(report),
        category=category,
        reason=reason,
        strict_xpass=_strict_xpass(report),
        upstream_gone=_upstream_gone(report),
        properties=tuple((str(k), str(v)) for k, v in report.user_properties),
    )


def not_covered(
    entry: Entry, when: str, named: tuple[str, ...], rule_entries: set[str]
) -> str | None:
    """Why an expected failure under ``entry`` is a failure after all, or ``None``: its
    ``when`` phase was not the test's call (the ledger covers what a test checks, not its
    set-up: a server that went away, a broken fixture), or, for a rule entry, its failure
    names a rule no rule entry of the ledger names — beside the gap's or instead of it (a
    regression; a campaign that broke the gap's rule and another)."""
    if when != "call":
        return f"its {when} failed"
    other = [r for r in named if r not in rule_entries]
    if entry.is_rule and other:
        return f"it failed under {', '.join(other)}"
    return None
