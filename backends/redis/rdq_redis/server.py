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

from typing import Any

import redis.exceptions as rx

from rdq_compliance.provision.admin import AdminHandle
from rdq_compliance.provision.backend import CUT_CONNECTIONS, Server, UnsupportedFault
from rdq_compliance.provision.owners import owner_record
from rdq_core.errors import BackendUnavailable
from rdq_redis import admin as redis_admin
from rdq_redis import keys
from rdq_redis.connection import is_cluster, open_client, parse_dsn
from rdq_redis.errors import map_error

__all__ = ["ADMIN_CLIENT_NAME", "RedisServer"]

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
        self.admin: AdminHandle[Any] = AdminHandle(
            connect=self._connect,
            disconnect=lambda client: client.close(),
            errors=(rx.RedisError, rx.RedisClusterException),
            map_error=lambda exc, action: map_error(exc, action, self.where),
        )
        client = self.admin.connection()
        self.cluster = is_cluster(client)
        kind = "server"
        if self.cluster:
            kind = f"cluster of {len(redis_admin.primaries(client))} masters"
        self.version = self.admin.call("server_version", _redis_version)
        self.origin = origin or f"given DSN {self.target.masked} ({kind})"

    def _connect(self) -> Any:
        """A new admin client that answered ``PING``."""
        try:
            client = open_client(self.target, ADMIN_CLIENT_NAME)
            client.ping()
        except (rx.RedisError, rx.RedisClusterException) as exc:
            raise BackendUnavailable(
                f"redis server at {self.target.masked} does not answer: "
                f"{str(exc).strip() or type(exc).__name__}"
            ) from None
        return client

    def forget_connections(self) -> None:
        self.admin.forget()

    def create_namespace(self) -> str:
        namespace = redis_admin.new_namespace_name()
        self.admin.call(
            "create_namespace",
            lambda c: redis_admin.create_namespace(c, namespace, owner_record()),
        )
        self.admin.created(namespace)
        return namespace

    def recorded_namespaces(self) -> dict[str, str | None]:
        """The namespaces named as :meth:`create_namespace` names them, each with the
        ``owner`` field of its marker key."""
        return self.admin.call("recorded_namespaces", redis_admin.made_namespaces)

    def drop_namespace(self, namespace: str) -> None:
        keys.namespace_name(namespace)
        self.admin.call("drop_namespace", lambda c: redis_admin.drop_namespace(c, namespace))
        self.admin.dropped(namespace)

    def cut_connections(self, namespace: str) -> int:
        keys.namespace_name(namespace)
        return self.admin.call(
            "cut_connections", lambda c: redis_admin.cut_connections(c, namespace)
        )

    def network_address(self) -> tuple[str, int]:
        if self.cluster:
            raise UnsupportedFault(
                "a Redis Cluster redirects its clients (MOVED, ASK) to its nodes' real "
                "addresses, which a relay in front of one node cannot intercept"
            )
        return super().network_address()

    def close(self) -> None:
        """Drop the namespaces this object created that are still there; close the admin
        client; the server keeps running."""
        self.admin.close(self.drop_namespace)


def _redis_version(client: Any) -> str:
    """``Redis 7.0.15`` (of the first master, for a cluster)."""
    return f"Redis {redis_admin.primaries(client)[0].info('server').get('redis_version', '?')}"
