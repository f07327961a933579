"""Bad input: every call with a bad argument raises the documented error (InvalidArgument
unless noted) and writes nothing (``contract.md#input-limits``).

Each test runs against a small world — a queue holding a DEAD, a SUCCEEDED, an
IN_FLIGHT, a due PENDING and a future PENDING task, and another queue holding one
task — and checks that every task and both queues' stats are exactly as before.

The world is built once and handed to the next test only while it is exactly as built
(every task and both stats read again, as each test reads them before its call anyway),
no test has failed since it was built, and it is younger than :data:`WORLD_MAX_AGE_S`
(far inside the IN_FLIGHT task's lease); otherwise the next test gets a new world in a
fresh namespace. So every test starts from the same state as in a world of its own,
without building one: the build (about 15 calls, mostly writes) was most of this
module's time, ~80 ms a test on a loaded PostgreSQL server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from rdq_compliance.provision.backend import StorageSpec
from rdq_compliance.suite import dlq_support as s
from rdq_compliance.suite import helpers
from rdq_core import validation
from rdq_core.errors import InvalidArgument, NotFound, StaleClaim
from rdq_core.model import ByIds, DlqFilter, ErrorInfo, NewTask, Outcome, QueueStats
from rdq_core.spi import Storage

pytestmark = pytest.mark.rdq_conformance

RULE = "bad-input"
Q = "q"
OTHER = "other-q"
#: The id a rejected enqueue would have written.
PROBE = "probe"
#: A well-formed token that no claim ever issued.
NEVER_ISSUED = "0123456789abcdef" * 2
#: Seconds a world is handed on for (its IN_FLIGHT task holds the 10-minute long lease).
WORLD_MAX_AGE_S = 60.0


@dataclass
class World:
    storage: Storage
    dead: str = "w-dead"
    succeeded: str = "w-succeeded"
    in_flight: str = "w-in-flight"
    pending: str = "w-pending"
    future: str = "w-future"
    other: str = "w-other"
    token: str = ""
    tasks: dict | None = None
    stats: dict[str, QueueStats] | None = None

    @property
    def ids(self) -> list[str]:
        return [
            self.dead, self.succeeded, self.in_flight, self.pending, self.future,
            self.other, PROBE,
        ]

    def remember(self) -> None:
        self.tasks = s.snapshot(self.storage, self.ids)
        self.stats = {q: self.storage.stats(q) for q in (Q, OTHER)}

    def assert_unchanged(self, what: str) -> None:
        assert self.tasks is not None and self.stats is not None
        s.assert_snapshot_unchanged(RULE, self.tasks, self.storage, f"after {what}")
        for q, before in self.stats.items():
            s.assert_stats(RULE, self.storage, q, before, f"after {what}")


def _build_world(storage: Storage) -> World:
    w = World(storage)
    s.make_dead(storage, Q, w.dead)
    s.make_succeeded(storage, Q, w.succeeded)
    claim = s.put_in_state(storage, Q, w.in_flight, "IN_FLIGHT")
    assert claim is not None
    w.token = claim.token
    s.enqueue_new(storage, Q, w.pending)
    s.enqueue_new(storage, Q, w.future, delay=s.FAR_FUTURE)
    s.enqueue_new(storage, OTHER, w.other)
    return w


@dataclass
class _Home:
    """The world handed from test to test, where it lives, and what it was when built."""

    session: object
    spec: StorageSpec | None = None
    world: World | None = None
    built_at: float = 0.0
    failures: int = 0
    pristine: tuple[dict, dict] = field(default_factory=lambda: ({}, {}))

    def discard(self) -> None:
        world, spec, self.world, self.spec = self.world, self.spec, None, None
        if world is not None:
            world.storage.close()
        if spec is not None:
            self.session.drop_namespace(spec)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def _world_home(rdq_session) -> Iterator[_Home]:
    home = _Home(rdq_session)
    try:
        yield home
    finally:
        home.discard()


@pytest.fixture
def world(_world_home: _Home, rdq_session, request) -> World:
    home, failures = _world_home, request.session.testsfailed
    w = home.world
    if w is not None:
        w.remember()
        if (
            failures == home.failures
            and time.monotonic() - home.built_at < WORLD_MAX_AGE_S
            and (w.tasks, w.stats) == home.pristine
        ):
            return w
        home.discard()
    home.spec = rdq_session.create_namespace()
    storage = rdq_session.open(home.spec)
    try:
        w = _build_world(storage)
        w.remember()
    except BaseException:
        storage.close()
        raise
    home.world, home.built_at, home.failures = w, time.monotonic(), failures
    home.pristine = (dict(w.tasks or {}), dict(w.stats or {}))
    return w


def _rejects(world: World, expected: type[BaseException], call: Callable[[], object], what: str):
    s.expect_error(RULE, expected, call, what)
    world.assert_unchanged(what)


def _task(**overrides: object) -> NewTask:
    fields: dict[str, object] = {"id": PROBE, "queue": Q, "handler": "h"}
    fields.update(overrides)
    return NewTask(**fields)  # type: ignore[arg-type]


# ---- names ---------------------------------------------------------------------------------

BAD_NAMES = {
    "empty": "",
    "uppercase": "Queue",
    "241-chars": "a" * 241,
    "space": "my queue",
    "sql-injection": "q'; DROP TABLE tasks;--",
    "path-traversal": "../x",
    "slash": "a/b",
    "nul": "q\x00",
    "newline": "q\n",
    "unicode": "qué",
    "wildcard": "q*",
    "int": 42,
    "none": None,
    "bytes": b"q",
}


def _queue_ops(world: World, name: object) -> dict[str, Callable[[], object]]:
    st = world.storage
    return {
        "enqueue": lambda: st.enqueue(_task(queue=name)),
        "claim_due": lambda: st.claim_due(name, 10, helpers.LONG_LEASE),  # type: ignore[arg-type]
        "stats": lambda: st.stats(name),  # type: ignore[arg-type]
        "dlq_list": lambda: st.dlq_list(name),  # type: ignore[arg-type]
        "redrive-ids": lambda: st.redrive(name, ByIds([world.dead])),  # type: ignore[arg-type]
        "redrive-all": lambda: st.redrive(name, DlqFilter(everything=True)),  # type: ignore[arg-type]
        "redrive-empty": lambda: st.redrive(name, ByIds([])),  # type: ignore[arg-type]
        "purge-ids": lambda: st.purge(name, ByIds([world.dead])),  # type: ignore[arg-type]
        "purge-all": lambda: st.purge(name, DlqFilter(everything=True)),  # type: ignore[arg-type]
        "purge-empty": lambda: st.purge(name, DlqFilter()),  # type: ignore[arg-type]
        "purge_succeeded": lambda: st.purge_succeeded(name, timedelta(0)),  # type: ignore[arg-type]
    }


QUEUE_OPS = [
    "enqueue", "claim_due", "stats", "dlq_list", "redrive-ids", "redrive-all",
    "redrive-empty", "purge-ids", "purge-all", "purge-empty", "purge_succeeded",
]


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
@pytest.mark.parametrize("op", QUEUE_OPS)
def test_bad_queue_name_is_rejected(world, op, name):
    """Rule bad-input: a queue name outside [a-z0-9._-]{1,240} (or not a str) raises
    InvalidArgument from every operation that takes a queue, and nothing is written."""
    call = _queue_ops(world, name)[op]
    _rejects(world, InvalidArgument, call, f"{op} with queue {name!r} (probe id {PROBE!r})")


def test_longest_queue_and_handler_names_are_accepted(rdq_storage):
    """Rule bad-input: names of exactly 240 characters from [a-z0-9._-] are valid
    (the limit is inclusive)."""
    name = ("a.b-c_9" * 40)[:240]
    s.enqueue_new(rdq_storage, name, "long-names", handler=name)
    task = rdq_storage.get("long-names")
    if (task.queue, task.handler) != (name, name):
        s.fail(RULE, f"task 'long-names': 240-char queue/handler came back changed: "
                     f"{task.queue!r}, {task.handler!r}")
    if rdq_storage.stats(name).pending != 1:
        s.fail(RULE, "task 'long-names' not counted in stats of its 240-char queue")


@pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
def test_bad_handler_name_is_rejected(world, name):
    """Rule bad-input: a handler name outside [a-z0-9._-]{1,240} raises InvalidArgument
    from enqueue and from DLQ filters, and nothing is written."""
    st = world.storage
    _rejects(world, InvalidArgument, lambda: st.enqueue(_task(handler=name)),
             f"enqueue of {PROBE!r} with handler {name!r}")
    if name is None:
        return  # DlqFilter(handler=None) means "no handler condition", not a bad name
    for op, call in {
        "dlq_list": lambda: st.dlq_list(Q, DlqFilter(handler=name)),  # type: ignore[arg-type]
        "redrive": lambda: st.redrive(Q, DlqFilter(handler=name)),  # type: ignore[arg-type]
        "purge": lambda: st.purge(Q, DlqFilter(handler=name)),  # type: ignore[arg-type]
    }.items():
        _rejects(world, InvalidArgument, call, f"{op} with DlqFilter(handler={name!r})")


# ---- ids -------------------------------------------------------------------------------------

BAD_IDS = {
    "empty": "",
    "256-chars": "x" * 256,
    "nul": "a\x00b",
    "newline": "a\nb",
    "tab": "a\tb",
    "int": 7,
    "none": None,
    "bytes": b"id",
}


def _id_ops(world: World, bad: object) -> dict[str, Callable[[], object]]:
    st, tok = world.storage, world.token
    return {
        "enqueue": lambda: st.enqueue(_task(id=bad)),
        "get": lambda: st.get(bad),  # type: ignore[arg-type]
        "complete": lambda: st.complete(bad, tok),  # type: ignore[arg-type]
        "reschedule": lambda: st.reschedule(bad, tok, timedelta(0)),  # type: ignore[arg-type]
        "dead_letter": lambda: st.dead_letter(bad, tok),  # type: ignore[arg-type]
        "extend_lease": lambda: st.extend_lease(bad, tok, helpers.LONG_LEASE),  # type: ignore[arg-type]
        "redrive": lambda: st.redrive(Q, ByIds([world.dead, bad])),
        "purge": lambda: st.purge(Q, ByIds([world.dead, bad])),
    }


ID_OPS = ["enqueue", "get", "complete", "reschedule", "dead_letter", "extend_lease",
          "redrive", "purge"]


@pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
@pytest.mark.parametrize("op", ID_OPS)
def test_bad_task_id_is_rejected(world, op, bad):
    """Rule bad-input: a task id that is not a str of 1 to 255 printable characters
    raises InvalidArgument (not NotFound, not StaleClaim) and nothing is written; a
    selector holding one bad id is rejected whole."""
    _rejects(world, InvalidArgument, _id_ops(world, bad)[op], f"{op} with task id {bad!r}")


def test_longest_task_id_is_accepted(rdq_storage):
    """Rule bad-input: a task id of exactly 255 characters is valid and round-trips."""
    tid = ("id-ü-" * 60)[:255]
    s.enqueue_new(rdq_storage, Q, tid)
    got = rdq_storage.get(tid).id
    if got != tid:
        s.fail(RULE, f"task {tid[:20]!r}...: 255-char id came back as {got[:20]!r}...")


UNKNOWN_IDS = {
    "never-enqueued": "never-enqueued",
    "trailing-space": "w-dead ",
    "other-case": "W-DEAD",
    "prefix": "w-dea",
}


@pytest.mark.parametrize("tid", list(UNKNOWN_IDS.values()), ids=list(UNKNOWN_IDS))
def test_get_of_unknown_id_raises_not_found(world, tid):
    """Rule bad-input: get() of a well-formed id no task has raises NotFound (ids are
    compared exactly: no case folding, no trailing-space padding, no prefix match)."""
    _rejects(world, NotFound, lambda: world.storage.get(tid), f"get({tid!r})")


# ---- payload and headers ------------------------------------------------------------------

BAD_PAYLOADS = {"str": "hello", "none": None, "int": 123, "list": [1, 2], "dict": {}}


@pytest.mark.parametrize("payload", list(BAD_PAYLOADS.values()), ids=list(BAD_PAYLOADS))
def test_non_bytes_payload_is_rejected(world, payload):
    """Rule bad-input: a payload that is not bytes-like raises InvalidArgument (text is
    never silently encoded) and nothing is written."""
    _rejects(world, InvalidArgument, lambda: world.storage.enqueue(_task(payload=payload)),
             f"enqueue of {PROBE!r} with payload {payload!r}")


BAD_HEADERS = {
    "int-value": {"k": 1},
    "int-key": {1: "v"},
    "none-value": {"k": None},
    "bytes-value": {"k": b"v"},
    "bytes-key": {b"k": "v"},
    "nested": {"k": {"a": "b"}},
    "empty-key": {"": "v"},
    "reserved-key": {"rdq.attempt": "1"},
    "reserved-prefix-only": {"rdq.": "x"},
    "reserved-among-good": {"good": "1", "rdq.trace": "x"},
    "nul-in-value": {"k": "a\x00b"},
    "nul-in-key": {"k\x00": "v"},
    "lone-surrogate": {"k": "\ud800"},
    "too-large": {"big": "x" * (validation.MAX_HEADER_BYTES + 1)},
    "not-a-mapping-list": [("k", "v")],
    "not-a-mapping-str": "k=v",
    "none": None,
}


@pytest.mark.parametrize("headers", list(BAD_HEADERS.values()), ids=list(BAD_HEADERS))
def test_bad_headers_are_rejected(world, headers):
    """Rule bad-input: headers that are not a flat str->str mapping, use a reserved
    'rdq.' key, contain NUL or are too large raise InvalidArgument; nothing is written."""
    _rejects(world, InvalidArgument, lambda: world.storage.enqueue(_task(headers=headers)),
             f"enqueue of {PROBE!r} with headers {str(headers)[:60]}")


def test_non_new_task_enqueue_is_rejected(world):
    """Rule bad-input: enqueue() of anything but a NewTask raises InvalidArgument."""
    for value in ({"id": PROBE, "queue": Q, "handler": "h"}, None, PROBE):
        _rejects(world, InvalidArgument, lambda v=value: world.storage.enqueue(v),
                 f"enqueue({value!r})")


# ---- numbers and durations -------------------------------------------------------------------

BAD_LIMITS = {
    "zero": 0,
    "negative": -1,
    "over-max": validation.MAX_CLAIM_LIMIT + 1,
    "huge": 10**12,
    "true": True,
    "false": False,
    "float": 1.5,
    "str": "1",
    "none": None,
}


@pytest.mark.parametrize("limit", list(BAD_LIMITS.values()), ids=list(BAD_LIMITS))
def test_bad_claim_limit_is_rejected(world, limit):
    """Rule bad-input: claim_due with a limit that is not an int in [1, 1000] (bools
    included) raises InvalidArgument and claims nothing."""
    _rejects(world, InvalidArgument,
             lambda: world.storage.claim_due(Q, limit, helpers.LONG_LEASE),  # type: ignore[arg-type]
             f"claim_due({Q!r}, limit={limit!r}) with {world.pending!r} due")


BAD_LEASES = {
    "zero": timedelta(0),
    "negative": -timedelta(seconds=1),
    "over-max": validation.MAX_LEASE + timedelta(seconds=1),
    "int-seconds": 30,
    "float-seconds": 30.0,
    "none": None,
}


@pytest.mark.parametrize("lease", list(BAD_LEASES.values()), ids=list(BAD_LEASES))
@pytest.mark.parametrize("op", ["claim_due", "extend_lease"])
def test_bad_lease_is_rejected(world, op, lease):
    """Rule bad-input: a lease that is not a positive timedelta of at most a day raises
    InvalidArgument; nothing is claimed and no lease is changed."""
    st = world.storage
    call = {
        "claim_due": lambda: st.claim_due(Q, 10, lease),  # type: ignore[arg-type]
        "extend_lease": lambda: st.extend_lease(world.in_flight, world.token, lease),  # type: ignore[arg-type]
    }[op]
    _rejects(world, InvalidArgument, call, f"{op} with lease {lease!r} (task {world.in_flight!r})")


BAD_ENQUEUE_DELAYS = {
    "int-seconds": 5,
    "float-seconds": 5.0,
    "str": "5s",
    "none": None,
    "over-max": validation.MAX_DELAY + timedelta(days=1),
    "under-min": -validation.MAX_DELAY - timedelta(days=1),
}


@pytest.mark.parametrize("delay", list(BAD_ENQUEUE_DELAYS.values()), ids=list(BAD_ENQUEUE_DELAYS))
def test_bad_enqueue_delay_is_rejected(world, delay):
    """Rule bad-input: an enqueue delay that is not a timedelta within +-3650 days raises
    InvalidArgument and nothing is written."""
    _rejects(world, InvalidArgument, lambda: world.storage.enqueue(_task(delay=delay)),
             f"enqueue of {PROBE!r} with delay {delay!r}")


BAD_RESCHEDULE_DELAYS = {
    "negative": -timedelta(seconds=1),
    "int-seconds": 5,
    "none": None,
    "over-max": validation.MAX_DELAY + timedelta(days=1),
}


@pytest.mark.parametrize(
    "delay", list(BAD_RESCHEDULE_DELAYS.values()), ids=list(BAD_RESCHEDULE_DELAYS)
)
def test_bad_reschedule_delay_is_rejected(world, delay):
    """Rule bad-input: a reschedule delay that is not a non-negative timedelta raises
    InvalidArgument; the task stays IN_FLIGHT with its claim, no attempt is recorded."""
    _rejects(world, InvalidArgument,
             lambda: world.storage.reschedule(world.in_flight, world.token, delay),  # type: ignore[arg-type]
             f"reschedule of {world.in_flight!r} with delay {delay!r}")


@pytest.mark.parametrize(
    "older_than",
    [-timedelta(seconds=1), 60, None, validation.MAX_DELAY + timedelta(days=1)],
    ids=["negative", "int-seconds", "none", "over-max"],
)
def test_bad_older_than_is_rejected(world, older_than):
    """Rule bad-input: purge_succeeded with an older_than that is not a non-negative
    timedelta raises InvalidArgument and deletes nothing."""
    _rejects(world, InvalidArgument,
             lambda: world.storage.purge_succeeded(Q, older_than),  # type: ignore[arg-type]
             f"purge_succeeded({Q!r}, {older_than!r}) with {world.succeeded!r} SUCCEEDED")


# ---- tokens ------------------------------------------------------------------------------------

BAD_TOKENS = {
    "empty": "",
    "short": "abc",
    "31-hex": "0" * 31,
    "33-hex": "0" * 33,
    "uppercase-hex": "ABCDEF" + "0" * 26,
    "non-hex": "g" * 32,
    "trailing-newline": "0" * 32 + "\n",
    "inner-space": "0" * 16 + " " + "0" * 15,
    "int": 123,
    "none": None,
    "bytes": b"0" * 32,
}

TOKEN_OPS = ["complete", "reschedule", "dead_letter", "extend_lease"]


def _token_ops(st: Storage, tid: str, token: object) -> dict[str, Callable[[], object]]:
    return {
        "complete": lambda: st.complete(tid, token),  # type: ignore[arg-type]
        "reschedule": lambda: st.reschedule(tid, token, timedelta(0)),  # type: ignore[arg-type]
        "dead_letter": lambda: st.dead_letter(tid, token),  # type: ignore[arg-type]
        "extend_lease": lambda: st.extend_lease(tid, token, helpers.LONG_LEASE),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("token", list(BAD_TOKENS.values()), ids=list(BAD_TOKENS))
@pytest.mark.parametrize("op", TOKEN_OPS)
def test_malformed_token_is_rejected(world, op, token):
    """Rule bad-input: a claim token that is not 32 lowercase hex digits raises
    InvalidArgument (before any lookup) and the claimed task is untouched."""
    call = _token_ops(world.storage, world.in_flight, token)[op]
    _rejects(world, InvalidArgument, call, f"{op} of {world.in_flight!r} with token {token!r}")


def test_uppercased_real_token_is_rejected(world):
    """Rule bad-input: the real token in upper case is malformed, not an alias of the
    token: InvalidArgument, and the task is untouched."""
    upper = world.token.upper()
    if upper == world.token:
        pytest.skip("the issued token has no hex letters to upper-case")
    for op in TOKEN_OPS:
        call = _token_ops(world.storage, world.in_flight, upper)[op]
        what = f"{op} of {world.in_flight!r} with upper-cased token"
        _rejects(world, InvalidArgument, call, what)


@pytest.mark.parametrize(
    "target", ["in_flight", "pending", "future", "succeeded", "dead", "unknown"]
)
@pytest.mark.parametrize("op", TOKEN_OPS)
def test_never_issued_token_is_stale_claim(world, op, target):
    """Rule fencing: a well-formed token that no claim issued raises StaleClaim from
    complete/reschedule/dead_letter/extend_lease, whatever the task's state (or if there
    is no such task), and nothing changes."""
    tid = "no-such-task" if target == "unknown" else getattr(world, target)
    s.expect_error("fencing", StaleClaim, _token_ops(world.storage, tid, NEVER_ISSUED)[op],
                   f"{op} of {tid!r} with never-issued token {NEVER_ISSUED}")
    s.assert_snapshot_unchanged("fencing", world.tasks or {}, world.storage, f"after {op}")


# ---- DLQ arguments ----------------------------------------------------------------------------

BAD_PAGE_SIZES = {
    "zero": 0,
    "negative": -5,
    "over-max": validation.MAX_PAGE_SIZE + 1,
    "true": True,
    "float": 2.0,
    "str": "10",
    "none": None,
}


@pytest.mark.parametrize("size", list(BAD_PAGE_SIZES.values()), ids=list(BAD_PAGE_SIZES))
def test_bad_dlq_page_size_is_rejected(world, size):
    """Rule bad-input: dlq_list with a page size that is not an int in [1, 1000]
    raises InvalidArgument."""
    _rejects(world, InvalidArgument,
             lambda: world.storage.dlq_list(Q, None, None, size),  # type: ignore[arg-type]
             f"dlq_list({Q!r}, limit={size!r}) with {world.dead!r} DEAD")


BAD_SELECTORS = {
    "none": None,
    "str-id": "w-dead",
    "int": 42,
    "dict": {"ids": ["w-dead"]},
    "set": {"w-dead"},
    "filter-class": DlqFilter,
}


@pytest.mark.parametrize("selector", list(BAD_SELECTORS.values()), ids=list(BAD_SELECTORS))
@pytest.mark.parametrize("op", ["redrive", "purge"])
def test_non_selector_is_rejected(world, op, selector):
    """Rule bad-input: redrive/purge with something that is neither ByIds nor DlqFilter
    raises InvalidArgument and no DEAD task changes."""
    call = getattr(world.storage, op)
    _rejects(world, InvalidArgument, lambda: call(Q, selector),
             f"{op}({Q!r}, {selector!r}) with {world.dead!r} DEAD")


BAD_FILTERS = {
    "not-a-filter": "handler=h",
    "selector-as-filter": ByIds(["w-dead"]),
    "nul-error-type": DlqFilter(error_type="boom\x00"),
    "int-error-type": DlqFilter(error_type=5),  # type: ignore[arg-type]
}


FILTER_CASES = [
    pytest.param(op, flt, id=f"{op}-{name}")
    for op in ("dlq_list", "redrive", "purge")
    for name, flt in BAD_FILTERS.items()
    if op == "dlq_list" or isinstance(flt, DlqFilter)
]


@pytest.mark.parametrize(("op", "flt"), FILTER_CASES)
def test_bad_dlq_filter_is_rejected(world, op, flt):
    """Rule bad-input: a DLQ filter that is not a DlqFilter of valid fields raises
    InvalidArgument (ByIds is a selector for redrive/purge, not a dlq_list filter)."""
    call = getattr(world.storage, op)
    _rejects(world, InvalidArgument, lambda: call(Q, flt), f"{op}({Q!r}, {flt!r})")


# ---- outcomes ------------------------------------------------------------------------------------

BAD_REPORTS = {
    "success-outcome": lambda st, w: st.dead_letter(w.in_flight, w.token, None, Outcome.SUCCESS),
    "lease-expired-outcome": lambda st, w: st.dead_letter(
        w.in_flight, w.token, None, Outcome.LEASE_EXPIRED
    ),
    "str-outcome": lambda st, w: st.dead_letter(w.in_flight, w.token, None, "PERMANENT"),
    "str-error": lambda st, w: st.dead_letter(w.in_flight, w.token, "boom"),
    "nul-in-error-message": lambda st, w: st.dead_letter(
        w.in_flight, w.token, ErrorInfo("boom.Error", "a\x00b")
    ),
    "int-error-type": lambda st, w: st.reschedule(
        w.in_flight, w.token, timedelta(0), ErrorInfo(5, "m")  # type: ignore[arg-type]
    ),
    "dict-error": lambda st, w: st.reschedule(
        w.in_flight, w.token, timedelta(0), {"type": "x", "message": "y"}
    ),
}


@pytest.mark.parametrize("report", list(BAD_REPORTS.values()), ids=list(BAD_REPORTS))
def test_bad_error_or_outcome_is_rejected(world, report):
    """Rule bad-input: a failure report with an error that is not a valid ErrorInfo, or a
    dead-letter outcome other than RETRYABLE/PERMANENT_FAILURE, raises InvalidArgument;
    the task stays IN_FLIGHT with no attempt recorded."""
    _rejects(world, InvalidArgument, lambda: report(world.storage, world),
             f"bad failure report for {world.in_flight!r}")
