"""Helpers for the clock-skew tests: libfaketime or a skip (a failure
under ``CI=true``), the ``clock`` scenario with or without its skew, one campaign on a
fresh session with its figures recorded (``benchmarks/clock_skew_bugs.py`` tabulates
them), and what "caught by the skew" means for a broken variant."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rdq_compliance import registry
from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.index import index_history
from rdq_compliance.chaos.checker.storage_clock import reversals
from rdq_compliance.chaos.checker.view import Context
from rdq_compliance.chaos.events import read_history
from rdq_compliance.chaos.libfaketime import INSTALL_HINT, find_libfaketime
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import Scenario, load_scenario
from rdq_compliance.provision.backend import ProvisionUnavailable
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from tests._paths import pythonpath

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


def clock_scenario(*, skewed: bool = True, seed: int | None = None) -> Scenario:
    """The shipped ``clock`` scenario (with ``seed``, else its own); ``skewed=False``: the
    same campaign, no skew."""
    scenario = load_scenario("clock")
    if seed is not None:
        scenario = scenario.with_seed(seed)
    if not skewed:
        scenario = replace(scenario, faults=scenario.faults.replace(skewed_workers=0))
    return scenario


def skew_campaign(
    session: Session, outdir: Path, *, skewed: bool = True, seed: int | None = None
) -> tuple[CampaignResult, float]:
    """Run the clock campaign (with ``seed``, else the scenario's) on ``session``; the
    result and its wall time (s)."""
    if skewed:
        need_libfaketime()
    t0 = time.monotonic()
    scenario = clock_scenario(skewed=skewed, seed=seed)
    result = run_campaign(scenario, session=session, outdir=outdir)
    return result, time.monotonic() - t0


def first_reversal(outdir: Path) -> float | None:
    """When the first call whose storage time ran backwards was answered (the earliest
    pair of :func:`~rdq_compliance.chaos.checker.storage_clock.reversals`): from then on the
    history holds the evidence."""
    events = read_history((outdir / "history").glob("*.jsonl"))
    ctx = Context(index_history(events), FinalState(tasks={}, dlq=[]))
    return min((b.answered for _, b in reversals(ctx)), default=None)


def skew_line(result: CampaignResult, backend: str, skewed: bool, wall: float) -> dict[str, str]:
    """One campaign's figures, as ``benchmarks/clock_skew_bugs.py`` prints them: the rules
    named, how long after the start the history first showed a reversal, the run time, the
    wall time with provisioning."""
    rules: dict[str, int] = {}
    for v in result.violations:
        rules[v.rule] = rules.get(v.rule, 0) + 1
    first = first_reversal(result.outdir)
    return {
        "backend": backend,
        "server": result.server_origin,
        "skew": "yes" if skewed else "no",
        "rules": ", ".join(f"{k} x{n}" for k, n in sorted(rules.items())) or "pass",
        "found after": "-" if first is None else f"{first - result.started_at:.1f} s",
        "run time": f"{result.duration:.1f} s",
        "wall (with provisioning)": f"{wall:.1f} s",
    }


def skew_case(
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    tmp_path: Path,
    *,
    skewed: bool,
    dsn: str | None = None,
    record: Callable[[str, object], None] | None = None,
    seed: int | None = None,
) -> CampaignResult:
    """The clock campaign (with or without its skew; with ``seed``, else the scenario's)
    on a fresh session of ``backend`` (see :func:`variant_session`); its figures go to
    ``record`` (``record_property``) as ``row``, caught or not; the result."""
    t0 = time.monotonic()
    session = variant_session(monkeypatch, backend, tmp_path / "srv", dsn=dsn)
    try:
        result, _ = skew_campaign(session, tmp_path / "out", skewed=skewed, seed=seed)
    finally:
        session.close()
    if record is not None:
        record("row", json.dumps(skew_line(result, backend, skewed, time.monotonic() - t0)))
    return result


def assert_clean(result: CampaignResult) -> None:
    """The campaign ran every phase and found nothing."""
    assert result.checked, result.checker_error
    assert result.drained, result.counters.notes
    assert not result.violations, "\n".join(str(v) for v in result.violations)
    assert not result.workers_left


def assert_caught(
    result: CampaignResult, skews: int = 3, rules: tuple[str, ...] = (RULE,)
) -> None:
    """The skew was applied, and the checker named ``storage-clock`` (one of ``rules``: the
    catalogue's), a task and the workers whose storage times disagree (two workers, or
    one whose calls were stamped by two clocks)."""
    assert result.counters.clock_skews >= skews, result.counters.notes
    assert result.checked, result.checker_error
    caught = [v for v in result.violations if v.rule in rules]
    assert caught, f"no {' or '.join(rules)} violation:\n" + "\n".join(
        map(str, result.violations)
    )
    for v in caught:
        assert v.message.startswith(f"[{v.rule}]"), v.message
        assert v.task and f"task {v.task!r}" in v.message, v.message
        assert v.workers and all(f"by {w}" in v.message for w in v.workers), v.message
    assert not result.workers_left


def variant_session(
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    workdir: Path,
    *,
    dsn: str | None = None,
) -> Session:
    """A started session on ``backend`` (a name or ``module:attr``, such as
    ``tests.broken.redis:client_clock``; ``dsn``: that server, else the kit provisions one
    from local binaries, never Docker). The worker processes get the checkout root on
    their ``PYTHONPATH``, so they import a test-only variant by the same name."""
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    try:
        session = Session(Settings(backend=backend, dsn=dsn, docker=False), workdir=workdir)
    except registry.UnknownBackend as exc:
        pytest.skip(f"backend {backend!r} not installed: {exc}")
    try:
        session.start()
    except ProvisionUnavailable as exc:
        pytest.skip(f"no {backend} server here: {exc}")
    return session
