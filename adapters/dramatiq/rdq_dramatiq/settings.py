"""The adapter's deployment settings, read from the DSN's query (storage half: standard
library and dramatiq only).

The DSN is the Redis server's URL as the ``redis`` backend's rungs give it, plus the
settings of the dramatiq deployment the adapter plays, as query parameters (the plugin
half puts ``--rdq-option dramatiq_*=...`` there, so a worker process spawned from a
``StorageSpec`` reads the same ones):

===============================  ==========================================================
``dramatiq_heartbeat_timeout``   ``RedisBroker(heartbeat_timeout=...)`` in ms: how long a
                                 broker (worker process) may go without a call before
                                 another broker's maintenance requeues what it holds.
                                 dramatiq's default is 60 000 ms
                                 (``dramatiq.brokers.redis.DEFAULT_HEARTBEAT_TIMEOUT``);
                                 the kit's default here is :data:`DEFAULT_HEARTBEAT_TIMEOUT_MS`
                                 so that the suite does not wait a minute per lease. It is
                                 the adapter's ``fixed_lease``.
``dramatiq_maintenance_chance``  ``RedisBroker(maintenance_chance=...)``: how many commands
                                 out of a million run maintenance (the reclaim of dead
                                 brokers' messages). dramatiq's default is 1000; the
                                 adapter's is 1 000 000 (every fetch and enqueue), see
                                 :data:`DEFAULT_MAINTENANCE_CHANCE`.
``dramatiq_delay_prefetch``      how many delayed messages one worker process holds in
                                 memory for promotion (dramatiq's worker: ``1000 x
                                 worker_threads``, env ``dramatiq_delay_queue_prefetch``);
                                 default 1000 (one worker thread).
===============================  ==========================================================

**Every setting the adapter's deployment changes from dramatiq's defaults**, with the
docs or code that allow it (``V`` = ``https://github.com/Bogdanp/dramatiq/blob/v2.2.1``):

=============================  =============  ==========  ==================================
setting                        dramatiq       adapter     where dramatiq documents it
=============================  =============  ==========  ==================================
``heartbeat_timeout``          60000 ms       2000 ms     ``RedisBroker`` docstring, "The
                                                          amount of time (in ms) that has to
                                                          pass without a heartbeat for a
                                                          broker process to be considered
                                                          offline" (V/dramatiq/brokers/
                                                          redis.py#L79-L81)
``maintenance_chance``         1000 per       1 000 000   "How many commands out of a
                               million                    million should trigger queue
                                                          maintenance" (same, #L76-L77)
delay-queue prefetch           1000 x         1000        ``dramatiq_delay_queue_prefetch``,
                               ``worker_                  "1000 times number of worker
                               threads``                  threads" (V/docs/source/
                               (8000 at the               reference.rst#L288-L290); the
                               default 8)                 adapter plays one worker thread
``max_retries`` (Retries)      20             ``None``    "``None`` means the message
                                                          should be retried indefinitely"
                                                          (V/docs/source/guide.rst#L245):
                                                          rdq's worker decides when to
                                                          dead-letter
``store_results`` (Results)    ``False``      ``True``    "Whether or not actor results
                                                          should be stored.  Defaults to
                                                          False" (V/dramatiq/results/
                                                          middleware.py#L59-L61)
``use_namespace_prefix_keys``  ``False``      ``True``    V/dramatiq/results/backends/
(Results' ``RedisBackend``)                               redis.py#L33 (keys under the
                                                          broker's namespace)
middleware                     AgeLimit,      Retries,    ``Broker(middleware=...)``
                               TimeLimit,     Results     (V/dramatiq/broker.py#L107-L108):
                               Shutdown-                  rdq's worker runs the handlers, so
                               Notifications,             the time limit, shutdown notices,
                               Callbacks,                 callbacks and pipelines have no
                               Pipelines,                 actor to act on; AgeLimit has no
                               Retries                    default ``max_age``
=============================  =============  ==========  ==================================

Nothing else is set: the Redis client is the one ``RedisBroker(url=...)`` builds (redis-py's
pool for that URL, its retry policy untouched), ``dead_message_ttl`` is its default (7
days).

``rdq_*`` parameters of the ``redis`` backend are dropped, but those that would change
what the client is (``rdq_cluster=yes``, ``rdq_wait``) are refused: dramatiq's broker
runs on one server (its script builds key names it does not declare).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dramatiq.brokers.redis import MAINTENANCE_SCALE

from rdq_core.errors import InvalidArgument

__all__ = [
    "DEFAULT_DELAY_PREFETCH",
    "DEFAULT_HEARTBEAT_TIMEOUT_MS",
    "DEFAULT_MAINTENANCE_CHANCE",
    "OPTION_NAMES",
    "Settings",
    "parse_dsn",
    "split_dsn",
]

#: The kit's heartbeat timeout (the fixed lease): a few seconds, so that a suite that
#: waits for leases to run out does not crawl (dramatiq's own default: 60 s).
DEFAULT_HEARTBEAT_TIMEOUT_MS = 2000
#: Every fetch (and every enqueue) runs maintenance: the reclaim is then a deterministic
#: step of every claim, as on a busy deployment, instead of a 1-in-1000 lottery that a
#: test's handful of calls would almost never win (dramatiq's default 1000 needs about a
#: thousand commands on the queue per reclaim). ``maintenance_chance`` is a documented
#: parameter of ``RedisBroker``; 1 000 000 is its scale (``MAINTENANCE_SCALE``).
DEFAULT_MAINTENANCE_CHANCE = MAINTENANCE_SCALE
#: dramatiq's worker prefetches ``1000 x worker_threads`` delayed messages (worker.py);
#: the adapter plays one worker thread per storage.
DEFAULT_DELAY_PREFETCH = 1000

HEARTBEAT_TIMEOUT = "dramatiq_heartbeat_timeout"
MAINTENANCE_CHANCE = "dramatiq_maintenance_chance"
DELAY_PREFETCH = "dramatiq_delay_prefetch"
OPTION_NAMES = (HEARTBEAT_TIMEOUT, MAINTENANCE_CHANCE, DELAY_PREFETCH)
#: ``rdq_*`` parameters of the redis backend's DSN that dramatiq cannot honour.
_REFUSED = {"rdq_cluster": {"", "no", "auto", "0", "false"}, "rdq_wait": {"", "0"}}


@dataclass(frozen=True)
class Settings:
    """The Redis URL redis-py gets, and the dramatiq deployment settings."""

    url: str
    heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    maintenance_chance: int = DEFAULT_MAINTENANCE_CHANCE
    delay_prefetch: int = DEFAULT_DELAY_PREFETCH


def split_dsn(dsn: str) -> tuple[str, dict[str, str]]:
    """``dsn`` without its ``dramatiq_*`` parameters, and those parameters."""
    url = urlsplit(dsn)
    mine, rest = {}, []
    for key, value in parse_qsl(url.query, keep_blank_values=True):
        if key.startswith("dramatiq_"):
            mine[key] = value
        else:
            rest.append((key, value))
    clean = urlunsplit((url.scheme, url.netloc, url.path, urlencode(rest), url.fragment))
    return clean, mine


def with_params(dsn: str, params: dict[str, str]) -> str:
    """``dsn`` with ``params`` added to its query (none: ``dsn`` unchanged)."""
    if not params:
        return dsn
    url = urlsplit(dsn)
    query = parse_qsl(url.query, keep_blank_values=True) + sorted(params.items())
    return urlunsplit((url.scheme, url.netloc, url.path, urlencode(query), url.fragment))


def _int(name: str, text: str, low: int, high: int | None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = None  # type: ignore[assignment]
    if value is None or value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidArgument(
            f"dramatiq adapter: {name}={text!r}: expected a whole number {bound}"
        ) from None
    return value


def parse_dsn(dsn: str) -> Settings:
    """The settings a DSN carries (defaults for those it leaves out)."""
    clean, mine = split_dsn(dsn)
    unknown = sorted(set(mine) - set(OPTION_NAMES))
    if unknown:
        raise InvalidArgument(
            f"dramatiq adapter: unknown DSN parameter(s) {unknown}; known: "
            f"{', '.join(OPTION_NAMES)}"
        )
    url = urlsplit(clean)
    kept = []
    for key, value in parse_qsl(url.query, keep_blank_values=True):
        if key in _REFUSED:
            if value.strip().lower() not in _REFUSED[key]:
                raise InvalidArgument(
                    f"dramatiq adapter: {key}={value!r}: dramatiq's Redis broker runs on "
                    "one server (its dispatch script builds key names it does not "
                    "declare, and nothing in it waits for replicas)"
                )
            continue
        if key.startswith("rdq_"):
            continue
        kept.append((key, value))
    url_text = urlunsplit((url.scheme, url.netloc, url.path, urlencode(kept), url.fragment))
    return Settings(
        url=url_text,
        heartbeat_timeout_ms=_int(
            HEARTBEAT_TIMEOUT,
            mine.get(HEARTBEAT_TIMEOUT, str(DEFAULT_HEARTBEAT_TIMEOUT_MS)),
            1,
            None,
        ),
        maintenance_chance=_int(
            MAINTENANCE_CHANCE,
            mine.get(MAINTENANCE_CHANCE, str(DEFAULT_MAINTENANCE_CHANCE)),
            0,
            MAINTENANCE_SCALE,
        ),
        delay_prefetch=_int(
            DELAY_PREFETCH, mine.get(DELAY_PREFETCH, str(DEFAULT_DELAY_PREFETCH)), 1, 65535
        ),
    )
