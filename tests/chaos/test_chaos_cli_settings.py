"""``rdq-chaos`` finds its settings exactly as the pytest plugin does: command line, then
``RDQ_*`` environment variables, then ``[tool.rdq]`` of the nearest ``pyproject.toml``.

Each case runs a tiny campaign against the PostgreSQL server named *only* by one source
and reads the report's server line: it must say "given DSN" and name that server, never
a private one the kit started instead (an operator who set ``RDQ_POSTGRES_DSN`` in CI
must get their server, not a silent substitute).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TINY = HERE / "tiny.toml"
SERVER = "127.0.0.1:5432/test"
DSN = f"postgresql://postgres@{SERVER}"


@pytest.fixture(scope="module")
def postgres_dsn() -> str:
    from tests.backends.postgres._pg_support import require_server

    return require_server()


def _run(cwd: Path, env_extra: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, dict]:  # noqa: E501
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    env.update(env_extra, COLUMNS="400")  # one line per message: rich wraps at 80
    out = cwd / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "rdq_compliance.chaos.cli", "run", str(TINY), "--out", str(out),
         "--quiet", *args],
        capture_output=True, text=True, timeout=170, env=env, cwd=cwd,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads((out / "results.json").read_text())


def _assert_given(proc: subprocess.CompletedProcess, results: dict, dsn: str, source: str) -> None:
    assert results["backend"] == "postgres"
    assert results["server"].startswith("given DSN "), results["server"]
    assert dsn.split("@", 1)[1] in results["server"], results["server"]
    assert f"from {source}" in proc.stdout, proc.stdout
    assert "local binary" not in proc.stdout and "container" not in proc.stdout


def test_backend_and_dsn_from_the_environment(postgres_dsn, tmp_path):
    """RDQ_BACKEND picks the backend; RDQ_POSTGRES_DSN names its server."""
    proc, results = _run(
        tmp_path, {"RDQ_BACKEND": "postgres", "RDQ_POSTGRES_DSN": postgres_dsn}
    )
    _assert_given(proc, results, postgres_dsn, "RDQ_POSTGRES_DSN")
    assert "from RDQ_BACKEND" in proc.stdout


def test_generic_rdq_dsn(postgres_dsn, tmp_path):
    """RDQ_DSN serves any backend when no RDQ_<BACKEND>_DSN is set."""
    proc, results = _run(tmp_path, {"RDQ_DSN": postgres_dsn}, "--backend", "postgres")
    _assert_given(proc, results, postgres_dsn, "RDQ_DSN")


def test_tool_rdq_table_of_the_nearest_pyproject(postgres_dsn, tmp_path):
    """[tool.rdq] of the pyproject.toml in a parent folder gives backend and DSN."""
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.rdq]\nbackend = "postgres"\n\n[tool.rdq.postgres]\ndsn = "{postgres_dsn}"\n'
    )
    below = tmp_path / "sub" / "dir"
    below.mkdir(parents=True)
    proc, results = _run(below, {})
    _assert_given(proc, results, postgres_dsn, "[tool.rdq.postgres]")


def test_the_command_line_beats_the_environment(postgres_dsn, tmp_path):
    """--dsn wins over RDQ_POSTGRES_DSN (which points nowhere here)."""
    proc, results = _run(
        tmp_path,
        {"RDQ_BACKEND": "postgres", "RDQ_POSTGRES_DSN": "postgresql://nobody@127.0.0.1:1/x"},
        "--dsn",
        postgres_dsn,
    )
    _assert_given(proc, results, postgres_dsn, "command line")
    assert "--dsn" in (tmp_path / "report" / "seed.txt").read_text()


def test_help_shows_the_precedence():
    proc = subprocess.run(
        [sys.executable, "-m", "rdq_compliance.chaos.cli", "run", "--help"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0
    for text in ("highest precedence first", "RDQ_BACKEND", "RDQ_<BACKEND>_DSN", "RDQ_DSN",
                 "[tool.rdq] backend", "[tool.rdq.<backend>] dsn", "RDQ_OPTION_<KEY>"):
        assert text in proc.stdout, text
