"""The suite's race of late outcomes against reclaims (``test_late_outcome.py``) fails a
reclaim that reads without a lock and saves what it read, on SQLite and on PostgreSQL,
naming the rule and a task the bug overwrote (issue 22).

Each variant of the catalogue proved here (``tests.broken.<store>:<name>``, whose
catches name this module) is run as a backend author runs the kit, in a pytest
subprocess (``pytest --rdq-backend=... -k <catching tests> --junitxml ...``), and the
JUnit report is read back:

(a) the run fails, and the broken code path fired (the variant appended the tasks whose
    row changed between its read and its save to the victims file);
(b) each catching test fails;
(c) each of its failures names the rule (``[rule-id]``), and one names a victim.

The unbroken backend passes the same tests, through the same command (the control), so
a variant's failure is its one change. The variants pass the rest of the conformance
suite: measured by hand (SQLite 591 passed, PostgreSQL 591 passed, only the two tests of
``test_late_outcome.py`` failed), not rerun here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._junit import read_junit
from tests._paths import pythonpath
from tests.broken import catalogue

BY = catalogue.relative(__file__)
#: The stores proved here, with their victims file's variable.
VICTIMS_ENV = {"sqlite": "RDQ_SQLITE_VICTIMS", "postgres": "RDQ_POSTGRES_VICTIMS"}
CASES = [
    (v, s) for store in VICTIMS_ENV for v, s in catalogue.cases(catalogue.Suite, store, by=BY)
]
RUN_TIMEOUT_S = 300


def _server(store: str) -> list[str]:
    if store == "postgres":
        from tests.backends.postgres._pg_support import require_server

        return [f"--rdq-dsn={require_server()}"]
    return []


def _run(tmp_path: Path, backend: str, store: str, keyword: str) -> tuple[int, list, dict, list]:
    victims, junit = tmp_path / "victims.txt", tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RDQ_", "PYTEST_XDIST_"))}
    env["PYTHONPATH"] = pythonpath(env.get("PYTHONPATH"))
    env[VICTIMS_ENV[store]] = str(victims)
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short",
        "--rdq-require-backend", "--rdq-no-docker", f"--rdq-backend={backend}",
        *_server(store), "-k", keyword,
        f"--junitxml={junit}",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert junit.exists(), f"the run wrote no JUnit report:\n{(proc.stdout + proc.stderr)[-4000:]}"
    passed, failed = read_junit(junit)
    recorded = victims.read_text().split() if victims.exists() else []
    return proc.returncode, passed, failed, recorded


def test_every_store_proved_here_has_a_case():
    assert {v.store for v, _ in CASES} == set(VICTIMS_ENV), CASES


@pytest.mark.parametrize(("variant", "case"), CASES, ids=[str(v) for v, _ in CASES])
def test_the_race_fails_the_reclaim_that_saves_what_it_read(
    tmp_path: Path, variant: catalogue.Variant, case: catalogue.Suite
):
    ret, passed, failed, victims = _run(tmp_path, variant.dotted, variant.store, case.keyword)
    where = f"{variant.dotted} ({variant.title})"
    # (a) the run fails, and the bug fired
    assert ret == 1, f"{where}: exit code {ret}; passed {passed}; failed {sorted(failed)}"
    assert victims, f"{where}: no row changed between a claim's read and its save"
    for catcher, rule in case.catchers.items():
        # (b) the catching test fails
        hits = {k: t for k, t in failed.items() if k.split("[", 1)[0] == catcher}
        assert hits, f"{where}: {catcher} did not fail; failed: {sorted(failed)}"
        # (c) it names the rule, and a task the bug overwrote
        for key, text in hits.items():
            assert f"[{rule}]" in text, f"{where}: {key} does not name [{rule}]:\n{text[-2000:]}"
        named = [
            t for t in victims if any(re.search(rf"'{re.escape(t)}'", x) for x in hits.values())
        ]
        assert named, f"{where}: no failure names a victim ({victims[:5]}):\n" + "\n".join(
            t[-1500:] for t in hits.values()
        )


@pytest.mark.parametrize("store", sorted(VICTIMS_ENV))
def test_the_unbroken_backend_passes_the_same_tests(tmp_path: Path, store: str):
    keyword = " or ".join(sorted({c.keyword for v, c in CASES if v.store == store}))
    ret, passed, failed, _ = _run(tmp_path, store, store, keyword)
    shown = {k: v[-1500:] for k, v in failed.items()}
    assert ret == 0 and passed and not failed, (ret, passed, shown)
