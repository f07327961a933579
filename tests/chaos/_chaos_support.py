"""Helpers for the chaos harness's own tests: provisioned servers, process checks."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
import pytest

from rdq_compliance import registry
from rdq_compliance.chaos.campaign_result import CampaignResult
from rdq_compliance.chaos.scenario import Scenario
from rdq_compliance.provision.backend import ProvisionUnavailable
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from tests._paths import ROOT, pythonpath
from tests._proof import AttemptResult, Proof, run_seeds, seeds_from

HERE = Path(__file__).resolve().parent
SMOKE = HERE / "smoke.toml"
STANDARD = ROOT / "chaos" / "standard.toml"


def start_session(name: str, workdir: Path) -> Session:
    """A started session on the backend's server from local resources (no Docker, no DSN:
    the kit provisions it); skip if there is none."""
    try:
        session = Session(Settings(backend=name, docker=False), workdir=workdir)
    except registry.UnknownBackend as exc:
        pytest.skip(f"backend {name!r} not installed: {exc}")
    try:
        session.start()
    except ProvisionUnavailable as exc:
        pytest.skip(f"no {name} server here: {exc}")
    return session


def gone(pid: int) -> bool:
    """The process no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until every pid is gone; the ones still running after ``timeout``."""
    left = list(pids)
    end = time.monotonic() + timeout
    while left and time.monotonic() < end:
        left = [p for p in left if not gone(p)]
        if left:
            time.sleep(0.1)
    return left


def broken_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, victims_env: str) -> Path:
    """Worker processes import the broken backends of ``tests.broken`` (the checkout root on
    ``PYTHONPATH``), and record their victims in the file named by ``victims_env``; that
    file's path."""
    monkeypatch.setenv("PYTHONPATH", pythonpath(os.environ.get("PYTHONPATH")))
    victims = tmp_path / "victims.txt"
    monkeypatch.setenv(victims_env, str(victims))
    return victims


#: Faulted runs (each with the next seed) before a fault-only variant counts as not found.
FAULTED_TRIES = 3


def calm_then_faulted(
    session: Session,
    faulted: Scenario,
    calm: Scenario,
    tmp_path: Path,
    victims: Path,
    wanted: str,
    caught: Callable[[CampaignResult], bool],
    on_calm: Callable[[CampaignResult], None] | None = None,
) -> Proof[CampaignResult]:
    """The control run (``calm``: the fault left out) must pass with no victim; then the
    faulted runs, one per seed of :data:`FAULTED_TRIES` from ``faulted``'s own, until one
    is ``caught`` (:func:`tests._proof.run_seeds`): the proof, shown or not, whose value
    is the last run's result (reports in ``tmp_path / "faulted"``, ``"faulted-2"``, ...;
    ``victims`` holds that run's victims, an earlier run's are moved aside). Each run
    reports its folder, its victims and the rules that fired. A run whose history was not
    checked fails at once. The caller records what it needs, then requires the proof.

    Why more than one: a fault-only variant's exposure is a race the fault opens (a
    reclaim by another worker within the third of a second that a heartbeat taken as
    applied claims, a report taken as applied before the thaw), and on a machine loaded
    far past its cores the healthy workers can be too slow for it in every fault of a
    run. Each run stands alone: a violation is judged within one run's history."""
    from rdq_compliance.chaos.runner import run_campaign

    quiet = run_campaign(calm, session=session, outdir=tmp_path / "calm")
    if on_calm is not None:
        on_calm(quiet)
    assert quiet.checked and quiet.violations == [], [str(v)[:300] for v in quiet.violations]
    assert not victims.exists(), f"the variant struck without the fault: {victims.read_text()}"

    def attempt(seed: int, number: int) -> AttemptResult[CampaignResult]:
        name = "faulted" if number == 1 else f"faulted-{number}"
        if victims.exists():  # the last run's victims stay in ``victims``; earlier ones aside
            victims.rename(victims.with_name(f"{victims.stem}.before-{name}{victims.suffix}"))
        result = run_campaign(faulted.with_seed(seed), session=session, outdir=tmp_path / name)
        assert result.checked, f"{result.checker_error}; report folder: {result.outdir}"
        taken = len(victims.read_text().split()) if victims.exists() else 0
        rules = sorted({v.rule for v in result.violations})
        facts = {"report": name, "victims": taken, "rules fired": rules}
        return AttemptResult(caught(result), result, facts)

    return run_seeds(wanted, seeds_from(faulted.seed, FAULTED_TRIES), attempt)
