"""Wire-level helpers for the mongo tests, on top of the shared proxy (:mod:`_tcp_proxy`).

- :func:`command` — a predicate on a request's bytes: is it this command (``update``,
  ``findAndModify``, ``insert``...)? A command's name is the first key of its OP_MSG
  body, a BSON string element (``0x02 name 0x00``) naming the collection; pymongo's
  heartbeats (``hello`` on other connections) never match.
- :class:`ForgetRetries` — a request rewriter that makes the server NOT recognise a
  retried write: a request whose session id (``lsid``) and ``txnNumber`` were seen
  before gets a fresh random session id, so the server runs it again as a new write.
  This stands in for a server that does not deduplicate retryable writes (SecantusDB
  does deduplicate them, as MongoDB does; rdq_mongo must not rely on it).
- :func:`proxy_uri` — the URI of the server through a proxy (``directConnection``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from tests._tcp_proxy import ReplyLosingProxy

LSID_ID = b"\x03lsid\x00"
UUID_FIELD = b"\x05id\x00\x10\x00\x00\x00\x04"
TXN_NUMBER = b"\x12txnNumber\x00"


def command(name: str) -> Callable[[bytes], bool]:
    marker = b"\x02" + name.encode() + b"\x00"
    return lambda request: marker in request


class ForgetRetries:
    """``proxy.rewrite = ForgetRetries()``: retried writes reach the server as new ones."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()
        self.rewritten = 0

    def __call__(self, request: bytes) -> bytes:
        txn = request.find(TXN_NUMBER)
        lsid = request.find(LSID_ID)
        if txn < 0 or lsid < 0:
            return request
        uuid_at = request.find(UUID_FIELD, lsid)
        if uuid_at < 0:
            return request
        uuid_at += len(UUID_FIELD)
        start = txn + len(TXN_NUMBER)
        key = request[uuid_at : uuid_at + 16] + request[start : start + 8]
        with self._lock:
            if key not in self._seen:
                self._seen.add(key)
                return request
            self.rewritten += 1
        return request[:uuid_at] + os.urandom(16) + request[uuid_at + 16 :]


def proxy_for(dsn: str) -> ReplyLosingProxy:
    parts = urlsplit(dsn)
    return ReplyLosingProxy(parts.hostname or "127.0.0.1", parts.port or 27017)


def proxy_uri(proxy: ReplyLosingProxy, dsn: str, query: str = "") -> str:
    """``dsn``'s credentials, the proxy's address, a direct connection, and ``query``."""
    userinfo = urlsplit(dsn).netloc.rpartition("@")[0]
    auth = f"{userinfo}@" if userinfo else ""
    extra = f"&{query}" if query else ""
    return f"mongodb://{auth}{proxy.address}/?directConnection=true{extra}"
