"""A soak: one scenario run N times on one server, each campaign with a fresh seed, to
measure how often the kit raises an alarm.

On a correct backend every alarm is the kit's own false alarm (a timing margin, a
checker rule too strict), so the soak's one figure is *runs that were not ok*; each run
keeps its own report folder and its replay command, and the soak writes ``soak.json``
(run by run: seed, verdict, violations by rule, time, faults) beside them.

The seeds come from one base seed (``Random(base)``), so a soak is replayed whole with
the same base and any single run with its own seed through ``rdq-chaos run``.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rdq_compliance.chaos.campaign_result import CampaignResult, ProgressFn, replay_command
from rdq_compliance.chaos.faults.display import fault_phrases
from rdq_compliance.chaos.runner import run_campaign
from rdq_compliance.chaos.scenario import Scenario
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings

__all__ = ["SoakResult", "SoakRun", "run_soak", "soak_seeds"]


def soak_seeds(base: int, runs: int) -> list[int]:
    """``runs`` distinct campaign seeds drawn from ``base``."""
    rng = random.Random(base)
    seeds: list[int] = []
    while len(seeds) < runs:
        seed = rng.randrange(2**31)
        if seed not in seeds:
            seeds.append(seed)
    return seeds


@dataclass(frozen=True)
class SoakRun:
    """One campaign of a soak, as ``soak.json`` keeps it."""

    index: int
    seed: int
    ok: bool
    duration: float
    violations: int
    #: violations by rule id
    rules: dict[str, int]
    #: rules the faults that happened had to exercise and did not
    unmet: list[str]
    checker_error: str | None
    faults: list[str]
    tasks: dict[str, int]
    report: str
    replay: str

    @property
    def verdict(self) -> str:
        if self.checker_error is not None:
            return "checker failed"
        if self.violations:
            return f"{self.violations} violation(s)"
        if self.unmet:
            return "not exercised"
        return "ok"


@dataclass
class SoakResult:
    scenario: str
    backend: str
    server_origin: str
    base_seed: int
    runs: list[SoakRun] = field(default_factory=list)
    duration: float = 0.0
    #: set when the soak stopped before its last run (an interrupt, a provisioning error)
    stopped: str | None = None

    @property
    def alarms(self) -> list[SoakRun]:
        """The runs that were not ok: on a correct backend, false alarms."""
        return [r for r in self.runs if not r.ok]

    def as_dict(self) -> dict[str, object]:
        durations = [r.duration for r in self.runs]
        return {
            "scenario": self.scenario,
            "backend": self.backend,
            "server_origin": self.server_origin,
            "base_seed": self.base_seed,
            "runs_done": len(self.runs),
            "runs_not_ok": len(self.alarms),
            "duration_s": round(self.duration, 1),
            "run_seconds": {
                "min": round(min(durations), 1) if durations else None,
                "mean": round(sum(durations) / len(durations), 1) if durations else None,
                "max": round(max(durations), 1) if durations else None,
            },
            "stopped": self.stopped,
            "runs": [asdict(r) | {"verdict": r.verdict} for r in self.runs],
        }


def _record(index: int, result: CampaignResult, replay: str) -> SoakRun:
    return SoakRun(
        index=index,
        seed=result.seed,
        ok=result.ok,
        duration=round(result.duration, 1),
        violations=len(result.violations),
        rules=dict(Counter(v.rule for v in result.violations)),
        unmet=[r.rule for r in result.unmet],
        checker_error=result.checker_error,
        faults=fault_phrases(result.counters),
        tasks=dict(result.tasks),
        report=str(result.outdir),
        replay=replay,
    )


def run_soak(
    scenario: Scenario,
    *,
    settings: Settings,
    runs: int,
    base_seed: int,
    outdir: Path,
    keep_passing: bool = False,
    on_run: Callable[[SoakRun, SoakResult], None] | None = None,
    progress: ProgressFn | None = None,
    dsn_for_replay: str | None = None,
) -> SoakResult:
    """Run ``scenario`` ``runs`` times on one provisioned server; write ``soak.json``
    into ``outdir`` after every run (so an interrupted soak keeps what it measured).

    A passing run's history is removed unless ``keep_passing`` (its ``results.json``
    stays); a failing run keeps its whole report folder.
    """
    if runs < 1:
        raise ValueError("a soak needs at least one run")
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    seeds: Sequence[int] = soak_seeds(base_seed, runs)
    t0 = time.monotonic()
    with Session(settings) as session:
        soak = SoakResult(
            scenario=scenario.name,
            backend=session.name,
            server_origin=session.server.origin,
            base_seed=base_seed,
        )
        try:
            for index, seed in enumerate(seeds, start=1):
                one = scenario.with_seed(seed)
                replay = replay_command(
                    one, session.name, seed, dsn_for_replay, options=settings.options
                )
                run_dir = outdir / f"run-{index:03d}-seed{seed}"
                result = run_campaign(
                    one, session=session, outdir=run_dir, progress=progress, command=replay
                )
                if result.ok and not keep_passing:
                    shutil.rmtree(run_dir / "history", ignore_errors=True)
                record = _record(index, result, replay)
                soak.runs.append(record)
                soak.duration = time.monotonic() - t0
                _write(outdir, soak)
                if on_run is not None:
                    on_run(record, soak)
        except BaseException as exc:
            soak.stopped = f"stopped after {len(soak.runs)} of {runs} runs: {type(exc).__name__}"
            soak.duration = time.monotonic() - t0
            _write(outdir, soak)
            raise
    soak.duration = time.monotonic() - t0
    _write(outdir, soak)
    return soak


def _write(outdir: Path, soak: SoakResult) -> None:
    path = outdir / "soak.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(soak.as_dict(), indent=2) + "\n")
    tmp.replace(path)
