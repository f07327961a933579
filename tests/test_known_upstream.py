"""Known-upstream ledger entries (``contract.md#7-the-ledger``): a behaviour a public issue
tracks. A failure an entry covers is reported, in the pytest summary, ``-rx``, the JUnit
XML and the chaos report folder, as ``known upstream, still present: owner/name#N
(title)``, never as a pass; the run fails on every failure no entry covers, and when the
behaviour is gone (``known upstream owner/name#N no longer reproduces: remove the entry
(the fix may have landed)``); a malformed entry is one clear error naming it.

The runs select a few suite tests with ``-k`` against ``memory`` and the deliberately
broken backends of ``tests/broken/``; the chaos runs take the tiny scenario (a few
seconds each) on ``tests.broken.sqlite:dead_letter_deletes``, whose seeded workload
dead-letters, and so loses, exactly the tasks ``t00000``, ``t00006`` and ``t00010``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rdq_compliance import known_upstream as ku
from rdq_compliance.ledger import TestRef
from rdq_compliance.settings import resolve
from rdq_core.errors import InvalidArgument
from tests._paths import pythonpath

TESTS_DIR = Path(__file__).resolve().parent
EXACT = "test_claim_returns_exactly_limit_when_more_are_due"  # claim-limit, on limit_ignored
STATS = "test_stats_count_only_their_own_queue"  # queue-isolation, on limit_ignored
LIMIT_IGNORED = "--rdq-backend=tests.broken.memory:limit_ignored"
CHAOS = "test_chaos_campaign_finds_no_violation"
STILL = "known upstream, still present: acme/store#42 (claims ignore the limit)"
GONE = (
    "known upstream acme/store#42 no longer reproduces: remove the entry (the fix may have landed)"
)

REF = TestRef(
    "rdq_compliance/suite/test_claim.py::test_x[a]", "test_x[a]", "test_x",
    ("claim-limit", "claim-complete"),
)  # fmt: skip


def _entry(**fields: object) -> ku.KnownUpstream:
    table = {"repository": "acme/store", "number": 42, "title": "claims ignore the limit"}
    (entry,) = ku.entries_from("here", [{**table, **fields}])
    return entry


def _toml(**fields: object) -> str:
    """One ``[[tool.rdq.known-upstream]]`` entry (acme/store#42 unless told)."""
    table = {"repository": "acme/store", "number": 42, "title": "claims ignore the limit"}
    lines = ["[[tool.rdq.known-upstream]]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in {**table, **fields}.items()]
    return "\n".join(lines) + "\n"


# ---- the entry ----------------------------------------------------------------------------------


def test_an_entry_names_its_issue_by_repository_and_number() -> None:
    entry = _entry(rules=["claim-limit"])
    assert entry.ref == "acme/store#42"
    assert entry.url == "https://github.com/acme/store/issues/42"
    assert entry.still_present() == STILL
    assert entry.gone() == GONE
    assert entry.source == "here"
    in_code = ku.KnownUpstream("rq/rq", 1716, "lost before STARTED", rules=("no-loss",))
    (checked,) = ku.entries_from("backend 'rq'", [in_code])
    assert checked.url == "https://github.com/rq/rq/issues/1716"
    assert checked.source == "backend 'rq'"


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"repository": "https://github.com/rq/rq/issues/1716", "number": None},
            [
                "repository 'https://github.com/rq/rq/issues/1716' is not owner/name: "
                'write repository = "rq/rq" and number = 1716',
                "number is missing",
            ],
        ),
        (
            {"repository": "rq/rq#1716"},
            ["repository 'rq/rq#1716' is not owner/name: write repository = \"rq/rq\""],
        ),
        ({"repository": "rq"}, ["repository 'rq' is not owner/name: write the repository as"]),
        ({"repository": "a b/c"}, ["repository 'a b/c' is not owner/name"]),
        ({"number": 0}, ["number 0: write the issue's number, a positive integer"]),
        ({"number": -3}, ["number -3: write the issue's number, a positive integer"]),
        ({"number": True}, ["number True: write the issue's number"]),
        ({"number": "#1716"}, ["number '#1716': write it as an integer (number = 1716)"]),
        ({"title": " "}, ["title ' ': write the issue's title"]),
        ({"title": "x" * 101}, ["title is 101 characters over 1 line(s): write one line of at"]),
        ({"tests": [], "rules": []}, ["it covers nothing: name the tests whose failure it covers"]),
        ({"pattern": "lost"}, ["it covers nothing", "(a pattern only narrows them)"]),
        ({"tests": "test_x"}, ["tests 'test_x': write a list of ids (tests = [\"test_x\"])"]),
        ({"rules": ["no-los"]}, ["rule 'no-los' is not a rule id", "close matches: no-loss"]),
        ({"rules": ["no-loss"], "pattern": "a("}, ["pattern 'a(' is not a regular expression"]),
        ({"rule": ["no-loss"]}, ["unknown key(s) 'rule': an entry's keys are repository, number"]),
    ],
)
def test_a_malformed_entry_is_an_error_naming_it_and_what_to_write(
    fields: dict[str, object], said: list[str]
) -> None:
    table = {"repository": "acme/store", "number": 42, "title": "claims ignore the limit"}
    if "tests" not in fields and "rules" not in fields and "pattern" not in fields:
        table["tests"] = ["test_x"]
    entry = {k: v for k, v in {**table, **fields}.items() if v is not None}
    good = {**table, "tests": ["test_y"]}
    with pytest.raises(InvalidArgument) as err:
        ku.entries_from("[[tool.rdq.known-upstream]] in p", [good, entry])
    text = str(err.value)
    assert text.startswith("known-upstream ledger: entry 2 of [[tool.rdq.known-upstream]] in p")
    assert "entry 1" not in text, text  # the good entry is not named
    for part in said:
        assert part in text, text


def test_what_is_not_an_entry_is_named() -> None:
    with pytest.raises(InvalidArgument, match=r"entry 1 of code: 'rq/rq#1' is not an entry: "
                       r"write KnownUpstream\(\"owner/name\", N"):  # fmt: skip
        ku.entries_from("code", ["rq/rq#1"])


def test_an_entry_covers_by_test_rule_and_pattern() -> None:
    limit = ku.Failure(("claim-limit",), "[claim-limit] returned 2 tasks")
    by_test = _entry(tests=["test_x"])
    assert by_test.covers(REF, limit) == ()
    assert by_test.covers(REF, ku.Failure((), "anything")) == ()
    assert _entry(tests=["test_y"]).covers(REF, limit) is None
    by_rule = _entry(rules=["claim-limit"])
    assert by_rule.covers(REF, limit) == ("claim-limit",)
    # a failure that names no rule is judged under the rules its test declares
    assert by_rule.covers(REF, ku.Failure((), "no rule named")) == ("claim-limit",)
    # one that names another rule too is not covered (a new bug never hides behind it)
    both = ku.Failure(("claim-limit", "claim-order"), "[claim-limit] [claim-order]")
    assert by_rule.covers(REF, both) is None
    assert _entry(rules=["one-claim"]).covers(REF, limit) is None  # not a rule of the test
    narrowed = _entry(tests=["test_x"], rules=["claim-limit"], pattern=r"returned \d tasks")
    assert narrowed.covers(REF, limit) == ("claim-limit",)
    assert narrowed.covers(REF, ku.Failure(("claim-limit",), "returned many")) is None


def test_a_judgement_splits_failures_and_says_what_is_gone() -> None:
    entries = (_entry(rules=["claim-limit"], pattern="t1"), _entry(tests=["test_x"], number=7))
    scope = ku.Scope.of(REF, entries)
    failures = [
        ku.Failure(("claim-limit",), "task t1"),
        ku.Failure(("claim-limit",), "task t2"),
        ku.Failure(("claim-complete",), "task t3"),
    ]
    judged = scope.judge(failures)
    assert judged.covered[0] is entries[0]
    assert judged.covered[1] is entries[1]  # the second entry takes what the first leaves
    assert judged.covered[2] is entries[1]
    assert judged.uncovered == [] and judged.gone() == []
    alone = ku.Scope.of(REF, entries[:1]).judge(failures)
    assert alone.uncovered == [1, 2]
    nothing = scope.judge([])
    assert nothing.gone() == [entries[1]]  # named the test by id, covered nothing
    assert nothing.state(entries[0]) == ku.STATE_NOT_SEEN  # by rule: judged over the run
    assert ku.Scope.of(REF, [_entry(tests=["test_y"])]).entries == ()


def test_the_run_finds_gone_entries_by_test_and_by_rule() -> None:
    def records(scope: ku.Scope, failures: list[ku.Failure]) -> list[dict[str, object]]:
        return [json.loads(r) for r in scope.judge(failures).records()]

    by_rule = _entry(rules=["claim-limit", "claim-complete"])
    other = TestRef("t.py::test_z", "test_z", "test_z", ("claim-limit",))
    limit = ku.Failure(("claim-limit",), "[claim-limit]")
    run = [("test_x[a]", r) for r in records(ku.Scope.of(REF, [by_rule]), [limit])] + [
        ("test_z", r) for r in records(ku.Scope.of(other, [by_rule]), [])
    ]
    stale = ku.stale(run)
    # claim-limit failed as covered in test_x; claim-complete (declared by test_x) never did
    assert [s.where for s in stale] == [
        "rule claim-complete: none of its 1 tests failed as the entry covers"
    ]
    assert stale[0].line().startswith(f"{GONE}; rule claim-complete")
    by_test = _entry(tests=["test_x"])
    gone = ku.stale([("test_x[a]", r) for r in records(ku.Scope.of(REF, [by_test]), [])])
    assert [s.where for s in gone] == ["test_x[a] ran without it"]
    assert ku.stale([("test_x[a]", r) for r in records(ku.Scope.of(REF, [by_test]), [limit])]) == []


def test_pyproject_arrays_are_read_as_written(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rdq]\nbackend = "sqlite"\n'
        + _toml(tests=["test_x"])
        + "[[tool.rdq.sqlite.known-upstream]]\n"
        'repository = "rq/rq"\nnumber = 1716\ntitle = "t"\nrules = ["no-loss"]\n'
    )
    s = resolve(rootpath=tmp_path, environ={})
    (shared, where_shared), (own, where_own) = [(d, w) for w, d in s.known_upstream]
    assert where_shared.startswith("[[tool.rdq.known-upstream]] in ") and len(shared) == 1
    assert where_own.startswith("[[tool.rdq.sqlite.known-upstream]] in ") and len(own) == 1
    assert s.options == {}  # the backend's array is not a backend option
    (entry,) = ku.entries_from(where_own, own)
    assert entry.ref == "rq/rq#1716" and entry.rules == ("no-loss",)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.rdq.known-upstream]\nrepository = "rq/rq"\nnumber = 1\n'
    )
    with pytest.raises(InvalidArgument, match=r"\[\[tool.rdq.known-upstream\]\] must be an array"):
        resolve(rootpath=tmp_path, environ={})


# ---- through pytest ---------------------------------------------------------------------------


def _outcomes(result: pytest.RunResult) -> dict[str, str]:
    out = {}
    for rep in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        name = rep.nodeid.rpartition("::")[2]
        if rep.when == "call" or rep.outcome != "passed":
            out[name] = "xfailed" if hasattr(rep, "wasxfail") and rep.skipped else rep.outcome
    return out


def _summary(text: str) -> str:
    return text[text.index("rdq summary") :]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)


def test_a_covered_failure_is_reported_as_known_upstream_and_the_run_passes(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(_toml(tests=[EXACT], rules=["claim-limit"]))
    xml = pytester.path / "out.xml"
    result = _run(pytester, LIMIT_IGNORED, "-k", EXACT, "-rx", f"--junitxml={xml}")
    text = result.stdout.str()
    assert _outcomes(result) == {EXACT: "xfailed"}, text[-3000:]
    assert result.ret == 0, text[-3000:]
    summary = _summary(text)
    assert "known upstream (failures, not passes): 1" in summary
    assert f"test_claim.py::{EXACT}: {STILL}" in summary
    assert "violations by rule: none" in summary
    # -rx: the mark and the failure it covers, never hidden
    result.stdout.fnmatch_lines([f"XFAIL *{EXACT} - {STILL}; it failed: *[[]claim-limit[]] *"])
    (case,) = ET.parse(xml).getroot().iter("testcase")
    skipped = case.find("skipped")
    assert skipped is not None and str(skipped.get("message")).startswith(STILL)
    (record,) = [
        json.loads(str(p.get("value")))
        for p in case.iter("property")
        if p.get("name") == "rdq.known-upstream"
    ]
    assert record["issue"] == "acme/store#42" and record["state"] == ku.STATE_PRESENT
    assert record["url"] == "https://github.com/acme/store/issues/42"
    # the same test without the entry fails: the entry is what reported it so
    pytester.makepyprojecttoml("")
    assert _outcomes(_run(pytester, LIMIT_IGNORED, "-k", EXACT)) == {EXACT: "failed"}


def test_an_uncovered_failure_beside_a_covered_one_fails_the_run(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(_toml(rules=["claim-limit"], pattern="returned 2 tasks"))
    result = _run(pytester, LIMIT_IGNORED, "-k", f"{EXACT} or {STATS}")
    text = result.stdout.str()
    assert _outcomes(result) == {EXACT: "xfailed", STATS: "failed"}, text[-3000:]
    assert result.ret == 1
    summary = _summary(text)
    assert f"queue-isolation: 1 ({STATS})" in summary
    assert f"test_claim.py::{EXACT}: {STILL}" in summary
    # a pattern the failure does not match covers nothing
    pytester.makepyprojecttoml(_toml(rules=["claim-limit"], pattern="returned 3 tasks"))
    unmatched = _run(pytester, LIMIT_IGNORED, "-k", EXACT)
    assert _outcomes(unmatched) == {EXACT: "failed"} and unmatched.ret == 1


def test_an_entry_whose_test_passes_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(_toml(tests=[EXACT]))
    result = _run(pytester, "--rdq-backend=memory", "-k", EXACT)
    text = result.stdout.str()
    assert _outcomes(result) == {EXACT: "failed"}, text[-3000:]
    assert result.ret == 1
    said = f"{GONE}; {EXACT} ran without it (known-upstream ledger, [[tool.rdq.known-upstream]] in"
    assert said in text.split("rdq summary")[0]  # the test's failure says it
    summary = _summary(text)
    assert said in summary
    assert "violations by rule: none" in summary  # a passing test broke no rule


def test_a_rule_entry_none_of_whose_tests_fails_any_more_fails_the_run(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyprojecttoml(_toml(rules=["claim-limit"]))
    result = _run(pytester, "--rdq-backend=memory", "-k", "test_claim.py", "-q")
    text = result.stdout.str()
    assert "failed" not in _outcomes(result).values(), text[-3000:]
    assert result.ret == 1, text[-3000:]
    assert f"  {GONE}; rule claim-limit: none of its " in _summary(text)
    # while one of its tests still fails as covered, the others may pass
    mixed = _run(pytester, LIMIT_IGNORED, "-k", "test_claim.py and not own_queue", "-q")
    assert mixed.ret == 0, mixed.stdout.str()[-3000:]
    assert "no longer reproduces" not in _summary(mixed.stdout.str())


def test_a_gone_rule_entry_fails_the_run_under_xdist_too(tmp_path: Path) -> None:
    """The verdict over the whole run is taken on the controller, from the records the
    workers' reports carry."""
    (tmp_path / "pyproject.toml").write_text(_toml(rules=["claim-limit"]))
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
            "--rdq-backend=memory", "-k", "test_claim.py"]  # fmt: skip
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert f"{GONE}; rule claim-limit: none of its " in _summary(proc.stdout)
    assert " failed" not in proc.stdout.splitlines()[-1], proc.stdout[-500:]


def test_a_backend_declares_known_upstream_entries_in_code(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        upstreamed=(
            "from rdq_compliance.known_upstream import KnownUpstream\n"
            "from tests.broken.memory import LimitIgnored\n"
            "from rdq_memory.plugin import MemoryBackend\n"
            "backend = MemoryBackend(LimitIgnored, 'limit-ignored-upstream')\n"
            "backend.known_upstream = (\n"
            "    KnownUpstream(\n"
            "        'acme/store', 42, 'claims ignore the limit', rules=('claim-limit',)\n"
            "    ),\n"
            ")\n"
        )
    )
    pytester.syspathinsert()
    result = _run(pytester, "--rdq-backend=upstreamed:backend", "-k", EXACT)
    assert _outcomes(result) == {EXACT: "xfailed"}, result.stdout.str()[-3000:]
    assert f"{EXACT}: {STILL}" in _summary(result.stdout.str())


def test_a_malformed_entry_ends_the_run_with_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(_toml(repository="https://github.com/acme/store", number=0))
    result = _run(pytester, "--rdq-backend=memory", "-k", EXACT)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*known-upstream ledger: entry 1 of [[]*tool.rdq.known-upstream[]]* in *pyproject.toml "
            "(repository 'https://github.com/acme/store', number 0, *): repository "
            "'https://github.com/acme/store' is not owner/name: write repository = \"acme/store\"; "
            "number 0: write the issue's number, a positive integer*"
        ]
    )
    pytester.makepyprojecttoml(_toml(tests=["test_claim_returns_exactly_limit"]))
    unknown = _run(pytester, "--rdq-backend=memory", "-k", EXACT)
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(
        ["*acme/store#42 (*): test 'test_claim_returns_exactly_limit' is not a test of this "
         f"run; close matches: {EXACT}*"]
    )  # fmt: skip


# ---- the chaos campaign ------------------------------------------------------------------------


def _chaos(
    tmp_path: Path, backend: str, entry: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "pyproject.toml").write_text(entry)
    xml = tmp_path / "out.xml"
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "chaos", "-rx",
            f"--rdq-backend={backend}", f"--junitxml={xml}",
            f"--rdq-chaos-scenario={TESTS_DIR / 'chaos' / 'tiny.toml'}"]  # fmt: skip
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    (case,) = ET.parse(xml).getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    return proc, Path(str(props["rdq.chaos-report"]))


LOST = "tests.broken.sqlite:dead_letter_deletes"
VANISH = "known upstream, still present: acme/store#42 (dead-lettered tasks vanish)"


def test_chaos_violations_an_entry_covers_are_marked_and_the_others_fail(tmp_path: Path) -> None:
    entry = _toml(title="dead-lettered tasks vanish", rules=["no-loss"], pattern="'t0000[06]'")
    proc, folder = _chaos(tmp_path, LOST, entry)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    failure = out[out.index("AssertionError: ") : out.index("rdq summary")]
    # the message: the uncovered violation in full, then the covered ones, marked
    assert "1 violation(s) of [no-loss] x 1; report folder: " in failure, failure
    assert "task 't00010'" in failure.split(VANISH)[0]
    assert (
        f"{VANISH}: 2 violation(s) of rule no-loss (tasks 't00000', 't00006') "
        "<https://github.com/acme/store/issues/42>" in failure
    )
    summary = _summary(out)
    assert f"no-loss: 1 ({CHAOS})" in summary
    assert f"test_chaos.py::{CHAOS}: {VANISH} (2 violations)" in summary
    results = json.loads((folder / "results.json").read_text())
    assert results["verdict"] == "violations"
    marks = {v["task"]: (v.get("known_upstream") or {}).get("mark") for v in results["violations"]}
    assert marks == {"t00000": VANISH, "t00006": VANISH, "t00010": None}
    assert results["rules"]["no-loss"] == f"violated; {VANISH}"
    (known,) = results["known_upstream"]
    assert (known["state"], known["violations"]) == (ku.STATE_PRESENT, 2)
    cases = {c.get("name"): c for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")}
    assert cases["no-loss"].find("failure") is not None
    page = (folder / "timeline.html").read_text()
    assert page.count(f'<a href="https://github.com/acme/store/issues/42">{VANISH}</a>') == 2


def test_a_chaos_campaign_whose_every_violation_is_known_is_reported_so(tmp_path: Path) -> None:
    entry = _toml(title="dead-lettered tasks vanish", tests=[CHAOS], pattern="get\\(\\) no longer")
    proc, folder = _chaos(tmp_path, LOST, entry)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    summary = _summary(out)
    assert "  chaos               0        0        0        0        1        0" in summary
    assert f"test_chaos.py::{CHAOS}: {VANISH} (3 violations)" in summary
    assert f"XFAIL rdq_compliance/suite/test_chaos.py::{CHAOS} - {VANISH}: 3 violation(s)" in out
    results = json.loads((folder / "results.json").read_text())
    assert results["verdict"] == "known-upstream"
    assert results["rules"]["no-loss"] == VANISH
    cases = {c.get("name"): c for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")}
    skipped = cases["no-loss"].find("skipped")
    assert skipped is not None and skipped.get("type") == "known-upstream"
    assert skipped.get("message") == VANISH and "t00010" in str(skipped.text)
    assert "<h2>Known upstream</h2>" in (folder / "timeline.html").read_text()


def test_a_chaos_entry_that_no_longer_reproduces_fails_the_run(tmp_path: Path) -> None:
    entry = _toml(title="dead-lettered tasks vanish", tests=[CHAOS], rules=["no-loss"])
    proc, folder = _chaos(tmp_path, "sqlite", entry)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    said = f"{GONE}; {CHAOS} ran without it"
    failure = out[: out.index("rdq summary")]
    assert said in failure and f"report folder: {folder}" in failure, failure[-3000:]
    assert said in _summary(out)
    assert "violations by rule: none" in _summary(out)
    results = json.loads((folder / "results.json").read_text())
    (known,) = results["known_upstream"]
    assert known["state"] == ku.STATE_GONE and known["says"] == GONE
    cases = {c.get("name"): c for c in ET.parse(folder / "junit.xml").getroot().iter("testcase")}
    gone = cases["known upstream acme/store#42"].find("failure")
    assert gone is not None and gone.get("message") == GONE
