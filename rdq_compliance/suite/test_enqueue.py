"""Enqueue: idempotent by id within a queue, one id never in two queues, timestamps from
the storage clock, payload and headers stored losslessly (bug classes
``enqueue-not-idempotent``, ``payload-altered``)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from rdq_compliance.rules import message
from rdq_compliance.suite import dlq_support as s
from rdq_compliance.suite import helpers
from rdq_core import validation
from rdq_core.errors import IdConflict, InvalidArgument, NotFound
from rdq_core.model import NewTask, QueueStats

pytestmark = pytest.mark.rdq_conformance

Q = "q"
OTHER = "other-q"

#: A second enqueue of the same id that differs in everything a producer can set.
DIFFERENT = {
    "handler": "other-handler",
    "payload": b"a different payload",
    "headers": {"changed": "yes"},
}
SECOND_CALLS = {
    "identical": {},
    "different-fields-due-now": {**DIFFERENT, "delay": timedelta(0)},
    "different-fields-backdated": {**DIFFERENT, "delay": -timedelta(hours=2)},
    "different-fields-far-future": {**DIFFERENT, "delay": timedelta(days=30)},
}
ORIGINAL = {"handler": "h", "payload": b"original", "headers": {"k": "v"}}


def _second(tid: str, queue: str, variant: str) -> NewTask:
    fields = {**ORIGINAL, "delay": timedelta(0), **SECOND_CALLS[variant]}
    return NewTask(tid, queue, **fields)  # type: ignore[arg-type]


def test_enqueue_returns_true_then_false_for_the_same_id(rdq_storage):
    """Rule enqueue-idempotent: the first enqueue of an id returns True, every later
    enqueue of that id in the same queue returns False."""
    task = helpers.new_task(Q, id="once")
    first = rdq_storage.enqueue(task)
    assert first is True, message(
        "enqueue-idempotent", f"first enqueue of 'once' returned {first!r}"
    )
    for n in (2, 3):
        again = rdq_storage.enqueue(task)
        assert again is False, message(
            "enqueue-idempotent", f"enqueue #{n} of 'once' returned {again!r}, expected False"
        )


@pytest.mark.parametrize("variant", list(SECOND_CALLS))
@pytest.mark.parametrize("state", s.STATES)
def test_re_enqueue_changes_nothing_whatever_the_state(rdq_storage, state, variant):
    """Rule enqueue-idempotent: re-enqueueing an existing id in its queue returns False
    and leaves the task exactly as it was (every field, history included), whatever
    its state and whatever the second call carries."""
    tid = f"re-{state.lower()}"
    claim = s.put_in_state(rdq_storage, Q, tid, state, **ORIGINAL)
    before = rdq_storage.get(tid)
    stats_before = rdq_storage.stats(Q)

    result = rdq_storage.enqueue(_second(tid, Q, variant))

    assert result is False, message(
        "enqueue-idempotent", f"re-enqueue of {tid!r} ({state}) returned {result!r}"
    )
    s.assert_same_task(
        "enqueue-idempotent", before, rdq_storage.get(tid), f"by a re-enqueue ({state}, {variant})"
    )
    s.assert_stats(
        "enqueue-idempotent", rdq_storage, Q, stats_before, f"after re-enqueue of {tid!r}"
    )
    if claim is not None and helpers.is_stale(
        rdq_storage.extend_lease, tid, claim.token, helpers.LONG_LEASE
    ):
        s.fail("enqueue-idempotent", f"re-enqueue of {tid!r} invalidated its live claim token")


@pytest.mark.parametrize("state", s.STATES)
def test_same_id_in_another_queue_raises_id_conflict(rdq_storage, state):
    """Rule enqueue-idempotent: an id already used in one queue is refused in any other
    queue with IdConflict, whatever the existing task's state, and nothing is written
    to either queue."""
    tid = f"conflict-{state.lower()}"
    s.put_in_state(rdq_storage, Q, tid, state, **ORIGINAL)
    s.enqueue_new(rdq_storage, OTHER, "bystander")
    before = rdq_storage.get(tid)
    stats_q, stats_other = rdq_storage.stats(Q), rdq_storage.stats(OTHER)

    for variant in ("identical", "different-fields-due-now"):
        s.expect_error(
            "enqueue-idempotent",
            IdConflict,
            lambda v=variant: rdq_storage.enqueue(_second(tid, OTHER, v)),
            f"enqueue of {tid!r} ({state} in {Q!r}) into {OTHER!r} ({variant})",
        )

    s.assert_same_task("enqueue-idempotent", before, rdq_storage.get(tid), "by the conflict")
    s.assert_stats("enqueue-idempotent", rdq_storage, Q, stats_q, f"after conflict on {tid!r}")
    s.assert_stats(
        "enqueue-idempotent", rdq_storage, OTHER, stats_other, f"after conflict on {tid!r}"
    )


@pytest.mark.parametrize(
    "delay",
    [timedelta(0), timedelta(seconds=5), timedelta(hours=1), -timedelta(hours=1)],
    ids=["no-delay", "plus-5s", "plus-1h", "minus-1h"],
)
def test_created_at_and_next_attempt_at_come_from_the_storage_clock(rdq_storage, delay):
    """Rule storage-clock: created_at is the storage's clock at enqueue and
    next_attempt_at is that time plus the delay (negative delays back-date)."""
    tid = "clocked"
    before = rdq_storage.now()
    s.enqueue_new(rdq_storage, Q, tid, delay=delay)
    after = rdq_storage.now()
    task = rdq_storage.get(tid)

    assert task.created_at.tzinfo is not None, message(
        "storage-clock", f"task {tid!r}: created_at {task.created_at!r} is naive"
    )
    assert before <= task.created_at <= after, message(
        "storage-clock",
        f"task {tid!r}: created_at {task.created_at} outside storage clock [{before}, {after}]",
    )
    assert task.next_attempt_at is not None, message(
        "storage-clock", f"task {tid!r}: PENDING task has no next_attempt_at"
    )
    assert before + delay <= task.next_attempt_at <= after + delay, message(
        "storage-clock",
        f"task {tid!r}: next_attempt_at {task.next_attempt_at} is not storage clock + "
        f"{delay} (clock was in [{before}, {after}])",
    )


# ---- lossless storage ----------------------------------------------------------------------

PAYLOADS = {
    "empty": b"",
    "single-nul": b"\x00",
    "nul-inside-and-trailing": b"a\x00b\x00\x00c\x00",
    "all-256-byte-values": bytes(range(256)),
    "all-256-reversed": bytes(range(255, -1, -1)),
    "invalid-utf8": b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c\xbc",
    "high-bytes": b"\x80" * 300,
    "looks-like-json": b'{"a": [1, "\\u0000"], "b": null}',
    "looks-like-sql": b"'); DROP TABLE tasks;--",
    "crlf-and-whitespace": b"\r\n\t \r\n",
}


@pytest.mark.parametrize("payload", list(PAYLOADS.values()), ids=list(PAYLOADS))
def test_payload_bytes_round_trip(rdq_storage, payload):
    """Rule round-trip: the payload comes back byte for byte, as bytes, from get()
    and from claim_due()."""
    tid = "payload"
    s.enqueue_new(rdq_storage, Q, tid, payload=payload)
    got = rdq_storage.get(tid).payload
    assert isinstance(got, bytes) and got == payload, message(
        "round-trip", f"task {tid!r}: get() payload {got[:40]!r}... != enqueued {payload[:40]!r}"
    )
    claimed = helpers.claim_one(rdq_storage, Q).task.payload
    assert isinstance(claimed, bytes) and claimed == payload, message(
        "round-trip", f"task {tid!r}: claimed payload {claimed[:40]!r} != {payload[:40]!r}"
    )


def test_bytearray_and_memoryview_payloads_are_stored_as_bytes(rdq_storage):
    """Rule round-trip: a bytes-like payload (bytearray, memoryview) is stored as the
    same bytes."""
    data = bytes(range(256)) * 4
    for tid, value in (("ba", bytearray(data)), ("mv", memoryview(data))):
        s.enqueue_new(rdq_storage, Q, tid, payload=value)  # type: ignore[arg-type]
        got = rdq_storage.get(tid).payload
        assert isinstance(got, bytes) and got == data, message(
            "round-trip", f"task {tid!r}: {type(value).__name__} payload came back as {type(got)}"
        )


def _large_size(caps) -> int:
    size = 4 * 1024 * 1024
    if caps.max_payload_bytes is not None:
        size = min(size, caps.max_payload_bytes)
    return size


def test_large_payload_round_trips(rdq_storage, rdq_capabilities):
    """Rule round-trip: a large payload (4 MiB, or the backend's declared maximum if
    lower) comes back byte for byte."""
    size = _large_size(rdq_capabilities)
    payload = random.Random(1234).randbytes(size)
    tid = "large"
    s.enqueue_new(rdq_storage, Q, tid, payload=payload)
    got = rdq_storage.get(tid).payload
    assert got == payload, message(
        "round-trip",
        f"task {tid!r}: {size}-byte payload came back as {len(got)} bytes"
        + ("" if len(got) != size else " with different content"),
    )


def _declared_limit(caps) -> int:
    if caps.max_payload_bytes is None:
        pytest.skip("the backend declares no max_payload_bytes")
    return min(caps.max_payload_bytes, validation.MAX_PAYLOAD_BYTES)


def test_payload_just_over_the_declared_limit_is_rejected(rdq_storage, rdq_capabilities):
    """Rule bad-input: a payload one byte over the backend's declared
    max_payload_bytes raises InvalidArgument and nothing is written."""
    limit = _declared_limit(rdq_capabilities)
    tid = "too-large"
    s.expect_error(
        "bad-input",
        InvalidArgument,
        lambda: rdq_storage.enqueue(NewTask(tid, Q, "h", b"\x00" * (limit + 1))),
        f"enqueue of {tid!r} with a {limit + 1}-byte payload (declared limit {limit})",
    )
    assert s.get_or_none(rdq_storage, tid) is None, message(
        "bad-input", f"task {tid!r} was stored although its payload was rejected"
    )
    s.assert_stats("bad-input", rdq_storage, Q, QueueStats(), f"after rejecting {tid!r}")


def test_payload_at_the_declared_limit_round_trips(rdq_storage, rdq_capabilities):
    """Rule round-trip: a payload of exactly the declared max_payload_bytes is
    accepted and comes back byte for byte."""
    limit = _declared_limit(rdq_capabilities)
    if limit > 16 * 1024 * 1024:
        pytest.skip(f"declared limit {limit} bytes is too large for a quick test")
    payload = random.Random(99).randbytes(limit)
    tid = "at-limit"
    s.enqueue_new(rdq_storage, Q, tid, payload=payload)
    assert rdq_storage.get(tid).payload == payload, message(
        "round-trip", f"task {tid!r}: {limit}-byte payload did not come back intact"
    )


HEADERS = {
    "empty": {},
    "empty-value": {"empty": ""},
    "unicode": {"ключ": "значение", "名前": "値 🚀", "emoji-🎉": "ü\u00e9\u0301"},
    "case-sensitive-keys": {"Key": "upper", "key": "lower", "KEY": "all"},
    "quotes-and-escapes": {"q": "'\"\\", "json": '{"a": 1}', "sql": "'; DROP TABLE x;--"},
    "whitespace": {" spaced key ": " spaced value ", "nl": "a\nb\r\n", "tab": "\t"},
    "punctuation-keys": {"Content-Type": "text/plain", "x:y": "1", "a.b": "2", "rdq": "3"},
    "many-keys": {f"k{i:03d}": f"value-{i}" for i in range(300)},
    "long-value": {"long": "x" * 30_000},
}


@pytest.mark.parametrize("headers", list(HEADERS.values()), ids=list(HEADERS))
def test_headers_round_trip(rdq_storage, headers):
    """Rule round-trip: headers come back exactly as enqueued (same keys, same values,
    nothing added), from get() and from claim_due()."""
    tid = "headers"
    s.enqueue_new(rdq_storage, Q, tid, headers=headers)
    got = dict(rdq_storage.get(tid).headers)
    assert got == headers, message(
        "round-trip", f"task {tid!r}: headers {_hdiff(headers, got)}"
    )
    claimed = dict(helpers.claim_one(rdq_storage, Q).task.headers)
    assert claimed == headers, message(
        "round-trip", f"task {tid!r}: claimed headers {_hdiff(headers, claimed)}"
    )


def _hdiff(want: dict[str, str], got: dict[str, str]) -> str:
    missing = sorted(set(want) - set(got))[:5]
    extra = sorted(set(got) - set(want))[:5]
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])[:5]
    return f"missing {missing}, extra {extra}, changed {changed}"


def test_get_of_an_unknown_id_raises_not_found(rdq_storage):
    """Rule bad-input: get() of an id that was never enqueued raises NotFound, in an
    empty namespace and beside other tasks."""
    s.expect_error("bad-input", NotFound, lambda: rdq_storage.get("never"), "get('never')")
    s.enqueue_new(rdq_storage, Q, "present")
    for tid in ("never", "presen", "present ", "PRESENT"):
        s.expect_error("bad-input", NotFound, lambda t=tid: rdq_storage.get(t), f"get({tid!r})")
