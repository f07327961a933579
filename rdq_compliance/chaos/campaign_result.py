"""What a chaos campaign yields, shared by the runner that fills it in, the report that
writes it down and the CLI that prints it: :class:`CampaignResult`, the live
:class:`Progress` snapshots, and :func:`replay_command`."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rdq_compliance import rules
from rdq_compliance.chaos.checker import Violation
from rdq_compliance.chaos.coverage import Coverage, Requirement
from rdq_compliance.chaos.nemesis import Counters, FaultPlan
from rdq_compliance.chaos.scenario import Scenario
from rdq_compliance.known_upstream import Judgement, KnownUpstream
from rdq_core.model import QueueStats

__all__ = ["CampaignResult", "Progress", "ProgressFn", "replay_command"]


@dataclass(frozen=True)
class Progress:
    """A snapshot for a live display."""

    phase: str  # enqueue | faults | drain | check | done
    elapsed: float
    total: int
    stats: QueueStats
    counters: Counters
    violations: int | None = None

    @property
    def done(self) -> int:
        return self.stats.succeeded + self.stats.dead


ProgressFn = Callable[[Progress], None]


@dataclass
class CampaignResult:
    """One campaign: what ran, what the checker found, and where the report is.

    ``checked`` is true once the checker ran to its end; if it raised instead,
    ``checker_error`` says how (and the run is not ``ok``).
    """

    scenario: Scenario
    seed: int
    backend: str
    server_origin: str
    outdir: Path
    plan: FaultPlan
    counters: Counters
    tasks: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    checked: bool = False
    checker_error: str | None = None
    drained: bool = False
    duration: float = 0.0
    #: seconds from the start until the tasks were enqueued (set-up included)
    enqueue_time: float = 0.0
    #: seconds from the start until the last fault was applied (the window's end)
    fault_phase: float = 0.0
    drain_time: float = 0.0
    #: seconds from the drain's end until the verdict (workers stopped, state read, checked)
    check_time: float = 0.0
    started_at: float = 0.0
    #: Worker processes alive after the fleet stopped: pids here, ``"<host> pid <n>"``
    #: on a remote fleet's hosts.
    workers_left: list[int | str] = field(default_factory=list)
    #: Where the workers ran when not on this machine: per host its name, SSH URL and
    #: measured clock offset and uncertainty (s) against the runner's.
    hosts: list[dict[str, object]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    #: The calls the campaign made, by operation, fault window and outcome.
    coverage: Coverage | None = None
    #: The checker's rules that saw none of the calls they judge (reported, not passed).
    not_exercised: list[str] = field(default_factory=list)
    #: What the faults that happened promised to exercise and did not (the run fails).
    unmet: list[Requirement] = field(default_factory=list)
    #: The known-upstream entries' judgement of the violations (``None``: none applied,
    #: as under ``rdq-chaos run``): a covered violation is reported marked, never passed.
    upstream: Judgement | None = None

    @property
    def ok(self) -> bool:
        """No violation found (a known-upstream one included), no checker failure, and
        every fault exercised what it is there for."""
        return not self.violations and self.checker_error is None and not self.unmet

    def known(self, index: int) -> KnownUpstream | None:
        """The known-upstream entry that covers ``violations[index]``, if one does."""
        return None if self.upstream is None else self.upstream.covered.get(index)

    def uncovered(self) -> list[Violation]:
        """The violations no known-upstream entry covers: those that fail the run."""
        return [v for i, v in enumerate(self.violations) if self.known(i) is None]

    def known_upstream_lines(self) -> list[str]:
        """One line per entry that covered violations (``known upstream, still present:
        owner/name#N (title): ...``, naming the rules and tasks without brackets, so that
        a failure message names only the rules of the violations that fail it), then one
        per entry that named the campaign and covered none (it no longer reproduces)."""
        if self.upstream is None:
            return []
        lines = []
        for entry in self.upstream.present():
            found = [self.violations[i] for i, e in self.upstream.covered.items() if e is entry]
            rules_seen = sorted({v.rule for v in found})
            tasks = [repr(v.task) for v in found if v.task is not None]
            shown = ", ".join(tasks[:5]) + (f", +{len(tasks) - 5}" if len(tasks) > 5 else "")
            lines.append(
                f"{entry.still_present()}: {len(found)} violation(s) of rule "
                f"{', '.join(rules_seen)}"
                + (f" (tasks {shown})" if tasks else "")
                + f" <{entry.url}>"
            )
        lines += [entry.gone() for entry in self.upstream.gone()]
        return lines

    def unmet_messages(self) -> list[str]:
        """Each unmet requirement as a failure line naming its rule."""
        return [
            rules.message(r.rule, f"not exercised: the campaign made no {r.describe()}")
            for r in self.unmet
        ]

    @property
    def notes(self) -> list[str]:
        return self.counters.notes


def replay_command(
    scenario: Scenario,
    backend: str,
    seed: int,
    dsn: str | None = None,
    options: Mapping[str, str] | None = None,
    fleet: Path | None = None,
) -> str:
    """The shell command that replays a run (same scenario file, backend, seed and
    backend options — e.g. the replicated server a failover campaign needs)."""
    source = str(scenario.source) if scenario.source is not None else f"{scenario.name}.toml"
    parts = ["rdq-chaos", "run", source, "--backend", backend, "--seed", str(seed)]
    if dsn:
        parts += ["--dsn", dsn]
    for key, value in sorted((options or {}).items()):
        parts += ["--option", f"{key}={value}"]
    if fleet is not None:
        parts += ["--fleet", str(fleet)]
    return " ".join(shlex.quote(p) for p in parts)
