"""Opening a pymongo client from a URI, once per process (storage half).

**URI.** ``mongodb://[user:password@]host[:port][,host…]/[?options]`` or
``mongodb+srv://…``, as pymongo reads it, plus one query parameter of rdq's own, removed
before pymongo sees the URI:

- ``rdq_claim_write=auto|find_and_modify|update_then_read`` (default ``auto``): how a
  claim's guarded atomic write is done (:mod:`rdq_mongo.storage`); ``auto`` picks
  ``find_and_modify`` on MongoDB and ``update_then_read`` on SecantusDB.

**Every client** is opened with ``w="majority"``, ``j=True`` (a write is acknowledged only
once it is journaled on a majority), ``retryWrites=True`` (see :mod:`rdq_mongo.errors` for
what a lost reply means), ``readConcernLevel="majority"`` and a primary read preference,
and timeouts that make a dead or paused server a prompt ``BackendUnavailable``
(:data:`SERVER_SELECTION_TIMEOUT_MS`, :data:`CONNECT_TIMEOUT_MS`,
:data:`SOCKET_TIMEOUT_MS`), unless the URI sets them itself. The application name is
``rdq:<namespace>``.

**Checked before anything is sent** (:func:`parse_uri`, ``InvalidArgument``): the URI's
syntax, hosts, ports and every option with pymongo's own validator — pymongo itself only
*warns* about an unknown option or a bad value and then ignores it (``tls=maybe`` would
connect without TLS); and the options of :data:`OWN_OPTIONS` with any value other than
rdq's, which it would silently override (``w=1``, ``retryWrites=false``,
``readPreference=secondary`` ...): rdq_mongo's guarantees rest on them.

**Fork safety.** pymongo's clients are not fork-safe: :class:`ClientSource` opens its
client lazily in the process that first uses it and a new one in a forked child.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pymongo
from pymongo import monitoring

from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_mongo.errors import mask_uri

#: Milliseconds to find a usable server before "nothing was done".
SERVER_SELECTION_TIMEOUT_MS = 5_000
#: Milliseconds to open a TCP connection.
CONNECT_TIMEOUT_MS = 5_000
#: Milliseconds to wait for a reply before the call's outcome counts as unknown.
SOCKET_TIMEOUT_MS = 10_000
CLAIM_WRITES = ("auto", "find_and_modify", "update_then_read")
#: A namespace is a database name: what :func:`namespace_name` accepts.
NAMESPACE_RE = re.compile(r"[A-Za-z0-9_-]{1,63}")
#: MongoDB's own databases: never a namespace (dropping one would drop the server's).
RESERVED_DATABASES = frozenset({"admin", "local", "config"})
#: Client options rdq_mongo sets itself, with the only value a URI may repeat.
OWN_OPTIONS = {
    "w": "majority",
    "journal": "true",
    "retrywrites": "true",
    "readconcernlevel": "majority",
    "readpreference": "primary",
}


def namespace_name(value: object) -> str:
    """A namespace (database name) checked: 1 to 63 of ``[A-Za-z0-9_-]``, not one of
    MongoDB's own databases (:data:`RESERVED_DATABASES`, in any case: MongoDB refuses
    database names that differ only in case)."""
    if not isinstance(value, str) or not NAMESPACE_RE.fullmatch(value):
        raise InvalidArgument(
            f"invalid mongo namespace {value!r}: a database name of 1 to 63 letters, "
            "digits, '_' or '-'"
        )
    if value.lower() in RESERVED_DATABASES:
        raise InvalidArgument(
            f"invalid mongo namespace {value!r}: {value.lower()!r} is one of MongoDB's own "
            f"databases ({', '.join(sorted(RESERVED_DATABASES))}); choose another name"
        )
    return value


@dataclass(frozen=True)
class Target:
    """A URI taken apart: the URI for pymongo and rdq's own options."""

    uri: str
    claim_write: str = "auto"

    @property
    def masked(self) -> str:
        return mask_uri(self.uri)


def parse_uri(uri: str) -> Target:
    """Split rdq's query parameter (``rdq_claim_write``) off ``uri``."""
    if not isinstance(uri, str) or not uri.startswith(("mongodb://", "mongodb+srv://")):
        raise InvalidArgument(
            f"invalid mongo URI {mask_uri(uri) if isinstance(uri, str) else uri!r}: expected "
            "mongodb://host:port/?options (or mongodb+srv://)"
        )
    parts = urlsplit(uri)
    query, claim_write = [], "auto"
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "rdq_claim_write":
            if value not in CLAIM_WRITES:
                raise InvalidArgument(
                    f"mongo URI option rdq_claim_write={value!r}: expected one of "
                    f"{', '.join(CLAIM_WRITES)}"
                )
            claim_write = value
        elif key.startswith("rdq_"):
            raise InvalidArgument(
                f"unknown rdq option {key!r} in the mongo URI: the only one is rdq_claim_write"
            )
        else:
            query.append((key, value))
    for key, value in query:
        wanted = OWN_OPTIONS.get(key.lower())
        if wanted is not None and value.strip().lower() != wanted:
            raise InvalidArgument(
                f"mongo URI option {key}={value!r}: rdq_mongo sets it itself ({key}={wanted}, "
                "what its guarantees rest on); remove it from the URI"
            )
    clean = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))
    _validate(clean)
    return Target(clean, claim_write)


def _validate(uri: str) -> None:
    """Refuse what pymongo would only warn about and ignore (an unknown option, a bad
    value: ``tls=maybe`` would connect without TLS) or refuse later (a bad host or port).
    An ``mongodb+srv://`` URI is checked without its DNS lookup."""
    try:
        from pymongo.uri_parser_shared import _validate_uri  # pymongo >= 4.13

        _validate_uri(uri, warn=False, normalize=True)
    except ImportError:  # pragma: no cover - older pymongo: the public parser
        if uri.startswith("mongodb://"):
            try:
                pymongo.uri_parser.parse_uri(uri, warn=False)
            except (pymongo.errors.ConfigurationError, ValueError) as exc:
                raise _bad_uri(uri, exc) from None
    except (pymongo.errors.ConfigurationError, ValueError, TypeError) as exc:
        raise _bad_uri(uri, exc) from None


def _bad_uri(uri: str, exc: BaseException) -> InvalidArgument:
    text = str(exc).strip().split(". Did you mean")[0]
    return InvalidArgument(
        f"invalid mongo URI {mask_uri(uri)}: {text}; expected "
        "mongodb://[user:password@]host[:port][,host...]/[?options] with the options of "
        "https://www.mongodb.com/docs/manual/reference/connection-string/"
    )


def _defaults(uri: str) -> dict[str, Any]:
    """Client options rdq sets unless the URI sets them."""
    given = {key.lower() for key, _ in parse_qsl(urlsplit(uri).query)}
    wanted = {
        "serverSelectionTimeoutMS": SERVER_SELECTION_TIMEOUT_MS,
        "connectTimeoutMS": CONNECT_TIMEOUT_MS,
        "socketTimeoutMS": SOCKET_TIMEOUT_MS,
    }
    return {k: v for k, v in wanted.items() if k.lower() not in given}


class NetworkErrors(monitoring.CommandListener):
    """Counts, per thread, the commands that failed on the network (a connection lost or
    no reply in time): a write that pymongo retried after one may have been applied by
    its first try, which a server that does not deduplicate retries does not say
    (:meth:`rdq_mongo.storage.MongoStorage._claim_one`)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def count(self) -> int:
        """Network failures seen so far by this thread."""
        return int(getattr(self._local, "n", 0))

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        failure = event.failure if isinstance(event.failure, dict) else {}
        if failure.get("errtype") in _NETWORK_ERRORS:
            self._local.n = self.count() + 1


_NETWORK_ERRORS = frozenset({"AutoReconnect", "NetworkTimeout", "ConnectionFailure"})


def open_client(
    target: Target, app_name: str, *, listener: NetworkErrors | None = None
) -> pymongo.MongoClient:
    """A client with rdq's write concern, read concern and timeouts (nothing is sent yet)."""
    try:
        return pymongo.MongoClient(
            target.uri,
            event_listeners=[listener] if listener is not None else [],
            appname=app_name,
            w="majority",
            journal=True,
            retryWrites=True,
            readConcernLevel="majority",
            readPreference="primary",
            connect=False,
            **_defaults(target.uri),
        )
    except (pymongo.errors.ConfigurationError, ValueError, TypeError) as exc:
        raise InvalidArgument(f"mongo URI {target.masked}: {exc}") from None


def close_client(client: pymongo.MongoClient) -> None:
    """Close ``client`` without stalling on a server that is down: ``close()`` first ends
    the client's sessions on the server, which waits the whole server-selection timeout
    when no server answers (5 s per close after a kill); with no readable server known,
    the sessions are dropped instead (the server, when back, expires them itself)."""
    try:
        reachable = client.topology_description.has_readable_server(
            pymongo.ReadPreference.PRIMARY_PREFERRED
        )
    except Exception:  # pragma: no cover - a client that cannot tell
        reachable = True
    if not reachable:
        with contextlib.suppress(Exception):
            client._topology.pop_all_sessions()  # private: no public way to skip endSessions
    client.close()


class ClientSource:
    """The client of one process, opened on first use (a forked child opens its own)."""

    def __init__(self, uri: str, app_name: str) -> None:
        self.target = parse_uri(uri)
        self.app_name = app_name
        self._lock = threading.Lock()
        self._client: pymongo.MongoClient | None = None
        self._pid = os.getpid()
        self._closed = False
        #: network failures of this source's commands, per thread
        self.network_errors = NetworkErrors()

    @property
    def where(self) -> str:
        return f"mongo {self.target.masked}"

    def get(self) -> pymongo.MongoClient:
        if self._pid != os.getpid():  # inherited through fork: never touch the parent's
            self._lock = threading.Lock()
            self._client, self._pid = None, os.getpid()
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._closed:
                raise BackendUnavailable(f"{self.where}: the storage was closed")
            if self._client is None:
                self._client = open_client(self.target, self.app_name, listener=self.network_errors)
            return self._client

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            close_client(client)
