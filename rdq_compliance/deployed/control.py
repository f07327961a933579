"""The control: rdq's own worker loop deployed as a system, on any kit backend.

:class:`CoreSystem` runs :class:`rdq_core.worker.Worker` (in the worker process of
:mod:`rdq_compliance.deployed.core_worker`) on the storage of the kit backend it is
given by name, fed by that storage's ``enqueue`` and read back by its ``get``: the
campaign a queue library gets, run on the reference of the contract. A correct backend
gives no finding; a broken one (a claim that ignores the lease) gives a finding.

Its promises quote the contract (``docs/contract.md``); its profiles are ``defaults``
(rdq_core's own defaults) and ``fast`` (a shorter lease and poll). The probe's
behaviours map to rdq's outcomes: ``retry`` raises :class:`rdq_core.retry.RetryableError`
(the default policy reschedules it until its attempts are spent), ``fail`` raises
:class:`rdq_core.retry.PermanentError` (dead-lettered at once); there is no hold.
rdq's attempt budget is set once for every job (``RetryPolicy.max_attempts``), so the
control takes no retry count per job (``retries_per_job = False``).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta

from rdq_compliance import registry
from rdq_compliance.deployed.system import (
    JobSpec,
    JobState,
    NeutralState,
    Part,
    Profile,
    Promise,
    Setting,
    WorkerLaunch,
)
from rdq_core.errors import NotFound
from rdq_core.model import NewTask, Outcome, Status
from rdq_core.spi import Storage

__all__ = ["DSN_ENV", "HANDLER", "PROFILES", "PROMISES", "QUEUE", "CoreSystem"]

#: The queue and the handler name the control's jobs use.
QUEUE = "deployed"
HANDLER = "probe"
#: The worker process reads the DSN from this variable (a password stays off its argv).
DSN_ENV = "RDQ_CORE_DSN"

_FAULTS_THAT_STOP_HEARTBEATS = frozenset(
    {"pause", "cut", "partition", "server-kill", "server-freeze"}
)

PROMISES: tuple[Promise, ...] = (
    Promise(
        id="rdq-one-rule",
        quote=(
            "At no moment may two workers both hold a live claim on the same task. A claim is "
            "live from the moment it is granted until its lease ends or it gets an accepted "
            "outcome, whichever comes first."
        ),
        link="docs/contract.md#1-the-one-rule-and-what-the-kit-is-for",
        forbids=frozenset({"handed-out-while-held"}),
        # a worker whose heartbeats stop (stopped, cut off, its server down or frozen)
        # loses its lease while its handler may still run: a second run is then allowed
        tolerates={"handed-out-while-held": _FAULTS_THAT_STOP_HEARTBEATS},
    ),
    Promise(
        id="rdq-never-lost",
        quote=(
            "A worker that dies mid-task costs one lease: its task is taken again once the "
            "lease has run out (never sooner), the lost claim is recorded as a LEASE_EXPIRED "
            "attempt, and another worker finishes the task. A task is never lost: it ends "
            "SUCCEEDED or DEAD, or it is still visibly PENDING or IN_FLIGHT."
        ),
        link="docs/contract.md#1-the-one-rule-and-what-the-kit-is-for",
        delivery="at-least-once",
        recovery="a task whose lease ran out is claimable again, and the next poll takes it",
        forbids=frozenset({"lost", "stuck", "never-ran"}),
        # a run whose outcome was not recorded (its worker died or lost its lease after the
        # handler returned) is run again: at least once. A task claimed with its attempts
        # spent is dead-lettered unrun (rdq_core/worker.py, "Poison pill"): claims whose
        # leases ran out before the handler started can spend them all.
        tolerates={
            "ran-after-done": frozenset({"kill", *_FAULTS_THAT_STOP_HEARTBEATS}),
            "never-ran": frozenset({"kill", *_FAULTS_THAT_STOP_HEARTBEATS}),
        },
    ),
    Promise(
        id="rdq-terminal",
        quote=(
            "There are four statuses and nothing else. SUCCEEDED and DEAD are terminal: no "
            "claim takes such a task (a DEAD one only once a redrive made it PENDING again)."
        ),
        link="docs/contract.md#statuses-and-their-changes",
        forbids=frozenset({"ran-after-done"}),
    ),
    Promise(
        id="rdq-token-fences-outcomes",
        quote=(
            "The token, not the clock, decides who may report. [...] once a reclaim happened, "
            "the old token is dead. A token is good for one outcome: after it, the task is no "
            "longer IN_FLIGHT under it."
        ),
        link="docs/contract.md#claims-leases-and-tokens",
        forbids=frozenset({"superseded-outcome"}),
        # a task whose budget a lost lease spent is dead-lettered unrun: its state then
        # comes from earlier runs, each of which another run followed
        tolerates={"superseded-outcome": frozenset({"kill", *_FAULTS_THAT_STOP_HEARTBEATS})},
    ),
)

_WORKER_DOCS = "rdq_core/worker.py (Worker)"
_LEASE_LINE = (
    '"lease: the lease asked for at claim and at each heartbeat", any positive lease up to a '
    'day ("lease must be positive and at most 1 day", rdq_core/validation.py); ' + _WORKER_DOCS
)
_POLL_LINE = (
    '"poll_interval / max_poll_interval: idle sleep and backoff after a failed storage '
    'call, doubling from the first up to the second", any positive pair with '
    "max_poll_interval >= poll_interval; " + _WORKER_DOCS
)
#: rdq_core's defaults (Worker and RetryPolicy), by setting.
_DEFAULTS = {
    "lease": "30s",
    "heartbeat_fraction": "1/3",
    "poll_interval": "0.2s",
    "max_poll_interval": "2s",
    "batch": "1",
    "concurrency": "1",
    "max_attempts": "5",
    "retry_backoff": "1s doubling, capped at 5min, equal jitter",
}


def _profile(name: str, changed: Mapping[str, tuple[str, str]], recovery: float) -> Profile:
    settings = tuple(
        Setting(k, changed[k][0] if k in changed else v, v, changed[k][1] if k in changed else "")
        for k, v in _DEFAULTS.items()
    )
    return Profile(name, settings, recovery_after=recovery, execution_limit=None)


#: ``defaults``: rdq_core's own (a dead worker's task is taken again after the lease, 30 s,
#: and the next idle poll, at most 2 s). ``fast``: a 4 s lease, polls from 0.1 s to 1 s.
PROFILES: Mapping[str, Profile] = {
    "defaults": _profile("defaults", {}, 32.0),
    "fast": _profile(
        "fast",
        {
            "lease": ("4s", _LEASE_LINE),
            "poll_interval": ("0.1s", _POLL_LINE),
            "max_poll_interval": ("1s", _POLL_LINE),
        },
        5.0,
    ),
}
#: The worker's command-line options per profile.
_OPTIONS = {
    "defaults": {"lease": 30.0, "poll_interval": 0.2, "max_poll_interval": 2.0},
    "fast": {"lease": 4.0, "poll_interval": 0.1, "max_poll_interval": 1.0},
}

_STATES: Mapping[Status, NeutralState] = {
    Status.SUCCEEDED: "finished",
    Status.DEAD: "failed-for-good",
    Status.PENDING: "waiting",
    Status.IN_FLIGHT: "running",
}


def _version() -> str:
    try:
        return importlib.metadata.version("rdq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class CoreSystem:
    """rdq's worker loop, deployed on the kit backend named ``backend`` (an ``rdq.backends``
    name or ``module:attribute``)."""

    behaviours: frozenset[str] = frozenset({"succeed", "sleep", "fail", "retry"})
    parts: tuple[Part, ...] = (
        Part("main", 1, "the worker loop: claims, heartbeats, runs the handler in a thread"),
    )
    promises: tuple[Promise, ...] = PROMISES
    profiles: Mapping[str, Profile] = PROFILES
    retries_per_job = False

    def __init__(self, backend: str) -> None:
        self.server = backend
        self.name = f"rdq=={_version()} on {backend}"
        self._storage: Storage | None = None
        self._dsn = ""
        self._namespace = ""

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        self._dsn, self._namespace = dsn, namespace
        self._storage = registry.load_backend(self.server).open(dsn, namespace)

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    def _opened(self) -> Storage:
        if self._storage is None:
            raise RuntimeError("CoreSystem.bind() was not called")
        return self._storage

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        options = _OPTIONS[profile]
        argv = [
            sys.executable, "-m", "rdq_compliance.deployed.core_worker",
            "--backend", self.server, "--namespace", self._namespace, "--queue", QUEUE,
            "--name", name,
        ]  # fmt: skip
        for key, value in options.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        env = {"RDQ_PROBE_PATH": probe_path, "RDQ_PROBE_WORKER": name, DSN_ENV: dsn or self._dsn}
        return WorkerLaunch(tuple(argv), env)

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        storage = self._opened()
        out = {}
        for job in jobs:
            payload = json.dumps({"behaviour": job.behaviour, "seconds": job.seconds})
            task = NewTask(
                id=job.key, queue=QUEUE, handler=HANDLER, payload=payload.encode(),
                delay=timedelta(seconds=job.delay),
            )  # fmt: skip
            if storage.enqueue(task):
                out[job.key] = job.key
        return out

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        storage = self._opened()
        out = {}
        for job in job_ids:
            try:
                task = storage.get(job)
            except NotFound:
                out[job] = JobState("unknown", "not found")
                continue
            words = f"{task.status.value} after {task.attempt_count} attempt(s)"
            state = _STATES.get(task.status, "unknown")
            # the attempt whose outcome made the state: the last of the history that is no
            # LEASE_EXPIRED one (a lease lost is recorded, never an outcome of the handler)
            kept = [a for a in task.attempts if a.outcome is not Outcome.LEASE_EXPIRED]
            done = state in ("finished", "failed-for-good", "held")
            final_attempt = kept[-1].attempt_no if kept and done else None
            out[job] = JobState(state, words, final_attempt)
        return out
