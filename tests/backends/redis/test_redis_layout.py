"""The key layout the conformance suite cannot see: fixed key names per bucket and index
shard, one hash tag per bucket (so one slot per queue), tokens that name their bucket,
and a namespace dropped with SCAN leaving no key of its own and every other key."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import redis
from rdq_redis import admin, keys
from rdq_redis.storage import RedisStorage
from redis.crc import key_slot

from rdq_core.errors import InvalidArgument
from rdq_core.model import DlqFilter, ErrorInfo, NewTask
from tests.backends.redis._redis_support import lifecycle


def _keys_of(client: redis.Redis, namespace: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=keys.scan_pattern(namespace)))


def test_every_key_is_a_fixed_name_of_a_bucket_or_shard(dsn, namespace, storage):
    """No key name carries a task id, handler or error text: a bucket holds ten fixed
    keys for all its queues, an id-index shard one; so the keys of every script are known
    before the call (declared in KEYS), never built from data."""
    for i in range(40):
        storage.enqueue(NewTask(f"id:{{weird}}*{i}", "q", "h"))
    lifecycle(storage, "q2")
    client = redis.Redis.from_url(dsn)
    found = _keys_of(client, namespace)
    ns = re.escape(namespace)
    pattern = re.compile(
        rf"rdq:\{{{ns}:(meta\}}|[0-9a-f]{{3}}\}}:(task|pay|hdr|hist|ready|lease|done|dlq|seq|rv)"
        rf"|i[0-9a-f]{{3}}\}}:ids)"
    )
    strays = [k for k in found if not pattern.fullmatch(k)]
    assert not strays, f"keys outside the layout: {strays}"
    buckets = {k.split(":")[2].rstrip("}") for k in found if re.search(r":[0-9a-f]{3}\}:", k)}
    assert buckets == {keys.bucket_of("q"), keys.bucket_of("q2")}
    assert not [k for k in found if "weird" in k or "id:" in k.split("}", 1)[1]]


def test_all_keys_of_a_queue_share_one_slot_and_each_shard_has_its_own():
    layout = keys.Layout("ns1")
    bucket = layout.of_queue("emails")
    assert len({key_slot(k.encode()) for k in bucket.all()}) == 1
    assert all(k.startswith(f"rdq:{{ns1:{bucket.bucket}}}:") for k in bucket.all())
    shard = layout.shard("task-1")
    assert shard.ids == f"rdq:{{ns1:i{keys.shard_of('task-1')}}}:ids"
    assert key_slot(shard.ids.encode()) == key_slot(f"ns1:i{keys.shard_of('task-1')}".encode())
    # buckets (and so queues) spread over the slot space
    slots = {key_slot(layout.bucket(f"{b:03x}").task.encode()) for b in range(keys.BUCKETS)}
    assert len(slots) > keys.BUCKETS * 0.85


def test_claim_tokens_name_the_bucket_of_their_queue(storage):
    for queue in ("a", "b", "c.d", "x-y_z"):
        for _ in range(3):
            storage.enqueue(NewTask(f"{queue}-{_}", queue, "h"))
        claims = storage.claim_due(queue, 10, timedelta(minutes=1))
        assert len(claims) == 3
        assert {c.token[:3] for c in claims} == {keys.bucket_of(queue)}
        assert len({c.token for c in claims}) == 3


def test_drop_namespace_deletes_its_keys_and_nothing_else(dsn, server):
    kept, dropped = server.create_namespace(), server.create_namespace()
    client = redis.Redis.from_url(dsn)
    stranger = f"rdq-test-stranger:{dropped}"
    client.set(stranger, b"x")
    try:
        for ns in (kept, dropped):
            s = RedisStorage(dsn, ns)
            lifecycle(s, "q")
            for i in range(1500):  # more keys than one SCAN batch (index shards)
                s.enqueue(NewTask(f"bulk-{i}", "bulk", "h"))
            s.close()
        before = _keys_of(client, kept)
        assert len(_keys_of(client, dropped)) > admin.SCAN_COUNT
        server.drop_namespace(dropped)
        assert _keys_of(client, dropped) == []
        assert _keys_of(client, kept) == before
        assert client.get(stranger) == b"x"
        server.drop_namespace(dropped)  # idempotent
    finally:
        client.delete(stranger)
        server.drop_namespace(kept)


@pytest.mark.parametrize("bad", ["", "a:b", "a{b}", "a*", "x" * 65, "sp ace", None])
def test_namespace_names_that_could_escape_their_prefix_are_refused(bad):
    with pytest.raises(InvalidArgument):
        RedisStorage("redis://127.0.0.1:1/0", bad)


def _sharing_a_bucket() -> tuple[str, str]:
    """Two queues in one bucket, one name a prefix of the other (the hardest case for
    ranges keyed by queue name)."""
    for i in range(100_000):
        base, longer = f"s{i}", f"s{i}.x"
        if keys.bucket_of(base) == keys.bucket_of(longer):
            return base, longer
        for j in range(40):
            longer = f"s{i}{j}"
            if keys.bucket_of(base) == keys.bucket_of(longer):
                return base, longer
    raise AssertionError("no two queues found in one bucket")


def test_queues_sharing_a_bucket_stay_isolated(storage):
    """Several queues may share a bucket (its keys): every range is keyed by the queue
    name and a NUL, so claim, stats, the DLQ, redrive, purge and purge_succeeded of one
    never see the other's tasks, even when one name is a prefix of the other."""
    a, b = _sharing_a_bucket()
    assert keys.bucket_of(a) == keys.bucket_of(b) and b.startswith(a)
    for q in (a, b):
        for i in range(3):
            storage.enqueue(NewTask(f"{q}-{i}", q, "h"))
    got = {q: [c for c in storage.claim_due(q, 10, timedelta(minutes=1))] for q in (a, b)}
    assert {c.task_id for c in got[a]} == {f"{a}-{i}" for i in range(3)}
    assert {c.task_id for c in got[b]} == {f"{b}-{i}" for i in range(3)}
    for q in (a, b):
        first, second, third = got[q]
        storage.complete(first.task_id, first.token)
        storage.dead_letter(second.task_id, second.token, None)
        storage.dead_letter(third.task_id, third.token, None)
    for q in (a, b):
        st = storage.stats(q)
        assert (st.pending, st.in_flight, st.succeeded, st.dead) == (0, 0, 1, 2), (q, st)
        assert {t.queue for t in storage.dlq_list(q).tasks} == {q}
    assert storage.redrive(a, DlqFilter(everything=True)) == 2
    assert storage.stats(b).dead == 2 and storage.stats(a).pending == 2
    assert storage.purge(b, DlqFilter(handler="h")) == 2
    assert storage.purge_succeeded(a, timedelta(0)) == 1
    assert storage.stats(b).succeeded == 1 and storage.stats(a).succeeded == 0


def test_dlq_filters_on_error_types_that_prefix_each_other(storage):
    """The DLQ index ranges end at ``type NUL``: error types that are byte-prefixes of
    one another, or hold control or non-ASCII characters, never leak into each other."""
    types = ["a", "a\x01", "a\x01b", "ab", "a b", "é", "é\x7f", ""]
    for i, etype in enumerate(types):
        storage.enqueue(NewTask(f"t{i}", "q", "h"))
        claim = storage.claim_due("q", 1, timedelta(minutes=1))[0]
        storage.dead_letter(claim.task_id, claim.token, ErrorInfo(etype, "m"))
    for i, etype in enumerate(types):
        for flt in (DlqFilter(error_type=etype), DlqFilter(handler="h", error_type=etype)):
            listed = [t.id for t in storage.dlq_list("q", flt).tasks]
            assert listed == [f"t{i}"], (etype, flt, listed)
    assert len(storage.dlq_list("q", DlqFilter(handler="h")).tasks) == len(types)
