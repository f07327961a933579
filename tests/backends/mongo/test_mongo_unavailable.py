"""What only MongoDB's outage cases have: rdq_mongo's default selection timeout bounds a
call on a closed port, and a call on a paused server is unknown after the socket timeout
and the driver's one retry. (A closed port, a closed storage and a server SIGKILLed
mid-use are the server contract's, ``tests/server_contract/test_server_down.py``, run for
every server backend, with this backend's bounds from its driver.)

Bounds (measured here on 2 shared cores, SecantusDB): with rdq_mongo's default
(:data:`rdq_mongo.connection.SERVER_SELECTION_TIMEOUT_MS`, 5 s) a call on a closed port
gives up after 5 s; a call on a paused server after ``socketTimeoutMS`` (the reply) +
``connectTimeoutMS`` (the retry's handshake) + ``serverSelectionTimeoutMS``: 2.4 s with
1,000 + 1,000 + 400 (3.1-3.3 s measured: pymongo's selection ends on a 0.5 s step). The
pause test uses a private server (the local rung, started for this module), never the
session's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from rdq_mongo.connection import SERVER_SELECTION_TIMEOUT_MS
from rdq_mongo.local import LocalMongoServer
from rdq_mongo.plugin import backend
from rdq_mongo.storage import MongoStorage

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask
from tests._fixtures import closed_after
from tests._ports import closed_port
from tests._processes import timed, until_works
from tests.backends.mongo.driver import SELECT_MS, SLACK_S, SOCKET_MS
from tests.backends.mongo.driver import down_storage as down_storage_on

LEASE = timedelta(minutes=5)
NOTHING = "nothing was done"
UNKNOWN = "outcome is unknown"


def test_the_default_selection_timeout_bounds_a_call_on_a_closed_port():
    storage = MongoStorage(f"mongodb://127.0.0.1:{closed_port()}/", "rdq_nowhere")
    elapsed, error = timed(lambda: storage.stats("q"))
    assert isinstance(error, BackendUnavailable) and NOTHING in str(error), error
    default_s = SERVER_SELECTION_TIMEOUT_MS / 1000
    assert default_s * 0.9 <= elapsed < default_s + SLACK_S, elapsed


# ---- a private server, killed and paused mid-use ------------------------------------------


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMongoServer]:
    request = ProvisionRequest(workdir=tmp_path_factory.mktemp("mongo-down"))
    try:
        server = backend.start_local_server(request)
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local MongoDB server binaries for the pause test: {exc}")
    yield from closed_after(server)


@pytest.fixture
def down_storage(private: LocalMongoServer) -> Iterator[MongoStorage]:
    namespace = private.create_namespace()
    storage = down_storage_on(private, namespace)
    yield storage
    storage.close()
    if private.node.paused:
        private.resume()
    if not private.node.running:
        private.restart()
    private.drop_namespace(namespace)


def test_a_paused_server_is_unknown_after_the_socket_timeout(
    private: LocalMongoServer, down_storage: MongoStorage
) -> None:
    storage = down_storage
    storage.enqueue(NewTask("t", "q", "h"))
    private.pause()
    try:
        elapsed, error = timed(lambda: storage.claim_due("q", 1, LEASE))
    finally:
        private.resume()
    assert isinstance(error, BackendUnavailable), error
    assert UNKNOWN in str(error) or NOTHING in str(error), error
    # the reply's wait, then the driver's retry: a new connection's handshake, selection
    assert elapsed < (2 * SOCKET_MS + SELECT_MS) / 1000 + SLACK_S, elapsed
    until_works(lambda: storage.stats("q"))
