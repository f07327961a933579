"""``RedisServer``: a Redis server or cluster the kit provisions namespaces on (plugin half).

A namespace is a key prefix ``rdq:{<ns>:`` (:mod:`rdq_redis.keys`). This is rung 1 of the
provisioning ladder as it is: a server (or any node of a cluster) given by DSN. It must
answer (else ``BackendUnavailable`` naming the DSN, password masked) and is never stopped
by the kit. A cluster needs no option: the node the URL names is asked (``INFO
cluster``) and a cluster client is used when it says ``cluster_enabled:1``
(``?rdq_cluster=yes|no`` in the URL overrides that; see :mod:`rdq_redis.connection`).

The one fault a given server can suffer is ``cut_connections``: ``CLIENT KILL`` of every
connection named ``rdq:<namespace>`` on every master. The kit's own rungs
(:mod:`rdq_redis.local`, :mod:`rdq_redis.container`) subclass it with the faults of a
server the kit owns.

Plugin half: may import :mod:`rdq_compliance.provision`; the storage half never imports
this module.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import redis.exceptions as rx

from rdq_compliance.provision.backend import CUT_CONNECTIONS, Server, UnsupportedFault
from rdq_core.errors import BackendUnavailable
from rdq_redis import admin, keys
from rdq_redis.connection import is_cluster, open_client, parse_dsn
from rdq_redis.errors import map_error

__all__ = ["ADMIN_CLIENT_NAME", "RedisServer"]

T = TypeVar("T")

#: The kit's own connections: no ``:``, so never the name of a namespace's connections.
ADMIN_CLIENT_NAME = "rdq-admin"


class RedisServer(Server):
    """A Redis server or cluster at ``dsn``; ``close()`` drops the namespaces it created
    that are still there and leaves the server running."""

    faults: frozenset[str] = frozenset({CUT_CONNECTIONS})

    def __init__(self, dsn: str, *, origin: str | None = None) -> None:
        self.dsn = dsn
        self.target = parse_dsn(dsn)
        self.where = f"redis {self.target.masked!r}"
        self._lock = threading.Lock()
        self._client: Any = None
        self._pid = os.getpid()
        self._created: set[str] = set()
        client = self._admin()
        self.cluster = is_cluster(client)
        kind = f"cluster of {len(admin.primaries(client))} masters" if self.cluster else "server"
        self.version = self._admin_call("server_version", _redis_version)
        self.origin = origin or f"given DSN {self.target.masked} ({kind})"

    def _admin(self) -> Any:
        """The server's own client (re-opened if lost or inherited through fork)."""
        client = self._client
        if client is not None and self._pid == os.getpid():
            return client
        try:
            client = open_client(self.target, ADMIN_CLIENT_NAME)
            client.ping()
        except (rx.RedisError, rx.RedisClusterException) as exc:
            raise BackendUnavailable(
                f"redis server at {self.target.masked} does not answer: "
                f"{str(exc).strip() or type(exc).__name__}"
            ) from None
        self._client, self._pid = client, os.getpid()
        return client

    def _admin_call(self, action: str, fn: Callable[[Any], T]) -> T:
        with self._lock:
            client = self._admin()
            try:
                return fn(client)
            except (rx.RedisError, rx.RedisClusterException) as exc:
                raise map_error(exc, action, self.where) from exc

    def create_namespace(self) -> str:
        namespace = admin.new_namespace_name()
        self._admin_call("create_namespace", lambda c: admin.create_namespace(c, namespace))
        with self._lock:
            self._created.add(namespace)
        return namespace

    def drop_namespace(self, namespace: str) -> None:
        keys.namespace_name(namespace)
        self._admin_call("drop_namespace", lambda c: admin.drop_namespace(c, namespace))
        with self._lock:
            self._created.discard(namespace)

    def cut_connections(self, namespace: str) -> int:
        keys.namespace_name(namespace)
        return self._admin_call("cut_connections", lambda c: admin.cut_connections(c, namespace))

    def network_address(self) -> tuple[str, int]:
        if self.cluster:
            raise UnsupportedFault(
                "a Redis Cluster redirects its clients (MOVED, ASK) to its nodes' real "
                "addresses, which a relay in front of one node cannot intercept"
            )
        return super().network_address()

    def _forget_admin_client(self) -> None:
        """The admin client's connections died with the server (a kill, a restart): the
        next admin call opens a new client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            with contextlib.suppress(Exception):
                client.close()

    def close(self) -> None:
        """Drop the namespaces this object created that are still there; close the admin
        client; the server keeps running."""
        with self._lock:
            leftover, self._created = sorted(self._created), set()
        for namespace in leftover:
            try:
                self.drop_namespace(namespace)
            except BackendUnavailable:
                break
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            client.close()


def _redis_version(client: Any) -> str:
    """``Redis 7.0.15`` (of the first master, for a cluster)."""
    return f"Redis {admin.primaries(client)[0].info('server').get('redis_version', '?')}"
