"""What one deployed campaign recorded and concluded, as the report writes it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rdq_compliance.deployed.faults import Fault
from rdq_compliance.deployed.fleet import Exit
from rdq_compliance.deployed.nemesis import NemesisResult
from rdq_compliance.deployed.plan import Plan
from rdq_compliance.deployed.probe import Execution, Torn
from rdq_compliance.deployed.system import JobState, Profile
from rdq_compliance.deployed.verdicts import Accepted, Drain, Verdict
from rdq_compliance.known_upstream import KnownUpstream

__all__ = ["CampaignResult"]


@dataclass
class CampaignResult:
    """One campaign: the system and its server, the plan, what was accepted and done,
    how the drain ended, every execution and final state, and the verdicts.

    Times are the harness's wall clock; ``t0`` is when the fault window opened. ``dsn`` is
    masked (no secret in it)."""

    system: str
    server_backend: str
    server_origin: str
    server_version: str | None
    dsn: str
    namespace: str
    profile: Profile
    plan: Plan
    outdir: Path
    t0: float = 0.0
    accepted: list[Accepted] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # key -> why not acknowledged
    keys: dict[str, str] = field(default_factory=dict)  # the library's job id -> key
    nemesis: NemesisResult = field(default_factory=NemesisResult)
    exits: list[Exit] = field(default_factory=list)
    launches: dict[str, list[str]] = field(default_factory=dict)
    drain: Drain | None = None
    drain_bound: float = 0.0
    drain_ended_by: str = ""
    drain_errors: list[str] = field(default_factory=list)
    final: dict[str, JobState] = field(default_factory=dict)
    executions: list[Execution] = field(default_factory=list)
    torn: list[Torn] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    #: The system's known-upstream entries the verdicts were judged against.
    known_upstream: tuple[KnownUpstream, ...] = ()
    uncertainty: float = 0.0
    uncertainty_note: str = ""
    #: The hosts of a fleet the workers ran on (name, address, measured clock, workers).
    hosts: list[dict[str, object]] = field(default_factory=list)
    #: What the places say of where the workers ran.
    notes: list[str] = field(default_factory=list)
    #: A fleet's host lost mid-campaign, as the checker reads it: a kill of each of its
    #: workers from when the harness saw its connection close to the worker's restart on
    #: another host (what its processes did after their last journalled line is unknown).
    host_losses: list[Fault] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def faults(self) -> list[Fault]:
        """Every fault the checker judges with: the nemesis's, and the hosts lost."""
        return [*self.nemesis.faults, *self.host_losses]

    @property
    def findings(self) -> list[Verdict]:
        """The findings no known-upstream entry covers: those that fail the campaign."""
        return [v for v in self.verdicts if v.kind == "finding" and v.upstream is None]

    @property
    def known(self) -> list[Verdict]:
        """The findings a known-upstream entry covers (confirmed upstream, still present)."""
        return [v for v in self.verdicts if v.kind == "finding" and v.upstream is not None]

    def not_seen(self) -> list[KnownUpstream]:
        """The known-upstream entries that covered no finding of this campaign."""
        seen = {id(v.upstream) for v in self.known}
        return [e for e in self.known_upstream if id(e) not in seen]

    @property
    def gaps(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.kind == "gap"]

    def behaviour_of(self, job: str) -> str:
        """The behaviour a job was enqueued with (from its key), or ``?``."""
        key = self.keys.get(job)
        spec = next((j for j in self.plan.jobs if j.key == key), None)
        return spec.behaviour if spec is not None else "?"

    def not_enqueued(self) -> list[str]:
        """The planned jobs the library's client refused or did not acknowledge (never
        judged), in words: one line per reason, with how many jobs of which behaviours it
        removed and their keys."""
        behaviour = {j.key: j.behaviour for j in self.plan.jobs}
        by_reason: dict[str, list[str]] = {}
        for key, why in self.refused.items():
            by_reason.setdefault(why, []).append(key)
        out = []
        for why, keys in by_reason.items():
            kinds = Counter(behaviour.get(k, "?") for k in keys)
            which = ", ".join(f"{b} {n}" for b, n in sorted(kinds.items()))
            out.append(f"{len(keys)} job(s) not enqueued ({which}): {why} [{', '.join(keys)}]")
        return out

    def counts(self) -> dict[str, dict[str, int]]:
        """Jobs planned, accepted and not enqueued by behaviour, accepted jobs by final
        state, and the executions by outcome."""
        by_behaviour = Counter(self.behaviour_of(a.job) for a in self.accepted)
        by_state = Counter(self.final.get(a.job, JobState("unknown", "")).state
                           for a in self.accepted)  # fmt: skip
        by_outcome = Counter(x.outcome or "no end" for x in self.executions)
        behaviour = {j.key: j.behaviour for j in self.plan.jobs}
        refused = Counter(behaviour.get(k, "?") for k in self.refused)
        return {
            "planned": self.plan.counts(),
            "accepted by behaviour": dict(sorted(by_behaviour.items())),
            "not enqueued by behaviour": dict(sorted(refused.items())),
            "final state": dict(sorted(by_state.items())),
            "executions by outcome": dict(sorted(by_outcome.items())),
            "verdicts": {
                "findings": len(self.findings),
                "known upstream": len(self.known),
                "gaps": len(self.gaps),
            },
        }
