"""A server that is down, or goes down mid-use: every call is ``BackendUnavailable``
saying whether anything was done (never a pymongo exception), within the time the
client's timeouts allow, and an open storage works again once the server is back.

Bounds (measured here on 2 shared cores, SecantusDB): with the URI's
``serverSelectionTimeoutMS=N`` a call on a closed port gives up after N ms (+ < 0.5 s);
with rdq_mongo's default (:data:`rdq_mongo.connection.SERVER_SELECTION_TIMEOUT_MS`,
5 s) after 5 s; a call on a server SIGKILLed mid-use after at most N ms more; a call on
a paused server after ``socketTimeoutMS`` (the reply) + ``connectTimeoutMS`` (the retry's
handshake) + N ms: 3.4 s with 1,000 + 1,000 + 400. The kill tests use a private server
(the local rung, started for this module), never the session's.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pymongo.errors as px
import pytest
from rdq_mongo.connection import SERVER_SELECTION_TIMEOUT_MS
from rdq_mongo.local import LocalMongoServer
from rdq_mongo.plugin import backend
from rdq_mongo.server import MongoServer
from rdq_mongo.storage import MongoStorage

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_core.errors import BackendUnavailable
from rdq_core.model import NewTask, Status

LEASE = timedelta(minutes=5)
SELECT_MS = 400
SOCKET_MS = 1000
#: What a call may take beyond its configured timeouts (2 busy cores).
SLACK_S = 1.5
NOTHING = "nothing was done"
UNKNOWN = "outcome is unknown"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    began = time.monotonic()
    try:
        call()
    except BaseException as exc:
        return time.monotonic() - began, exc
    return time.monotonic() - began, None


def _calls(st: MongoStorage) -> dict[str, Callable[[], object]]:
    return {
        "enqueue": lambda: st.enqueue(NewTask("t", "q", "h")),
        "claim_due": lambda: st.claim_due("q", 1, LEASE),
        "complete": lambda: st.complete("t", "0" * 32),
        "extend_lease": lambda: st.extend_lease("t", "0" * 32, LEASE),
        "get": lambda: st.get("t"),
        "stats": lambda: st.stats("q"),
        "dlq_list": lambda: st.dlq_list("q"),
        "now": st.now,
    }


def test_a_closed_port_is_unavailable_nothing_done_within_the_selection_timeout():
    uri = f"mongodb://127.0.0.1:{_closed_port()}/?serverSelectionTimeoutMS={SELECT_MS}"
    storage = MongoStorage(uri, "rdq_nowhere")
    for name, call in _calls(storage).items():
        elapsed, error = _timed(call)
        assert isinstance(error, BackendUnavailable), (name, error)
        assert not isinstance(error, px.PyMongoError)
        assert f"{name}: no server of mongo" in str(error) and NOTHING in str(error), error
        assert SELECT_MS / 1000 * 0.9 <= elapsed < SELECT_MS / 1000 + SLACK_S, (name, elapsed)
    caps = storage.capabilities()  # never raises: promises nothing while unknown
    assert caps.durable is False and caps.durability.startswith("unknown")
    elapsed, error = _timed(lambda: MongoServer(uri))
    assert isinstance(error, BackendUnavailable) and "does not answer" in str(error), error
    assert elapsed < SELECT_MS / 1000 + SLACK_S


def test_the_default_selection_timeout_bounds_a_call_on_a_closed_port():
    storage = MongoStorage(f"mongodb://127.0.0.1:{_closed_port()}/", "rdq_nowhere")
    elapsed, error = _timed(lambda: storage.stats("q"))
    assert isinstance(error, BackendUnavailable) and NOTHING in str(error), error
    default_s = SERVER_SELECTION_TIMEOUT_MS / 1000
    assert default_s * 0.9 <= elapsed < default_s + SLACK_S, elapsed


def test_passwords_are_masked_in_unavailable_messages():
    uri = f"mongodb://u:s3cret@127.0.0.1:{_closed_port()}/?serverSelectionTimeoutMS=200"
    with pytest.raises(BackendUnavailable) as info:
        MongoStorage(uri, "rdq_nowhere").stats("q")
    assert "s3cret" not in str(info.value) and "u:***@" in str(info.value)
    with pytest.raises(BackendUnavailable) as info:
        MongoServer(uri)
    assert "s3cret" not in str(info.value)


def test_a_closed_storage_is_unavailable(connect):
    storage = connect()
    storage.stats("q")
    storage.close()
    storage.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        storage.stats("q")


# ---- a private server, killed and paused mid-use ------------------------------------------


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMongoServer]:
    request = ProvisionRequest(workdir=tmp_path_factory.mktemp("mongo-down"))
    try:
        server = backend.start_local_server(request)
    except ProvisionUnavailable as exc:
        pytest.skip(f"no local MongoDB server binaries for the kill tests: {exc}")
    yield server
    server.close()


@pytest.fixture
def down_storage(private: LocalMongoServer) -> Iterator[MongoStorage]:
    namespace = private.create_namespace()
    uri = f"{private.dsn}&serverSelectionTimeoutMS={SELECT_MS}&socketTimeoutMS={SOCKET_MS}"
    uri += f"&connectTimeoutMS={SOCKET_MS}"
    storage = MongoStorage(uri, namespace)
    yield storage
    storage.close()
    if private.node.paused:
        private.resume()
    if not private.node.running:
        private.restart()
    private.drop_namespace(namespace)


def _until_works(call: Callable[[], object], within: float) -> object:
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_server_killed_mid_use_is_unavailable_promptly_and_the_storage_recovers(
    private: LocalMongoServer, down_storage: MongoStorage
) -> None:
    storage = down_storage
    assert storage.enqueue(NewTask("before", "q", "h", b"kept"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    other = MongoStorage(private.dsn, storage.namespace)
    assert other.get("before").payload == b"kept"
    elapsed, error = _timed(private.kill)  # closing the kit's own client must not stall
    assert error is None and elapsed < 1.0, (elapsed, error)
    elapsed, error = _timed(other.close)  # nor closing a storage whose server is gone
    assert error is None and elapsed < 1.0, (elapsed, error)
    bound = SELECT_MS / 1000 + SLACK_S
    for i in range(2):  # the first calls find their pooled connection dead, later ones none
        for name, call in list(_calls(storage).items())[i * 5 :]:
            elapsed, error = _timed(call)
            assert isinstance(error, BackendUnavailable), (name, error)
            assert not isinstance(error, px.PyMongoError)
            text = str(error)
            assert text.startswith(f"{name}: ") and (NOTHING in text or UNKNOWN in text), text
            assert elapsed < bound, f"{name} took {elapsed:.2f} s to fail ({text})"
    private.restart()
    task = _until_works(lambda: storage.get("before"), 10)
    assert task.status is Status.IN_FLIGHT and task.payload == b"kept"  # type: ignore[attr-defined]
    storage.complete("before", claim.token)  # the same storage, the same claim, no reopening
    assert storage.get("before").status is Status.SUCCEEDED


def test_a_paused_server_is_unknown_after_the_socket_timeout(
    private: LocalMongoServer, down_storage: MongoStorage
) -> None:
    storage = down_storage
    storage.enqueue(NewTask("t", "q", "h"))
    private.pause()
    try:
        elapsed, error = _timed(lambda: storage.claim_due("q", 1, LEASE))
    finally:
        private.resume()
    assert isinstance(error, BackendUnavailable), error
    assert UNKNOWN in str(error) or NOTHING in str(error), error
    # the reply's wait, then the driver's retry: a new connection's handshake, selection
    assert elapsed < (2 * SOCKET_MS + SELECT_MS) / 1000 + SLACK_S, elapsed
    _until_works(lambda: storage.stats("q"), 10)
