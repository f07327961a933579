"""The conformance suite fails the SQLite and PostgreSQL variants of the catalogue whose
catches name this module, naming the rule and a task the bug hit: the reclaim
that reads without a lock and saves what it read (``test_late_outcome.py``'s race of late
outcomes against reclaims), the DLQ keyset cursor that compares ids only
(``test_dlq.py``'s paging with ids sorted against dead time), queues kept apart by
hash bucket, not by name (``test_neighbours.py``'s 512 queue names side by side), and
the claim that serves due PENDING tasks before expired leases (``test_claim.py``'s
claims with the two kinds interleaved in due time).

Each variant (``tests.broken.<store>:<name>``) is run as a backend author runs the kit,
in a pytest subprocess (``pytest --rdq-backend=... -k <catching tests> --junitxml ...``),
and the JUnit report is read back:

(a) the run fails, and the broken code path fired (the variant appended the tasks it hit
    (a row changed between its read and its save; a task the reference page lists and
    its page does not; a task of another queue claimed or listed) to the victims file);
(b) each catching test fails;
(c) each of its failures names the rule (``[rule-id]``), and one names a victim.

The unbroken backend passes the same tests, through the same command (the control), so
a variant's failure is its one change. Measured by hand, not rerun here: the late-outcome
variants pass the rest of the conformance suite (SQLite 591 passed, PostgreSQL 591
passed), and of ``test_dlq.py`` the DLQ-cursor variants fail only the three cases of
``test_dlq_pages_in_dead_letter_order_when_ids_sort_the_other_way`` (SQLite 32 passed,
PostgreSQL 31 passed); the bucketed-queue variants fail only
``test_queues_stored_side_by_side_stay_apart`` of the whole kit (SQLite: 598 passed, the
standard chaos campaign among them; PostgreSQL by DSN, chaos deselected: 597 passed);
the PENDING-first claim variants fail only
``test_expired_leases_and_due_tasks_are_claimed_in_one_due_order`` of the conformance
suite (SQLite and PostgreSQL: 596 passed, 1 failed, chaos and stateful deselected).
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
def test_the_suite_fails_the_store_variant(
    tmp_path: Path, variant: catalogue.Variant, case: catalogue.Suite
):
    ret, passed, failed, victims = _run(tmp_path, variant.dotted, variant.store, case.keyword)
    where = f"{variant.dotted} ({variant.title})"
    # (a) the run fails, and the bug fired
    assert ret == 1, f"{where}: exit code {ret}; passed {passed}; failed {sorted(failed)}"
    assert victims, f"{where}: the broken code path never fired (no victim recorded)"
    for catcher, rule in case.catchers.items():
        # (b) the catching test fails
        hits = {k: t for k, t in failed.items() if k.split("[", 1)[0] == catcher}
        assert hits, f"{where}: {catcher} did not fail; failed: {sorted(failed)}"
        # (c) it names the rule, and a task the bug hit
        for key, text in hits.items():
            assert catalogue.names_rule(text, rule), (
                f"{where}: {key} does not name [{rule}]:\n{text[-2000:]}"
            )
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
