"""The pgqueuer application a deployed worker runs: ``pgq run rdq_pgqueuer.deployed_app:main``.

A factory as pgqueuer's CLI reference asks for (an ``@asynccontextmanager`` yielding a
``PgQueuer``; docs/reference/cli.md "Factory contract" at v1.6.0), over one psycopg
connection opened by pgqueuer's own helper
(``pgqueuer.adapters.connections.connect_psycopg``: the DSN from ``PGDSN``, autocommit).
The installation's Postgres schema and object prefix come from ``PGQUEUER_SCHEMA`` and
``PGQUEUER_PREFIX``, which pgqueuer reads itself.

Three entrypoints run the kit's probe (:func:`rdq_compliance.deployed.handler.perform`),
each at pgqueuer's defaults but for what it is registered to show (``concurrency_limit=0``
on all three):

- :data:`ENTRYPOINT` (the default executor, ``on_failure="delete"``): ``succeed``,
  ``sleep``, ``fail`` asking no retry (the handler raises: logged ``exception``, "not
  automatically retried", docs/guides/reliability.md) and ``retry`` (the handler raises
  ``RetryRequested``; once the job's ``attempts`` reach the retries asked it raises an
  ordinary error instead, as the retry guide's "Reading the attempt counter" does);
- :data:`RETRYING_ENTRYPOINT` (``executor_factory=DatabaseRetryEntrypointExecutor``, the
  executor pgqueuer documents for "any unhandled exception to trigger a retry",
  docs/guides/retry.md "Automatic retry with DatabaseRetryEntrypointExecutor"): ``fail``
  asking pgqueuer's own retries. The executor's settings are its defaults
  (:data:`RETRYING_DEFAULTS`): a failure before the ``max_attempts``-th retry is re-queued
  as a ``RetryRequested`` with an exponential delay, the next one propagates (logged
  ``exception``);
- :data:`HOLD_ENTRYPOINT` (``on_failure="hold"``): ``hold`` (the handler raises; pgqueuer
  parks the job with status ``failed`` until someone re-queues it).

The probe's body blocks (it sleeps), so it runs in ``asyncio.to_thread`` as pgqueuer's
core concepts page says for blocking code; the event loop stays free for heartbeats.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

from pgqueuer import PgQueuer
from pgqueuer.adapters.connections import connect_psycopg
from pgqueuer.errors import RetryRequested
from pgqueuer.executors import DatabaseRetryEntrypointExecutor
from pgqueuer.models import Job

from rdq_compliance.deployed.handler import perform

__all__ = [
    "DEFAULT_RETRIES",
    "ENTRYPOINT",
    "HOLD_ENTRYPOINT",
    "RETRYING_DEFAULTS",
    "RETRYING_ENTRYPOINT",
    "Order",
    "ProbeGaveUp",
    "ProbeHold",
    "main",
]

#: The entrypoint of every job but a held one and a failing one pgqueuer retries.
ENTRYPOINT = "rdq_probe"
#: The entrypoint registered with ``on_failure="hold"``: a job the probe holds.
HOLD_ENTRYPOINT = "rdq_probe_hold"
#: The entrypoint whose executor is pgqueuer's ``DatabaseRetryEntrypointExecutor`` at its
#: defaults: a ``fail`` job retried by pgqueuer.
RETRYING_ENTRYPOINT = "rdq_probe_retrying"


def _executor_defaults() -> dict[str, str]:
    """``DatabaseRetryEntrypointExecutor``'s settings, as its class declares them."""
    out = {}
    for f in dataclasses.fields(DatabaseRetryEntrypointExecutor):
        if f.name == "parameters":
            continue
        value = f.default
        if value is dataclasses.MISSING:
            value = f.default_factory()
        out[f.name] = f"{value.total_seconds():g}s" if isinstance(value, timedelta) else str(value)
    return out


#: ``DatabaseRetryEntrypointExecutor``'s settings, every one its default (pgqueuer
#: 1.6.0, pgqueuer/core/executors.py; docs/guides/retry.md, Parameters): a failing job is
#: retried 5 times, 1, 2, 4, 8 and 16 s after its failures, then logged ``exception``.
RETRYING_DEFAULTS = _executor_defaults()
#: Retries a ``retry`` job asks when the harness names none: pgqueuer sets no limit on
#: ``RetryRequested``; 5 is the ``max_attempts`` default of its
#: ``DatabaseRetryEntrypointExecutor`` (docs/guides/retry.md, Parameters), the budget a
#: ``fail`` job gets.
DEFAULT_RETRIES = DatabaseRetryEntrypointExecutor.max_attempts


class ProbeGaveUp(RuntimeError):
    """What a ``retry`` job's handler raises once it has asked all the retries it may."""


class ProbeHold(RuntimeError):
    """What a ``hold`` job's handler raises: on an ``on_failure="hold"`` entrypoint,
    pgqueuer parks the job (status ``failed``)."""


@dataclass(frozen=True)
class Order:
    """What a job's payload tells the probe: the behaviour, the seconds of a ``sleep``,
    the retries of a ``retry``."""

    behaviour: str
    seconds: float = 0.0
    retries: int = DEFAULT_RETRIES

    def encode(self) -> bytes:
        return json.dumps(
            {"behaviour": self.behaviour, "seconds": self.seconds, "retries": self.retries}
        ).encode()

    @classmethod
    def decode(cls, payload: bytes | None) -> Order:
        data = json.loads(payload or b"{}")
        return cls(str(data["behaviour"]), float(data["seconds"]), int(data["retries"]))


def _retry(job: Job, retries: int) -> NoReturn:
    if job.attempts >= retries:
        raise ProbeGaveUp(f"probe: job {job.id} asked for a retry after {retries} retries")
    raise RetryRequested(reason="probe: told to ask for a retry")


def _hold(job: Job) -> NoReturn:
    raise ProbeHold(f"probe: job {job.id} told to be held")


async def _run(job: Job) -> None:
    order = Order.decode(job.payload)
    await asyncio.to_thread(
        perform,
        str(job.id),
        order.behaviour,
        order.seconds,
        attempt=job.attempts,
        retry=lambda: _retry(job, order.retries),
        hold=lambda: _hold(job),
    )


@asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    """The factory ``pgq run`` enters: a ``PgQueuer`` with the probe's three entrypoints."""
    async with connect_psycopg() as connection:
        pgq = PgQueuer.from_psycopg_connection(connection)

        @pgq.entrypoint(ENTRYPOINT)
        async def probe(job: Job) -> None:
            await _run(job)

        @pgq.entrypoint(RETRYING_ENTRYPOINT, executor_factory=DatabaseRetryEntrypointExecutor)
        async def probe_retrying(job: Job) -> None:
            await _run(job)

        @pgq.entrypoint(HOLD_ENTRYPOINT, on_failure="hold")
        async def probe_hold(job: Job) -> None:
            await _run(job)

        yield pgq
