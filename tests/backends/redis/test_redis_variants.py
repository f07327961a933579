"""The kit fails every broken Redis variant, naming the rule.

For each variant of :mod:`tests.broken.redis` the conformance suite is run against it in a
pytest subprocess, as a backend author would run it (``pytest
--rdq-backend=tests.broken.redis:<variant> -k ... --junitxml ...``), and the JUnit report is
read back. The check, as for the in-memory broken backends
(``tests/test_kit_catches_bug_classes.py``):

(a) the run fails, and the variant's broken code path ran (it recorded victims);
(b) each test that exists to catch the class fails;
(c) every failure of it names the rule (``[rule-id]``), and one names a task the bug hit
    (a victim) — and, for a double claim, the two workers holding it.

Each run is narrowed with ``-k`` to the catching tests (a second or two each); the control
(the same plumbing, nothing changed) runs the whole conformance suite and must pass, so a
variant's failure is its one change.

**Where each runs.** On the test server (``RDQ_REDIS_DSN``, default 127.0.0.1:6379),
except the undeclared-key variant: Redis refuses a key outside the script's slot only on a
cluster, so it runs on the local 3-master cluster (``--rdq-option redis_cluster=3``, the
backend's own local rung); on a single server it passes the same tests (shown below), and
the scripts' undeclared-key guard (``rdq_check_keys=1``) catches it there too.

**Caught by the clock skew only**: the client-clock variant (``now`` sent in ``ARGV``).
On one host the client's clock is the server's, so the conformance suite passes it (shown
below); the chaos campaign with skewed worker clocks (``chaos/clock.toml``) fails it under
``storage-clock``, naming the task and the workers
(``tests/server_contract/test_clock_skew.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from rdq_compliance.rules import RULES
from tests._junit import read_junit as _read_junit
from tests._paths import pythonpath
from tests.backends.redis._redis_support import with_query
from tests.broken import catalogue
from tests.broken import redis as broken

CONFORMANCE = "not chaos and not stateful"
#: A whole run (one subprocess) may take at most this long.
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class Case:
    """A variant and what the suite must show of it (:class:`tests.broken.catalogue.Suite`:
    its catchers, where it runs, whether it must be caught)."""

    variant: str
    bug_class: str
    suite: catalogue.Suite

    @property
    def catchers(self) -> Mapping[str, str]:
        return self.suite.catchers

    @property
    def where(self) -> str:
        return self.suite.where

    @property
    def workers(self) -> bool:
        return self.suite.workers

    @property
    def keyword(self) -> str:
        return self.suite.keyword

    def __str__(self) -> str:
        return f"{self.variant}-{self.where}"


#: Every redis variant of the catalogue with what the suite must show of it.
_ALL = [Case(v.name, v.title, s) for v, s in catalogue.cases(catalogue.Suite, "redis")]
#: The ones the suite must catch.
CASES = [c for c in _ALL if c.suite.caught]
#: The undeclared-key variant where it is caught: on the cluster.
(UNDECLARED,) = [c for c in CASES if c.variant == "undeclared_key_enqueue" and c.where == "cluster"]
#: The ones the suite alone must not catch: the undeclared-key variant on a single server
#: without the guard, and the client-clock variant (the clock-skew campaign catches it).
(UNDECLARED_ON_SERVER,) = [
    c for c in _ALL if c.variant == "undeclared_key_enqueue" and not c.suite.caught
]
(CLIENT_CLOCK,) = [c for c in _ALL if c.variant == "client_clock" and not c.suite.caught]


# ---- running the suite in a subprocess ---------------------------------------------------


@dataclass
class SuiteRun:
    ret: int
    passed: list[str]
    failed: dict[str, str]  # module.py::test[params] -> failure text
    victims: list[str]
    output: str

    def describe(self) -> str:
        listed = "\n".join(f"  {k}" for k in sorted(self.failed)) or "  (none)"
        return f"exit code {self.ret}, {len(self.passed)} passed, failed:\n{listed}"


def run_suite(tmp_path: Path, variant: str, where: str, dsn: str, select: list[str]) -> SuiteRun:
    """``pytest --rdq-backend=tests.broken.redis:<variant> <select>`` in ``tmp_path``, as a
    backend author runs the kit (the plugin adds its suite, node ids
    ``rdq_compliance/suite/<module>.py::...``)."""
    victims, junit = tmp_path / "victims.txt", tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RDQ_", "PYTEST_XDIST_"))}
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    env[broken.VICTIMS_ENV] = str(victims)
    if where == "cluster":
        server = ["--rdq-option", "redis_cluster=3", "--rdq-option", "redis_persistence=none"]
    else:
        server = [f"--rdq-dsn={with_query(dsn, 'rdq_check_keys=1') if where == 'guard' else dsn}"]
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short",
        "--rdq-require-backend", "--rdq-no-docker", f"--rdq-backend=tests.broken.redis:{variant}",
        *server, *select, f"--junitxml={junit}",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    output = proc.stdout + proc.stderr
    assert junit.exists(), f"the suite run wrote no JUnit report:\n{output[-4000:]}"
    passed, failed = _read_junit(junit)
    recorded = victims.read_text().splitlines() if victims.exists() else []
    named = [line.split("\t", 1)[1] for line in recorded if line.startswith(f"{variant}\t")]
    return SuiteRun(proc.returncode, passed, failed, list(dict.fromkeys(named)), output)


def _names(text: str, task_ids: list[str]) -> list[str]:
    return [t for t in task_ids if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)]


def _holders(text: str, task_id: str) -> set[str]:
    """The workers a one-claim report lists as holding ``task_id``."""
    found = re.search(rf"task '{re.escape(task_id)}' was claimed \d+ times: ([^;]*)", text)
    return set(re.findall(r"\bthread-\d+\b", found[1])) if found else set()


class NotCaught(AssertionError):
    """The kit did not fail the variant the way it must (what a strict xfail waits for)."""


def check_caught(case: Case, run: SuiteRun) -> None:
    """(a) to (c) of the module docstring; raises :class:`NotCaught`."""
    where = f"{case} ({case.bug_class})"
    if run.ret != pytest.ExitCode.TESTS_FAILED:
        raise NotCaught(f"{where}: the suite did not fail: {run.describe()}")
    for catcher, rule in case.catchers.items():
        exact = "[" in catcher
        hits = {
            k: text
            for k, text in run.failed.items()
            if (k == catcher if exact else k.split("[", 1)[0] == catcher)
        }
        if not hits:
            raise NotCaught(f"{where}: {catcher} did not fail: {run.describe()}")
        unnamed = [k for k, text in hits.items() if not catalogue.names_rule(text, rule)]
        if unnamed:
            raise NotCaught(
                f"{where}: these failures do not name rule [{rule}]:\n"
                + "\n".join(f"--- {k}\n{hits[k][-1500:]}" for k in unnamed)
            )
        named = {k: _names(text, run.victims) for k, text in hits.items()}
        if not any(named.values()):
            raise NotCaught(
                f"{where}: no failure of {catcher} names a task the bug hit (victims "
                f"{run.victims[:10]}):\n"
                + "\n".join(f"--- {k}\n{t[-1500:]}" for k, t in hits.items())
            )
        if case.workers and not any(
            len(_holders(hits[k], tid)) >= 2 for k, tids in named.items() for tid in tids
        ):
            raise NotCaught(f"{where}: no failure of {catcher} names two workers holding a victim")


# ---- the checks -------------------------------------------------------------------------------


def test_every_variant_has_a_case_and_every_rule_exists():
    exposed = {n for n, v in vars(broken).items() if isinstance(v, broken.VariantBackend)}
    covered = {c.variant for c in _ALL} | {catalogue.control("redis").name}
    assert exposed == covered, f"variants without a case: {sorted(exposed - covered)}"
    rules = {r for c in _ALL for spec in c.catchers.values() for r in catalogue.rule_ids(spec)}
    assert rules <= set(RULES), f"unknown rule ids: {sorted(rules - set(RULES))}"


@pytest.mark.parametrize(
    "where, select",
    [
        pytest.param("server", ["-m", CONFORMANCE], id="server-whole-conformance-suite"),
        pytest.param("cluster", ["-k", UNDECLARED.keyword], id="cluster-cluster-keys-tests"),
    ],
)
def test_control_passes(tmp_path: Path, dsn: str, where: str, select: list[str]):
    """The variants' plumbing with nothing changed passes: on the server the whole
    conformance suite, on the cluster the tests the undeclared-key variant fails there."""
    run = run_suite(tmp_path, "control", where, dsn, select)
    assert run.ret == pytest.ExitCode.OK and not run.failed, (
        f"the control fails: {run.describe()}\n{run.output[-4000:]}"
    )
    assert len(run.passed) > (100 if where == "server" else 0), run.describe()
    assert not run.victims, f"the control recorded victims: {run.victims[:10]}"


def test_undeclared_key_variant_passes_on_a_single_server(tmp_path: Path, dsn: str):
    """Why the cluster run is needed: on one server, without the guard, a script may touch
    any key, and the one-script enqueue is even atomic — the same tests pass."""
    case = UNDECLARED_ON_SERVER
    run = run_suite(tmp_path, case.variant, case.where, dsn, ["-k", case.keyword])
    assert run.ret == pytest.ExitCode.OK and run.passed and not run.failed, run.describe()
    assert run.victims, "the one-script enqueue never ran"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_suite_fails_the_variant(tmp_path: Path, dsn: str, case: Case):
    run = run_suite(tmp_path, case.variant, case.where, dsn, ["-k", case.keyword])
    assert run.victims, f"{case}: the broken code path never ran:\n{run.output[-3000:]}"
    check_caught(case, run)


def test_suite_alone_does_not_catch_the_client_clock_variant(tmp_path: Path, dsn: str):
    """The claim stamps leases on the client's clock (victims: every claimed task); the
    claim and lease tests that lean on the clock run too, and pass: on one host the
    client's clock is the server's. The clock-skew campaign catches it
    (``tests/server_contract/test_clock_skew.py``)."""
    case = CLIENT_CLOCK
    run = run_suite(tmp_path, case.variant, case.where, dsn, ["-k", case.keyword])
    assert run.passed and run.ret in (0, 1), run.describe() + run.output[-3000:]
    assert run.victims, "no claim ran on the client's clock"
    with pytest.raises(NotCaught):
        check_caught(case, run)
