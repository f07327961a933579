"""What only Redis's error cases have: a reply that comes too late is
``BackendUnavailable`` with the outcome unknown, and bad DSNs are refused clearly. (A
server that is down, a closed storage, a reply lost after the server acted — journaled as
``info`` — and connections cut while idle are the server contract's,
``tests/server_contract/``, run for every server backend; passwords never shown
included.)"""

from __future__ import annotations

import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from rdq_redis.storage import RedisStorage

from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_core.model import NewTask, Status
from tests._waiting import HANG_S
from tests.backends.redis._redis_support import ReplyLosingProxy, warm


@pytest.fixture
def proxy(dsn):
    parts = urlsplit(dsn)
    p = ReplyLosingProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    yield p
    p.close()


def test_a_reply_too_late_is_unknown(connect, proxy):
    storage = connect(proxy.dsn(), socket_timeout=0.3)
    warm(storage, "q")
    storage.enqueue(NewTask("t", "q", "h"))
    proxy.hold_replies(HANG_S)  # the reply passes only after the caller gave up (below)
    with pytest.raises(BackendUnavailable, match=r"no reply.*in time.*outcome is unknown"):
        storage.claim_due("q", 1, timedelta(minutes=1))
    proxy.hold_replies(0)
    # the claim happened (once the proxy has passed the request on: the wait ends then)
    deadline = time.monotonic() + HANG_S
    while storage.get("t").status is not Status.IN_FLIGHT:
        assert time.monotonic() < deadline, "the claim whose reply came too late never happened"
        time.sleep(0.01)


@pytest.mark.parametrize(
    "dsn", ["localhost:6379", "http://localhost/", "redis://h/0?rdq_cluster=maybe", 7]
)
def test_bad_dsns_are_refused_clearly(dsn):
    with pytest.raises(InvalidArgument):
        RedisStorage(dsn, "ns")  # type: ignore[arg-type]
