"""procrastinate 3.10.0 as its users deploy it: the deployed system ``procrastinate``
(:class:`ProcrastinateSystem`, contract section 9).

- **Workers**: procrastinate's own CLI, ``python -m procrastinate
  --app=rdq_procrastinate.deployed_app.app worker --name=<name> --concurrency=1 ...``, on
  every queue (no queue named: the probe task and the stalled-jobs recipe share the
  default queue). One asyncio process (part ``main``); a sync task runs in a thread of it.
- **Schema**: ``procrastinate schema --apply`` (the same CLI) in the campaign's own
  PostgreSQL schema, put on the search path by the connection's ``options``
  (``-c search_path=<namespace>``), as the docs' "Set the database PG schema" page says.
  Every connection of a worker carries ``application_name`` ``rdq:<namespace>`` (what the
  postgres server's ``cut_connections`` ends); the client's ``rdq-client:<namespace>``.
- **Client**: an :class:`procrastinate.App` on a ``PsycopgConnector`` used synchronously
  (procrastinate then opens its ``SyncPsycopgConnector``): ``configure_task(name=...,
  schedule_in=...).defer(...)`` returns the job id the probe journals;
  ``job_manager.list_jobs()`` gives the final states.
- **Recovery** of a dead worker's jobs: only the periodic recipe the docs tell users to
  add (:mod:`rdq_procrastinate.deployed_app`), every 10 minutes, for jobs whose worker's
  heartbeat is 30 s old.

What the code does and the docs do not say (code, never a promise): a worker stops once
a side task fails (``_monitor_side_tasks``,
https://github.com/procrastinate-org/procrastinate/blob/3.10.0/procrastinate/worker.py#L621-L652),
e.g. when its LISTEN connection cannot reconnect or a heartbeat update fails during a
database outage; its shutdown cancels the heartbeat before it waits for the jobs it runs
(``_shutdown``, #L551-L556; upstream: https://github.com/procrastinate-org/procrastinate/pull/1585,
open), and a finish that fails leaves the job ``doing``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import procrastinate
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from rdq_postgres.connection import default_application_name
from rdq_postgres.schema import schema_name

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
from rdq_compliance.provision.process import run_to_completion
from rdq_procrastinate.deployed_app import (
    CRON_ENV,
    DSN_ENV,
    HEARTBEAT_ENV,
    PROBE_TASK,
    STALLED_ENV,
    WORKER_TIMEOUT_ENV,
)

__all__ = ["PROFILES", "PROMISES", "VERSION", "ProcrastinateSystem"]

VERSION = "3.10.0"
DOCS = f"https://procrastinate.readthedocs.io/en/{VERSION}"
APP = "rdq_procrastinate.deployed_app.app"
STALLED_PAGE = f"{DOCS}/howto/production/retry_stalled_jobs.html"

# ---- promises: the docs' words and what they imply -----------------------------------------

ONLY_ONE = Promise(
    id="procrastinate-only-one",
    quote="PostgreSQL's top notch ability to manage locks, thanks to its ACID properties. This "
    "ensures that when a worker starts executing a job, it's the only one.",
    link=f"{DOCS}/discussions.html#discussion-general",
    forbids=frozenset({"handed-out-while-held", "superseded-outcome"}),
)
#: The one way back for a dead worker's job. A job is stalled when its worker's heartbeat
#: is older than the threshold, whatever stopped it: so two runs at once are within this
#: model when a fault held the first worker's heartbeats off for a span (pause, partition,
#: a server down or frozen), and a run after the handler's end line when a fault kept its
#: outcome from being recorded. A connection cut is an instant: it holds no heartbeat off.
STALLED_JOBS = Promise(
    id="procrastinate-stalled-jobs-retried",
    quote="If a worker is terminated without a regular shutdown, the heartbeat of that worker "
    "will not be updated, and the worker will be considered stalled. Jobs in the `doing` state "
    "of such stalled workers are considered stalled as well [...] Those stalled jobs can then "
    "be retried for example by a periodic task. [...] The task retrieves all the jobs that "
    "have been in the `doing` status of workers that have not received a heartbeat since the "
    "last (by default) 30 seconds.",
    link=STALLED_PAGE,
    delivery="at-least-once",
    recovery="a dead worker's job stays `doing` until a run of the documented periodic recipe "
    "(every 10th minute) finds its worker's heartbeat older than seconds_since_heartbeat and "
    "retries it (`todo`, attempts + 1); a live worker then fetches it",
    forbids=frozenset({"stuck"}),
    tolerates={
        "handed-out-while-held": frozenset({"pause", "partition", "server-kill", "server-freeze"}),
        "ran-after-done": frozenset(
            {"kill", "pause", "partition", "cut", "server-kill", "server-freeze"}
        ),
    },
)
FINAL_STATES = Promise(
    id="procrastinate-final-states",
    quote="Delete jobs that have reached a final state (``succeeded``, ``failed``, "
    "``cancelled``, or ``aborted``).",
    link=f"{DOCS}/reference.html#procrastinate.manager.JobManager.delete_old_jobs",
    forbids=frozenset({"ran-after-done"}),
)
DEFER = Promise(
    id="procrastinate-defer",
    quote="Defer: The action of instantiating a task and registering it for later execution "
    "by a worker.",
    link=f"{DOCS}/glossary.html",
    forbids=frozenset({"lost", "never-ran"}),
)
SCHEDULE = Promise(
    id="procrastinate-schedule",
    quote="If a job is configured with a date in the future, it will run at the first "
    "opportunity after that date.",
    link=f"{DOCS}/howto/advanced/schedule.html",
    forbids=frozenset({"lost"}),
)
RETRIES = Promise(
    id="procrastinate-retry-strategy",
    quote="You can define a retry strategy on a task and Procrastinate will enforce it. Note "
    "that a job waiting to be retried lives in the database. It will persist across app / "
    "machine reboots. [...] Retry 5 times (so 6 attempts total)",
    link=f"{DOCS}/howto/advanced/retry.html",
    forbids=frozenset({"lost"}),
)
PROMISES: tuple[Promise, ...] = (ONLY_ONE, STALLED_JOBS, FINAL_STATES, DEFER, SCHEDULE, RETRIES)

# ---- profiles ------------------------------------------------------------------------------

_RUN_WORKER = f"{DOCS}/reference.html#procrastinate.App.run_worker_async"
_ADJUST = (
    '"If you change the `seconds_since_heartbeat` parameter, make sure to also check the '
    "`update_heartbeat_interval` and `stalled_worker_timeout` parameters of the worker and "
    f'adjust them accordingly." ({STALLED_PAGE}); set through App(worker_defaults=...): "All '
    'the values passed here will override the default values sent when launching a worker." '
    f"({DOCS}/reference.html#procrastinate.App)"
)
_THRESHOLD = (
    '"This duration can be configured with the `seconds_since_heartbeat` parameter of the '
    f'`get_stalled_jobs` method." ({STALLED_PAGE})'
)
_CRON = (
    f'The recipe is "configured to be deferred at every 10th minute" ({STALLED_PAGE}); "an '
    "optional 6th column is "
    "supported for seconds with the same syntax, allowing you to make a periodic task as "
    f'frequent as "1 per second"." ({DOCS}/howto/advanced/cron.html)'
)
#: The periodic deferrer wakes this long after each tick (periodic.py ``MARGIN``).
_MARGIN_S = 0.5
#: How each setting reaches the worker: a CLI flag, or an environment variable
#: :mod:`rdq_procrastinate.deployed_app` reads.
_CLI = {
    "concurrency": "--concurrency",
    "fetch_job_polling_interval": "--fetch-job-polling-interval",
}
_ENV = {
    "update_heartbeat_interval": HEARTBEAT_ENV,
    "stalled_worker_timeout": WORKER_TIMEOUT_ENV,
    "seconds_since_heartbeat": STALLED_ENV,
    "retry_stalled_jobs cron": CRON_ENV,
}


def _profile(name: str, heartbeat: float, stalled: float, cron: str, period: float) -> Profile:
    """A profile: the worker's heartbeat every ``heartbeat`` s, a worker or job stalled after
    ``stalled`` s without one, the recipe on ``cron`` (every ``period`` s).

    ``recovery_after``: a dead worker's last heartbeat is no later than its death, so its
    jobs are stalled within ``stalled`` s; the recipe runs at the next tick (``period``, +
    the deferrer's margin) when a live worker has a free slot; ``retry_job`` sends no
    notification (schema.sql: only an insert notifies), so another idle worker fetches the
    job at its next poll (``fetch_job_polling_interval``, 5 s). No execution limit: a job is
    never taken from a worker that heartbeats (the ``select_stalled_jobs_by_heartbeat``
    query,
    https://github.com/procrastinate-org/procrastinate/blob/3.10.0/procrastinate/sql/queries.sql#L39-L53)."""

    def s(key: str, value: object, default: object, why: str) -> Setting:
        return Setting(key, str(value), str(default), why if str(value) != str(default) else "")

    settings = (
        s("concurrency", 1, 1, ""),
        s("fetch_job_polling_interval", 5.0, 5.0, ""),
        s("update_heartbeat_interval", heartbeat, 10.0, _ADJUST),
        s("stalled_worker_timeout", stalled, 30.0, _ADJUST),
        s("seconds_since_heartbeat", stalled, 30.0, _THRESHOLD),
        s("retry_stalled_jobs cron", cron, "*/10 * * * *", _CRON),
    )
    return Profile(name, settings, recovery_after=stalled + period + _MARGIN_S + 5.0)


PROFILES: Mapping[str, Profile] = {
    "defaults": _profile("defaults", 10.0, 30.0, "*/10 * * * *", 600.0),
    "fast": _profile("fast", 2.0, 6.0, "* * * * * */2", 2.0),
}

# ---- the system ----------------------------------------------------------------------------

#: procrastinate's job statuses (reference: ``procrastinate.jobs.Status``) in neutral words.
#: ``cancelled`` (never started, never will) has no neutral word of its own: failed for good.
#: ``aborting`` is "legacy, not used anymore"; it meant a running job asked to abort.
NEUTRAL: Mapping[str, NeutralState] = {
    "todo": "waiting",
    "doing": "running",
    "succeeded": "finished",
    "failed": "failed-for-good",
    "cancelled": "failed-for-good",
    "aborting": "running",
    "aborted": "failed-for-good",
}


class ProcrastinateSystem:
    """procrastinate 3.10.0 on the kit's PostgreSQL, one PostgreSQL schema per campaign."""

    name = f"procrastinate=={VERSION}"
    server = "postgres"
    #: No ``hold``: procrastinate has no way for a handler to park a job (cancelling and
    #: aborting are an operator's acts, not a hold).
    behaviours = frozenset({"succeed", "sleep", "fail", "retry"})
    parts = (Part("main", 1, "the worker: one asyncio process, sync tasks in its threads"),)
    promises = PROMISES
    profiles = PROFILES

    def __init__(self) -> None:
        self._worker_dsn: str | None = None
        self._schema = ""
        self._workdir: Path | None = None
        self._client: procrastinate.App | None = None

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        """Apply procrastinate's schema in ``namespace`` with its CLI and open the client."""
        if procrastinate.__version__ != VERSION:
            raise RuntimeError(
                f"the procrastinate system cites procrastinate {VERSION}, but "
                f"{procrastinate.__version__} is installed: pip install 'rdq[procrastinate]'"
            )
        self._settings(profile)
        schema = schema_name(namespace)
        self._schema = schema
        self._worker_dsn = _conninfo(dsn, schema, default_application_name(schema))
        self._workdir = Path(workdir)
        run_to_completion(
            [sys.executable, "-m", "procrastinate", f"--app={APP}", "schema", "--apply"],
            log_path=self._workdir / "procrastinate-schema.log",
            cwd=self._workdir,
            env={**os.environ, DSN_ENV: self._worker_dsn},
        )
        client_dsn = _conninfo(dsn, schema, f"rdq-client:{schema}")
        self._client = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=client_dsn)
        )
        self._client.open()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        """``procrastinate worker`` of the probe's app; ``dsn``: the server as this worker
        reaches it (default: the DSN bound)."""
        if self._worker_dsn is None:
            raise RuntimeError("call bind() before worker(): the worker needs the campaign's DSN")
        argv = [sys.executable, "-m", "procrastinate", f"--app={APP}", "worker", f"--name={name}"]
        conninfo = self._worker_dsn
        if dsn:
            conninfo = _conninfo(dsn, self._schema, default_application_name(self._schema))
        env = {PATH_ENV: probe_path, WORKER_ENV: name, DSN_ENV: conninfo}
        for setting in self._settings(profile):
            if setting.name in _CLI:
                argv.append(f"{_CLI[setting.name]}={setting.value}")
            else:
                env[_ENV[setting.name]] = setting.value
        return WorkerLaunch(tuple(argv), env, str(self._workdir))

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        """Defer each job with procrastinate's client, in order. procrastinate's errors are
        raised as its client raises them (a server out of reach: ``ConnectorException``
        from a psycopg ``OperationalError``, a pool timeout among them)."""
        client = self._open_client()
        unknown = sorted({j.behaviour for j in jobs} - self.behaviours)
        if unknown:
            raise ValueError(
                f"{self.name} cannot make the handler {unknown}; it supports "
                f"{sorted(self.behaviours)}"
            )
        out: dict[str, str] = {}
        for job in jobs:
            options = {"schedule_in": {"seconds": job.delay}} if job.delay > 0 else {}
            deferrer = client.configure_task(name=PROBE_TASK, **options)  # type: ignore[arg-type]
            job_id = deferrer.defer(
                key=job.key, behaviour=job.behaviour, seconds=job.seconds, retries=job.retries
            )
            out[job.key] = str(job_id)
        return out

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        status = {str(j.id): str(j.status) for j in self._open_client().job_manager.list_jobs()}
        return {
            j: JobState(NEUTRAL.get(status[j], "unknown"), status[j])
            if j in status
            else JobState("unknown", "(no such job)")
            for j in job_ids
        }

    def _open_client(self) -> procrastinate.App:
        if self._client is None:
            raise RuntimeError("call bind() first: the client opens there")
        return self._client

    def _settings(self, profile: str) -> tuple[Setting, ...]:
        if profile not in self.profiles:
            raise ValueError(
                f"{self.name} has no profile {profile!r}; it has {sorted(self.profiles)}"
            )
        return self.profiles[profile].settings


def _conninfo(dsn: str, schema: str, application_name: str) -> str:
    """``dsn`` with ``schema`` on the search path (appended to its own ``options``)."""
    options = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(
        dsn,
        options=f"{options} -c search_path={schema}".strip(),
        application_name=application_name,
    )
