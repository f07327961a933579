"""The procrastinate App a deployed worker runs: ``python -m procrastinate
--app=rdq_procrastinate.deployed_app.app worker`` (the deployed system,
:mod:`rdq_procrastinate.deployed`, starts it so).

It holds two tasks and nothing else:

- :func:`probe`, the kit's probe handler (:func:`rdq_compliance.deployed.handler.perform`)
  as a sync procrastinate task (each sync task runs in a thread of its own, so the worker's
  event loop keeps heartbeating while it sleeps). The job id is procrastinate's own
  (``context.job.id``), the attempt its ``attempts`` (0 on the first run, one more per
  retry). A handler asks for a retry the only way procrastinate has: it raises, and the
  job's retry strategy retries it while attempts remain. The strategy is procrastinate's
  own (``get_retry_strategy(N)``, what ``@app.task(retry=N)`` makes) for the ``retries``
  the job was deferred with, a documented custom strategy
  (https://procrastinate.readthedocs.io/en/3.10.0/howto/advanced/retry.html#implementing-your-own-strategy).
- :func:`retry_stalled_jobs`, the periodic task procrastinate's docs tell users to add to
  recover the jobs of dead workers, as the docs write it
  (https://procrastinate.readthedocs.io/en/3.10.0/howto/production/retry_stalled_jobs.html),
  with its period and ``seconds_since_heartbeat`` from the profile.

Everything else comes from the environment the deployed system sets: the connection
(``RDQ_PROCRASTINATE_DSN``, a libpq connection string whose ``options`` put the
campaign's PostgreSQL schema on the search path), the worker's heartbeat settings
(``App(worker_defaults=...)``, only those set) and the recipe's cron and threshold
(procrastinate's docs' values when unset).
"""

from __future__ import annotations

import os
from typing import NoReturn

import procrastinate
from procrastinate.jobs import Job
from procrastinate.retry import get_retry_strategy

from rdq_compliance.deployed.handler import perform

__all__ = [
    "CRON_ENV",
    "DSN_ENV",
    "HEARTBEAT_ENV",
    "PROBE_TASK",
    "STALLED_ENV",
    "WORKER_TIMEOUT_ENV",
    "JobRetries",
    "ProbeRetry",
    "app",
    "probe",
    "retry_stalled_jobs",
]

DSN_ENV = "RDQ_PROCRASTINATE_DSN"
#: ``Worker(update_heartbeat_interval=...)``, seconds (procrastinate's default: 10).
HEARTBEAT_ENV = "RDQ_PROCRASTINATE_UPDATE_HEARTBEAT_INTERVAL"
#: ``Worker(stalled_worker_timeout=...)``, seconds (procrastinate's default: 30).
WORKER_TIMEOUT_ENV = "RDQ_PROCRASTINATE_STALLED_WORKER_TIMEOUT"
#: The recipe's ``get_stalled_jobs(seconds_since_heartbeat=...)`` (procrastinate's default: 30).
STALLED_ENV = "RDQ_PROCRASTINATE_SECONDS_SINCE_HEARTBEAT"
#: The recipe's ``@app.periodic(cron=...)`` (the docs' recipe: every 10th minute).
CRON_ENV = "RDQ_PROCRASTINATE_RECIPE_CRON"
#: The probe task's name, which the client defers by (``App.configure_task(name=...)``).
PROBE_TASK = "rdq_probe"

_WORKER_SETTINGS = {
    "update_heartbeat_interval": HEARTBEAT_ENV,
    "stalled_worker_timeout": WORKER_TIMEOUT_ENV,
}

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get(DSN_ENV, "")),
    worker_defaults={  # type: ignore[typeddict-item]
        name: float(os.environ[env]) for name, env in _WORKER_SETTINGS.items() if env in os.environ
    },
)


class ProbeRetry(Exception):
    """What the probe raises to ask for a retry (behaviour ``retry``)."""


def _ask_retry() -> NoReturn:
    raise ProbeRetry("probe: retry asked")


class JobRetries(procrastinate.BaseRetryStrategy):
    """The retries a job was deferred with (its ``retries`` argument), given as
    ``@app.task(retry=retries)`` gives them: none when ``None`` or 0, else procrastinate's
    ``RetryStrategy(max_attempts=retries)`` (retries at once, on any exception)."""

    def get_retry_decision(
        self, *, exception: BaseException, job: Job
    ) -> procrastinate.RetryDecision | None:
        strategy = get_retry_strategy(job.task_kwargs.get("retries") or False)
        if strategy is None:
            return None
        return strategy.get_retry_decision(exception=exception, job=job)


@app.task(name=PROBE_TASK, pass_context=True, retry=JobRetries())
def probe(
    context: procrastinate.JobContext,
    key: str,
    behaviour: str,
    seconds: float = 0.0,
    retries: int | None = None,
) -> None:
    """The probe handler on job ``context.job`` (``key``: the harness's name for it)."""
    perform(str(context.job.id), behaviour, seconds, attempt=context.job.attempts, retry=_ask_retry)


@app.periodic(cron=os.environ.get(CRON_ENV, "*/10 * * * *"))
@app.task(queueing_lock="retry_stalled_jobs", pass_context=True)
async def retry_stalled_jobs(context: procrastinate.JobContext, timestamp: int) -> None:
    stalled_jobs = await app.job_manager.get_stalled_jobs(
        seconds_since_heartbeat=float(os.environ.get(STALLED_ENV, "30"))
    )
    for job in stalled_jobs:
        await app.job_manager.retry_job(job)
