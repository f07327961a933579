"""The adapter's DSN: a Redis URL, plus the rq deployment settings the adapter runs with
(storage half: the standard library and ``rdq_core`` only).

``redis://[user:password@]host:port/db`` (``rediss://``, ``unix://``) as redis-py reads
it, with two query parameters of the adapter's own, removed before redis-py sees the URL:

- ``rq_lease=S`` (whole seconds, at least 61; default :data:`DEFAULT_LEASE_S`): the
  heartbeat TTL every claim gets. rq gives an execution ``min(job timeout,
  job_monitoring_interval) + 60`` seconds (``BaseWorker.get_heartbeat_ttl``,
  worker/base.py L1112-1126); the adapter enqueues with ``timeout=-1`` (no job timeout), so
  the TTL is ``job_monitoring_interval + 60`` and the adapter's workers are built with
  ``job_monitoring_interval = S - 60``. rq's own default is 30 + 60 = **90 s**; the
  adapter's default is the shortest rq allows, **61 s** (``job_monitoring_interval=1``);
- ``rq_maintenance_interval=S`` (whole seconds, ``>= 0``; default
  :data:`DEFAULT_MAINTENANCE_INTERVAL_S`): the worker's ``maintenance_interval``, how often
  a worker runs rq's maintenance (``clean_registries``: the abandoned-job reclaim, among
  others) before a dequeue. rq's default is **600 s** (``--maintenance-interval``,
  docs/docs/workers.md); the kit's default is **1 s**, so that an expired lease is
  reclaimed about when it expires.

The ``rdq_*`` parameters of the built-in redis backend's DSNs (``rdq_cluster``,
``rdq_check_keys``, ``rdq_wait``, ``rdq_wait_timeout``) are removed too: rq sends no
``WAIT``, and the adapter runs on a single server (``rdq_cluster=yes`` is refused: rq
reaches a cluster only with a hash-tagged ``RQ_KEY_PREFIX``, a process-wide setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq_core.errors import InvalidArgument
from rdq_core.masking import mask_dsn as _mask

#: rq's floor: ``job_monitoring_interval`` of 1 s, plus its fixed 60 s.
MIN_LEASE_S = 61
DEFAULT_LEASE_S = 61
#: rq's own default heartbeat TTL: ``DEFAULT_JOB_MONITORING_INTERVAL`` (30) + 60.
RQ_DEFAULT_LEASE_S = 90
DEFAULT_MAINTENANCE_INTERVAL_S = 1
#: rq's own default (``DEFAULT_MAINTENANCE_TASK_INTERVAL``, defaults.py L98).
RQ_DEFAULT_MAINTENANCE_INTERVAL_S = 600

LEASE_PARAM = "rq_lease"
MAINTENANCE_PARAM = "rq_maintenance_interval"
ADAPTER_PARAMS = (LEASE_PARAM, MAINTENANCE_PARAM)
_REDIS_BACKEND_PARAMS = ("rdq_cluster", "rdq_check_keys", "rdq_wait", "rdq_wait_timeout")
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Target:
    """A DSN taken apart: the URL for redis-py and the adapter's settings."""

    url: str
    lease_s: int = DEFAULT_LEASE_S
    maintenance_interval_s: int = DEFAULT_MAINTENANCE_INTERVAL_S

    @property
    def masked(self) -> str:
        return mask(self.url)


def parse(dsn: str) -> Target:
    if not isinstance(dsn, str) or "://" not in dsn:
        raise InvalidArgument(
            f"invalid rq DSN {dsn!r}: expected redis://host:port/db (or rediss://, unix://)"
        )
    parts = urlsplit(dsn)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise InvalidArgument(f"invalid rq DSN {mask(dsn)!r}: scheme must be redis, rediss or unix")
    kept = []
    lease, interval = DEFAULT_LEASE_S, DEFAULT_MAINTENANCE_INTERVAL_S
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == LEASE_PARAM:
            lease = whole(key, value, MIN_LEASE_S)
        elif key == MAINTENANCE_PARAM:
            interval = whole(key, value, 0)
        elif key == "rdq_cluster" and value.strip().lower() in _TRUE:
            raise InvalidArgument(
                "the rq adapter runs on a single Redis server: rq reaches a Redis Cluster "
                "only with RQ_KEY_PREFIX set to a hash tag (rq 3.0 CHANGES.md), a "
                "process-wide setting; with rq's default prefix its Lua scripts and MULTI "
                "pipelines touch keys of several slots"
            )
        elif key in _REDIS_BACKEND_PARAMS:
            continue
        else:
            kept.append((key, value))
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))
    return Target(url, lease, interval)


def whole(key: str, value: object, low: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = low - 1
    if number < low:
        raise InvalidArgument(f"{key}={value!r}: expected a whole number of seconds >= {low}")
    return number


def with_params(dsn: str, params: dict[str, str]) -> str:
    """``dsn`` with the adapter's ``params`` set in its query (replacing any there)."""
    if not params:
        return dsn
    parts = urlsplit(dsn)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    kept.extend(params.items())
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))


def split_params(dsn: str) -> tuple[str, dict[str, str]]:
    """``dsn`` without the adapter's parameters, and those parameters."""
    parts = urlsplit(dsn)
    kept, ours = [], {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ADAPTER_PARAMS:
            ours[key] = value
        else:
            kept.append((key, value))
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))
    return url, ours


def mask(dsn: str) -> str:
    """``dsn`` with every secret in it replaced by ``***``: the kit's one masker,
    :func:`rdq_core.masking.mask_dsn`."""
    return _mask(dsn)
