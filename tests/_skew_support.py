"""Helpers for the clock-skew tests (issue 14, item 2): libfaketime or a skip (a failure
under ``CI=true``), the ``clock`` scenario with or without its skew, and what "caught by
the skew" means for a broken variant."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rdq_compliance import registry
from rdq_compliance.chaos.faults.libfaketime import INSTALL_HINT, find_libfaketime
from rdq_compliance.chaos.results import CampaignResult
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import Scenario, load_scenario
from rdq_compliance.provision.backend import ProvisionUnavailable
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings

#: The rule a backend that takes time from its client breaks.
RULE = "storage-clock"


def need_libfaketime() -> Path:
    """The libfaketime library; without it, skip (fail on CI, where it must be there)."""
    library = find_libfaketime()
    if library is None:
        why = f"libfaketime is not installed: {INSTALL_HINT}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return library


def clock_scenario(*, skewed: bool = True) -> Scenario:
    """The shipped ``clock`` scenario; ``skewed=False``: the same campaign, no skew."""
    scenario = load_scenario("clock")
    if not skewed:
        scenario = replace(scenario, faults=scenario.faults.replace(skewed_workers=0))
    return scenario


def skew_campaign(
    session: Session, outdir: Path, *, skewed: bool = True
) -> tuple[CampaignResult, float]:
    """Run the clock campaign on ``session``; the result and its wall time (s)."""
    if skewed:
        need_libfaketime()
    t0 = time.monotonic()
    result = run_campaign(clock_scenario(skewed=skewed), session=session, outdir=outdir)
    return result, time.monotonic() - t0


def assert_clean(result: CampaignResult) -> None:
    """The campaign ran every phase and found nothing."""
    assert result.checked, result.checker_error
    assert result.drained, result.counters.notes
    assert not result.violations, "\n".join(str(v) for v in result.violations)
    assert not result.workers_left


def assert_caught(result: CampaignResult, skews: int = 3) -> None:
    """The skew was applied, and the checker named ``storage-clock``, a task and the
    workers whose storage times disagree (two workers, or one whose calls were stamped
    by two clocks)."""
    assert result.counters.clock_skews >= skews, result.counters.notes
    assert result.checked, result.checker_error
    caught = [v for v in result.violations if v.rule == RULE]
    assert caught, "no storage-clock violation:\n" + "\n".join(map(str, result.violations))
    for v in caught:
        assert v.message.startswith(f"[{RULE}]"), v.message
        assert v.task and f"task {v.task!r}" in v.message, v.message
        assert v.workers and all(f"by {w}" in v.message for w in v.workers), v.message
    assert not result.workers_left


def variant_session(
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    workdir: Path,
    *,
    dsn: str | None = None,
    module_dir: Path | None = None,
) -> Session:
    """A started session on ``backend`` (a name or ``module:attr``; ``dsn``: that server,
    else the kit provisions one from local binaries, never Docker). ``module_dir`` goes
    on the worker processes' ``PYTHONPATH`` too, so they import a test-only variant."""
    if module_dir is not None:
        path = os.environ.get("PYTHONPATH")
        monkeypatch.setenv(
            "PYTHONPATH", os.fspath(module_dir) + (os.pathsep + path if path else "")
        )
    try:
        session = Session(Settings(backend=backend, dsn=dsn, docker=False), workdir=workdir)
    except registry.UnknownBackend as exc:
        pytest.skip(f"backend {backend!r} not installed: {exc}")
    try:
        session.start()
    except ProvisionUnavailable as exc:
        pytest.skip(f"no {backend} server here: {exc}")
    return session
