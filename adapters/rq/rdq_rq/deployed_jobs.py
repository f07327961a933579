"""The job function rq's own workers run in a deployed campaign: the kit's probe handler
(:func:`rdq_compliance.deployed.handler.perform`), written as an rq job function is.

rq imports it by name in the work horse (``rdq_rq.deployed_jobs.probe``). It reads the
job from rq's :func:`rq.get_current_job` and hands :func:`perform` the job's id, the
behaviour and seconds the harness put in the job's arguments, and the attempt number as
rq counts its retries. rq's documented way for a handler to ask for a retry is to
*return* a :class:`rq.Retry` ("Asking RQ to Retry",
https://github.com/rq/rq/blob/v3.0.0/docs/docs/results.md#asking-rq-to-retry): ``perform``
returns what the retry request returns, and the job returns it.
"""

from __future__ import annotations

from rq import Retry, get_current_job

from rdq_compliance.deployed.handler import perform

__all__ = ["attempt_of", "probe"]


def attempt_of(number_of_retries: int | None, retries_left: int | None, retries: int) -> int:
    """The retries rq has made of a job before this execution, from rq's two counters:
    ``number_of_retries`` (a ``Retry`` the job returned, counted up by rq,
    ``rq/job.py#L1739-L1740``) and ``retries_left`` (the ``retry=Retry(max=retries)``
    given to ``enqueue``, counted down by rq on a failure or an abandoned execution,
    ``rq/job.py#L1791-L1792``); ``None`` where rq keeps no count."""
    used = retries - retries_left if retries_left is not None else 0
    return (number_of_retries or 0) + used


def probe(behaviour: str, seconds: float, retries: int) -> Retry | None:
    """One execution of the probe handler under rq: ``retries`` is the ``Retry(max=...)``
    given at enqueue (for ``fail``, ``succeed``, ``sleep``) or the one the job returns
    (for ``retry``)."""
    job = get_current_job()
    if job is None:
        raise RuntimeError("rdq_rq.deployed_jobs.probe runs only as an rq job (no current job)")

    attempt = attempt_of(job.number_of_retries, job.retries_left, retries)
    asked = perform(job.id, behaviour, seconds, attempt=attempt, retry=lambda: Retry(max=retries))
    return asked if isinstance(asked, Retry) else None
