"""Fixtures of the chaos harness's own tests (helpers live in ``_chaos_support``)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _chaos_support import provision  # noqa: E402

from rdq_compliance.provision.backend import Backend, Server  # noqa: E402


@pytest.fixture(params=["sqlite", "postgres"])
def backend_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Backend, Server]]:
    workdir = tmp_path / "server"
    workdir.mkdir()
    backend, server = provision(request.param, workdir)
    try:
        yield request.param, backend, server
    finally:
        server.close()
        shutil.rmtree(workdir, ignore_errors=True)
