"""The settings profiles (``ci``, ``deep``), the example database, and :func:`run`."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase
from hypothesis.errors import Flaky
from hypothesis.stateful import (
    run_state_machine_as_test,
)

from rdq_compliance.queue_names import queue_pair
from rdq_compliance.stateful.machine import (
    BackendVsModel,
)
from rdq_compliance.stateful.records import (
    RunStats,
    StatefulViolation,
    Target,
)
from rdq_compliance.stateful.world import (
    MachineConfig,
)

# ---- settings profiles and the runner -----------------------------------------------------------

#: ``ci``: bounded and derandomized (a fixed seed), for every CI run and the conformance run.
#: ``deep``: many more and longer programs, a fresh random seed each run (printed).
PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 100, "stateful_step_count": 30},
    "deep": {"max_examples": 2000, "stateful_step_count": 60},
}
COMMON: dict[str, Any] = {
    "deadline": None,
    # no "explain" phase: it replays the failing program hundreds of times to annotate it
    "phases": (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    "print_blob": True,
    "report_multiple_bugs": False,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
}
#: The seed of the ``ci`` profile (``deep`` draws one per run).
CI_SEED = 0
#: What a profile takes when no earlier run here says, as a run starts (measured on 2
#: cores, 2026-12-04: BENCHMARKS.md, "Stateful machine: the ci profile per backend").
EXPECTED: dict[str, str] = {
    "ci": "about 3 s on memory, 5 s on sqlite, 13 s on postgres (2 cores)",
    "deep": "about 2 min on sqlite, 6 min on postgres (2 cores)",
}
#: Seconds between two progress lines.
PROGRESS_EVERY_S = 10.0


class Progress:
    """The progress lines of one run: ``write(line)`` at the start, then at most every
    :data:`PROGRESS_EVERY_S` seconds as programs begin, with the time left estimated from
    this run's rate (``expected``: what the run should take, for the first line)."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        backend: str,
        profile: str,
        total: int,
        steps: int,
        expected: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.write, self.total, self.clock = write, total, clock
        self.label = f"rdq stateful ({profile} profile, {backend})"
        self.started = clock()
        self.last = self.started
        guess = expected or EXPECTED.get(profile, "not known")
        write(f"{self.label}: {total} programs of up to {steps} steps; expected: {guess}")

    def __call__(self, stats: RunStats) -> None:
        now = self.clock()
        if now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        self.write(self.line(stats, now))

    def line(self, stats: RunStats, now: float) -> str:
        elapsed = now - self.started
        done = min(stats.examples, self.total)
        head = f"{self.label}: {done}/{self.total} programs, {stats.steps} steps, {elapsed:.0f} s"
        if stats.failures:
            return f"{head}; a rule broke: shrinking the failing program"
        if 0 < done < self.total:
            left = elapsed / done * (self.total - done)
            return f"{head}; about {_duration(left)} left"
        return head


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def register_profiles() -> None:
    """Register hypothesis profiles ``rdq-ci`` and ``rdq-deep`` (not loaded: the machine
    passes its settings explicitly, so a project's own hypothesis profile is untouched)."""
    for name, values in PROFILES.items():
        hypothesis.settings.register_profile(f"rdq-{name}", **COMMON, **values)


register_profiles()


def settings_for(profile: str, database: ExampleDatabase | None = None) -> hypothesis.settings:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: use one of {', '.join(PROFILES)}")
    return hypothesis.settings(hypothesis.settings.get_profile(f"rdq-{profile}"), database=database)


def database_for(root: Path, backend: str) -> DirectoryBasedExampleDatabase:
    """The example database of one backend: ``<root>/.hypothesis/rdq-stateful/<backend>``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", backend)
    return DirectoryBasedExampleDatabase(root / ".hypothesis" / "rdq-stateful" / safe)


def pick_seed(profile: str, seed: int | None = None) -> int:
    if seed is not None:
        return seed
    return CI_SEED if profile == "ci" else random.SystemRandom().randrange(2**32)


def run(
    target: Target,
    *,
    profile: str = "ci",
    settings: hypothesis.settings | None = None,
    seed: int | None = None,
    database: ExampleDatabase | None = None,
    config: MachineConfig | None = None,
    stats: RunStats | None = None,
    rerun: str | None = None,
    progress: Callable[[str], None] | None = None,
    expected: str | None = None,
) -> RunStats:
    """Run the machine on ``target``; raise (with the shrunk program) if the backend
    breaks a rule. ``settings`` overrides ``profile``; ``rerun`` is the command line that
    replays the run, for the failure note (a ``{seed}`` in it is filled in);
    ``progress(line)`` gets a line as the run starts (with ``expected``, what it should
    take, else the profile's figure) and then every few seconds (:class:`Progress`).

    The machine's two queues are ``config.queues`` when a config is given, else
    :func:`~rdq_compliance.queue_names.queue_pair` of the target's backend (a
    :class:`~rdq_compliance.session.Session` has one) and the seed: the backend's
    neighbour queues, or a pair drawn from the seed."""
    stats = stats if stats is not None else RunStats()
    used_seed = pick_seed(profile, seed)
    chosen = settings if settings is not None else settings_for(profile, database)
    if progress is not None:
        stats.on_example = Progress(
            progress,
            backend=target.name,
            profile=profile,
            total=chosen.max_examples,
            steps=chosen.stateful_step_count,
            expected=expected,
        )
    if config is not None:
        cfg = config
    else:
        cfg = replace(
            MachineConfig(), queues=queue_pair(getattr(target, "backend", None), used_seed)
        )

    def machine() -> BackendVsModel:
        return BackendVsModel(target, cfg, stats)

    hypothesis.seed(used_seed)(machine)
    try:
        # any callable returning a machine is accepted (hypothesis types it as the class)
        run_state_machine_as_test(machine, settings=chosen)  # type: ignore[arg-type]
    except BaseException as exc:
        where = getattr(chosen.database, "path", None)
        note = (
            f"rdq stateful machine: backend {target.name!r}, profile {profile!r}, seed "
            f"{used_seed}, {stats.examples} examples, {stats.steps} steps, "
            f"{time.perf_counter() - stats.started:.1f}s; the program's queues qa and qb "
            f"are stored as {cfg.queues[0]!r} and {cfg.queues[1]!r}."
        )
        if rerun:
            note += f"\nReplay: {rerun.format(seed=used_seed)}"
        if where is not None:
            note += f"\nThe failing program is kept in {where} and replays first next run."
        unreplayable = _unreplayable(exc, stats.first_violation)
        if unreplayable is not None:
            unreplayable.add_note(note)
            raise unreplayable from exc
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        raise
    return stats


def _unreplayable(
    exc: BaseException, violation: StatefulViolation | None
) -> StatefulViolation | None:
    """When hypothesis stops because a failing program did not replay the same way
    (``Flaky``: its draws or its failure changed, as with a backend whose answers depend
    on timing), the rule the backend broke, as first seen, with what happened; else
    ``None``. The failure stands: a backend that breaks a rule only sometimes breaks it."""
    if violation is None or not isinstance(exc, Flaky):
        return None
    # hypothesis's first line, then its detail, if any (which draw or result changed)
    why = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
    return StatefulViolation(
        violation.rule,
        f"{violation.detail}\n(the program that broke it did not replay the same way, so it "
        f"is not shrunk; hypothesis: {type(exc).__name__}: {why})",
    )
