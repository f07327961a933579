"""Opening a redis-py client from a DSN: a single server or a cluster, found out by asking
the server (storage half).

**DSN.** ``redis://[user:password@]host:port/db`` (``rediss://`` for TLS,
``unix:///path``), as redis-py's ``from_url`` reads it, plus two query parameters of
rdq's own, removed before redis-py sees the URL:

- ``rdq_cluster=auto|yes|no`` (default ``auto``): ``auto`` asks the node named by the
  URL (``INFO cluster``) and uses redis-py's ``RedisCluster`` (which discovers the other
  nodes, follows ``MOVED``/``ASK`` and routes every script by its keys' slot) when the
  node has ``cluster_enabled:1``, else a plain ``Redis`` client. So one URL of any node
  of a cluster is enough, and the same option works for both;
- ``rdq_check_keys=1``: register every script with the undeclared-key guard (a test aid,
  see :mod:`rdq_redis.scripts`);
- ``rdq_wait=N`` (default ``0``: off) and ``rdq_wait_timeout=MS`` (default
  :data:`DEFAULT_WAIT_TIMEOUT_MS`): after every *write* script, ``WAIT N MS`` on the same
  connection (one pipeline), and a write that fewer than ``N`` replicas confirmed within
  ``MS`` milliseconds raises ``BackendUnavailable`` (it is on the primary, maybe not on a
  replica: its outcome is unknown) instead of being acknowledged. Opt-in: a server
  without replicas would refuse every write. ``WAIT`` does not make Redis strongly
  consistent (a write is visible on the primary before its replicas have it, and a
  failover may still pick a replica that missed it), but a write the storage
  *acknowledges* is then on ``N`` replicas. Not on a cluster (refused).

**Every connection** has the client name ``rdq:<namespace>`` (``CLIENT SETNAME``, so a
namespace's connections can be found and cut), a connect timeout and a reply timeout, and
**no automatic retry**: redis-py would otherwise resend a command after a lost
connection or a timeout, running a script twice (a claim taken twice, a complete
retried into a ``StaleClaim`` although it took effect). A pooled connection the server
closed while idle is still replaced before anything is sent: redis-py's pool checks a
connection it lends for pending input or end-of-file and reconnects it.

**Server version.** Redis 7.0 or later (script shebangs and flags).

**Fork safety.** redis-py's pools notice a fork and open new connections in the child;
the lock of :class:`ClientSource` is renewed in a forked child.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_redis.errors import map_error, mask_dsn
from rdq_redis.scripts import Scripts, ScriptSource

#: Seconds to wait for a TCP connection.
CONNECT_TIMEOUT_S = 5.0
#: Seconds to wait for a reply before the call's outcome counts as unknown.
SOCKET_TIMEOUT_S = 10.0
MIN_SERVER_VERSION = (7, 0)
#: Milliseconds ``WAIT`` may take after a write (``rdq_wait_timeout``), below the reply
#: timeout so that a replica that does not confirm is an error, not a hang.
DEFAULT_WAIT_TIMEOUT_MS = 1000
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

_SOURCES: weakref.WeakSet[ClientSource] = weakref.WeakSet()


@dataclass(frozen=True)
class Target:
    """A DSN taken apart: the URL for redis-py and rdq's own options."""

    url: str
    cluster: str = "auto"  # auto | yes | no
    check_keys: bool = False
    #: ``WAIT`` after each write script: how many replicas, how many milliseconds.
    wait_replicas: int = 0
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS

    @property
    def masked(self) -> str:
        return mask_dsn(self.url)


def parse_dsn(dsn: str) -> Target:
    """Split rdq's query parameters (``rdq_cluster``, ``rdq_check_keys``) off ``dsn``."""
    if not isinstance(dsn, str) or "://" not in dsn:
        raise InvalidArgument(
            f"invalid redis DSN {dsn!r}: expected redis://host:port/db (or rediss://, unix://)"
        )
    parts = urlsplit(dsn)
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise InvalidArgument(
            f"invalid redis DSN {mask_dsn(dsn)!r}: scheme must be redis, rediss or unix"
        )
    kept, cluster, check_keys = [], "auto", False
    wait = {"rdq_wait": 0, "rdq_wait_timeout": DEFAULT_WAIT_TIMEOUT_MS}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "rdq_cluster":
            low = value.strip().lower()
            if low == "auto":
                cluster = "auto"
            elif low in _TRUE:
                cluster = "yes"
            elif low in _FALSE:
                cluster = "no"
            else:
                raise InvalidArgument(f"rdq_cluster={value!r}: expected auto, yes or no")
        elif key == "rdq_check_keys":
            check_keys = value.strip().lower() in _TRUE
        elif key in wait:
            wait[key] = _count(key, value, low=0 if key == "rdq_wait" else 1)
        else:
            kept.append((key, value))
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment))
    if wait["rdq_wait"] and cluster == "yes":
        raise InvalidArgument("rdq_wait: WAIT after each write is not offered on a cluster")
    return Target(url, cluster, check_keys, wait["rdq_wait"], wait["rdq_wait_timeout"])


def _count(key: str, value: str, *, low: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = low - 1
    if number < low:
        what = "replicas to wait for" if key == "rdq_wait" else "milliseconds"
        raise InvalidArgument(f"{key}={value!r}: expected an integer >= {low} ({what})")
    return number


def _common_kwargs(
    client_name: str, socket_timeout: float, connect_timeout: float
) -> dict[str, Any]:
    return {
        "client_name": client_name,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
        "decode_responses": False,
    }


def server_version(info: dict[str, Any]) -> tuple[int, ...]:
    text = str(info.get("redis_version", "0"))
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return (0,)


def open_client(
    target: Target,
    client_name: str,
    *,
    socket_timeout: float = SOCKET_TIMEOUT_S,
    connect_timeout: float = CONNECT_TIMEOUT_S,
) -> redis.Redis | RedisCluster:
    """A client for ``target`` (cluster or not, see the module docstring); raw redis-py
    errors propagate (callers map them). The node the URL names is asked first (version,
    ``cluster_enabled``) on a connection of its own."""
    kwargs = _common_kwargs(client_name, socket_timeout, connect_timeout)
    probe = redis.Redis.from_url(target.url, **kwargs)
    try:
        info = probe.info("server")
        info.update(probe.info("cluster"))
    finally:
        probe.close()
    version = server_version(info)
    if version < MIN_SERVER_VERSION:
        raise BackendUnavailable(
            f"redis server at {target.masked} is version {info.get('redis_version')}; "
            "rdq_redis needs Redis >= 7.0 (script shebangs and flags)"
        )
    enabled = int(info.get("cluster_enabled", 0)) == 1
    if target.cluster == "yes" or (target.cluster == "auto" and enabled):
        return RedisCluster.from_url(target.url, **kwargs)
    return redis.Redis.from_url(target.url, **kwargs)


def is_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


def primaries(client: redis.Redis | RedisCluster) -> list[redis.Redis]:
    """One plain client per master: the client itself, or each master of a cluster."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


class ClientSource:
    """A client and its scripts for one namespace, opened on first use in a process."""

    def __init__(
        self,
        dsn: str,
        client_name: str,
        *,
        socket_timeout: float = SOCKET_TIMEOUT_S,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        sources: Mapping[str, ScriptSource] | None = None,
    ) -> None:
        self.target = parse_dsn(dsn)
        self._sources = sources
        self.client_name = client_name
        self.where = f"redis {self.target.masked!r}"
        self._socket_timeout = socket_timeout
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._client: redis.Redis | RedisCluster | None = None
        self._scripts: Scripts | None = None
        self._closed = False
        _SOURCES.add(self)

    def get(self) -> tuple[redis.Redis | RedisCluster, Scripts]:
        """The client and its scripts (opened now if needed); ``BackendUnavailable`` if
        the server does not answer or the source is closed."""
        client, scripts = self._client, self._scripts
        if client is not None and scripts is not None:
            return client, scripts
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"{self.where}: the storage is closed; open a new one")
            if self._client is None or self._scripts is None:
                try:
                    client = open_client(
                        self.target,
                        self.client_name,
                        socket_timeout=self._socket_timeout,
                        connect_timeout=self._connect_timeout,
                    )
                except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
                    raise map_error(exc, "connect", self.where) from exc
                wait = None
                if self.target.wait_replicas:
                    if is_cluster(client):
                        client.close()
                        raise InvalidArgument(
                            f"{self.where}: rdq_wait (WAIT after each write) is not offered "
                            "on a cluster; remove it from the DSN"
                        )
                    wait = (self.target.wait_replicas, self.target.wait_timeout_ms)
                self._scripts = Scripts(
                    client, check_keys=self.target.check_keys, sources=self._sources, wait=wait
                )
                self._client = client
            return self._client, self._scripts

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close this process's connections; idempotent."""
        with self._lock:
            self._closed = True
            client, self._client, self._scripts = self._client, None, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing must not fail; the server reaps dead connections
                pass

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


def _renew_locks() -> None:
    for source in list(_SOURCES):
        source._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks)
