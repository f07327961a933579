"""The MongoDB backend's driver for the server contract (:mod:`tests.server_contract`).

Its local rung here starts SecantusDB — a MongoDB wire-protocol stand-in, not MongoDB
(every origin and label says so) — since no ``mongod`` is installed; ``RDQ_MONGO_DSN``
names a shared server instead. What is the stand-in's own (the stand-in ``mongod`` of
``test_mongo_local_rung.py``, retried writes made to look new, a paused server's socket
timeout) stays in this folder.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pymongo
import pymongo.errors as px
from rdq_mongo.connection import SERVER_SELECTION_TIMEOUT_MS
from rdq_mongo.local import MONGO_SEARCH_DIRS, find_server
from rdq_mongo.options import CONTAINER_OPTIONS, LOCAL_OPTIONS
from rdq_mongo.plugin import MongoBackend
from rdq_mongo.server import MongoServer
from rdq_mongo.storage import CLOCK_DESCRIPTION, MAX_PAYLOAD_BYTES, MongoStorage

from rdq_compliance.provision.backend import CUT_CONNECTIONS, Server
from tests.backends.mongo._mongo_support import ForgetRetries, command, proxy_uri
from tests.server_contract import driver as contract
from tests.server_contract.driver import LOCAL_FAULTS, ServerDriver, why_missing

#: The timeouts of a storage on a server that goes down (ms): server selection, a reply,
#: a connection's handshake; and what a call may take beyond them (s). pymongo's selection
#: loop ends on a 0.5 s step, so a call takes up to 0.85 s past its timeouts, two busy
#: loops beside it included (a fresh client's first call on a closed port, 1.0 s for
#: 0.4 s; a paused server's, 3.1-3.3 s for 2.4 s). The slack is 3.5 times that and keeps
#: every bound below the wait it replaces: rdq_mongo's 5 s selection and 10 s reply
#: timeouts, pymongo's 30 s selection timeout.
SELECT_MS = 400
SOCKET_MS = 1000
SLACK_S = 3.0


def _silent(server: Server) -> None:
    client: pymongo.MongoClient = pymongo.MongoClient(
        server.dsn, serverSelectionTimeoutMS=500, connectTimeoutMS=500, socketTimeoutMS=500
    )
    try:
        client.admin.command("ping")
    except px.PyMongoError:
        return
    finally:
        client.close()
    raise AssertionError("a paused server answered")


def _found_off_path() -> dict[str, Path]:
    kind, binary = find_server("auto", None)
    return {kind: binary}


def _usual_dirs() -> list[Path]:
    """The usual folders, then this Python's scripts (where pip puts ``secantusd-py``),
    those that hold a server."""
    dirs = [*MONGO_SEARCH_DIRS, str(Path(sys.executable).parent), sysconfig.get_path("scripts")]
    return [
        Path(d)
        for d in dict.fromkeys(dirs)
        if any((Path(d) / name).is_file() for name in ("mongod", "secantusd-py"))
    ]


def down_storage(server: Server, namespace: str) -> MongoStorage:
    """A storage with short timeouts (the bounds of the outage cases assume them)."""
    uri = f"{server.dsn}&serverSelectionTimeoutMS={SELECT_MS}&socketTimeoutMS={SOCKET_MS}"
    return MongoStorage(uri + f"&connectTimeoutMS={SOCKET_MS}", namespace)


def via_proxy(
    proxy: Any, server: Server, namespace: str, mode: str, **options: Any
) -> MongoStorage:
    """A storage through ``proxy`` (``options`` as for MongoStorage), warmed up; ``mode``
    ``forgetful``: retried writes reach the server as new ones (one
    :class:`ForgetRetries`, the proxy's rewrite, for every storage through it)."""
    if mode != "forgetful":
        proxy.rewrite = None
    elif not isinstance(proxy.rewrite, ForgetRetries):
        proxy.rewrite = ForgetRetries()
    storage = MongoStorage(proxy_uri(proxy, server.dsn), namespace, **options)
    storage.stats("warm")  # indexes, flavour: the first call's own writes are done
    return storage


CLOSED = "mongodb://u:s3cret@127.0.0.1:{port}/?serverSelectionTimeoutMS=" + str(SELECT_MS)

DRIVER = ServerDriver(
    name="mongo",
    backend_ref="rdq_mongo.plugin:backend",
    store="mongo",
    shared_dsn=lambda: os.environ.get("RDQ_MONGO_DSN") or None,
    ladder=contract.Ladder(
        bin_dir_option="mongo_bin_dir",
        local_dsn=lambda port: f"mongodb://127.0.0.1:{port}/?directConnection=true",
        local_faults=LOCAL_FAULTS - {CUT_CONNECTIONS},
        datadir=lambda workdir: workdir / "mongo-data",
        origin_details=lambda server: (f": {server.flavour.label}",),  # type: ignore[attr-defined]
        given_type=MongoServer,
        given_origin=lambda local, dsn: f"given URI {dsn} ({local.flavour.label})",  # type: ignore[attr-defined]
        given_faults=frozenset(),
        missing_binaries="MongoDB server binaries: mongod not found",
        partial_binaries=((), ("mongod", "secantusd-py"), {}),
        found_off_path=_found_off_path,
        usual_dirs=_usual_dirs,
        local_options=LOCAL_OPTIONS,
        local_defaults={
            "mongo_server": "auto",
            "mongo_bin_dir": None,
            "mongo_sync_on_commit": False,
            "mongo_start_timeout": 60.0,
        },
        container_options=CONTAINER_OPTIONS,
        container_defaults={
            "mongo_image": "mongo:7",
            "mongo_network": "auto",
            "mongo_start_timeout": 60.0,
        },
        bad_options=(("mongo_start_timeout", "soon", "a positive number ("),),
        ladder_bad_option=(
            "mongo_start_timeout",
            "-1",
            "mongo_start_timeout='-1': expected a positive",
        ),
        port_taken_log="in use",
        durability=lambda server: re.escape(
            'every write acknowledged with w:"majority", j:true (journaled before the reply) '
            f"by {server.flavour.label}"  # type: ignore[attr-defined]
        ),
        durability_load=20,  # SecantusDB: a few ms a write, on 2 busy cores
        clean_stop_log=None,
        assert_silent=_silent,
        missing_for=lambda options: why_missing(lambda: find_server("auto", None)),
    ),
    outage=contract.Outage(
        open_down=down_storage,
        fail_fast_s=SELECT_MS / 1000 + SLACK_S,
        down_text=r"^{call}: .*(nothing was done|outcome is unknown)",
        default_fails_within=SERVER_SELECTION_TIMEOUT_MS / 1000 + SLACK_S,
        native_errors=(px.PyMongoError,),
        closed_port_storage=lambda port: MongoStorage(CLOSED.format(port=port), "rdq_nowhere"),
        closed_port_dsn=lambda port: CLOSED.format(port=port),
        closed_port_text=r"^{call}: no server of mongo .*nothing was done",
        closed_port_within=(SELECT_MS / 1000 * 0.9, SELECT_MS / 1000 + SLACK_S),
        server_down_within=SELECT_MS / 1000 + SLACK_S,
        masked="mongodb://u:***@127.0.0.1",
    ),
    reply_loss=contract.ReplyLoss(
        modes=("deduplicating", "forgetful"),
        open=via_proxy,
        complete_request=command("update"),
        complete_tries=2,  # the first try and the driver's retry
        unknown_text=r"lost the connection.*outcome is unknown",
    ),
    packaging=contract.Packaging(
        storage_modules=(
            "rdq_mongo",
            "rdq_mongo.storage",
            "rdq_mongo.connection",
            "rdq_mongo.documents",
            "rdq_mongo.updates",
            "rdq_mongo.schema",
            "rdq_mongo.flavour",
            "rdq_mongo.errors",
            "rdq_mongo.window",
        ),
        plugin_modules=(
            "rdq_mongo.plugin",
            "rdq_mongo.server",
            "rdq_mongo.local",
            "rdq_mongo.container",
            "rdq_mongo.options",
        ),
        unreachable_dsn="mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100",
        backend_class=MongoBackend,
        storage_class=MongoStorage,
        max_payload_bytes=MAX_PAYLOAD_BYTES,
        server_payload_limit=16 * 1024 * 1024,  # a BSON document's
        clock=CLOCK_DESCRIPTION,
        clock_marker="$$NOW",
        unknown_durability="unknown: the server could not be asked (",
    ),
    skew=contract.Skew(on_shared=True),
)
