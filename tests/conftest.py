"""Shared set-up of the kit's own tests.

``pytester`` runs the conformance suite inside these tests. The deliberately broken
backends live in ``tests/broken/`` and are named to the suite by their dotted names
(``--rdq-backend=tests.broken.memory:<attribute>``): importable because pytest puts the
checkout root on ``sys.path`` (``pythonpath`` in ``[tool.pytest.ini_options]``).
"""

from __future__ import annotations

import pytest

from tests import _schedule

pytest_plugins = ["pytester", "tests._cpu"]


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Hide the Docker engine from the kit for one test: ``DOCKER_HOST`` names a socket
    that does not exist, so the container rung's "Docker is not reachable" path runs even
    on a machine (such as CI here) where an engine answers."""
    missing = tmp_path_factory.mktemp("no-docker") / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("TESTCONTAINERS_HOST_OVERRIDE", "")


def pytest_configure(config: pytest.Config) -> None:
    _schedule.hand_out_few(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests first (``tests/_schedule.py``): the two xdist workers then finish
    together instead of one running the longest test alone at the end."""
    _schedule.longest_first(items, _schedule.load())


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's seconds (setup + call + teardown), for ``tests/_schedule.py``."""
    _schedule.record(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Keep this run's seconds in pytest's cache (``rdq/durations``): ``python -m
    tests._schedule --from-cache`` refreshes ``tests/durations.json`` from them."""
    _schedule.save(session.config)
