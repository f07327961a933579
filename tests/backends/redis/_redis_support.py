"""Where the test server is (a clean module-level skip when it does not answer, a failure
under ``CI=true``), a warm-up that caches every script, a TCP proxy that loses replies on
demand, a 3-master cluster on loopback (the backend's own local rung), and a lifecycle
that runs every script of the backend."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import pytest
import redis
from rdq_redis.local import LocalRedisServer
from rdq_redis.plugin import backend

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_core.errors import IdConflict
from rdq_core.model import ByIds, DlqFilter, ErrorInfo, NewTask, Outcome
from rdq_core.spi import Storage
from tests import _tcp_proxy
from tests._waiting import HANG_S

DEFAULT_DSN = "redis://127.0.0.1:6379/0"
CLUSTER_ENV = "RDQ_REDIS_CLUSTER_DSN"


def server_dsn() -> str:
    return os.environ.get("RDQ_REDIS_DSN") or os.environ.get("RDQ_DSN") or DEFAULT_DSN


def _unavailable(message: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        # CI machines start the server before the run: its absence is a failure there.
        pytest.fail(message + " (CI is set: a missing server fails the run)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_server() -> str:
    """The DSN of a server that answers, or skip (the whole module when called at import)."""
    dsn = server_dsn()
    try:
        client = redis.Redis.from_url(dsn, socket_connect_timeout=HANG_S, socket_timeout=HANG_S)
        try:
            client.ping()
        finally:
            client.close()
    except redis.RedisError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _unavailable(f"no Redis server answers at RDQ_REDIS_DSN / default {dsn!r}: {reason}")
    return dsn


def with_query(dsn: str, query: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + query


def warm(storage: Storage, queue: str) -> None:
    """One full cycle, so every script is cached on the server (no NOSCRIPT later)."""
    storage.enqueue(NewTask(f"warm-{queue}", queue, "h"))
    claim = storage.claim_due(queue, 1, timedelta(minutes=1))[0]
    storage.extend_lease(claim.task_id, claim.token, timedelta(minutes=1))
    storage.complete(claim.task_id, claim.token)


# ---- a proxy that loses replies -----------------------------------------------------------


class ReplyLosingProxy(_tcp_proxy.ReplyLosingProxy):
    """The shared reply-losing proxy (:mod:`_tcp_proxy`), with the DSN of a Redis behind it."""

    def dsn(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


# ---- a cluster ------------------------------------------------------------------------------


@contextlib.contextmanager
def cluster(masters: int = 3) -> Iterator[str]:
    """The DSN of one node of a Redis Cluster: ``RDQ_REDIS_CLUSTER_DSN`` if set, else a
    private one of ``masters`` masters started by the backend's own local rung
    (``redis_cluster=N``: managed processes that die with the kit, data in a temporary
    folder), closed afterwards. Skips (fails under CI) when the binaries are missing."""
    given = os.environ.get(CLUSTER_ENV)
    if given:
        yield given
        return
    with local_cluster(masters) as server:
        yield server.dsn


@contextlib.contextmanager
def local_cluster(masters: int = 3, **options: str) -> Iterator[LocalRedisServer]:
    """A cluster of ``masters`` masters from the local rung (see :func:`cluster`)."""
    workdir = Path(tempfile.mkdtemp(prefix="rdq-redis-cluster-"))
    request = ProvisionRequest(
        workdir=workdir, options={"redis_cluster": str(masters), **options}, allow_docker=False
    )
    try:
        try:
            server = backend.start_local_server(request)
        except ProvisionUnavailable as exc:
            _unavailable(f"no local Redis Cluster: {exc}")
        assert isinstance(server, LocalRedisServer)
        try:
            yield server
        finally:
            server.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ---- every script, once ---------------------------------------------------------------------

ERR = ErrorInfo("app.Boom", "boom", "detail \x01")
SHORT = timedelta(milliseconds=50)
LONG = timedelta(minutes=5)


def _wait_past(storage: Storage, when: object) -> None:
    while storage.now() <= when:  # type: ignore[operator]
        time.sleep(0.01)


def lifecycle(storage: Storage, queue: str, prefix: str = "") -> None:
    """Drive one queue through every SPI call (so every script runs at least once, with
    every selector kind and filter index); asserts only what the suite would."""
    other = queue + ".other"
    p = prefix or queue
    ids = [f"{p}-{i}" for i in range(6)]
    for i, tid in enumerate(ids):
        assert storage.enqueue(NewTask(tid, queue, "h" if i % 2 else "g", b"\x00\xff", {"k": "v"}))
    assert not storage.enqueue(NewTask(ids[0], queue, "h"))
    with contextlib.suppress(IdConflict):
        storage.enqueue(NewTask(ids[0], other, "h"))
        raise AssertionError("IdConflict expected")
    claims = {c.task_id: c for c in storage.claim_due(queue, 10, SHORT)}
    assert set(claims) == set(ids)
    storage.extend_lease(ids[0], claims[ids[0]].token, LONG)
    storage.complete(ids[0], claims[ids[0]].token)
    storage.reschedule(ids[1], claims[ids[1]].token, timedelta(0), ERR)
    _wait_past(storage, max(c.lease_expires_at for c in claims.values()))
    again = {c.task_id: c for c in storage.claim_due(queue, 10, LONG)}  # reclaims too
    assert set(again) == set(ids[1:]) and again[ids[2]].reclaimed
    for i, tid in enumerate(ids[1:]):
        outcome = Outcome.PERMANENT_FAILURE if i % 2 else Outcome.RETRYABLE_FAILURE
        storage.dead_letter(tid, again[tid].token, ERR if i % 3 else None, outcome)
    storage.get(ids[3])
    storage.stats(queue)
    for flt in (
        None,
        DlqFilter(everything=True),
        DlqFilter(handler="h"),
        DlqFilter(error_type=ERR.type),
        DlqFilter(handler="h", error_type=ERR.type),
    ):
        page = storage.dlq_list(queue, flt, None, 1)
        if page.next_cursor is not None:
            storage.dlq_list(queue, flt, page.next_cursor, 100)
    assert storage.redrive(queue, ByIds([ids[1]])) == 1
    assert storage.redrive(queue, DlqFilter(handler="g")) >= 1
    assert storage.purge(queue, ByIds([ids[3], "never-there"])) == 1
    storage.purge(queue, DlqFilter(everything=True))
    assert storage.purge_succeeded(queue, timedelta(0)) == 1
