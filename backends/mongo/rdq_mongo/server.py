"""``MongoServer``: a MongoDB deployment (or SecantusDB) the kit provisions namespaces on
(plugin half).

A namespace is a database ``rdq_<12 hex digits>`` with the collections and indexes of
:mod:`rdq_mongo.schema`; dropping it drops the database. This is rung 1 of the
provisioning ladder as it is: a deployment given by URI. It must answer (else
``BackendUnavailable`` naming the URI, password masked) and is never stopped by the kit.
Its ``origin`` names the server honestly (:mod:`rdq_mongo.flavour`): SecantusDB is never
presented as MongoDB.

**Faults.** None on a given server: ``cut_connections`` is not supported, because neither
MongoDB nor SecantusDB has a command that closes other clients' connections
(``killOp`` / ``killSessions`` end operations and sessions; the connections stay). The
kit's own rungs (:mod:`rdq_mongo.local`, :mod:`rdq_mongo.container`) subclass it with the
faults of a server the kit owns (kill, restart, pause).

Plugin half: may import :mod:`rdq_compliance.provision`; the storage half never imports
this module.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import pymongo
import pymongo.errors as px

from rdq_compliance.provision.backend import Server
from rdq_core.errors import BackendUnavailable
from rdq_mongo import schema
from rdq_mongo.connection import close_client, namespace_name, open_client, parse_uri
from rdq_mongo.errors import map_error
from rdq_mongo.flavour import Flavour, identify

__all__ = ["ADMIN_APP_NAME", "NAMESPACE_PREFIX", "MongoServer"]

T = TypeVar("T")

#: The kit's own connections (a namespace's are ``rdq:<namespace>``).
ADMIN_APP_NAME = "rdq-admin"
NAMESPACE_PREFIX = "rdq_"


class MongoServer(Server):
    """A MongoDB deployment at ``uri``; ``close()`` drops the namespaces it created that are
    still there and leaves the server running."""

    faults: frozenset[str] = frozenset()

    def __init__(self, uri: str, *, origin: str | None = None) -> None:
        self.dsn = uri
        self.target = parse_uri(uri)
        self.where = f"mongo {self.target.masked!r}"
        self._lock = threading.Lock()
        self._client: pymongo.MongoClient | None = None
        self._pid = os.getpid()
        self._created: set[str] = set()
        self.flavour: Flavour = self._admin_call("identify", identify)
        self.origin = origin or f"given URI {self.target.masked} ({self.flavour.label})"
        self.version = self.flavour.label
        #: SecantusDB drains ~20 tasks/s with 16 claimers on 2 cores: too slow for the
        #: standard campaign (2,000 tasks); the compact one keeps every fault kind.
        self.chaos_scenario = "compact" if self.flavour.secantus else "standard"
        #: and its 4-process claim race (1,200 tasks) needs up to ~60 s on 2 shared cores
        self.race_time_factor = 4.0 if self.flavour.secantus else 1.0

    def _admin(self) -> pymongo.MongoClient:
        """The server's own client (re-opened if inherited through fork)."""
        client = self._client
        if client is not None and self._pid == os.getpid():
            return client
        client = open_client(self.target, ADMIN_APP_NAME)
        try:
            client.admin.command("ping")
        except px.PyMongoError as exc:
            client.close()
            raise BackendUnavailable(
                f"mongo server at {self.target.masked} does not answer: "
                f"{str(exc).strip()[:300] or type(exc).__name__}"
            ) from None
        self._client, self._pid = client, os.getpid()
        return client

    def _admin_call(self, action: str, fn: Callable[[Any], T]) -> T:
        with self._lock:
            client = self._admin()
            try:
                return fn(client)
            except px.PyMongoError as exc:
                raise map_error(exc, action, self.where) from exc

    def create_namespace(self) -> str:
        namespace = NAMESPACE_PREFIX + secrets.token_hex(6)
        self._admin_call("create_namespace", lambda c: schema.ensure(c[namespace]))
        with self._lock:
            self._created.add(namespace)
        return namespace

    def drop_namespace(self, namespace: str) -> None:
        namespace_name(namespace)
        self._admin_call("drop_namespace", lambda c: c.drop_database(namespace))
        with self._lock:
            self._created.discard(namespace)

    def dsn_via(self, host: str, port: int) -> str:
        """The URI through ``host:port`` with ``directConnection=true``: without it, the
        driver would discover a replica set's members by the names they advertise and
        connect to those, around the relay."""
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

        url = urlsplit(super().dsn_via(host, port))
        query = [(k, v) for k, v in parse_qsl(url.query) if k.lower() != "directconnection"]
        query.append(("directConnection", "true"))
        return urlunsplit(url._replace(query=urlencode(query)))

    def _forget_admin_client(self) -> None:
        """The admin client's connections died with the server: reopen on next use."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            with contextlib.suppress(Exception):
                close_client(client)

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
        self._forget_admin_client()
