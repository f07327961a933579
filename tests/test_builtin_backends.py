"""The whole conformance suite against every built-in backend that needs no server.

Each backend runs in its own pytest process, exactly as a user would run it
(``pytest --pyargs rdq_compliance.suite --rdq-backend=NAME``), so the run exercises
entry-point discovery, provisioning and suite injection end to end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rdq_compliance.plugin import SUITE_DIR


def _suite_size() -> int:
    return sum(
        1
        for path in SUITE_DIR.glob("test_*.py")
        for line in path.read_text().splitlines()
        if line.startswith("def test_")
    )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_conformance_suite_passes(backend: str, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
            f"--rdq-backend={backend}", "--rdq-require-backend", "-q", "-rs",
            "-p", "no:cacheprovider", f"--junitxml={junit}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, f"conformance suite failed on {backend}:\n{tail}"
    summary = proc.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= _suite_size() * 0.9, f"too few tests ran on {backend}: {summary}"
