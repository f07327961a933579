"""The dramatiq app the deployed campaign runs: the module dramatiq's own CLI imports.

A worker is started as dramatiq's docs start one, with the CLI's "callable that sets up a
broker" form (``dramatiq some_module:setup_broker``, ``dramatiq --help``)::

    dramatiq rdq_dramatiq.deployed_jobs:setup_broker [--processes N --threads M]

Each worker process calls :func:`setup_broker`, which builds what a dramatiq user's
broker module holds, from the environment (:class:`Deployment`):

- a ``RedisBroker(url=..., namespace=...)`` with dramatiq's default middleware; the
  profile's ``heartbeat_timeout`` and ``maintenance_chance`` are passed only when the
  profile changes them (they exist only as ``RedisBroker`` arguments);
- the ``Results`` middleware with its ``RedisBackend`` (cookbook, "Results"), under the
  same key prefix (``use_namespace_prefix_keys=True``), so a job's outcome outlives its
  ack for ``result_ttl`` (10 minutes by default);
- the ``CurrentMessage`` middleware (advanced, "Accessing Messages from Within Actors"),
  so the actor knows its message's id and its ``retries`` count;
- the actor :data:`ACTOR` on queue :data:`QUEUE` (``store_results=True``; the profile's
  ``min_backoff``/``max_backoff`` actor options only when it changes them), whose body is
  the kit's probe (:func:`rdq_compliance.deployed.handler.perform`).

The kit's side (:mod:`rdq_dramatiq.deployed`) builds the same broker to enqueue with the
actor's own ``send_with_options``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

from rdq_compliance.deployed.handler import perform

__all__ = ["ACTOR", "QUEUE", "Deployment", "DeploymentError", "build", "setup_broker"]

#: The actor's name and queue (dramatiq's default queue).
ACTOR = "rdq_probe"
QUEUE = "default"

URL_ENV = "RDQ_DRAMATIQ_URL"
NAMESPACE_ENV = "RDQ_DRAMATIQ_NAMESPACE"
#: Settings a profile may change, by environment variable: ``RedisBroker`` arguments and
#: the actor's retry options (milliseconds, or commands per million).
SETTING_ENVS = {
    "heartbeat_timeout": "RDQ_DRAMATIQ_HEARTBEAT_TIMEOUT",
    "maintenance_chance": "RDQ_DRAMATIQ_MAINTENANCE_CHANCE",
    "min_backoff": "RDQ_DRAMATIQ_MIN_BACKOFF",
    "max_backoff": "RDQ_DRAMATIQ_MAX_BACKOFF",
}


class DeploymentError(RuntimeError):
    """The worker's environment does not say how to reach the broker."""


@dataclass(frozen=True)
class Deployment:
    """Where the broker is and the settings a profile changed (``None``: dramatiq's
    default, not passed at all)."""

    url: str
    namespace: str
    heartbeat_timeout: int | None = None
    maintenance_chance: int | None = None
    min_backoff: int | None = None
    max_backoff: int | None = None

    def env(self) -> dict[str, str]:
        """The environment a worker reads this deployment from."""
        out = {URL_ENV: self.url, NAMESPACE_ENV: self.namespace}
        for name, var in SETTING_ENVS.items():
            value = getattr(self, name)
            if value is not None:
                out[var] = str(value)
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Deployment:
        missing = [v for v in (URL_ENV, NAMESPACE_ENV) if not env.get(v)]
        if missing:
            raise DeploymentError(
                f"rdq_dramatiq.deployed_jobs needs {missing} in the worker's environment "
                "(rdq_dramatiq.deployed.DramatiqSystem.worker gives them)"
            )
        settings: dict[str, int] = {}
        for name, var in SETTING_ENVS.items():
            text = env.get(var)
            if text is None:
                continue
            try:
                settings[name] = int(text)
            except ValueError:
                raise DeploymentError(f"{var}={text!r}: expected a whole number") from None
        return cls(env[URL_ENV], env[NAMESPACE_ENV], **settings)


def _retry() -> NoReturn:
    """dramatiq's own way for an actor to ask for a retry (``dramatiq.Retry``)."""
    raise dramatiq.Retry("probe: asked for a retry")


def probe(behaviour: str, seconds: float) -> None:
    """The actor's body: the kit's probe, under the message's own id and retry count."""
    message = CurrentMessage.get_current_message()
    if message is None:
        raise DeploymentError("the probe actor runs without the CurrentMessage middleware")
    attempt = int(message.options.get("retries", 0))
    perform(message.message_id, behaviour, seconds, attempt=attempt, retry=_retry)


def build(d: Deployment) -> tuple[RedisBroker, RedisBackend, dramatiq.Actor[Any, Any]]:
    """The broker (dramatiq's default middleware, plus Results and CurrentMessage), its
    result backend and the probe actor, as :class:`Deployment` ``d`` says."""
    broker_args: dict[str, Any] = {}
    if d.heartbeat_timeout is not None:
        broker_args["heartbeat_timeout"] = d.heartbeat_timeout
    if d.maintenance_chance is not None:
        broker_args["maintenance_chance"] = d.maintenance_chance
    broker = RedisBroker(url=d.url, namespace=d.namespace, **broker_args)
    backend = RedisBackend(
        url=d.url, namespace=f"{d.namespace}:results", use_namespace_prefix_keys=True
    )
    broker.add_middleware(Results(backend=backend))
    broker.add_middleware(CurrentMessage())
    options: dict[str, Any] = {}
    if d.min_backoff is not None:
        options["min_backoff"] = d.min_backoff
    if d.max_backoff is not None:
        options["max_backoff"] = d.max_backoff
    actor = dramatiq.actor(
        probe, broker=broker, actor_name=ACTOR, queue_name=QUEUE, store_results=True, **options
    )
    return broker, backend, actor


def setup_broker() -> None:
    """What the dramatiq CLI calls in each worker process: build the broker from the
    environment and make it dramatiq's global broker."""
    broker, _, _ = build(Deployment.from_env(os.environ))
    dramatiq.set_broker(broker)
