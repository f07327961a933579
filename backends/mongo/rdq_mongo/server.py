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

import re
import secrets

import pymongo
import pymongo.errors as px

from rdq_compliance.provision.admin import AdminHandle
from rdq_compliance.provision.backend import Server
from rdq_compliance.provision.owners import owner_record
from rdq_core.errors import BackendUnavailable
from rdq_mongo import schema
from rdq_mongo.connection import close_client, namespace_name, open_client, parse_uri
from rdq_mongo.errors import map_error
from rdq_mongo.flavour import Flavour, identify

__all__ = ["ADMIN_APP_NAME", "NAMESPACE_PREFIX", "MongoServer"]

#: The kit's own connections (a namespace's are ``rdq:<namespace>``).
ADMIN_APP_NAME = "rdq-admin"
NAMESPACE_PREFIX = "rdq_"
#: The names :meth:`MongoServer.create_namespace` gives.
MADE_NAME_RE = re.compile(NAMESPACE_PREFIX + "[0-9a-f]{12}")


class MongoServer(Server):
    """A MongoDB deployment at ``uri``; ``close()`` drops the namespaces it created that are
    still there and leaves the server running."""

    faults: frozenset[str] = frozenset()

    def __init__(self, uri: str, *, origin: str | None = None) -> None:
        self.dsn = uri
        self.target = parse_uri(uri)
        self.where = f"mongo {self.target.masked!r}"
        self.admin: AdminHandle[pymongo.MongoClient] = AdminHandle(
            connect=self._connect,
            disconnect=close_client,
            errors=(px.PyMongoError,),
            map_error=lambda exc, action: map_error(exc, action, self.where),
        )
        self.flavour: Flavour = self.admin.call("identify", identify)
        self.origin = origin or f"given URI {self.target.masked} ({self.flavour.label})"
        self.version = self.flavour.label
        #: SecantusDB drains ~20 tasks/s with 16 claimers on 2 cores: too slow for the
        #: standard campaign (2,000 tasks); the compact one keeps every fault kind.
        self.chaos_scenario = "compact" if self.flavour.secantus else "standard"
        #: and its 4-process claim race (1,200 tasks) needs up to ~60 s on 2 shared cores
        #: on a fresh server, several times more on one that has served a whole suite
        #: (it slows with every database created and dropped): it races a third of the
        #: tasks: 400 for the 4 processes (the 8 threads' 200 are at the floor already)
        self.race_time_factor = 4.0 if self.flavour.secantus else 1.0
        self.race_size = 1 / 3 if self.flavour.secantus else 1.0

    def _connect(self) -> pymongo.MongoClient:
        """A new admin client that answered ``ping``."""
        client = open_client(self.target, ADMIN_APP_NAME)
        try:
            client.admin.command("ping")
        except px.PyMongoError as exc:
            client.close()
            raise BackendUnavailable(
                f"mongo server at {self.target.masked} does not answer: "
                f"{str(exc).strip()[:300] or type(exc).__name__}"
            ) from None
        return client

    def forget_connections(self) -> None:
        self.admin.forget()

    def create_namespace(self) -> str:
        namespace = NAMESPACE_PREFIX + secrets.token_hex(6)
        self.admin.call(
            "create_namespace", lambda c: schema.ensure(c[namespace], owner_record())
        )
        self.admin.created(namespace)
        return namespace

    def recorded_namespaces(self) -> dict[str, str | None]:
        """The databases named as :meth:`create_namespace` names them, each with the owner
        record its sequence document keeps."""

        def find(client: pymongo.MongoClient) -> dict[str, str | None]:
            names = [n for n in client.list_database_names() if MADE_NAME_RE.fullmatch(n)]
            return {name: schema.owner_of(client[name]) for name in names}

        return self.admin.call("recorded_namespaces", find)

    def drop_namespace(self, namespace: str) -> None:
        namespace_name(namespace)
        self.admin.call("drop_namespace", lambda c: c.drop_database(namespace))
        self.admin.dropped(namespace)

    def dsn_via(self, host: str, port: int) -> str:
        """The URI through ``host:port`` with ``directConnection=true``: without it, the
        driver would discover a replica set's members by the names they advertise and
        connect to those, around the relay."""
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

        url = urlsplit(super().dsn_via(host, port))
        query = [(k, v) for k, v in parse_qsl(url.query) if k.lower() != "directconnection"]
        query.append(("directConnection", "true"))
        return urlunsplit(url._replace(query=urlencode(query)))

    def close(self) -> None:
        """Drop the namespaces this object created that are still there; close the admin
        client; the server keeps running."""
        self.admin.close(self.drop_namespace)
