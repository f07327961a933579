"""The ``rq`` backend plugin (entry point ``rdq.backends: rq``): the *plugin half*, which
may import :mod:`rdq_compliance.provision` and the built-in redis backend's plugin half;
the storage half (:mod:`rdq_rq.storage` and its modules) imports neither.

:class:`RqBackend` is :class:`rdq_redis.plugin.RedisBackend`'s provisioning ladder (a
given DSN, a private ``redis-server`` from local binaries, a container) with each rung's
server wrapped in :class:`RqServer`, a
:class:`~rdq_compliance.provision.wrapped.WrappedServer`:

- the namespace the redis server hands out (a key prefix of rdq's own) is, for rq, a
  part of every queue name and job id (:mod:`rdq_rq.names`): rq's keys are fixed ``rq:``
  keys. Preparing a namespace therefore writes nothing; dropping one also deletes the rq
  keys that carry it (:func:`rdq_rq.admin.drop_rq_keys`), then lets the redis server drop
  its own;
- the DSN handed to storages carries the adapter's settings (``rq_lease``,
  ``rq_maintenance_interval``: :mod:`rdq_rq.dsn`) when ``--rdq-option`` gives them (or the
  given DSN already has them);
- a Redis Cluster is refused: rq 3.0 reaches one only with ``RQ_KEY_PREFIX`` set to a
  hash tag (CHANGES.md, "making it possible to run RQ on Redis Cluster"), a process-wide
  environment setting read when rq is imported; the adapter keeps rq's default ``rq``,
  whose keys spread over the slots.

``--rdq-option`` settings of this plugin (besides the redis rungs' own):

=============================  ============================================================
``rq_lease``                   every claim's heartbeat TTL in whole seconds, >= 61 (61; rq's
                               own default 90): ``job_monitoring_interval = rq_lease - 60``
``rq_maintenance_interval``    seconds between a worker's maintenance passes, the reclaim
                               among them (1; rq's own default 600)
=============================  ============================================================
"""

from __future__ import annotations

import threading
from types import MappingProxyType
from typing import Any

import redis
from rdq_redis.plugin import RedisBackend

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable, Server
from rdq_compliance.provision.options import RungOptions, option
from rdq_compliance.provision.wrapped import WrappedServer
from rdq_rq import dsn as dsns
from rdq_rq.admin import drop_rq_keys
from rdq_rq.gaps import EXPECTED_FAILURES
from rdq_rq.storage import RqStorage

__all__ = ["RQ_VERSION", "RqBackend", "RqServer", "backend"]

RQ_VERSION = "rq 3.0.0"

RQ_LEASE = option(
    dsns.LEASE_PARAM,
    int,
    dsns.DEFAULT_LEASE_S,
    "every claim's heartbeat TTL in whole seconds, at least 61 (rq's own default: 90)",
    positive=True,
)
RQ_MAINTENANCE_INTERVAL = option(
    dsns.MAINTENANCE_PARAM,
    int,
    dsns.DEFAULT_MAINTENANCE_INTERVAL_S,
    "seconds between a worker's maintenance passes, the reclaim among them (rq's own default: 600)",
)
OPTIONS = RungOptions("rq adapter", [RQ_LEASE, RQ_MAINTENANCE_INTERVAL])


def adapter_params(request: ProvisionRequest, given: dict[str, str]) -> dict[str, str]:
    """The adapter's DSN parameters: those of a given DSN, overridden by ``--rdq-option``
    (each checked as a storage would check it)."""
    values = OPTIONS.parse(request.options)
    params = dict(given)
    for opt in OPTIONS:
        if values.given(opt):
            params[opt.name] = str(values[opt])
    dsns.parse(dsns.with_params("redis://127.0.0.1/0", params))  # refuses a bad value now
    return params


class RqServer(WrappedServer):
    """A redis server whose namespaces are rq namespaces (see the module docstring)."""

    def __init__(self, inner: Server, params: dict[str, str]) -> None:
        if getattr(inner, "cluster", False):
            inner.close()
            raise ProvisionUnavailable(
                "the rq adapter runs on a single Redis server: rq reaches a Redis Cluster "
                "only with RQ_KEY_PREFIX set to a hash tag (rq 3.0 CHANGES.md), a "
                "process-wide setting; with rq's default prefix its Lua scripts and MULTI "
                "pipelines touch keys of several slots"
            )
        super().__init__(inner, self._prepare, version=RQ_VERSION)
        self._params = dict(params)
        self._created: set[str] = set()
        self._lock = threading.Lock()
        self._clients: dict[str, Any] = {}

    @property  # type: ignore[override]
    def dsn(self) -> str:
        return dsns.with_params(self.inner.dsn, self._params)

    def dsn_via(self, host: str, port: int) -> str:
        return dsns.with_params(self.inner.dsn_via(host, port), self._params)

    def _prepare(self, dsn: str, namespace: str) -> None:
        """Nothing to install: rq needs no schema, and its keys of the namespace appear as
        it writes them."""
        with self._lock:
            self._created.add(namespace)

    def _client(self) -> Any:
        url = dsns.parse(self.inner.dsn).url  # read each time: a failover moves it
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                client = self._clients[url] = redis.Redis.from_url(
                    url, client_name="rdq-admin", socket_timeout=10, socket_connect_timeout=5
                )
        return client

    def _drop_rq(self, namespace: str) -> None:
        drop_rq_keys(self._client(), namespace)
        with self._lock:
            self._created.discard(namespace)

    def drop_namespace(self, namespace: str) -> None:
        self._drop_rq(namespace)
        self.inner.drop_namespace(namespace)

    def discard_namespace(self, namespace: str) -> None:
        self._drop_rq(namespace)
        self.inner.discard_namespace(namespace)

    def close(self) -> None:
        with self._lock:
            left = sorted(self._created)
        try:
            for namespace in left:
                try:
                    self._drop_rq(namespace)
                except redis.RedisError:  # the server is gone: nothing left to drop
                    break
        finally:
            with self._lock:
                clients, self._clients = list(self._clients.values()), {}
            for client in clients:
                try:
                    client.close()
                except Exception:  # closing must not fail
                    pass
            self.inner.close()


class RqBackend(RedisBackend):
    """``--rdq-backend=rq``: rq 3.0.0's worker logic, in-process, on a Redis server."""

    name = "rq"

    def options(self) -> tuple[RungOptions, ...]:
        """The redis rungs' options and the adapter's own."""
        return (*super().options(), OPTIONS)
    expected_failures = MappingProxyType(dict(EXPECTED_FAILURES))

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        url, given = dsns.split_params(dsn)
        params = adapter_params(request, given)
        return RqServer(super().server_from_dsn(url, request), params)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        params = adapter_params(request, {})
        return RqServer(super().start_local_server(request), params)

    def start_container(self, request: ProvisionRequest) -> Server:
        params = adapter_params(request, {})
        return RqServer(super().start_container(request), params)

    def open(self, dsn: str, namespace: str) -> RqStorage:  # type: ignore[override]
        return RqStorage(dsn, namespace)


backend = RqBackend()
