"""Fixtures of the chaos harness's own tests (helpers live in :mod:`tests.chaos._chaos_support`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdq_compliance.session import Session
from tests.chaos._chaos_support import start_session


@pytest.fixture(params=["sqlite", "postgres"])
def chaos_session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    """A started session on a server the kit provisions (SQLite, and PostgreSQL from the
    local binaries)."""
    workdir = tmp_path / "server"
    session = start_session(request.param, workdir)
    try:
        yield session
    finally:
        session.close()
        shutil.rmtree(workdir, ignore_errors=True)
