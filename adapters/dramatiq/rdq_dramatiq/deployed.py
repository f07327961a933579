"""dramatiq 2.2.1 with its Redis broker, deployed as its users deploy it (contract
section 9): dramatiq's own CLI starts the workers, the actor's own ``send_with_options``
enqueues, dramatiq's Results middleware and the broker's queues tell each job's state.

A worker is ``dramatiq rdq_dramatiq.deployed_jobs:setup_broker`` (the app:
:mod:`rdq_dramatiq.deployed_jobs`): a parent process (part ``main``) that forks
``--processes`` worker processes (part ``worker``), each with its own ``RedisBroker``
(its own heartbeat and ack sets), two consumer threads and ``--threads`` worker threads.
When one worker process dies the parent stops the others and exits with code 1
(changelog 1.4.0: "Dramatiq now shuts itself down if any of the workers die
unexpectedly"; Bogdanp/dramatiq#505, "All workers terminate when one worker crashes",
closed: the maintainer keeps it so). When the parent is SIGKILLed its worker processes
run on, orphaned (Bogdanp/dramatiq#788, "Child worker processes hang, when main process
closed abruptly", open).

The campaign lives under the kit namespace's key prefix (``RedisBroker(namespace=...)``,
advanced, "Multi-tenancy"), and every connection is named ``rdq:<namespace>`` so the
kit's connection cut finds it.

Job ids are dramatiq's ``message_id`` (``send_with_options`` mints it; the actor reads it
through the CurrentMessage middleware). What :meth:`DramatiqSystem.final_states` cannot
know: an ack deletes the message, so a finished job is known only by its stored result,
for ``result_ttl`` (10 minutes by default); a dead letter only for ``dead_message_ttl``
(7 days). After both, dramatiq has no record of it (``unknown``).

Links point at the tag ``v2.2.1`` (docs/source/ and the code).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dramatiq import Actor
from dramatiq.brokers.redis import (
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_MAINTENANCE_CHANCE,
    RedisBroker,
)
from dramatiq.cli import CPUS
from dramatiq.message import Message
from dramatiq.middleware.retries import DEFAULT_MAX_BACKOFF, DEFAULT_MIN_BACKOFF
from dramatiq.results import ResultFailure, ResultMissing
from dramatiq.results.backends import RedisBackend

from rdq_compliance.deployed.system import (
    JobSpec,
    JobState,
    Part,
    Profile,
    Promise,
    Setting,
    WorkerLaunch,
)
from rdq_core.errors import InvalidArgument
from rdq_dramatiq.deployed_jobs import ACTOR, QUEUE, Deployment, build
from rdq_dramatiq.keys import broker_namespace
from rdq_dramatiq.settings import parse_dsn, split_dsn, with_params

__all__ = ["PROFILES", "PROMISES", "DramatiqSystem"]

TAG = "https://github.com/Bogdanp/dramatiq/blob/v2.2.1"
DOCS = f"{TAG}/docs/source"
_REDIS_DOC = f"{TAG}/dramatiq/brokers/redis.py#L76-L83"
_RETRY_DOC = f"{DOCS}/guide.rst#L240-L250"
_CLI_DOC = f"{TAG}/dramatiq/cli.py#L184-L197"

#: Worker faults after which the docs say a message may be received again.
_WORKER_FAILURE = frozenset({"kill", "pause", "cut", "partition"})
_DUPLICATES = ("handed-out-while-held", "ran-after-done", "superseded-outcome")

PROMISES: tuple[Promise, ...] = (
    Promise(
        id="dramatiq-ack-after-processing",
        quote=(
            "Messages that have been pulled by workers but not processed are returned to the "
            "broker on graceful shutdown and any messages that are in flight when a worker is "
            "terminated are going to be redelivered later.  Messages are only ever "
            "acknowledged to (removed from) the broker after they have been successfully "
            "processed.  When a worker goes down while processing messages (eg. due to "
            "hardware, power or network failure) then the messages it pulled from the broker "
            "will eventually be re-delivered to it (assuming it recovers) or another worker."
        ),
        link=f"{DOCS}/advanced.rst#L172-L181",
        delivery="at-least-once",
        recovery=(
            "a worker process silent for heartbeat_timeout is offline; a dispatch of any "
            "other broker on the same queue runs maintenance with odds maintenance_chance "
            "in a million and requeues the offline broker's unacked messages"
        ),
        forbids=frozenset({"lost", "stuck", "never-ran"}),
    ),
    Promise(
        id="dramatiq-persistence",
        quote=(
            "Messages sent to Dramatiq brokers are persisted to disk and survive across "
            "broker reboots.  Exactly how often messages are flushed to disk depends on your "
            "broker."
        ),
        link=f"{DOCS}/advanced.rst#L168-L170",
        forbids=frozenset({"lost"}),
        tolerates={
            "lost": frozenset({"server-kill"}),
            "ran-after-done": frozenset({"server-kill"}),
        },
    ),
    Promise(
        id="dramatiq-idempotent-actors",
        quote=(
            "Dramatiq actors may receive the same message multiple times in the event of a "
            "worker failure (hardware, network or power failure).  This means that, for any "
            "given message, running your actor multiple times must be safe."
        ),
        link=f"{DOCS}/best_practices.rst#L17-L23",
        delivery="at-least-once",
        forbids=frozenset(_DUPLICATES),
        tolerates={rule: _WORKER_FAILURE for rule in _DUPLICATES},
    ),
    Promise(
        id="dramatiq-redis-heartbeat",
        quote=(
            "heartbeat_timeout(int): The amount of time (in ms) that has to pass without a "
            "heartbeat for a broker process to be considered offline."
        ),
        link=_REDIS_DOC,
        recovery="the offline broker's unacked messages are requeued by maintenance",
        tolerates={rule: frozenset({"pause", "server-freeze"}) for rule in _DUPLICATES},
    ),
    Promise(
        id="dramatiq-retries",
        quote=(
            "Dramatiq assumes all actors are idempotent so when an exception occurs during "
            "message processing, it automatically enqueues a retry for that message with "
            "exponential backoff."
        ),
        link=f"{DOCS}/guide.rst#L152-L158",
        forbids=frozenset({"lost"}),
    ),
    Promise(
        id="dramatiq-dead-letters",
        quote=(
            "Once a message has exceeded its retry or age limits, it gets moved to the dead "
            "letter queue where it's kept for up to 7 days and then automatically dropped from "
            "the message broker.  From here, you can manually inspect the message and decide "
            "whether or not it should be put back on the queue."
        ),
        link=f"{DOCS}/guide.rst#L264-L271",
        forbids=frozenset({"lost", "ran-after-done"}),
    ),
    Promise(
        id="dramatiq-time-limits",
        quote=(
            "Dramatiq has a default actor time limit of 10 minutes, which means that any actor "
            "running for longer than 10 minutes is killed with a TimeLimitExceeded error. "
            "[...] Time limits are best-effort.  They cannot cancel system calls or any "
            "function that doesn't currently hold the GIL under CPython."
        ),
        link=f"{DOCS}/guide.rst#L275-L299",
        tolerates={
            "handed-out-while-held": frozenset({"over-limit"}),
            "superseded-outcome": frozenset({"over-limit"}),
        },
    ),
)

_MS = 1000.0
#: How often an idle consumer polls its queue at least: its backoff is capped at the
#: worker's ``worker_timeout``, 1000 ms (``dramatiq_worker_timeout``, worker.py L58).
_POLLS_PER_S = 1.0
_TIME_LIMIT_S = 600.0  # TimeLimit(time_limit=600000), middleware/time_limit.py L67

#: The ``fast`` profile: ``Deployment`` fields (ms; commands per million), CLI flags.
FAST = {"heartbeat_timeout": 5000, "maintenance_chance": 1_000_000, "min_backoff": 1000,
        "max_backoff": 10_000}  # fmt: skip
FAST_PROCESSES, FAST_THREADS = 2, 2


def _recovery(heartbeat_ms: int, chance: int) -> float:
    """Seconds until an offline broker's messages are requeued, with 99 % odds, when one
    idle worker process polls the queue: the heartbeat timeout, then the first of its
    polls to win the maintenance draw (``chance`` in a million each; under a chance of
    a million, the first poll)."""
    polls = 1.0 if chance >= 1_000_000 else math.log(100) / (chance / 1_000_000)
    return heartbeat_ms / _MS + polls / _POLLS_PER_S


def _same(name: str, value: str) -> Setting:
    return Setting(name, value, value)


_UNCHANGED = (
    _same("dead_message_ttl", "604800000 ms"),
    _same("max_retries", "20 (JobSpec.retries sets it per message)"),
    _same("time_limit", "600000 ms"),
    _same("result_ttl", "600000 ms"),
    _same("worker_timeout", "1000 ms"),
)
PROFILES: Mapping[str, Profile] = {
    "defaults": Profile(
        "defaults",
        (
            _same("heartbeat_timeout", f"{DEFAULT_HEARTBEAT_TIMEOUT} ms"),
            _same("maintenance_chance", f"{DEFAULT_MAINTENANCE_CHANCE} per million"),
            _same("min_backoff", f"{DEFAULT_MIN_BACKOFF} ms"),
            _same("max_backoff", f"{DEFAULT_MAX_BACKOFF} ms"),
            _same("--processes", str(CPUS)),
            _same("--threads", "8"),
            *_UNCHANGED,
        ),
        recovery_after=_recovery(DEFAULT_HEARTBEAT_TIMEOUT, DEFAULT_MAINTENANCE_CHANCE),
        execution_limit=_TIME_LIMIT_S,
    ),
    "fast": Profile(
        "fast",
        (
            Setting(
                "heartbeat_timeout", f"{FAST['heartbeat_timeout']} ms",
                f"{DEFAULT_HEARTBEAT_TIMEOUT} ms",
                '"heartbeat_timeout(int): The amount of time (in ms) that has to pass '
                'without a heartbeat for a broker process to be considered offline." '
                f"({_REDIS_DOC})",
            ),
            Setting(
                "maintenance_chance", f"{FAST['maintenance_chance']} per million",
                f"{DEFAULT_MAINTENANCE_CHANCE} per million",
                '"maintenance_chance(int): How many commands out of a million should trigger '
                f'queue maintenance." ({_REDIS_DOC})',
            ),
            Setting(
                "min_backoff", f"{FAST['min_backoff']} ms", f"{DEFAULT_MIN_BACKOFF} ms",
                '"The following retry options are configurable on a per-actor basis: [...] '
                "min_backoff [...] The minimum number of milliseconds of backoff to apply "
                f'between retries.  Must be greater than 100 milliseconds." ({_RETRY_DOC})',
            ),
            Setting(
                "max_backoff", f"{FAST['max_backoff']} ms", f"{DEFAULT_MAX_BACKOFF} ms",
                '"max_backoff [...] The maximum number of milliseconds of backoff to apply '
                f'between retries." ({_RETRY_DOC})',
            ),
            Setting(
                "--processes", str(FAST_PROCESSES), str(CPUS),
                f'"the number of worker processes to run (default: {CPUS})" ({_CLI_DOC})',
            ),
            Setting(
                "--threads", str(FAST_THREADS), "8",
                f'"the number of worker threads per process (default: 8)" ({_CLI_DOC})',
            ),
            *_UNCHANGED,
        ),
        recovery_after=_recovery(FAST["heartbeat_timeout"], FAST["maintenance_chance"]),
        execution_limit=_TIME_LIMIT_S,
    ),
}  # fmt: skip

#: What each profile passes: ``Deployment`` fields, then the CLI's flags.
_CHANGES: Mapping[str, tuple[Mapping[str, int], tuple[str, ...]]] = {
    "defaults": ({}, ()),
    "fast": (FAST, ("--processes", str(FAST_PROCESSES), "--threads", str(FAST_THREADS))),
}


def _dramatiq_cli() -> str:
    """The ``dramatiq`` console script of this environment."""
    beside = Path(sys.executable).with_name("dramatiq")
    found = str(beside) if beside.exists() else shutil.which("dramatiq")
    if not found:
        raise InvalidArgument(
            "the dramatiq CLI is not installed in this environment: pip install 'rdq[dramatiq]'"
        )
    return found


def _url(dsn: str, namespace: str) -> str:
    """The Redis URL of ``dsn`` whose connections carry the kit's ``namespace`` as their
    client name (what the server's connection cut looks for)."""
    return with_params(parse_dsn(dsn).url, {"client_name": f"rdq:{namespace}"})


class DramatiqSystem:
    """dramatiq 2.2.1 on Redis, deployed (see the module docstring)."""

    name = "dramatiq==2.2.1"
    server = "redis"
    behaviours = frozenset({"succeed", "sleep", "fail", "retry"})
    parts = (
        Part("main", 1, "the dramatiq CLI's parent: forks the worker processes, stops them "
             "all and exits when one dies; SIGKILLed, it leaves them running", "leader"),
        Part("worker", CPUS, "a worker process (the defaults' --processes): its own "
             "RedisBroker, consumer threads and worker threads", "descendants"),
    )  # fmt: skip
    promises = PROMISES
    profiles = PROFILES

    def __init__(self) -> None:
        self._url: str | None = None
        self._namespace = ""
        self._bound_namespace = ""
        self._client: tuple[RedisBroker, RedisBackend, Actor[Any, Any]] | None = None

    def _deployment(self, profile: str) -> tuple[Deployment, tuple[str, ...]]:
        if profile not in _CHANGES:
            raise InvalidArgument(f"unknown profile {profile!r} (known: {sorted(_CHANGES)})")
        if self._url is None:
            raise InvalidArgument("DramatiqSystem: call bind() first")
        settings, flags = _CHANGES[profile]
        return Deployment(self._url, self._namespace, **settings), flags

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        clean, mine = split_dsn(dsn)
        if mine:
            raise InvalidArgument(
                f"the deployed dramatiq system takes its settings from its profiles, not from "
                f"DSN parameters {sorted(mine)}: drop them"
            )
        self._url = _url(clean, namespace)
        self._bound_namespace = namespace
        self._namespace = broker_namespace(namespace)
        broker, backend, actor = build(self._deployment(profile)[0])
        self._client = (broker, backend, actor)

    def close(self) -> None:
        if self._client is not None:
            broker, backend, _ = self._client
            broker.client.connection_pool.disconnect()
            backend.client.connection_pool.disconnect()
            self._client = None

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        """The dramatiq CLI on the probe's broker module; ``dsn``: the server as this
        worker reaches it (default: the DSN bound)."""
        deployment, flags = self._deployment(profile)
        if dsn:
            deployment = dataclasses.replace(
                deployment, url=_url(split_dsn(dsn)[0], self._bound_namespace)
            )
        argv = (_dramatiq_cli(), "rdq_dramatiq.deployed_jobs:setup_broker", *flags)
        env = {**deployment.env(), "RDQ_PROBE_PATH": probe_path, "RDQ_PROBE_WORKER": name}
        return WorkerLaunch(argv, env)

    def _bound(self) -> tuple[RedisBroker, RedisBackend, Actor[Any, Any]]:
        if self._client is None:
            raise InvalidArgument("DramatiqSystem: call bind() first")
        return self._client

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        _, _, actor = self._bound()
        out: dict[str, str] = {}
        for job in jobs:
            options = {} if job.retries is None else {"max_retries": job.retries}
            delay = round(job.delay * _MS) if job.delay > 0 else None
            message = actor.send_with_options(
                args=(job.behaviour, job.seconds), delay=delay, **options
            )
            out[job.key] = message.message_id
        return out

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        broker, backend, _ = self._bound()
        r, ns = broker.client, self._namespace
        held: dict[tuple[str, bytes], str] = {}  # (queue, redis message id) -> broker id
        for key in r.scan_iter(match=f"{ns}:__acks__.*", count=1000):
            broker_id, _, queue = key.decode()[len(ns) + 10 :].partition(".")
            for rid in r.smembers(key):
                held[(queue, rid)] = broker_id
        copies: dict[str, list[JobState]] = {}
        for queue in (QUEUE, f"{QUEUE}.DQ", f"{QUEUE}.XQ"):
            for rid, data in r.hgetall(f"{ns}:{queue}.msgs").items():
                message = Message.decode(data)
                if queue.endswith(".XQ"):
                    state = JobState("failed-for-good", f"dead-lettered on {queue}")
                elif queue.endswith(".DQ"):  # a worker holds it in memory until its eta
                    holder = held.get((queue, rid))
                    by = f", held until its eta by broker {holder}" if holder else ""
                    state = JobState("waiting", f"delayed on {queue}{by}")
                elif (queue, rid) in held:
                    words = f"fetched from {queue} by broker {held[(queue, rid)]}, not acked"
                    state = JobState("running", words)
                else:
                    state = JobState("waiting", f"queued on {queue}")
                copies.setdefault(message.message_id, []).append(state)
        out: dict[str, JobState] = {}
        for job in job_ids:
            found = sorted(copies.get(job, []), key=lambda s: _RANK[s.state])
            if found and found[0].state in ("running", "waiting"):
                out[job] = _with_others(found[0], found[1:])
                continue
            stub = Message(queue_name=QUEUE, actor_name=ACTOR, args=(), kwargs={}, options={},
                           message_id=job)  # fmt: skip
            try:
                backend.get_result(stub)
                out[job] = _with_others(JobState("finished", "result stored"), found)
            except ResultFailure as failure:
                out[job] = _with_others(JobState("failed-for-good", f"result: {failure}"), found)
            except ResultMissing:
                out[job] = _with_others(found[0], found[1:]) if found else _NO_RECORD
        return out


#: Which copy of a message speaks first: one a worker holds, then one queued, then a dead
#: letter (a stored result comes between: it outlives the ack).
_RANK = {"running": 0, "waiting": 1, "failed-for-good": 2}
_NO_RECORD = JobState(
    "unknown",
    "no queued copy, no dead letter, no stored result (acked with its result expired, or "
    "never enqueued)",
)


def _with_others(state: JobState, others: Sequence[JobState]) -> JobState:
    """``state``, its words followed by those of the job's other copies."""
    return JobState(state.state, "; ".join([state.words, *(f"also {o.words}" for o in others)]))
