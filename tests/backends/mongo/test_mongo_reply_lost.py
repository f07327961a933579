"""A reply lost after the server acted (a TCP proxy forwards the request and drops the
reply, :mod:`_tcp_proxy`): a ``complete`` retried by the driver succeeds exactly once, an
enqueue retried is idempotent, a claim either returns the claim or reports unavailable
— never two live claims, never a claim held by a token nobody has. (A complete whose
replies are all lost, unknown then fenced, and the journal's ``info`` for it are the
server contract's, ``tests/server_contract/test_server_down.py``, in both modes below.)

Each case runs twice: on the server as it is (SecantusDB, like MongoDB, deduplicates a
retried write by its session and transaction number) and through
:class:`_mongo_support.ForgetRetries`, which makes the retry reach the server as a new
write — a server that does not deduplicate; there rdq_mongo's own nonces decide.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from rdq_mongo import schema
from rdq_mongo.storage import FIND_AND_MODIFY, UPDATE_THEN_READ

from rdq_core.errors import BackendUnavailable, StaleClaim
from rdq_core.model import NewTask, Outcome, Status
from tests.backends.mongo._mongo_support import command, proxy_for
from tests.backends.mongo.driver import via_proxy

LEASE = timedelta(minutes=1)


@pytest.fixture
def proxy(mongo_server):
    p = proxy_for(mongo_server.dsn)
    yield p
    p.close()


@pytest.fixture(params=["deduplicating", "forgetful"])
def via(request, proxy, mongo_server, namespace):
    """Open storages through the proxy; ``forgetful``: retries reach the server as new
    writes (the driver's :func:`~tests.backends.mongo.driver.via_proxy`)."""
    opened = []

    def open_(**kwargs):
        storage = via_proxy(proxy, mongo_server, namespace, request.param, **kwargs)
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


def _retried(proxy) -> None:
    if proxy.rewrite is not None:
        assert proxy.rewrite.rewritten >= 1, "the retry was not made to look new"


def test_a_complete_whose_first_reply_is_lost_succeeds_exactly_once(via, proxy):
    storage = via()
    storage.enqueue(NewTask("t", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    proxy.drop_next_reply(when=command("update"))
    storage.complete("t", claim.token)  # the driver's retry found it done
    assert proxy.dropped == 1
    _retried(proxy)
    task = storage.get("t")
    assert task.status is Status.SUCCEEDED
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCESS]
    with pytest.raises(StaleClaim):
        storage.complete("t", claim.token)


def test_an_enqueue_whose_reply_is_lost_is_idempotent(via, proxy, mongo_server, namespace):
    storage = via()
    proxy.drop_next_reply(when=command("insert"))
    assert storage.enqueue(NewTask("t", "q", "h", b"p")) is True  # its own insert, found
    assert proxy.dropped == 1
    _retried(proxy)
    assert storage.enqueue(NewTask("t", "q", "h", b"p")) is False  # a real duplicate
    assert storage.stats("q").pending == 1
    client = mongo_server.admin.connection()
    assert client[namespace][schema.TASKS].count_documents({"_id": "t"}) == 1


@pytest.mark.parametrize("write", [UPDATE_THEN_READ, FIND_AND_MODIFY])
def test_a_claim_whose_reply_is_lost_is_returned_or_unavailable_never_lost(via, proxy, write):
    storage = via(claim_write=write)
    other = via(claim_write=write)
    storage.enqueue(NewTask("t", "q", "h"))
    name = "update" if write == UPDATE_THEN_READ else "findAndModify"
    proxy.drop_next_reply(when=command(name))
    try:
        claims = storage.claim_due("q", 1, LEASE)
    except BackendUnavailable as exc:
        assert "outcome is unknown" in str(exc)
        claims = None
    assert proxy.dropped == 1
    _retried(proxy)
    task = storage.get("t")
    assert task.status is Status.IN_FLIGHT and task.attempts == ()
    if claims is not None:
        assert [c.task_id for c in claims] == ["t"], (
            "the claim was applied but not returned: its task is held by a token nobody has"
        )
        storage.extend_lease("t", claims[0].token, LEASE)  # the returned token is the live one
    assert other.claim_due("q", 1, LEASE) == []  # never a second live claim
    if claims is not None:
        storage.complete("t", claims[0].token)
        assert storage.get("t").status is Status.SUCCEEDED
