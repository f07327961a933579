"""The kit fails broken MongoDB storages, naming the rule and a task the bug hit
(``contract.md#8-bug-classes``), and passes the faithful one (the control), on a real
wire-protocol server.

Each variant of :mod:`tests.broken.mongo` (its catching test and rule: the catalogue's,
:mod:`tests.broken.catalogue`) is run through the conformance suite exactly as a
backend author runs it (``--rdq-backend=tests.broken.mongo:<name> --rdq-dsn URI``),
in-process, on the suite modules that hold the catching tests. Each test checks that (a)
the run fails and the broken path ran; (b) the catching tests fail; (c) their reports
start with the rule id, and one names a task the broken path mishandled. The control runs
the same modules and must pass.
"""

from __future__ import annotations

import os
import re

import pytest

from tests._paths import pythonpath
from tests.broken import catalogue
from tests.broken import mongo as variants

SUITE = "rdq_compliance.suite"

def _case(suite: catalogue.Suite) -> tuple[str, str, str]:
    """(suite module, catching test function, rule id): a mongo case has one catcher."""
    ((key, rule),) = suite.catchers.items()
    module, function = key.split("::")
    return module.removesuffix(".py"), function, rule


#: variant -> (suite module, catching test function, rule id): the catalogue's.
CASES = {v.name: _case(s) for v, s in catalogue.cases(catalogue.Suite, "mongo")}


def _run(pytester: pytest.Pytester, dsn: str, variant: str, module: str, function: str):
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-q", "--rdq-require-backend",
        f"--rdq-backend=tests.broken.mongo:{variant}", f"--rdq-dsn={dsn}",
        "-k", function, "--pyargs", f"{SUITE}.{module}",
    )  # fmt: skip
    reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    failed = {r.nodeid: r.longreprtext for r in reports if r.failed}
    passed = [r.nodeid for r in reports if r.passed and r.when == "call"]
    return result.ret, failed, passed, result.stdout.str()


@pytest.fixture
def suite_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    for name in [n for n in os.environ if n.startswith("RDQ_")]:
        monkeypatch.delenv(name)
    return pytester


@pytest.mark.parametrize("variant", sorted(CASES))
def test_kit_fails_the_broken_mongo_storage(suite_env, mongo_server, variant):
    module, function, rule = CASES[variant]
    variants.VICTIMS.pop(variant, None)
    ret, failed, _, out = _run(suite_env, mongo_server.dsn, variant, module, function)
    victims = sorted(variants.VICTIMS.get(variant, ()))
    assert ret == pytest.ExitCode.TESTS_FAILED, f"{variant}: the suite did not fail:\n{out[-3000:]}"
    assert victims, f"{variant}: the broken code path never ran"
    hits = {k: v for k, v in failed.items() if function in k}
    assert hits, f"{variant}: {function} did not fail; failed: {sorted(failed)}"
    unnamed = [k for k, text in hits.items() if not catalogue.names_rule(text, rule)]
    assert not unnamed, f"{variant}: failures not naming [{rule}]: " + "\n".join(
        hits[k][-1500:] for k in unnamed
    )
    named = [
        t for t in victims for text in hits.values()
        if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)
    ]  # fmt: skip
    assert named, f"{variant}: no report names a victim {victims[:10]}:\n" + "\n".join(
        text[-1500:] for text in hits.values()
    )


def test_faithful_mongo_storage_passes_the_catching_tests(suite_env, mongo_server):
    """The control: the real storage through the same module passes every catching test."""
    for module in sorted({m for m, _, _ in CASES.values()}):
        functions = " or ".join(f for m, f, _ in CASES.values() if m == module)
        control = catalogue.control("mongo").name
        ret, failed, passed, out = _run(suite_env, mongo_server.dsn, control, module, functions)
        assert ret == pytest.ExitCode.OK and not failed, (
            f"{module}: {sorted(failed)}\n{out[-3000:]}"
        )
        assert passed, f"{module}: nothing passed"
