"""Which server speaks on the wire: MongoDB, or SecantusDB (storage half).

SecantusDB (a MongoDB-wire-protocol server on WiredTiger) is *not* MongoDB, and its
``buildInfo`` says ``version: 8.2.11`` whatever it is; it is recognised by
``serverStatus().process == "secantus"`` (or a ``secantusVersion`` in ``buildInfo``), and
its own version is ``buildInfo.secantusVersion``. Every label rdq prints names the
server as what it is: ``"SecantusDB 0.7.0b3 (MongoDB wire protocol, not MongoDB)"`` or
``"MongoDB 7.0.14"``.

What differs for rdq_mongo (:mod:`rdq_mongo.storage` says how each is handled):

- a filter with ``$expr`` — or any ``findAndModify`` — makes SecantusDB scan the whole
  collection (≈30 ms per 4,000 documents), where MongoDB uses the ``_id`` index; so on
  SecantusDB the claim's atomic write is ``update_one`` (indexed, ≈1 ms) and the claimed
  document is read back by its fresh token;
- comparing a stored BSON date with ``$$NOW`` is wrong on SecantusDB: rdq_mongo stores
  every time as integer microseconds and takes "now" as ``{$toLong: "$$NOW"}`` * 1000,
  right on both;
- ``{$max: "$attempts.n"}`` over an array of subdocuments is null on SecantusDB:
  ``$reduce`` is used, right on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pymongo.errors as px

MONGODB = "mongodb"
SECANTUS = "secantus"


@dataclass(frozen=True)
class Flavour:
    """The server behind a connection: ``kind`` (:data:`MONGODB` or :data:`SECANTUS`),
    its own version, and whether it runs as a replica set."""

    kind: str
    version: str
    replica_set: str | None = None

    @property
    def secantus(self) -> bool:
        return self.kind == SECANTUS

    @property
    def label(self) -> str:
        """The server named honestly, for reports and skip reasons."""
        if self.secantus:
            return f"SecantusDB {self.version} (MongoDB wire protocol, not MongoDB)"
        rs = f", replica set {self.replica_set!r}" if self.replica_set else ", standalone"
        return f"MongoDB {self.version}{rs}"


def identify(client: Any) -> Flavour:
    """Ask the server what it is (``buildInfo``, ``serverStatus``, ``hello``)."""
    admin = client.admin
    build = admin.command("buildInfo")
    hello = admin.command("hello")
    replica_set = hello.get("setName")
    secantus_version = build.get("secantusVersion")
    if secantus_version is None:
        try:
            status = admin.command("serverStatus")
        except px.OperationFailure:  # no clusterMonitor role: not needed to tell
            status = {}
        if status.get("process") == SECANTUS:
            secantus_version = (status.get("secantus") or {}).get("version", "unknown version")
    if secantus_version is not None:
        return Flavour(SECANTUS, str(secantus_version), replica_set)
    return Flavour(MONGODB, str(build.get("version", "unknown version")), replica_set)
