"""Shared set-up of the kit's own tests.

``pytester`` runs the conformance suite inside these tests. The deliberately broken
backends live in ``tests/rdq_broken_backends.py`` and are named to the suite as
``--rdq-backend=rdq_broken_backends:<attribute>``, so this folder must be importable:
it is put on ``sys.path`` here, explicitly, so it does not depend on pytest's
``--import-mode`` (``importlib`` mode adds nothing to ``sys.path``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Hide the Docker engine from the kit for one test: ``DOCKER_HOST`` names a socket
    that does not exist, so the container rung's "Docker is not reachable" path runs even
    on a machine (such as CI here) where an engine answers."""
    missing = tmp_path_factory.mktemp("no-docker") / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("TESTCONTAINERS_HOST_OVERRIDE", "")
