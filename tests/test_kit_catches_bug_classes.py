"""The kit's proof that its conformance suite fails broken backends
(``contract.md#8-bug-classes``).

For every deliberately broken backend in :mod:`tests.broken.memory` the suite is run
against it (its cases, and the tests that must catch each, are the catalogue's:
:mod:`tests.broken.catalogue`), exactly as a backend author would run it
(``pytest --pyargs rdq_compliance.suite... --rdq-backend=tests.broken.memory:<variant>``),
and this test checks that

(a) the run fails;
(b) the named suite tests — the ones that exist to catch this bug class — fail;
(c) each of their failure reports starts with the violated rule's id (``[rule-id]``),
    and at least one of them names a task the broken code path actually mishandled
    (the broken store records those task ids as it goes, so "names the task" means the
    task the bug hit, not any task).

The controls run the *whole* suite against the unbroken reference store and against
the hook-split copy of it the claim-side variants are built on: both must pass
(0 failures, >0 passed), so a variant's failures come from its one change.

Choice of scope (``RDQ_KIT_SCOPE``). The whole suite takes about 11 s per backend
(lease expiries are waited for on the storage clock, never faked), so "the whole
suite for each of ~30 variants" takes about 7 minutes. So:

- the controls always run the **whole** suite;
- each variant runs, by default (``modules``), the whole suite modules that hold its
  catching tests (about 80 s for the file in total, one process);
- ``RDQ_KIT_SCOPE=tests`` narrows each variant's run with ``-k`` to its catching test
  functions (about 40 s in total); ``RDQ_KIT_SCOPE=suite`` runs the whole suite for
  every variant. The assertions are the same in every scope.

Runs are in-process (``pytester.runpytest_inprocess``): no interpreter start-up per
run, and the test reads the broken store's record of its victims directly. The
in-process run imports ``tests.broken.memory`` from the checkout root (pytest's
``pythonpath``); the root is put on ``PYTHONPATH`` as well so any process the suite
spawns could import the variants too (the multi-process race skips on in-process stores
anyway).
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from rdq_compliance.rules import RULES
from tests._paths import pythonpath
from tests.broken import catalogue
from tests.broken import memory as broken

# pytester restores sys.modules after every in-process run, so whatever a run imports
# is imported again by the next one. Hypothesis (pulled in by its pytest plugin) costs
# about a second per run that way; imported here once, every run reuses it.
importlib.import_module("hypothesis")

SUITE = "rdq_compliance.suite"
SCOPES = ("tests", "modules", "suite")
SCOPE = os.environ.get("RDQ_KIT_SCOPE", "modules").strip().lower() or "modules"


#: (variant, what the suite must show): the memory variants of the catalogue.
CASES = catalogue.cases(catalogue.Suite, "memory", by=catalogue.KIT)


# ---- running the suite --------------------------------------------------------------------


@dataclass
class SuiteRun:
    ret: int
    passed: list[str]
    failed: dict[str, str]  # test key -> failure report text (setup/call/teardown)
    output: str

    def describe(self) -> str:
        listed = "\n".join(f"  {key}" for key in sorted(self.failed)) or "  (none)"
        return f"exit code {self.ret}, {len(self.passed)} passed, failed:\n{listed}"


def _key(report: pytest.TestReport) -> str:
    """``module.py::test_name[params]``. Taken from the report's location: the suite lives
    outside pytester's root directory, and its node ids then carry no module path."""
    name = report.nodeid.rpartition("::")[2]
    return f"{Path(report.location[0]).name}::{name}"


def run_suite(
    pytester: pytest.Pytester,
    backend: str,
    modules: list[str] | None = None,
    functions: list[str] | None = None,
) -> SuiteRun:
    targets = [SUITE] if modules is None else [f"{SUITE}.{m}" for m in modules]
    select = [] if functions is None else ["-k", " or ".join(functions)]
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-q", "--rdq-require-backend",
        f"--rdq-backend={backend}", *select, "--pyargs", *targets,
    )  # fmt: skip
    reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    failed: dict[str, str] = {}
    passed = []
    for rep in reports:
        key = _key(rep)
        if rep.failed:
            failed[key] = failed.get(key, "") + rep.longreprtext
        elif rep.passed and rep.when == "call":
            passed.append(key)
    return SuiteRun(result.ret, passed, failed, result.stdout.str())


@pytest.fixture
def suite_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    for name in [n for n in os.environ if n.startswith("RDQ_") and n != "RDQ_KIT_SCOPE"]:
        monkeypatch.delenv(name)  # the command line alone picks the backend and its settings
    return pytester


def _names_task(text: str, task_ids: list[str]) -> list[str]:
    return [t for t in task_ids if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)]


def _matching(run: SuiteRun, catcher: str) -> dict[str, str]:
    if "[" in catcher:
        return {k: v for k, v in run.failed.items() if k == catcher}
    return {k: v for k, v in run.failed.items() if k.split("[", 1)[0] == catcher}


# ---- the controls ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", catalogue.control("memory").dotted])
def test_unbroken_reference_passes_the_whole_suite(suite_env: pytest.Pytester, backend: str):
    run = run_suite(suite_env, backend, None)
    assert run.ret == pytest.ExitCode.OK and not run.failed, (
        f"the unbroken store {backend!r} fails the suite: {run.describe()}\n{run.output[-4000:]}"
    )
    assert len(run.passed) > 0, f"nothing passed on {backend!r}: {run.describe()}"


def test_every_rule_id_of_the_cases_exists():
    unknown = {rule for _, suite in CASES for rule in suite.rules} - set(RULES)
    assert not unknown, f"cases name rule ids that rules.py does not define: {unknown}"
    exposed = {n for n, v in vars(broken).items() if isinstance(v, broken.MemoryBackend)}
    excused = {v.name for v in catalogue.variants("memory") if "suite" in v.excused}
    covered = {variant.name for variant, _ in CASES} | excused | {"control"}
    assert exposed == covered, (
        f"broken backends neither caught by the suite nor excused: {sorted(exposed - covered)}; "
        f"cases without a backend: {sorted(covered - exposed)}"
    )


# ---- the broken variants ----------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "case"), CASES, ids=[v.name for v, _ in CASES])
def test_suite_fails_the_broken_backend(
    suite_env: pytest.Pytester, variant: catalogue.Variant, case: catalogue.Suite
):
    backend = getattr(broken, variant.name)
    store_cls = backend.store_factory
    store_cls.victims.clear()

    assert SCOPE in SCOPES, f"RDQ_KIT_SCOPE={SCOPE!r}: use one of {SCOPES}"
    run = run_suite(
        suite_env,
        variant.dotted,
        None if SCOPE == "suite" else case.modules,
        case.functions if SCOPE == "tests" else None,
    )
    victims = list(store_cls.victims)
    where = f"{variant.name} ({variant.title})"

    # (a) the run fails, and the bug actually fired
    assert run.ret == pytest.ExitCode.TESTS_FAILED, (
        f"{where}: the suite did not fail: {run.describe()}"
    )
    assert victims, f"{where}: the broken code path never ran; the suite never exercised it"

    for catcher, rule in case.catchers.items():
        # (b) the tests that exist to catch this class fail
        hits = _matching(run, catcher)
        assert hits, f"{where}: {catcher} did not fail: {run.describe()}"
        # (c) every failure report of it names the rule, one names a task the bug hit
        unnamed = [k for k, text in hits.items() if not catalogue.names_rule(text, rule)]
        assert not unnamed, f"{where}: these failures do not name rule [{rule}]:\n" + "\n".join(
            f"--- {k}\n{hits[k][-1500:]}" for k in unnamed
        )
        named = {k: _names_task(text, victims) for k, text in hits.items()}
        assert any(named.values()), (
            f"{where}: no failure report of {catcher} names a task the bug hit "
            f"(victims {victims[:10]}):\n"
            + "\n".join(f"--- {k}\n{text[-1500:]}" for k, text in hits.items())
        )
