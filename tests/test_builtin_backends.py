"""The whole conformance suite against every built-in backend (and the chaos and
stateful gates through the plugin).

Each run is its own pytest process, exactly as a user would start it
(``pytest --pyargs rdq_compliance.suite --rdq-backend=NAME ...``), so it exercises
entry-point discovery, provisioning and suite injection end to end. PostgreSQL runs
twice: on the given server (``RDQ_POSTGRES_DSN``, default the local 127.0.0.1:5432),
and on a private server the kit starts from the local binaries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rdq_compliance.plugin import SUITE_DIR

PG_DSN = (
    os.environ.get("RDQ_POSTGRES_DSN")
    or os.environ.get("RDQ_DSN")
    or "postgresql://postgres@127.0.0.1:5432/test"
)

CONFORMANCE = ["-m", "not chaos and not stateful"]
CHAOS = ["-m", "chaos"]
STATEFUL = ["-m", "stateful"]

#: run id -> (arguments, the least number of tests that must pass)
RUNS: dict[str, tuple[list[str], int | None]] = {
    "memory": (["--rdq-backend=memory", *CONFORMANCE], None),
    "sqlite": (["--rdq-backend=sqlite", *CONFORMANCE], None),
    "postgres-dsn": (["--rdq-backend=postgres", f"--rdq-dsn={PG_DSN}", *CONFORMANCE], None),
    "postgres-local": (["--rdq-backend=postgres", "--rdq-no-docker", *CONFORMANCE], None),
    # The chaos gate, through the plugin as a user runs it: the standard scenario.
    "sqlite-chaos": (["--rdq-backend=sqlite", *CHAOS], 1),
    "postgres-local-chaos": (["--rdq-backend=postgres", "--rdq-no-docker", *CHAOS], 1),
    # The stateful machine, ci profile (fixed seed), through the plugin.
    "memory-stateful": (["--rdq-backend=memory", *STATEFUL], 1),
    "sqlite-stateful": (["--rdq-backend=sqlite", *STATEFUL], 1),
    "postgres-dsn-stateful": (["--rdq-backend=postgres", f"--rdq-dsn={PG_DSN}", *STATEFUL], 1),
}


def _suite_size() -> int:
    return sum(
        1
        for path in SUITE_DIR.glob("test_*.py")
        for line in path.read_text().splitlines()
        if line.startswith("def test_")
    )


@pytest.mark.parametrize("run", list(RUNS))
def test_conformance_suite_passes(run: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
            *RUNS[run][0], "--rdq-require-backend", "-q", "-rs", "-p", "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"conformance suite failed on {run}:\n{tail}"
    summary = [line for line in proc.stdout.splitlines() if " passed" in line][-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    least = RUNS[run][1] or int(_suite_size() * 0.9)
    assert passed >= least, f"too few tests ran on {run}: {summary}"
    print(f"{run}: {summary}")
