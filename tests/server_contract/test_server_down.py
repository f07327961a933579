"""A server that is down, or goes down mid-use, or loses a reply, on every server backend:
each call is ``BackendUnavailable`` saying whether anything was done (never the driver's
own exception), within the time the client's timeouts allow; an open storage works again
once the server is back, without being reopened; a password never reaches a message.

The kill tests use a private server of the backend's local rung (``local``, started for
this module), never the shared one. A backend's own outage cases (PostgreSQL's
statements cut by a kill and its pool, MongoDB's paused server and selection timeout,
Redis's late replies) are in its folder.
"""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from rdq_compliance.chaos.events import Journal
from rdq_compliance.chaos.journal_observer import JournalObserver
from rdq_compliance.provision.backend import ProvisionRequest, Server
from rdq_core.errors import BackendUnavailable, StaleClaim
from rdq_core.model import NewTask, Outcome, Status
from rdq_core.worker import Worker
from tests._ports import closed_port
from tests._processes import timed, until_works
from tests._tcp_proxy import ReplyLosingProxy
from tests._waiting import HANG_S
from tests.server_contract.conftest import Opened
from tests.server_contract.driver import Outage, ReplyLoss, ServerDriver, each_call
from tests.server_contract.drivers import each

LEASE = timedelta(minutes=5)
PASSWORD = "s3cret"


def outage(driver: ServerDriver) -> Outage:
    assert driver.outage is not None
    return driver.outage


def reply_loss(driver: ServerDriver) -> ReplyLoss:
    assert driver.reply_loss is not None
    return driver.reply_loss


def _says(pattern: str, call: str, error: BaseException | None) -> bool:
    return re.search(pattern.replace("{call}", call), str(error), re.DOTALL) is not None


def _clean(facts: Outage, error: BaseException | None) -> None:
    """A storage's error: ``BackendUnavailable``, not the driver's, and (where the driver
    promises it) with no driver exception chained for a traceback."""
    assert isinstance(error, BackendUnavailable), error
    assert not isinstance(error, facts.native_errors), type(error).__mro__
    if facts.unchained:
        assert error.__cause__ is None and (
            error.__context__ is None or error.__suppress_context__
        ), f"{type(error).__name__} carries a chained driver exception: {error.__context__!r}"


# ---- a server that is not there --------------------------------------------------------


@each("outage")
def test_a_closed_port_is_unavailable_nothing_done_and_no_password_shown(
    driver: ServerDriver, tmp_path: Path
) -> None:
    facts = outage(driver)
    port = closed_port()
    storage = facts.closed_port_storage(port)
    low, high = facts.closed_port_within
    try:
        for name, call in each_call(storage):
            elapsed, error = timed(call)
            _clean(facts, error)
            assert _says(facts.closed_port_text, name, error), (name, str(error))
            assert low <= elapsed < high, (name, elapsed)
            assert PASSWORD not in str(error) and facts.masked in str(error), str(error)
        caps = storage.capabilities()  # never raises: promises nothing while unknown
        assert caps.durable is False and caps.durability.startswith("unknown"), caps
    finally:
        storage.close()
    dsn = facts.closed_port_dsn(port)
    elapsed, error = timed(
        lambda: driver.backend.server_from_dsn(dsn, ProvisionRequest(workdir=tmp_path, dsn=dsn))
    )
    _clean(facts, error)
    expected = facts.server_down_text.replace("{port}", str(port))
    assert re.search(expected, str(error), re.DOTALL), str(error)
    assert PASSWORD not in str(error) and facts.masked in str(error), str(error)
    assert elapsed < facts.server_down_within, elapsed


@each("outage")
def test_a_closed_storage_is_unavailable(driver: ServerDriver, on_shared: Opened) -> None:
    storage = on_shared.open()
    storage.stats("q")
    storage.close()
    storage.close()  # idempotent
    with pytest.raises(BackendUnavailable, match="closed"):
        storage.stats("q")
    with pytest.raises(BackendUnavailable, match="closed"):
        storage.now()


# ---- a server killed mid-use -------------------------------------------------------------


@each("outage")
def test_an_open_storage_fails_fast_while_the_server_is_down_and_recovers(
    driver: ServerDriver, local: Server, on_local: Opened
) -> None:
    facts = outage(driver)
    storage = facts.open_down(local, on_local.namespace)
    other = driver.open(local.dsn, on_local.namespace)  # a second process's view, say
    doomed = driver.open(local.dsn, on_local.namespace)  # closed while the server is down
    on_local.storages += [storage, other, doomed]
    assert storage.enqueue(NewTask("before", "q", "h", payload=b"kept"))
    assert storage.enqueue(NewTask("held", "claimed", "h"))
    claim = storage.claim_due("claimed", 1, LEASE)[0]
    assert other.get("before").payload == b"kept"  # every storage is connected
    assert doomed.get("before").payload == b"kept"
    if facts.pooled is not None:
        assert facts.pooled(storage), "the storage holds no pooled connection"

    # closing the kit's own connections must not stall, nor closing a storage whose server
    # is gone: no longer than a call takes to fail (a driver's close would wait seconds)
    elapsed, error = timed(local.kill)
    assert error is None and elapsed < facts.fail_fast_s, (elapsed, error)
    elapsed, error = timed(doomed.close)
    assert error is None and elapsed < facts.fail_fast_s, (elapsed, error)
    for name, call in each_call(storage):
        for _ in range(3):  # the first calls find their pooled connection dead, later ones none
            elapsed, error = timed(call)
            _clean(facts, error)
            assert _says(facts.down_text, name, error), (name, str(error))
            assert elapsed < facts.fail_fast_s, f"{name} took {elapsed:.2f} s to fail ({error})"
    elapsed, error = timed(lambda: other.get("before"))  # the backend's default timeouts
    _clean(facts, error)
    assert _says(facts.down_text, "get", error), str(error)  # what happened, not a timeout
    assert elapsed < facts.default_fails_within, (elapsed, error)

    local.restart()
    began = time.monotonic()
    task = until_works(lambda: storage.get("before"), facts.recover_s or HANG_S)
    if facts.recover_s is not None:
        assert time.monotonic() - began < facts.recover_s, "the storage did not recover promptly"
    assert task.payload == b"kept"
    assert until_works(lambda: other.get("before")).payload == b"kept"
    held = storage.get("held")
    assert held.status is Status.IN_FLIGHT
    storage.complete("held", claim.token)  # the same storage, the same claim, no reopening
    assert storage.get("held").status is Status.SUCCEEDED
    assert storage.enqueue(NewTask("after", "q", "h"))
    assert {c.task_id for c in storage.claim_due("q", 10, LEASE)} == {"before", "after"}
    if facts.settles is not None:
        facts.settles(storage)


# ---- a reply lost after the server acted -------------------------------------------------


def _modes(driver: ServerDriver):
    return [(mode, mode) for mode in reply_loss(driver).modes]


@pytest.fixture
def proxy(shared: Server):
    parts = urlsplit(shared.dsn)
    p = ReplyLosingProxy(parts.hostname or "127.0.0.1", parts.port or 0)
    yield p
    p.close()


@each("reply_loss", cases=_modes)
def test_a_complete_whose_replies_are_lost_is_unknown_then_fenced(
    driver: ServerDriver, case: str, shared: Server, on_shared: Opened, proxy: ReplyLosingProxy
) -> None:
    facts = reply_loss(driver)
    storage = facts.open(proxy, shared, on_shared.namespace, case)
    on_shared.storages.append(storage)
    storage.enqueue(NewTask("t", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    proxy.drop_next_reply(when=facts.complete_request, count=facts.complete_tries)
    with pytest.raises(BackendUnavailable) as info:
        storage.complete("t", claim.token)
    assert re.search(facts.unknown_text, str(info.value)), str(info.value)
    assert proxy.dropped == facts.complete_tries
    task = storage.get("t")  # the server did act, once
    assert task.status is Status.SUCCEEDED
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCESS]
    with pytest.raises(StaleClaim):  # the caller's retry is fenced and changes nothing
        storage.complete("t", claim.token)
    assert storage.get("t") == task


@each("reply_loss", cases=_modes)
def test_a_lost_reply_is_journaled_as_info_and_the_worker_settles_it(
    driver: ServerDriver,
    case: str,
    shared: Server,
    on_shared: Opened,
    proxy: ReplyLosingProxy,
    tmp_path: Path,
) -> None:
    """The worker's report of a complete whose replies were all lost: the journal says
    ``info`` (unknown), the worker's retry is refused as stale and settled by reading the
    history, which shows the first try took effect, once."""
    facts = reply_loss(driver)
    storage = facts.open(proxy, shared, on_shared.namespace, case)
    on_shared.storages.append(storage)
    storage.enqueue(NewTask("job", "q", "h"))
    path = tmp_path / "w0.jsonl"
    journal = Journal(path, "w0")

    def handler(ctx: object) -> None:  # the next call is the complete
        proxy.drop_next_reply(when=facts.complete_request, count=facts.complete_tries)

    worker = Worker(
        storage,
        "q",
        {"h": handler},
        observer=JournalObserver(journal),
        lease=timedelta(seconds=10),
        poll_interval=timedelta(milliseconds=20),
    )
    assert worker.run_once() == 1
    journal.close()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    reports = [(e["type"], e.get("error")) for e in events if e["op"] == "complete"]
    assert reports[:2] == [("invoke", None), ("info", "unavailable")], reports
    assert proxy.dropped == facts.complete_tries
    task = storage.get("job")
    assert task.status is Status.SUCCEEDED
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCESS]
