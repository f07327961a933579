"""The expected-failure ledger: a backend's known gaps, declared in code
(``Backend.expected_failures``) or in ``[tool.rdq.expected-failures]``, run and are
reported as expected failures with the reason; a covered test that passes, or that fails
under another rule than its entry's, fails the run; an unknown id is a usage error that
lists the close matches.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rdq_compliance.ledger import Ledger, TestRef
from rdq_compliance.settings import resolve
from rdq_core.errors import InvalidArgument
from tests._paths import pythonpath

EXACT = "test_claim_returns_exactly_limit_when_more_are_due"
ORDER = "test_claims_come_out_oldest_due_first"
LIMIT_IGNORED = "--rdq-backend=tests.broken.memory:limit_ignored"

REF = TestRef(
    "rdq_compliance/suite/test_claim.py::test_x[page-size-1]", "test_x[page-size-1]", "test_x",
    ("claim-limit", "claim-complete"),
)  # fmt: skip


# ---- the ledger itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "test_x",
        "test_x[page-size-1]",
        "test_claim.py::test_x[page-size-1]",
        "suite/test_claim.py::test_x[page-size-1]",
        "rdq_compliance/suite/test_claim.py::test_x[page-size-1]",
    ],
)
def test_a_test_id_entry_matches_by_name_or_node_id(key: str) -> None:
    ledger = Ledger.from_sources([("here", {key: "known"})])
    entry = ledger.entry_for(REF)
    assert entry is not None and entry.reason == "known" and not entry.is_rule
    ledger.check([REF])


@pytest.mark.parametrize("key", ["test_y", "test_x[page-size-2]", "claim.py::test_x[page-size-1]"])
def test_a_test_id_entry_does_not_match_another_test(key: str) -> None:
    assert Ledger.from_sources([("here", {key: "known"})]).entry_for(REF) is None


def test_a_rule_entry_covers_the_tests_declaring_it_and_a_test_entry_wins() -> None:
    ledger = Ledger.from_sources(
        [("code", {"claim-complete": "by rule"}), ("toml", {"test_x": "by test"})]
    )
    assert ledger.entry_for(REF).reason == "by test"  # type: ignore[union-attr]
    by_rule = Ledger.from_sources([("code", {"claim-complete": "by rule"})]).entry_for(REF)
    assert by_rule is not None and by_rule.is_rule and by_rule.key == "claim-complete"
    assert Ledger.from_sources([("code", {"one-claim": "x"})]).entry_for(REF) is None


def test_an_unknown_entry_is_an_error_listing_close_matches() -> None:
    ledger = Ledger.from_sources(
        [("[tool.rdq.expected-failures] in p", {"claim-limt": "x", "test_xx": "y"})]
    )
    with pytest.raises(InvalidArgument) as err:
        ledger.check([REF])
    text = str(err.value)
    assert (
        "'claim-limt' ([tool.rdq.expected-failures] in p) is neither a rule id nor a test" in text
    )
    assert "close matches: claim-limit" in text
    assert "'test_xx'" in text and "close matches: test_x" in text
    # a test the run did not collect but the suite has (``more_names``) is known
    Ledger.from_sources([("p", {"test_xx": "y"})]).check([REF], more_names={"test_xx"})
    with pytest.raises(InvalidArgument, match="claim-limt"):
        ledger.check([REF], more_names={"test_xx"})


def test_an_entry_needs_a_reason() -> None:
    with pytest.raises(InvalidArgument, match=r"'claim-limit' needs a reason"):
        Ledger.from_sources([("code", {"claim-limit": "  "})])


def test_pyproject_tables_are_read_and_checked(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rdq]\nbackend = "sqlite"\n'
        '[tool.rdq.expected-failures]\n"claim-order" = "shared"\n'
        '[tool.rdq.sqlite.expected-failures]\n"test_x" = "sqlite only"\n'
    )
    s = resolve(rootpath=tmp_path, environ={})
    assert dict(s.expected_failures) == {"claim-order": "shared", "test_x": "sqlite only"}
    assert s.sources["expected-failures"].startswith(
        "[tool.rdq.expected-failures] and [tool.rdq.sqlite.expected-failures] in "
    )
    assert s.options == {}  # the backend's ledger table is not a backend option
    (tmp_path / "pyproject.toml").write_text('[tool.rdq.expected-failures]\n"claim-order" = 3\n')
    with pytest.raises(InvalidArgument, match=r"'claim-order' = 3: the value must be the reason"):
        resolve(rootpath=tmp_path, environ={})
    (tmp_path / "pyproject.toml").write_text('[tool.rdq]\nexpected-failures = ["claim-order"]\n')
    with pytest.raises(InvalidArgument, match=r"must be a table of id = \"reason\""):
        resolve(rootpath=tmp_path, environ={})


# ---- through pytest ---------------------------------------------------------------------------


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    out = {}
    for rep in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        name = rep.nodeid.rpartition("::")[2]
        if rep.when == "call" or rep.outcome != "passed":
            out[name] = "xfailed" if hasattr(rep, "wasxfail") and rep.skipped else rep.outcome
    return out


def _summary(result: pytest.RunResult) -> str:
    text = result.stdout.str()
    return text[text.index("rdq summary") :]


def test_a_rule_entry_turns_a_known_failure_into_a_reported_expected_failure(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(
        '[tool.rdq.expected-failures]\n"claim-limit" = "ignores the limit (tracked upstream)"\n'
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", LIMIT_IGNORED, "-k", EXACT, "-rx"
    )
    assert _outcomes(result) == {EXACT: "xfailed"}, result.stdout.str()[-3000:]
    assert result.ret == 0
    summary = _summary(result)
    assert "expected failures (ledger): 1" in summary
    assert f"test_claim.py::{EXACT}: ignores the limit (tracked upstream) [claim-limit]" in summary
    assert "violations by rule: none" in summary
    # without the entry, the same test fails
    pytester.makepyprojecttoml("")
    again = pytester.runpytest_inprocess("-p", "no:cacheprovider", LIMIT_IGNORED, "-k", EXACT)
    assert _outcomes(again) == {EXACT: "failed"}


def test_a_strict_entry_whose_test_passes_is_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(f'[tool.rdq.expected-failures]\n"{ORDER}" = "thought broken"\n')
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=memory", "-k", ORDER
    )
    assert _outcomes(result) == {ORDER: "failed"}, result.stdout.str()[-3000:]
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [f"*[[]XPASS(strict)[]] {ORDER}: thought broken (expected-failure ledger*"]
    )
    summary = _summary(result)
    assert "ledger entries whose test PASSED (strict: fix the ledger): 1" in summary
    assert f"test_claim.py::{ORDER}: thought broken [{ORDER}]" in summary
    assert "violations by rule: none" in summary  # a passing test broke no rule


def test_a_rule_entry_lets_its_other_tests_pass_and_fails_once_none_fails(
    pytester: pytest.Pytester,
) -> None:
    """A rule entry is strict as a whole: tests of the rule that the gap does not touch
    may pass (XPASS, not a failure) while one still fails; once none fails, the entry is
    stale and the run fails, naming it."""
    entry = '[tool.rdq.expected-failures]\n"claim-limit" = "ignores the limit (tracked upstream)"\n'
    pytester.makepyprojecttoml(entry)
    mixed = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", LIMIT_IGNORED, "-k", "test_claim.py and not own_queue", "-q"
    )
    outcomes = _outcomes(mixed)
    assert outcomes[EXACT] == "xfailed", mixed.stdout.str()[-3000:]
    assert "xpassed" in _summary(mixed) and " 1 xpassed" in mixed.stdout.str()
    assert mixed.ret == 0, mixed.stdout.str()[-3000:]
    assert "ledger rule entry" not in _summary(mixed)
    fixed = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=memory", "-k", "test_claim.py", "-q"
    )
    assert fixed.ret == 1, fixed.stdout.str()[-3000:]
    assert "failed" not in _outcomes(fixed).values()
    summary = _summary(fixed)
    assert "ledger rule entry 'claim-limit': all " in summary
    assert "(strict: the gap is fixed; remove the entry)" in summary


def test_a_failure_under_another_rule_than_the_entrys_is_reported(
    pytester: pytest.Pytester,
) -> None:
    # EXACT declares claim-limit and claim-complete; on limit_ignored it breaks claim-limit
    pytester.makepyprojecttoml('[tool.rdq.expected-failures]\n"claim-complete" = "stops short"\n')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", LIMIT_IGNORED, "-k", EXACT)
    assert _outcomes(result) == {EXACT: "failed"}, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(
        ["*in the ledger (rule claim-complete: stops short (*), but it failed under claim-limit:*"]
    )
    assert "claim-limit: 1 (" in _summary(result)


_IN_CODE = """
from tests.broken.memory import LimitIgnored
from rdq_memory.plugin import MemoryBackend

backend = MemoryBackend(LimitIgnored, "limit-ignored-with-ledger")
backend.expected_failures = {"%s": "declared by the backend"}
"""


def test_a_backend_declares_its_ledger_in_code(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ledgered=_IN_CODE % EXACT)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=ledgered:backend", "-k", f"{EXACT} or {ORDER}"
    )
    assert _outcomes(result) == {EXACT: "xfailed", ORDER: "passed"}, result.stdout.str()[-3000:]
    assert f"{EXACT}: declared by the backend [{EXACT}]" in _summary(result)


def test_an_unknown_entry_ends_the_run_with_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.rdq.expected-failures]\n"claim-ordr" = "typo"\n')
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=memory", "-k", ORDER
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*'claim-ordr' (*) is neither a rule id nor a test*close matches: claim-order*"]
    )


def test_an_unknown_entry_under_xdist_is_one_usage_error_too(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(f'[tool.rdq.expected-failures]\n"{ORDER}x" = "typo"\n')
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
         "--rdq-backend=memory"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    assert f"'{ORDER}x' (" in out and f"close matches: {ORDER}" in out, out[-3000:]
    assert "INTERNALERROR" not in out


_SETUP_FAILS = """
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("the fixture broke")

def test_mine(broken):
    pass
"""


def test_a_covered_test_whose_set_up_fails_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_own=_SETUP_FAILS)
    pytester.makepyprojecttoml('[tool.rdq.expected-failures]\n"test_mine" = "known gap"\n')
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--rdq-backend=memory", "--rdq-no-suite"
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*in the ledger (test_mine: known gap (*), but its setup failed*"])


def test_the_chaos_tests_message_names_every_rule_the_run_broke():
    """A campaign's failure names every violated rule, not only those of the violations it
    prints in full: a ledger entry for one rule must not cover a run that broke another
    (the eleventh violation's rule included)."""
    from types import SimpleNamespace

    from rdq_compliance import rules
    from rdq_compliance.suite.test_chaos import _by_rule

    many = [SimpleNamespace(rule="fencing")] * 10 + [SimpleNamespace(rule="lease-respected")]
    said = _by_rule(many)
    assert said == "[fencing] x 10, [lease-respected] x 1"
    assert set(rules.named_in(said)) == {"fencing", "lease-respected"}


def test_a_failure_under_the_entrys_rule_and_another_is_reported():
    """A failure that names the entry's rule *and* one no rule entry names (a chaos
    campaign that broke both) is a failure, naming the other rule; with both rules in the
    ledger it is an expected one; a test-id entry covers the test whatever it names."""
    from rdq_compliance.ledger import Entry
    from rdq_compliance.pytest_report import not_covered

    limit = Entry("claim-limit", "ignores the limit", "pyproject.toml", is_rule=True)
    both = ("claim-limit", "claim-order")
    assert not_covered(limit, "call", both, {"claim-limit"}) == "it failed under claim-order"
    assert not_covered(limit, "call", both, {"claim-limit", "claim-order"}) is None
    assert not_covered(limit, "call", ("claim-limit",), {"claim-limit"}) is None
    assert not_covered(limit, "setup", ("claim-limit",), {"claim-limit"}) == "its setup failed"
    by_id = Entry("test_x", "known", "pyproject.toml", is_rule=False)
    assert not_covered(by_id, "call", both, set()) is None
