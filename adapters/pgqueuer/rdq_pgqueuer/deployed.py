"""pgqueuer 1.6.0 as its users deploy it (contract section 9): ``pgq run`` workers, the
schema ``pgq install`` makes, pgqueuer's own client.

- **Worker**: one process, ``python -m pgqueuer run rdq_pgqueuer.deployed_app:main`` (the
  ``pgq`` CLI, docs/reference/cli.md: "Invoke it as ``pgq`` or ``python3 -m pgqueuer``"):
  one asyncio loop whose ``QueueManager`` dequeues, runs each job in a task, heartbeats
  and writes outcomes (and an idle ``SchedulerManager``). Flags only for what a profile
  changes.
- **Namespace**: pgqueuer's own settings, ``PGQUEUER_SCHEMA`` = the kit's namespace (every
  table, the enum and the trigger function live in that Postgres schema, whatever the
  connection's ``search_path``), and ``PGQUEUER_PREFIX`` derived from it: NOTIFY channels
  are database-wide, and the prefix is what gives the installation a channel of its own
  (docs/getting-started/installation.md#L159-L187 at v1.6.0). The workers' sessions carry
  ``application_name`` ``rdq:<namespace>`` (pgqueuer's ``PGQUEUER_APPLICATION_NAME``),
  the tag the kit's connection cuts find a namespace's sessions by.
- **Install** (:meth:`PgqueuerSystem.bind`): ``pgq install`` with those variables.
- **Enqueue**: ``SyncQueries.enqueue`` over ``SyncPsycopgDriver`` (pgqueuer's synchronous
  client: the same insert as ``Queries.enqueue``); the job id it returns is the id the
  probe journals. Delay: ``execute_after``; priority 0 (the default). The entrypoint
  says what pgqueuer does with a failure (:mod:`rdq_pgqueuer.deployed_app`): a ``fail``
  job goes to the one whose executor is ``DatabaseRetryEntrypointExecutor`` at its
  defaults (retried 5 times, then logged ``exception``), or, asking 0 retries, to the
  default executor's (not retried). pgqueuer sets that budget per entrypoint, not per job
  (``retries_per_job = False``: the plan's ``fail`` and ``retry`` jobs ask for none); a
  ``retry`` job's handler counts its own (``job.attempts``, 5 when none is asked).
  A client error is raised as pgqueuer's client raises it (a connection lost is closed
  first, so the next call connects again).
- **Final states**: what a pgqueuer user reads: the queue table (``queued``, ``picked``,
  ``failed`` = held) and, for a job gone from it, its last terminal row in the log table
  (``successful``, ``exception``, ``canceled``, ``deleted``). The statistics table keeps
  counts per entrypoint and second, no job ids.

A worker hands each outcome to a buffer flushed every 0.1 s (+-20 %) or when
``batch_size`` outcomes wait (code: pgqueuer/core/buffers.py#L27-L31, #L112-L121,
core/qm.py#L423-L425 at v1.6.0): a worker killed after its handler returned and before
that flush leaves the job ``picked``, and it is run again after ``heartbeat_timeout``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import timedelta

import psycopg
from pgqueuer.adapters.persistence.qb import QueryQueueBuilder
from pgqueuer.db import SyncPsycopgDriver
from pgqueuer.domain.settings import DBSettings, QualifiedNames
from pgqueuer.queries import SyncQueries
from psycopg.conninfo import conninfo_to_dict
from rdq_postgres.connection import default_application_name

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
from rdq_core.errors import InvalidArgument, RdqError
from rdq_core.masking import mask_dsn
from rdq_pgqueuer.deployed_app import (
    DEFAULT_RETRIES,
    ENTRYPOINT,
    HOLD_ENTRYPOINT,
    RETRYING_DEFAULTS,
    RETRYING_ENTRYPOINT,
    Order,
)

__all__ = ["InstallFailed", "PgqueuerSystem", "entrypoint_of"]

VERSION = "1.6.0"
DOCS = f"https://github.com/janbjorge/pgqueuer/blob/v{VERSION}/docs"
APP = "rdq_pgqueuer.deployed_app:main"
#: Seconds ``pgq install`` may take before :meth:`PgqueuerSystem.bind` calls it hung.
INSTALL_TIMEOUT = 120.0
_STALL = frozenset({"pause", "cut", "partition", "server-freeze"})

AT_LEAST_ONCE = Promise(
    id="pgqueuer-at-least-once",
    quote=(
        "A job may run more than once; PgQueuer does not attempt exactly-once. When a worker "
        "crashes between claim and completion, the job is re-delivered to another worker. [...] "
        "No job is lost to a worker crash; re-delivery is the recovery path."
    ),
    link=f"{DOCS}/adr/ADR-0004-delivery-is-at-least-once.md#L17-L29",
    delivery="at-least-once",
    recovery="the job stays 'picked'; once its heartbeat is older than heartbeat_timeout the "
    "next dequeue of any worker re-picks it (an idle worker dequeues on a NOTIFY, at the "
    "latest after dequeue_timeout)",
    forbids=frozenset({"lost", "never-ran"}),
    # Completion is the outcome written to the database, after the handler returned (the
    # buffer above): a kill in between re-delivers a job whose handler already ended.
    tolerates={"ran-after-done": frozenset({"kill"})},
)
STALLED_WORKER = Promise(
    id="pgqueuer-heartbeat-liveness",
    quote=(
        "Workers prove liveness in data. Each running job carries a heartbeat timestamp that "
        "its worker refreshes periodically; a job whose heartbeat is older than a configured "
        "timeout counts as abandoned and becomes claimable again through the ordinary claim "
        "path [...] A worker that stalls without dying, for example on a blocked event loop, "
        "misses heartbeats and gets its job re-delivered while the original run may still "
        "finish. This is the duplicate-run case ADR-0004 already requires entrypoints to "
        "tolerate."
    ),
    link=f"{DOCS}/adr/ADR-0005-worker-liveness-is-application-signal.md#L19-L44",
    delivery="at-least-once",
    tolerates={
        "handed-out-while-held": _STALL,
        "superseded-outcome": _STALL,
        "ran-after-done": _STALL,
    },
)
LIVE_JOB_KEPT = Promise(
    id="pgqueuer-live-job-kept",
    quote=(
        "A dequeue can re-pick a live job only once its stored heartbeat is older than "
        "`heartbeat_timeout` (T)."
    ),
    link=f"{DOCS}/guides/heartbeat.md#L59-L64",
    # A superseded outcome needs a second execution while the first ran: the re-pick of a
    # live job this promise rules out. No page speaks of outcomes themselves (ADR-0004:
    # "no fencing tokens").
    forbids=frozenset({"handed-out-while-held", "superseded-outcome"}),
)
RECOVERY = Promise(
    id="pgqueuer-stalled-jobs-recover",
    quote=(
        "The `heartbeat_timeout` parameter on `pgq.run()` / `QueueManager.run()` sets the "
        "duration after which a picked job with a stale heartbeat becomes eligible for "
        "re-pickup by any available worker. Heartbeats are sent automatically at half this "
        "interval, so a crashed or stalled worker's jobs recover without operator action"
    ),
    link=f"{DOCS}/guides/heartbeat.md#L28-L34",
    delivery="at-least-once",
    forbids=frozenset({"stuck", "lost"}),
)
TERMINAL = Promise(
    id="pgqueuer-terminal-states",
    quote=(
        "Once a job reaches a terminal state (`successful`, `exception`, `canceled`, "
        "`deleted`), it is moved from the `pgqueuer` table to the `pgqueuer_log` table as an "
        "audit record. Jobs with status `failed` remain in the queue table until manually "
        "re-queued or deleted."
    ),
    link=f"{DOCS}/getting-started/core-concepts.md#L109-L111",
    forbids=frozenset({"ran-after-done"}),
)
FAILURE_NOT_RETRIED = Promise(
    id="pgqueuer-failure-not-retried",
    quote=(
        "When a job raises an unhandled exception, PgQueuer: 1. Marks the job status as "
        "`exception`. [...] The job is **not** automatically retried at this point; it is "
        "considered definitively failed for this execution attempt."
    ),
    link=f"{DOCS}/guides/reliability.md#L6-L15",
    forbids=frozenset({"ran-after-done"}),
)
HELD = Promise(
    id="pgqueuer-held-until-requeued",
    quote=(
        'Setting `on_failure="hold"` on an entrypoint changes this behavior: instead of '
        "deleting, the job is updated to `status='failed'` and stays in the queue table with "
        "its payload, headers, and all metadata intact. The dequeue query skips `failed` "
        "jobs, so they won't be picked up by workers until explicitly re-queued."
    ),
    link=f"{DOCS}/guides/hold-failed-jobs.md#L8-L11",
    forbids=frozenset({"ran-after-done", "lost"}),
)
RETRY = Promise(
    id="pgqueuer-retry-requested",
    quote=(
        "Your handler raises `RetryRequested` with an optional delay and reason. PgQueuer "
        "catches the exception and atomically: Resets the job status to `queued`. [...] The "
        "job becomes eligible for dequeue again after the delay expires."
    ),
    link=f"{DOCS}/guides/retry.md#L8-L17",
    forbids=frozenset({"lost"}),
)
RETRY_EXECUTOR = Promise(
    id="pgqueuer-retry-executor",
    quote=(
        "After `max_attempts` consecutive failures, the original exception propagates as a "
        "terminal failure (the job is deleted and logged with status `exception`)."
    ),
    link=f"{DOCS}/guides/retry.md#L100-L101",
    forbids=frozenset({"ran-after-done", "lost"}),
)
DURABLE = Promise(
    id="pgqueuer-durable-tables",
    quote="`durable` *(default)*: All tables are logged: full crash recovery.",
    link=f"{DOCS}/reference/cli.md#L14-L18",
    forbids=frozenset({"lost"}),
)

_HEARTBEAT = "heartbeat_timeout"
_DEQUEUE = "dequeue_timeout"
#: The ``pgq run`` flag of each setting a profile may change.
FLAGS = {_HEARTBEAT: "--heartbeat-timeout", _DEQUEUE: "--dequeue-timeout"}
_CLI = f"{DOCS}/reference/cli.md#L403-L419"


_RETRY_PARAMETERS = f"{DOCS}/guides/retry.md#L106-L113"
#: Each ``DatabaseRetryEntrypointExecutor`` parameter's line of the retry guide's table.
_RETRY_DOCS = {
    "max_attempts": "`max_attempts` | `int` | `5` | Maximum retries before the exception "
    "becomes terminal",
    "initial_delay": "`initial_delay` | `timedelta` | `1s` | Delay before the first retry",
    "max_delay": "`max_delay` | `timedelta` | `5m` | Cap on exponential backoff",
    "backoff_multiplier": "`backoff_multiplier` | `float` | `2.0` | Multiplier applied to "
    "delay after each attempt",
}


def _defaults() -> tuple[Setting, ...]:
    return (
        Setting(_HEARTBEAT, "30", "30", f"`--heartbeat-timeout` default 30.0 ({_CLI})"),
        Setting(_DEQUEUE, "30", "30", f"`--dequeue-timeout` default 30.0 ({_CLI})"),
        Setting("batch_size", "10", "10", f"`--batch-size` default 10 ({_CLI})"),
        Setting("max_concurrent_tasks", "None", "None", f"unlimited by default ({_CLI})"),
        Setting("restart_on_failure", "False", "False", f"off by default ({_CLI})"),
        Setting("concurrency_limit", "0", "0", f"{DOCS}/getting-started/core-concepts.md#L56-L62"),
        # the executor of the entrypoint a failing job is retried on, every setting its own
        *(
            Setting(
                f"DatabaseRetryEntrypointExecutor.{name}", value, value,
                f'"{_RETRY_DOCS[name]}" ({_RETRY_PARAMETERS})',
            )
            for name, value in RETRYING_DEFAULTS.items()
        ),
    )  # fmt: skip


def _fast() -> tuple[Setting, ...]:
    changed = {
        _HEARTBEAT: Setting(
            _HEARTBEAT, "15", "30",
            '"The psycopg driver\'s listener can hold the connection for about a second at a '
            "time, adding up to about 2 s. That needs T of 10 s or more when failed writes "
            'are fast, and about 15 s if a failed write also waits on that connection." '
            f"({DOCS}/guides/heartbeat.md#L98-L101)",
        ),
        _DEQUEUE: Setting(
            _DEQUEUE, "5", "30",
            '"Worker-crash recovery: stalled jobs [...] await pgq.run(dequeue_timeout='
            'timedelta(seconds=5), batch_size=10, heartbeat_timeout=timedelta(minutes=5))" '
            f"({DOCS}/guides/reliability.md#L80-L94)",
        ),
    }  # fmt: skip
    return tuple(changed.get(s.name, s) for s in _defaults())


#: 1.x has no ``retry_timer``: one ``heartbeat_timeout`` per worker, stale-job re-pick always
#: on (https://github.com/janbjorge/pgqueuer/blob/v1.6.0/RELEASE.md#L458-L464); heartbeats
#: are queued every T/2 and written every T/8.
#: A dead worker's job is re-picked once its heartbeat is older than heartbeat_timeout, by
#: a dequeue that comes at the latest dequeue_timeout later ("QueueManager re-polls after
#: dequeue_timeout even without a NOTIFY", guides/performance-tuning.md#L113-L122).
PROFILES = {
    "defaults": Profile("defaults", _defaults(), recovery_after=30.0 + 30.0),
    "fast": Profile("fast", _fast(), recovery_after=15.0 + 5.0),
}

_QUEUE_STATES: dict[str, NeutralState] = {"queued": "waiting", "picked": "running",
                                          "failed": "held"}  # fmt: skip
#: ``canceled`` and ``deleted`` end a job the kit never cancels nor deletes: pgqueuer
#: dropped it, which the checker judges as a job it no longer runs.
_LOG_STATES: dict[str, NeutralState] = {"successful": "finished", "exception": "failed-for-good",
                                        "canceled": "unknown", "deleted": "unknown"}  # fmt: skip


def entrypoint_of(job: JobSpec) -> str:
    """The entrypoint a job goes to: ``hold`` to the holding one; ``fail`` asking
    pgqueuer's retries (none named, or the executor's ``max_attempts``) to the retrying
    one; every other job to the default one."""
    if job.behaviour == "hold":
        return HOLD_ENTRYPOINT
    if job.behaviour == "fail" and job.retries != 0:
        return RETRYING_ENTRYPOINT
    return ENTRYPOINT


class InstallFailed(RdqError):
    """``pgq install`` did not install pgqueuer's schema."""


def _prefix(namespace: str) -> str:
    """A short object prefix of the namespace's own (names stay under 63 characters)."""
    return f"rdq{hashlib.sha256(namespace.encode()).hexdigest()[:8]}_"


class PgqueuerSystem:
    """pgqueuer 1.6.0 deployed: see the module's docstring."""

    name = f"pgqueuer=={VERSION}"
    server = "postgres"
    behaviours = frozenset({"succeed", "sleep", "fail", "retry", "hold"})
    parts = (
        Part("main", 1, "`pgq run`: one asyncio loop dequeuing, heartbeating, writing "
             "outcomes; each job a task, the probe's body in a thread (asyncio.to_thread)"),
    )  # fmt: skip
    promises = (AT_LEAST_ONCE, STALLED_WORKER, LIVE_JOB_KEPT, RECOVERY, TERMINAL,
                FAILURE_NOT_RETRIED, HELD, RETRY, RETRY_EXECUTOR, DURABLE)  # fmt: skip
    profiles: Mapping[str, Profile] = PROFILES
    #: pgqueuer retries a failing job by its entrypoint's executor (``max_attempts``), the
    #: same budget for every job of the entrypoint.
    retries_per_job = False

    def __init__(self) -> None:
        self._dsn = ""
        self._namespace = ""
        self._env: dict[str, str] = {}
        self._settings: DBSettings | None = None
        self._conn: psycopg.Connection | None = None

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        if profile not in PROFILES:
            raise InvalidArgument(f"unknown profile {profile!r} (known: {sorted(PROFILES)})")
        try:
            self._settings = DBSettings(db_schema=namespace, prefix=_prefix(namespace))
        except ValueError as exc:
            raise InvalidArgument(
                f"namespace {namespace!r} is not a Postgres schema name pgqueuer accepts "
                "(letters, digits, underscores, not starting with a digit)"
            ) from exc
        self._dsn = dsn
        self._namespace = namespace
        self._env = {
            "PGDSN": dsn,
            "PGQUEUER_SCHEMA": namespace,
            "PGQUEUER_PREFIX": _prefix(namespace),
            "PGQUEUER_APPLICATION_NAME": default_application_name(namespace),
        }
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pgqueuer", "install"],
                env={**os.environ, **self._env}, cwd=workdir, capture_output=True, text=True,
                timeout=INSTALL_TIMEOUT,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise InstallFailed(
                f"`pgq install` into schema {namespace!r} on {mask_dsn(dsn)} did not finish "
                f"in {INSTALL_TIMEOUT:g} s (is the server answering?)"
            ) from exc
        if done.returncode != 0:
            raise InstallFailed(
                f"`pgq install` into schema {namespace!r} on {mask_dsn(dsn)} exited "
                f"{done.returncode}: {self._hide(done.stderr.strip()[-2000:])}"
            )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        """``pgq run`` of the probe's app; ``dsn``: the server as this worker reaches it
        (default: the DSN bound)."""
        if profile not in PROFILES:
            raise InvalidArgument(f"unknown profile {profile!r} (known: {sorted(PROFILES)})")
        flags = [
            part
            for s in PROFILES[profile].settings
            if s.changed and s.name in FLAGS
            for part in (FLAGS[s.name], s.value)
        ]
        return WorkerLaunch(
            (sys.executable, "-m", "pgqueuer", "run", APP, *flags),
            {
                **self._bound_env(),
                **({"PGDSN": dsn} if dsn else {}),
                "RDQ_PROBE_PATH": probe_path,
                "RDQ_PROBE_WORKER": name,
            },
        )

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        orders = [self._order(j) for j in jobs]
        if not jobs:
            return {}
        builder = self._builder()
        try:
            queries = SyncQueries(SyncPsycopgDriver(self._connection()), qbq=builder)
            ids = queries.enqueue(
                [entrypoint_of(j) for j in jobs],
                [o.encode() for o in orders],
                [0] * len(jobs),
                [timedelta(seconds=j.delay) if j.delay > 0 else None for j in jobs],
            )
        except psycopg.OperationalError:
            self.close()  # the next call connects again
            raise
        return {j.key: str(i) for j, i in zip(jobs, ids, strict=True)}

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        names = self.names()
        wanted = [int(j) for j in job_ids if j.isdigit()]
        queued = self._rows(
            f"SELECT id, status::text FROM {names.queue_table} WHERE id = ANY(%s)", wanted
        )
        logged = self._rows(
            f"SELECT DISTINCT ON (job_id) job_id, status::text FROM {names.queue_table_log} "
            "WHERE job_id = ANY(%s) AND status NOT IN ('queued', 'picked') "
            "ORDER BY job_id, id DESC",
            wanted,
        )
        out: dict[str, JobState] = {}
        for job in job_ids:
            key = int(job) if job.isdigit() else -1
            if key in queued:
                words = queued[key]
                out[job] = JobState(_QUEUE_STATES.get(words, "unknown"), f"queue: {words}")
            elif key in logged:
                words = logged[key]
                out[job] = JobState(_LOG_STATES.get(words, "unknown"), f"log: {words}")
            else:
                out[job] = JobState("unknown", "absent from the queue and the log")
        return out

    # ---- helpers ----------------------------------------------------------------------

    @staticmethod
    def _order(job: JobSpec) -> Order:
        if job.behaviour not in PgqueuerSystem.behaviours:
            raise InvalidArgument(f"job {job.key!r}: unknown behaviour {job.behaviour!r}")
        if job.behaviour != "retry" and job.retries not in (None, 0, DEFAULT_RETRIES):
            raise InvalidArgument(
                f"job {job.key!r}: pgqueuer retries a failing job by its entrypoint's "
                f"executor, {DEFAULT_RETRIES} times (DatabaseRetryEntrypointExecutor's "
                f"max_attempts), or not at all (the default executor), the same for every job "
                f"of the entrypoint; {job.behaviour!r} with retries={job.retries} has no "
                "pgqueuer meaning"
            )
        retries = DEFAULT_RETRIES if job.retries is None else job.retries
        return Order(job.behaviour, job.seconds, retries)

    def names(self) -> QualifiedNames:
        """The installation's schema-qualified object names (after :meth:`bind`)."""
        if self._settings is None:
            raise InvalidArgument("PgqueuerSystem: call bind() first")
        return self._settings.qualified

    def _builder(self) -> QueryQueueBuilder:
        self.names()
        assert self._settings is not None
        return QueryQueueBuilder(self._settings)

    def _bound_env(self) -> dict[str, str]:
        self.names()
        return dict(self._env)

    def _rows(self, query: str, ids: list[int]) -> dict[int, str]:
        return dict(self._connection().execute(query, (ids,)).fetchall())

    def _connection(self) -> psycopg.Connection:
        self.names()
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._dsn, autocommit=True, application_name=f"rdq-client:{self._namespace}"
            )
        return self._conn

    def _hide(self, text: str) -> str:
        """``text`` with the DSN and its password masked."""
        text = text.replace(self._dsn, mask_dsn(self._dsn))
        password = conninfo_to_dict(self._dsn).get("password")
        return text.replace(str(password), "***") if password else text
