"""The "local binaries" rung: a private ``mongod`` as a single-node replica set, or, when
there is none, a private SecantusDB (``secantusd-py``).

:func:`start_local_server` finds the server (option ``mongo_server``: ``auto`` looks for
``mongod`` on ``PATH`` and in the usual install folders, :data:`MONGO_SEARCH_DIRS`, then
for ``secantusd-py`` there and in this Python's scripts folder) and starts it as a
:class:`~rdq_compliance.provision.process.ManagedProcess` (it dies with the kit, even on
SIGKILL) in the kit's workdir — ``<workdir>/mongo-data/`` its data, ``<workdir>/mongo.log``
its log — listening on 127.0.0.1 only, on a free port (a fresh one is tried if another
process takes it first). The URI is ``mongodb://127.0.0.1:PORT/?directConnection=true``.

**mongod** runs as ``mongod --replSet rdq --bind_ip 127.0.0.1 --port PORT --dbpath DIR
--oplogSize 64 --wiredTigerCacheSizeGB 0.25`` (:func:`mongod_argv`): a replica set even
with one member, because ``w: "majority"`` and retryable writes need one. Ready
(:class:`Readiness`) when ``hello`` says ``isWritablePrimary``: a first ``hello`` without a
``setName`` gets ``replSetInitiate`` with this one member (``AlreadyInitialized`` is fine:
a restart keeps the configuration), then ``hello`` is polled until the election is won.

**SecantusDB** runs as ``secantusd-py --host 127.0.0.1 --port PORT --storage-path DIR
--cache-size 256M --oplog-max-entries 500 --oplog-retention-seconds 60``
(:func:`secantus_argv`): it advertises itself as the primary of a single-node replica set
``secantus`` from the start. Its oplog is kept short because its writes slow down as the
oplog grows (≈1 ms per write with a fresh oplog, ≈15 ms at 25,000 entries; nothing of
rdq reads the oplog). It is ready when ``hello`` says ``isWritablePrimary``. Its label is
honest everywhere: ``"SecantusDB 0.7.0b3 (MongoDB wire protocol, not MongoDB)"``.

**Faults** (on a server this rung started): ``kill_server`` SIGKILLs the server's
processes; it stays down until ``restart_server``, which starts it again on the same
port and data (a running server is first stopped: SIGTERM, then SIGKILL after the grace
period — :data:`STOP_GRACE_S`; SecantusDB does not exit promptly on SIGTERM).
``pause_server`` SIGSTOPs it until ``resume``. No ``cut_connections``
(:mod:`rdq_mongo.server` says why). ``close()`` stops it and removes its data (also after
a kill or a pause); if the kit dies, the watchdog does.

Plugin half: built from :mod:`rdq_compliance.provision` on
:class:`rdq_mongo.server.MongoServer`: the server process is a :class:`LocalMongoNode` (a
``ProcessSlot``: what it runs, how it is probed), the faults and close come from
``LocalFaults``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymongo
import pymongo.errors as px

from rdq_compliance.provision.backend import (
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    ProvisionRequest,
    ProvisionUnavailable,
)
from rdq_compliance.provision.binaries import BinaryNotFound, find_binary
from rdq_compliance.provision.local_server import LocalFaults, ProcessSlot, start_rung
from rdq_compliance.provision.options import Paths
from rdq_compliance.provision.process import ManagedProcess, ProcessFailed, remove_tree
from rdq_mongo.options import (
    LOCAL_OPTIONS,
    MONGO_BIN_DIR,
    MONGO_START_TIMEOUT,
    MONGO_SYNC_ON_COMMIT,
    check_known,
    local_server,
)
from rdq_mongo.server import MongoServer

__all__ = [
    "MONGO_SEARCH_DIRS",
    "REPLICA_SET",
    "LocalMongoNode",
    "LocalMongoServer",
    "Readiness",
    "find_server",
    "mongod_argv",
    "secantus_argv",
    "start_local_server",
]

#: Where MongoDB is usually installed, searched after ``PATH``.
MONGO_SEARCH_DIRS: tuple[str, ...] = (
    "/usr/bin",
    "/usr/local/bin",
    "/opt/homebrew/bin",
    "/opt/mongodb/bin",
    "/usr/local/opt/mongodb-community/bin",
    "/opt/homebrew/opt/mongodb-community/bin",
)
#: The replica set a local ``mongod`` runs as.
REPLICA_SET = "rdq"
MONGOD, SECANTUS = "mongod", "secantus"
BINARY = {MONGOD: "mongod", SECANTUS: "secantusd-py"}
#: Seconds a SIGTERM may take before SIGKILL.
STOP_GRACE_S = {MONGOD: 20.0, SECANTUS: 3.0}
#: SecantusDB's oplog bounds (its writes slow down as the oplog grows).
SECANTUS_OPLOG_ENTRIES = 500
SECANTUS_OPLOG_SECONDS = 60


def _scripts_dirs() -> list[str]:
    """This Python's console-script folders (where ``pip install SecantusDB`` puts
    ``secantusd-py`` when the venv is not on ``PATH``)."""
    dirs = [str(Path(sys.executable).parent)]
    with contextlib.suppress(KeyError):
        dirs.append(sysconfig.get_path("scripts"))
    return dirs


def find_server(kind: str, bin_dirs: Paths | None) -> tuple[str, Path]:
    """``(kind, binary)`` of the server to start, or ``ProvisionUnavailable`` naming what is
    missing and every folder searched."""
    kinds = [MONGOD, SECANTUS] if kind == "auto" else [kind]
    if bin_dirs is not None:
        dirs, use_path, hint = list(bin_dirs), False, "as given by --rdq-option mongo_bin_dir"
        absent = [d for d in dirs if not Path(d).is_dir()]
        if absent:
            hint += f"; not a folder: {', '.join(absent)}"
    else:
        dirs = [*MONGO_SEARCH_DIRS, *_scripts_dirs()]
        use_path, hint = True, "PATH, the usual install folders, this Python's scripts"
    misses = []
    for k in kinds:
        try:
            return k, find_binary(BINARY[k], dirs, use_path=use_path)
        except BinaryNotFound as exc:
            misses.append(str(exc))
    raise ProvisionUnavailable(
        f"MongoDB server binaries: {'; '.join(misses)} [{hint}]; install MongoDB 6.0+ "
        "(mongod on PATH) or SecantusDB (pip install SecantusDB: a MongoDB-wire-protocol "
        "server, not MongoDB), or point --rdq-option mongo_bin_dir=FOLDER at the folder "
        "holding mongod"
    )


def mongod_argv(binary: Path, port: int, datadir: Path) -> list[str]:
    """The command line of a local ``mongod``: a single-node replica set on loopback."""
    return [
        str(binary),
        *("--replSet", REPLICA_SET, "--bind_ip", "127.0.0.1", "--port", str(port)),
        *("--dbpath", str(datadir), "--oplogSize", "64", "--wiredTigerCacheSizeGB", "0.25"),
    ]


def secantus_argv(binary: Path, port: int, datadir: Path, *, sync_on_commit: bool) -> list[str]:
    """The command line of a local SecantusDB."""
    argv = [
        str(binary),
        *("--host", "127.0.0.1", "--port", str(port), "--storage-path", str(datadir)),
        *("--cache-size", "256M", "--log-level", "WARNING"),
        *("--oplog-max-entries", str(SECANTUS_OPLOG_ENTRIES)),
        *("--oplog-retention-seconds", str(SECANTUS_OPLOG_SECONDS)),
    ]
    return [*argv, "--sync-on-commit"] if sync_on_commit else argv


class Readiness:
    """The readiness check of a local server at ``uri``: true once ``hello`` says it is a
    writable primary; a ``mongod`` whose ``hello`` names no replica set is sent
    ``replSetInitiate`` (once per start) with itself as the only member."""

    def __init__(self, uri: str, member: str, *, initiate: bool) -> None:
        self.uri, self.member, self.initiate = uri, member, initiate
        self.initiated = False

    def __call__(self) -> bool:
        client: pymongo.MongoClient = pymongo.MongoClient(
            self.uri, serverSelectionTimeoutMS=1000, connectTimeoutMS=1000, socketTimeoutMS=5000
        )
        try:
            hello = client.admin.command("hello")
            if hello.get("isWritablePrimary"):
                return True
            if self.initiate and not self.initiated and not hello.get("setName"):
                config = {"_id": REPLICA_SET, "members": [{"_id": 0, "host": self.member}]}
                try:
                    client.admin.command("replSetInitiate", config)
                except px.OperationFailure as exc:
                    if exc.code != 23:  # AlreadyInitialized
                        raise
                self.initiated = True
            return False
        finally:
            client.close()


@dataclass
class LocalMongoNode(ProcessSlot):
    """The server process this rung started: its kind, binary, folder and port."""

    kind: str
    binary: Path
    workdir: Path
    start_timeout: float
    sync_on_commit: bool = False
    port: int = 0
    process: ManagedProcess | None = field(default=None, repr=False)

    @property
    def datadir(self) -> Path:
        return self.workdir / "mongo-data"

    @property
    def log_path(self) -> Path:
        return self.workdir / "mongo.log"

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    @property
    def stop_grace(self) -> float:  # type: ignore[override]
        return STOP_GRACE_S[self.kind]

    def argv(self) -> list[str]:
        if self.kind == MONGOD:
            return mongod_argv(self.binary, self.port, self.datadir)
        return secantus_argv(
            self.binary, self.port, self.datadir, sync_on_commit=self.sync_on_commit
        )

    def readiness(self) -> Callable[[], object]:
        """Until a writable primary (a ``mongod`` is sent ``replSetInitiate`` once)."""
        return Readiness(self.uri, f"127.0.0.1:{self.port}", initiate=self.kind == MONGOD)

    def launch_options(self) -> dict[str, Any]:
        return {"cwd": self.workdir, "cleanup_paths": [self.datadir]}

    def port_taken(self, log: str) -> bool:
        return "in use" in log.lower()  # mongod: "Address already in use"; SecantusDB too


class LocalMongoServer(LocalFaults, MongoServer):
    """A private server the kit started from local binaries (see the module docstring)."""

    faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER})
    start_errors = (ProcessFailed, OSError, px.PyMongoError)

    def __init__(self, node: LocalMongoNode) -> None:
        super().__init__(node.uri)
        real = Path(os.path.realpath(node.binary))
        shown = f"{node.binary} (-> {real})" if real != node.binary else str(node.binary)
        self.origin = f"local binary {shown} on 127.0.0.1:{node.port}: {self.flavour.label}"
        self.node = node
        self.hold_processes()

    def process_slots(self) -> Sequence[LocalMongoNode]:
        return [self.node]


def start_local_server(request: ProvisionRequest) -> LocalMongoServer:
    """Rung 2 of the ladder: find the binary, start the server on a free port, wait until
    it is a writable primary (see the module docstring)."""
    check_known(request.options)
    options = LOCAL_OPTIONS.parse(request.options)  # a bad value fails before any work
    kind, binary = find_server(local_server(options), options[MONGO_BIN_DIR])
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    node = LocalMongoNode(
        kind,
        binary,
        workdir,
        options[MONGO_START_TIMEOUT],
        sync_on_commit=options[MONGO_SYNC_ON_COMMIT],
    )

    def start() -> None:
        remove_tree(node.datadir)  # nothing of an earlier run may be reused
        node.start_on_free_port()

    return start_rung(
        node,
        start,
        LocalMongoServer,
        failure=f"the local {BINARY[kind]} ({binary}) did not start",
    )
