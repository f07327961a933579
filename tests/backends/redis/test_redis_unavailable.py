"""Errors: a server that is down, a reply lost after the server acted, a reply that comes
too late, a connection cut while idle; each is ``BackendUnavailable`` saying whether
anything was done (never a redis-py traceback), and the chaos journal records a lost
reply as ``info`` (unknown)."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import redis
from rdq_redis import keys
from rdq_redis.plugin import RedisServer
from rdq_redis.storage import RedisStorage

from rdq_compliance.chaos.events import Journal
from rdq_compliance.chaos.journal_observer import JournalObserver
from rdq_core.errors import BackendUnavailable, InvalidArgument, StaleClaim
from rdq_core.model import NewTask, Outcome, Status
from rdq_core.worker import Worker
from tests.backends.redis._redis_support import ReplyLosingProxy, free_port


@pytest.fixture
def proxy(dsn):
    parts = urlsplit(dsn)
    p = ReplyLosingProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    yield p
    p.close()


def _warm(storage: RedisStorage, queue: str) -> None:
    """One full cycle, so every script is cached on the server (no NOSCRIPT later)."""
    storage.enqueue(NewTask(f"warm-{queue}", queue, "h"))
    claim = storage.claim_due(queue, 1, timedelta(minutes=1))[0]
    storage.extend_lease(claim.task_id, claim.token, timedelta(minutes=1))
    storage.complete(claim.task_id, claim.token)


def test_a_server_that_is_down_is_backend_unavailable_and_nothing_was_done(namespace):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    storage = RedisStorage(dead, namespace, connect_timeout=1)
    for call in (
        lambda: storage.enqueue(NewTask("t", "q", "h")),
        lambda: storage.claim_due("q", 1, timedelta(seconds=1)),
        lambda: storage.complete("t", "0" * 32),
        lambda: storage.get("t"),
        lambda: storage.stats("q"),
        storage.now,
    ):
        with pytest.raises(BackendUnavailable, match=r"cannot connect.*nothing was done") as info:
            call()
        assert not isinstance(info.value, redis.RedisError)
    with pytest.raises(BackendUnavailable, match="does not answer"):
        RedisServer(dead)


def test_a_reply_lost_after_the_server_acted_is_unknown_and_fenced(connect, proxy):
    storage = connect(proxy.dsn())
    _warm(storage, "q")
    storage.enqueue(NewTask("t", "q", "h"))
    claim = storage.claim_due("q", 1, timedelta(minutes=1))[0]
    proxy.drop_next_reply()
    with pytest.raises(BackendUnavailable, match=r"mid-call.*outcome is unknown"):
        storage.complete("t", claim.token)
    assert proxy.dropped == 1
    task = storage.get("t")  # the server did act
    assert task.status is Status.SUCCEEDED
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCESS]
    with pytest.raises(StaleClaim):  # a retry with the same token is fenced, changes nothing
        storage.complete("t", claim.token)
    assert storage.get("t") == task


def test_a_reply_too_late_is_unknown(connect, proxy):
    storage = connect(proxy.dsn(), socket_timeout=0.3)
    _warm(storage, "q")
    storage.enqueue(NewTask("t", "q", "h"))
    proxy.hold_replies(1.0)
    with pytest.raises(BackendUnavailable, match=r"no reply.*in time.*outcome is unknown"):
        storage.claim_due("q", 1, timedelta(minutes=1))
    proxy.hold_replies(0)
    assert storage.get("t").status is Status.IN_FLIGHT  # the claim happened


def test_connections_cut_while_idle_are_replaced_before_the_next_call(dsn, server, namespace):
    storage = RedisStorage(dsn, namespace)
    try:
        _warm(storage, "q")
        admin = redis.Redis.from_url(dsn)
        named = [c for c in admin.client_list() if c.get("name") == keys.client_name(namespace)]
        assert named, "the storage's connections carry the namespace's client name"
        assert server.cut_connections(namespace) >= 1
        assert not [c for c in admin.client_list() if c.get("name") == keys.client_name(namespace)]
        storage.enqueue(NewTask("after-cut", "q", "h"))  # no error: reconnected first
        assert storage.get("after-cut").status is Status.PENDING
        assert server.cut_connections("ns-with-no-clients") == 0
    finally:
        storage.close()


def test_a_lost_reply_is_journaled_as_info_and_the_worker_settles_it(connect, proxy, tmp_path):
    """The worker's report of a complete whose reply was lost: the journal says ``info``
    (unknown), the retry is refused as stale, and the read-back shows it took effect."""
    storage = connect(proxy.dsn())
    _warm(storage, "q")
    storage.enqueue(NewTask("job", "q", "h"))
    path = tmp_path / "w0.jsonl"
    journal = Journal(path, "w0")

    def handler(ctx: object) -> None:
        proxy.drop_next_reply()  # the next call is the complete

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
    task = storage.get("job")
    assert task.status is Status.SUCCEEDED
    assert [a.outcome for a in task.attempts] == [Outcome.SUCCESS]


def test_a_closed_storage_is_unavailable(storage):
    storage.stats("q")
    storage.close()
    storage.close()
    with pytest.raises(BackendUnavailable, match="closed"):
        storage.stats("q")


@pytest.mark.parametrize(
    "dsn", ["localhost:6379", "http://localhost/", "redis://h/0?rdq_cluster=maybe", 7]
)
def test_bad_dsns_are_refused_clearly(dsn):
    with pytest.raises(InvalidArgument):
        RedisStorage(dsn, "ns")  # type: ignore[arg-type]


def test_passwords_are_masked_in_messages(namespace):
    storage = RedisStorage(f"redis://u:s3cret@127.0.0.1:{free_port()}/0", namespace)
    with pytest.raises(BackendUnavailable) as info:
        storage.stats("q")
    assert "s3cret" not in str(info.value) and "***" in str(info.value)
