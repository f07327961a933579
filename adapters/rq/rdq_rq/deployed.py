"""rq 3.0.0 as its users deploy it: ``rq worker --with-scheduler`` processes fed by rq's own
``Queue.enqueue`` (the contract's section 9, ``docs/contract.md#9-deployed-systems``).

Everything rq does is rq's: its CLI worker at its settings, its client, its job
statuses. The job the workers run is :func:`rdq_rq.deployed_jobs.probe`.

**Where a campaign lives.** rq's key names are fixed (``rq:queue:<queue>``,
``rq:job:<id>``, ``rq:wip:<queue>``, ...; the ``RQ_KEY_PREFIX`` environment variable is
read once per process at import, ``rq/defaults.py#L4``), so the kit's namespace is
carried in names: the campaign's queue is ``rdq-<namespace>`` and each job id
``<namespace>-<key>``. That isolates the jobs and every per-queue registry on a shared
server; what stays shared is server-wide (``rq suspend`` stops every worker on the
database, the ``rq:workers`` and ``rq:queues`` sets). The server faults (kill, freeze)
need a server the kit owns: the harness provisions one through the ``redis`` backend's
ladder. rq names its workers' connections after the worker (``CLIENT SETNAME``,
``rq/worker/base.py#L253``), not ``rdq:<namespace>``, so the server's
``cut_connections(namespace)`` finds none of them.

**Settings.** ``defaults`` passes no setting; ``fast`` passes three of ``rq worker``'s
options, each listed with its default and the line that allows it. ``recovery_after`` is
how long after a worker dies rq's own maintenance acts on its job (re-enqueues it while
its ``Retry`` has retries left, else fails it), on a queue with at least one worker idle
or between short jobs; with ``p = maintenance_interval + (worker_ttl - 15)`` (a pass runs
between dequeues, and an idle worker's dequeue blocks ``worker_ttl - 15`` seconds,
``rq/worker/base.py#L420-L426``, ``#L469-L472``), it is the larger of

- an execution in the StartedJobRegistry: its heartbeat's score lapses ``min(job
  timeout, job_monitoring_interval) + 60`` s after the last heartbeat
  (``rq/worker/base.py#L1112-L1126``), then the next pass collects it
  (``rq/registry.py#L268-L337``): ``job_monitoring_interval + 60 + p``;
- a job dequeued into the queue's intermediate list but never started: a first pass
  marks it, a pass more than 60 s later fails it (``rq/intermediate_queue.py#L67-L81``,
  ``#L99-L118``): ``p + 60 + p``;

plus 1 s (rq's registry scores are whole seconds, ``rq/registry.py#L339-L355``). A worker
killed between registering an execution and its horse starting it needs both, one after
the other. ``execution_limit`` is the job timeout (``Queue.DEFAULT_TIMEOUT`` = 180 s,
``rq/queue.py#L109``): past it the horse is interrupted and the job failed.

**Known upstream** (rq's tracker, not this kit's findings): the window between a dequeue
and the job's registration is not atomic (https://github.com/rq/rq/issues/1716,
https://github.com/rq/rq/issues/2236, https://github.com/rq/rq/issues/381, all open); a
worker on one queue, as here, dequeues into the intermediate list, from which the job is
failed after a minute. Finished jobs later marked abandoned
(https://github.com/rq/rq/issues/2289, https://github.com/rq/rq/issues/2290,
https://github.com/rq/rq/issues/2424) are fixed in 3.0 by
https://github.com/rq/rq/pull/2466. One job run by two workers at once was reported
without a cause found (https://github.com/rq/rq/issues/1854, closed).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import redis
import rq
from rq import Queue, Retry
from rq.job import Job, JobStatus

from rdq_compliance.deployed.probe import PATH_ENV, WORKER_ENV
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
from rdq_core.masking import mask_dsn
from rdq_rq.deployed_jobs import probe

__all__ = ["PROFILES", "PROMISES", "VERSION", "RqSystem"]

VERSION = "3.0.0"
#: The release's tag on GitHub; every link below is pinned to it.
TAG = "v3.0.0"
_BLOB = f"https://github.com/rq/rq/blob/{TAG}"
DOCS = f"{_BLOB}/docs/docs"
CODE = f"{_BLOB}/rq"

# ---- promises -----------------------------------------------------------------------------

#: A dequeue pops the job's id, then the worker registers the job as its own: one worker
#: runs it. (The docs say no more of two workers running one job.)
DEQUEUE_POPS = Promise(
    id="rq-dequeue-pops",
    quote="3. _Start listening_. A job is popped from any of the given Redis queues. If all "
    "queues are empty and the worker is running in burst mode, quit now. Else, wait until "
    "jobs arrive. 4. _Prepare job execution_. The worker tells the system that it will begin "
    "work by setting its status to `busy` and registers job in the `StartedJobRegistry`.",
    link=f"{DOCS}/workers.md#the-worker-lifecycle",
    forbids=frozenset({"handed-out-while-held"}),
)
#: A worker that dies mid-job has its job collected by another worker's maintenance, which
#: fails it, or re-enqueues it while its Retry has retries left (rq/registry.py#L310-L322).
#: rq tells a dead worker by its lapsed heartbeat ("`job.last_heartbeat` [...] Can be used
#: to determine if the job is still active", docs/docs/jobs.md): a worker stopped, cut off
#: or partitioned past it is collected as a dead one, and a second run while the first
#: still runs is the documented model then. Of a collected execution's late outcome the
#: docs say only that the collector fails the job.
ABANDONED = Promise(
    id="rq-abandoned-job",
    quote="This error means an unfinished job was collected by another worker's maintenance "
    "task. This usually happens when a worker is busy with a job and is terminated before it "
    "finished that job. Another worker collects this job and moves it to the "
    "FailedJobRegistry.",
    link=f"{DOCS}/exceptions.md#abandonedjoberror",
    recovery="another worker on the queue, in a maintenance pass (every --maintenance-interval "
    "seconds, between dequeues), collects an execution whose heartbeat lapsed "
    "(min(job timeout, --job-monitoring-interval) + 60 s after the last one): it re-enqueues "
    "the job while its Retry(max=...) has retries left, else fails it with AbandonedJobError",
    forbids=frozenset({"stuck", "superseded-outcome"}),
    tolerates={
        "handed-out-while-held": frozenset({"kill", "pause", "cut", "partition", "server-freeze"})
    },
)
#: kill -9: the job of a killed worker ends up failed; the kill may "lead to damage" (an
#: outcome the handler reached but rq never recorded, so the job runs again). A worker
#: killed after it took a job and before its horse started the handler leaves a job rq
#: fails the same way, never run.
KILLED = Promise(
    id="rq-killed-worker",
    quote="However, workers can be killed forcefully by `kill -9`, which will not give the "
    "workers a chance to finish the job gracefully or to put the job on the `failed` queue. "
    "Therefore, killing a worker forcefully could potentially lead to damage. Just sayin'. "
    "If the worker gets killed while a job is running, it will eventually end up in "
    "`FailedJobRegistry` because a cleanup task will raise an `AbandonedJobError`.",
    link=f"{DOCS}/results.md#dealing-with-interruptions",
    recovery="as rq-abandoned-job; a killed work horse is seen by its own worker at once and "
    "its job failed ('Work-horse terminated unexpectedly', rq/worker/worker_classes.py"
    "#L139-L151), or re-enqueued while its Retry has retries left",
    forbids=frozenset({"lost", "stuck"}),
    tolerates={"ran-after-done": frozenset({"kill"}), "never-ran": frozenset({"kill"})},
)
#: Delayed jobs: a scheduler dies, another worker's takes over.
SCHEDULER = Promise(
    id="rq-scheduler-failover",
    quote="Active schedulers are responsible for enqueueing scheduled jobs. Active schedulers "
    "will check for scheduled jobs once every second. Idle schedulers will periodically "
    "(every 15 minutes) check whether the queues they're responsible for have active "
    "schedulers. If they don't, one of the idle schedulers will start working. This way, if a "
    "worker with active scheduler dies, the scheduling work will be picked up by other "
    "workers with the scheduling component enabled.",
    link=f"{DOCS}/scheduling.md#running-the-scheduler",
    recovery="the dead scheduler's lock lapses 1 + 60 s after its last heartbeat "
    "(rq/scheduler.py#L127-L134); a worker started --with-scheduler takes it at its next "
    "maintenance pass (rq/worker/base.py#L1061-L1075), not every 15 minutes as the docs say",
    forbids=frozenset({"lost"}),
)
#: The lifecycle ends at finished; a failed job is retried at most max times.
LIFECYCLE = Promise(
    id="rq-job-lifecycle",
    quote="3. _Finished_. After an execution has ended, `execution` will be removed from "
    "`StartedJobRegistry`. A `Result` object that holds the result of the execution will be "
    "created. [...] `finished`: The job has finished execution and is available through the "
    "finished job registry.",
    link=f"{DOCS}/jobs.md#the-job-lifecycle",
    forbids=frozenset({"ran-after-done", "never-ran"}),
)
RETRIES = Promise(
    id="rq-retry",
    quote="RQ lets you easily retry failed jobs. To configure retries, use RQ's `Retry` "
    "object that accepts `max` and `interval` arguments. [...] # Retry up to 3 times, failed "
    "job will be requeued immediately",
    link=f"{DOCS}/exceptions.md#retrying-failed-jobs",
    forbids=frozenset({"ran-after-done"}),
)
#: Past its timeout an execution is rq's to interrupt and fail.
TIMEOUT = Promise(
    id="rq-job-timeout",
    quote="By default, jobs should execute within 180 seconds. After that, the worker kills "
    "the work horse and puts the job onto the `failed` queue, indicating the job timed out.",
    link=f"{DOCS}/results.md#dealing-with-job-timeouts",
    tolerates={"handed-out-while-held": frozenset({"over-limit"})},
)
PROMISES: tuple[Promise, ...] = (
    DEQUEUE_POPS, ABANDONED, KILLED, SCHEDULER, LIFECYCLE, RETRIES, TIMEOUT,
)  # fmt: skip

# ---- profiles ------------------------------------------------------------------------------

_MAINTENANCE = (
    '"`--maintenance-interval`: defaults to 600 seconds. Runs maintenance tasks every X '
    f'seconds." ({DOCS}/workers.md#worker-arguments)'
)
_WORKER_TTL = (
    '"The `dequeue_timeout` is computed as 15 seconds shorter than the `worker_ttl` value." '
    f"({DOCS}/connections.md#timeout), set by rq worker's option "
    f'`--worker-ttl` "Worker timeout to be used" ({CODE}/cli/workers.py#L37)'
)
_MONITORING = (
    "rq worker's option `--job-monitoring-interval` \"Default job monitoring interval to be "
    f'used" ({CODE}/cli/workers.py#L44-L49; the docs pages do not name it)'
)
_DEFAULTS = {  # rq/defaults.py#L46, #L52, #L98; rq/queue.py#L109; rq/defaults.py#L57
    "--maintenance-interval": 600,
    "--worker-ttl": 420,
    "--job-monitoring-interval": 30,
    "job_timeout": 180,
    "result_ttl": 500,
}
_ALLOWED = {
    "--maintenance-interval": _MAINTENANCE,
    "--worker-ttl": _WORKER_TTL,
    "--job-monitoring-interval": _MONITORING,
}


def _profile(name: str, changed: Mapping[str, int] | None = None) -> Profile:
    """A profile: rq's defaults with ``changed`` settings (by name), each citing its line;
    ``recovery_after`` and ``execution_limit`` as the module's docstring computes them."""
    changed = changed or {}
    values = {**_DEFAULTS, **changed}
    settings = tuple(
        Setting(key, str(values[key]), str(default), _ALLOWED[key] if key in changed else "")
        for key, default in _DEFAULTS.items()
    )
    p = values["--maintenance-interval"] + max(1, values["--worker-ttl"] - 15)
    started = values["--job-monitoring-interval"] + 60 + p
    dequeued = p + 60 + p
    return Profile(
        name,
        settings,
        recovery_after=float(max(started, dequeued) + 1),
        execution_limit=float(values["job_timeout"]),
    )


#: ``defaults``: recovery_after 2071 s (p = 600 + 405), execution_limit 180 s; ``fast``:
#: maintenance every second, a 1 s dequeue wait, a heartbeat every second (so a 61 s
#: heartbeat TTL, rq's floor): recovery_after 65 s (p = 1 + 1), execution_limit 180 s.
#: ``fast``'s ``--worker-ttl 16`` also sets the client's socket timeout to 11 s
#: (docs/docs/connections.md#timeout): a server frozen longer makes a busy worker quit.
PROFILES: Mapping[str, Profile] = {
    "defaults": _profile("defaults"),
    "fast": _profile(
        "fast",
        {"--maintenance-interval": 1, "--worker-ttl": 16, "--job-monitoring-interval": 1},
    ),
}

# ---- the system ----------------------------------------------------------------------------

_JOB_ID = re.compile(r"[A-Za-z0-9_-]+")  # rq/job.py#L55
#: rq's statuses (rq/job.py#L58-L71, docs/docs/jobs.md "Job Status") in neutral words. rq
#: writes ``failed`` only once it retries no more (rq/worker/base.py#L751-L759, #L1429-L1433,
#: rq/registry.py#L312-L321); a stopped job "will be sent to FailedJobRegistry" and is never
#: retried, a canceled one "will not be executed": all final, none finished.
_STATES: Mapping[str, NeutralState] = {
    JobStatus.FINISHED: "finished",
    JobStatus.FAILED: "failed-for-good",
    JobStatus.STOPPED: "failed-for-good",
    JobStatus.CANCELED: "failed-for-good",
    JobStatus.STARTED: "running",
    JobStatus.QUEUED: "waiting",
    JobStatus.SCHEDULED: "waiting",
    JobStatus.DEFERRED: "waiting",
    JobStatus.CREATED: "waiting",
    JobStatus.RATE_LIMITED: "waiting",
    JobStatus.READY_TO_ENQUEUE: "waiting",
}


def _rq_cli() -> list[str]:
    """rq's own CLI: the ``rq`` script beside this interpreter, else ``python -m rq.cli``."""
    script = Path(sys.executable).with_name("rq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rq.cli"]


class RqSystem:
    """rq 3.0.0's CLI workers on one Redis server (see the module's docstring)."""

    name = f"rq=={VERSION}"
    server = "redis"
    #: No hold: rq has no per-job park (``rq suspend`` stops every worker; a canceled job
    #: "will not be executed").
    behaviours = frozenset({"succeed", "sleep", "fail", "retry"})
    #: rq names each connection after its worker (``client_setname(self.name)``,
    #: rq/worker/base.py#L253), not
    #: after the kit's namespace: the kit's connection cut cannot find them.
    connections_in_namespace = False
    parts = (
        Part("main", 1, "the `rq worker` process: dequeues, registers the execution, forks the "
             "horse and heartbeats while it runs, runs maintenance between dequeues; the "
             "worker holding the queue's scheduler lock also forks rq's scheduler process",
             "leader"),
        Part("horse", 1, "the work horse rq forks per job (os.fork, then os.setpgrp, "
             "rq/worker/worker_classes.py#L60-L77): runs the handler and records its outcome",
             "descendants"),
    )  # fmt: skip
    promises = PROMISES
    profiles = PROFILES

    def __init__(self) -> None:
        self._dsn: str | None = None
        self._namespace = ""
        self._workdir = ""
        self._client: redis.Redis | None = None
        self._queue: Queue | None = None

    @property
    def namespace(self) -> str:
        """The kit's namespace this system is bound to (``""`` before :meth:`bind`)."""
        return self._namespace

    @property
    def queue_name(self) -> str:
        """The campaign's rq queue: ``rdq-<namespace>``."""
        return f"rdq-{self._namespace}"

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        if rq.__version__ != VERSION:
            raise RuntimeError(f"{self.name} needs rq {VERSION}; rq {rq.__version__} is installed")
        self._profile(profile)
        if not _JOB_ID.fullmatch(namespace):
            raise ValueError(f"namespace {namespace!r}: rq ids take letters, digits, '_', '-'")
        self._dsn, self._namespace, self._workdir = dsn, namespace, workdir
        self._client = redis.Redis.from_url(dsn)
        try:
            self._client.ping()
        except redis.RedisError as exc:
            raise RuntimeError(f"no Redis server answers at {mask_dsn(dsn)}: {exc}") from None
        self._queue = Queue(self.queue_name, connection=self._client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        """``rq worker --with-scheduler [options] --url <dsn> <queue>``, as docs/docs/workers.md
        starts it. No ``--name``: rq names each worker itself, as the docs' supervisor and
        systemd setups leave it; a fixed name would be refused after a kill until the dead
        worker's key expires (``register_birth``, rq/worker/base.py#L954-L960). A DSN
        carrying a password goes in ``RQ_REDIS_URL`` (the option's environment variable,
        rq/cli/helpers.py#L393), never in the argv. ``dsn``: the server as this worker
        reaches it (default: the DSN bound)."""
        dsn = dsn or self._bound()[0]
        changed = [s for s in self._profile(profile).settings if s.changed]
        options = [x for s in changed if s.name.startswith("--") for x in (s.name, s.value)]
        env = {PATH_ENV: probe_path, WORKER_ENV: name}
        url: list[str] = []
        if mask_dsn(dsn) == dsn:
            url = ["--url", dsn]
        else:
            env["RQ_REDIS_URL"] = dsn
        argv = [*_rq_cli(), "worker", "--with-scheduler", *options, *url, self.queue_name]
        return WorkerLaunch(tuple(argv), env, self._workdir or None)

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        """rq's ``Queue.enqueue`` (``enqueue_in`` for a delay) of the probe with job id
        ``<namespace>-<key>`` and ``unique=True`` (docs/docs/index.md "Unique Jobs": a
        second enqueue of an id raises ``DuplicateJobError`` instead of overwriting it).
        ``retries`` n of a ``fail``/``succeed``/``sleep`` job is ``retry=Retry(max=n)`` (none
        for 0); a ``retry`` job returns ``Retry(max=n)`` itself, which rq refuses for n < 1
        (``ValueError``, rq/job.py#L1932: the job fails when it asks). rq's errors are raised
        as they come (a job id rq refuses among them, rq/job.py#L86-L87)."""
        queue = self._bound()[1]
        plan = [(spec, f"{self._namespace}-{spec.key}", self._retries(spec)) for spec in jobs]
        out: dict[str, str] = {}
        for spec, job_id, retries in plan:
            options: dict[str, object] = {"job_id": job_id, "unique": True}
            if spec.behaviour != "retry" and retries:
                options["retry"] = Retry(max=retries)
            args = (spec.behaviour, float(spec.seconds), retries)
            if spec.delay > 0:
                job = queue.enqueue_in(timedelta(seconds=spec.delay), probe, *args, **options)
            else:
                job = queue.enqueue(probe, *args, **options)
            out[spec.key] = job.id
        return out

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        """rq's status of each job (``Job.fetch_many``), with its retry counters and, for a
        failed or stopped job, its latest result's type and first error line."""
        queue = self._bound()[1]
        ids = list(job_ids)
        out: dict[str, JobState] = {}
        for job_id, job in zip(ids, Job.fetch_many(ids, connection=queue.connection), strict=True):
            if job is None:
                out[job_id] = JobState("unknown", "no such job (its key expired or was never set)")
                continue
            status = job.get_status(refresh=False)
            words = [str(status.value)]
            if job.retries_left is not None:
                words.append(f"retries_left={job.retries_left}")
            if job.number_of_retries:
                words.append(f"number_of_retries={job.number_of_retries}")
            if status in (JobStatus.FAILED, JobStatus.STOPPED):
                result = job.latest_result()
                if result is not None:
                    error = (result.exc_string or "").strip().splitlines()
                    words.append(result.type.name + (f": {error[-1][:200]}" if error else ""))
            out[job_id] = JobState(_STATES.get(status, "unknown"), "; ".join(words))
        return out

    # ---- helpers --------------------------------------------------------------------------

    def _bound(self) -> tuple[str, Queue]:
        if self._dsn is None or self._queue is None:
            raise RuntimeError(f"{self.name}: call bind(dsn, namespace, workdir, profile) first")
        return self._dsn, self._queue

    def _profile(self, profile: str) -> Profile:
        if profile not in self.profiles:
            known = sorted(self.profiles)
            raise ValueError(f"{self.name}: no profile {profile!r} (known: {known})")
        return self.profiles[profile]

    def _retries(self, spec: JobSpec) -> int:
        if spec.behaviour not in self.behaviours:
            raise ValueError(
                f"{self.name} cannot run behaviour {spec.behaviour!r} (it runs "
                f"{sorted(self.behaviours)})"
            )
        return spec.retries or 0
