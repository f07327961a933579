"""A deployed system for the kit's own tests: declarations only (its workers are never
started), promising what a typical at-least-once queue promises."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rdq_compliance.deployed.system import (
    JobSpec,
    JobState,
    Part,
    Profile,
    Promise,
    Setting,
    WorkerLaunch,
)

DOCS = "https://toy.invalid/docs/1.0"

#: Redelivery after a worker failure: two runs of one job are design then, not a bug.
AT_LEAST_ONCE = Promise(
    id="toy-at-least-once",
    quote="A job whose worker dies is run again by another worker after the heartbeat timeout.",
    link=f"{DOCS}/reliability.html#at-least-once",
    delivery="at-least-once",
    recovery="a worker silent for the heartbeat timeout is declared dead; its jobs are requeued",
    forbids=frozenset(
        {"lost", "never-ran", "handed-out-while-held", "superseded-outcome", "stuck"}
    ),
    tolerates={
        "handed-out-while-held": frozenset(
            {"kill", "pause", "cut", "partition", "server-freeze", "over-limit"}
        ),
    },
)
#: A finished job stays finished.
DONE_IS_FINAL = Promise(
    id="toy-done-is-final",
    quote="A job that completed is never run again.",
    link=f"{DOCS}/guarantees.html#completion",
    forbids=frozenset({"ran-after-done"}),
)


@dataclass
class ToySystem:
    name: str = "toy==1.0"
    server: str = "memory"
    behaviours: frozenset[str] = frozenset({"succeed", "fail", "retry", "sleep"})
    parts: tuple[Part, ...] = (Part("main", 1, "fetches"), Part("child", 2, "runs handlers"))
    promises: tuple[Promise, ...] = (AT_LEAST_ONCE, DONE_IS_FINAL)
    profiles: Mapping[str, Profile] = field(
        default_factory=lambda: {
            "defaults": Profile(
                "defaults", (Setting("heartbeat_timeout", "60", "60"),), recovery_after=60.0
            ),
            "fast": Profile(
                "fast",
                (Setting("heartbeat_timeout", "5", "60", f'"any value >= 1 s" ({DOCS}/settings)'),),
                recovery_after=5.0,
            ),
        }
    )
    known_upstream: tuple[object, ...] = ()

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        pass

    def close(self) -> None:
        pass

    def worker(self, name: str, profile: str, probe_path: str) -> WorkerLaunch:
        return WorkerLaunch(
            ("toy-worker", "--profile", profile),
            {"RDQ_PROBE_PATH": probe_path, "RDQ_PROBE_WORKER": name},
        )

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        return {j.key: f"toy-{j.key}" for j in jobs}

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        return {j: JobState("unknown", "absent") for j in job_ids}
