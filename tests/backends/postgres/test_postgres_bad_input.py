"""Bad and awkward input on PostgreSQL: injection-looking names and ids, huge payloads,
NUL bytes. Rejections happen before any SQL (shown with a storage whose server does not
exist: validation answers InvalidArgument, never BackendUnavailable) and write nothing."""

from __future__ import annotations

import random
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from rdq_postgres.storage import PostgresStorage

from rdq_core import validation
from rdq_core.errors import InvalidArgument
from rdq_core.model import ByIds, DlqFilter, ErrorInfo, NewTask, Outcome, Status
from tests._ports import closed_port
from tests.backends.postgres._pg_support import count_rows, require_server

DSN = require_server()
LEASE = timedelta(minutes=5)

INJECTION_NAMES = [
    "q'; DROP TABLE tasks;--",
    'q"; DROP SCHEMA public CASCADE;--',
    "q); DELETE FROM tasks; --",
    "' OR '1'='1",
    "q\\",
    "$1",
    "%s",
    "%(queue)s",
    "{tasks}",
    "q\x00'; DROP TABLE tasks;--",
    "Q",
]

#: Valid ids (printable, <= 255 chars) that look like SQL; they must round-trip literally.
AWKWARD_IDS = [
    "'; DROP TABLE tasks; --",
    '"; DROP SCHEMA public CASCADE; --',
    "Robert'); DROP TABLE Students;--",
    "' OR '1'='1",
    "%s %(id)s {} {tasks} $1 ?",
    "back\\slash\\'quote",
    "E'\\x00'",
    "semi;colon;",
    "ünïcødé \u2019quotes\u2019 «»",
    "a" * 255,
]


@pytest.fixture
def nowhere() -> PostgresStorage:
    """A storage on a server that does not exist: any SQL would fail BackendUnavailable."""
    return PostgresStorage(f"postgresql://postgres@127.0.0.1:{closed_port()}/test", "rdq_x")


def _all_calls(st: PostgresStorage, name: str) -> dict[str, object]:
    token = "0" * 32
    return {
        "enqueue-queue": lambda: st.enqueue(NewTask("probe", name, "h")),
        "enqueue-handler": lambda: st.enqueue(NewTask("probe", "q", name)),
        "claim_due": lambda: st.claim_due(name, 1, LEASE),
        "stats": lambda: st.stats(name),
        "dlq_list": lambda: st.dlq_list(name),
        "dlq_list-handler": lambda: st.dlq_list("q", DlqFilter(handler=name)),
        "redrive": lambda: st.redrive(name, DlqFilter(everything=True)),
        "purge": lambda: st.purge(name, ByIds(["x"])),
        "purge_succeeded": lambda: st.purge_succeeded(name, timedelta(0)),
        "complete-token": lambda: st.complete("x", name),
        "extend-token": lambda: st.extend_lease("x", token + name, LEASE),
    }


@pytest.mark.parametrize("name", INJECTION_NAMES)
def test_injection_looking_names_are_rejected_before_any_sql(nowhere, storage, raw, name):
    for call in _all_calls(nowhere, name).values():
        with pytest.raises(InvalidArgument):
            call()  # type: ignore[operator]
    for call in _all_calls(storage, name).values():
        with pytest.raises(InvalidArgument, match=r"invalid|malformed"):
            call()  # type: ignore[operator]
    assert count_rows(raw, storage.schema) == 0, "a rejected call wrote something"


@pytest.mark.parametrize("bad", ["", "x" * 256, "a\x00b", "a\nb", "\x00'; DROP TABLE tasks;--"])
def test_bad_ids_are_rejected_before_any_sql(nowhere, bad):
    for call in (
        lambda: nowhere.enqueue(NewTask(bad, "q", "h")),
        lambda: nowhere.get(bad),
        lambda: nowhere.complete(bad, "0" * 32),
        lambda: nowhere.redrive("q", ByIds([bad])),
    ):
        with pytest.raises(InvalidArgument):
            call()


def test_sql_looking_ids_round_trip_literally(storage, raw):
    for tid in AWKWARD_IDS:
        headers = {"sql": tid, tid[:40]: "'; --"}
        assert storage.enqueue(NewTask(tid, "q", "h", tid.encode(), headers)) is True
        assert storage.enqueue(NewTask(tid, "q", "h")) is False
        got = storage.get(tid)
        assert (got.id, got.payload, dict(got.headers)) == (tid, tid.encode(), headers)
    claims = {c.task_id: c for c in storage.claim_due("q", 100, LEASE)}
    assert set(claims) == set(AWKWARD_IDS)
    for i, tid in enumerate(AWKWARD_IDS):
        error = ErrorInfo(f"err'{i};--", f"message {tid}", detail=tid)
        storage.dead_letter(tid, claims[tid].token, error, Outcome.PERMANENT_FAILURE)
    listed = storage.dlq_list("q", DlqFilter(error_type="err'0;--"))
    assert [t.id for t in listed.tasks] == [AWKWARD_IDS[0]]
    assert listed.tasks[0].attempts[-1].error == ErrorInfo(
        "err'0;--", f"message {AWKWARD_IDS[0]}", AWKWARD_IDS[0]
    )
    assert storage.redrive("q", ByIds(AWKWARD_IDS[:3])) == 3
    assert storage.get(AWKWARD_IDS[1]).status is Status.PENDING
    assert storage.purge("q", ByIds(AWKWARD_IDS[3:])) == len(AWKWARD_IDS) - 3
    assert count_rows(raw, storage.schema) == 3
    tables = raw.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (storage.schema,)
    ).fetchone()
    assert tables == (3,)  # tasks, attempts, rdq_migrations: nothing was dropped


@pytest.mark.parametrize(
    "payload",
    [b"\x00", b"\x00" * 4096, b"a\x00b\x00", bytes(range(256)) * 16, b"\\x00", b"'\x00;--"],
    ids=["nul", "nuls", "inner-nuls", "all-bytes", "escaped-looking", "quote-nul"],
)
def test_payload_bytes_round_trip_including_nul(storage, payload):
    storage.enqueue(NewTask("p", "q", "h", payload))
    assert storage.get("p").payload == payload
    claim = storage.claim_due("q", 1, LEASE)[0]
    assert claim.task.payload == payload
    storage.dead_letter("p", claim.token)
    assert storage.dlq_list("q").tasks[0].payload == payload


def test_32_mib_payload_round_trips(storage):
    payload = random.Random(32).randbytes(32 * 1024 * 1024)
    assert storage.enqueue(NewTask("big", "q", "h", payload)) is True
    assert storage.get("big").payload == payload
    assert storage.claim_due("q", 1, LEASE)[0].task.payload == payload


def test_payload_over_the_kit_ceiling_is_rejected_and_nothing_written(nowhere, storage, raw):
    too_big = b"\x00" * (validation.MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(InvalidArgument, match="at most"):
        nowhere.enqueue(NewTask("huge", "q", "h", too_big))
    with pytest.raises(InvalidArgument, match="at most"):
        storage.enqueue(NewTask("huge", "q", "h", too_big))
    assert count_rows(raw, storage.schema) == 0


def test_values_postgres_refuses_map_to_invalid_argument(storage):
    """Whatever slips past validation and is refused by PostgreSQL or psycopg as a value
    (DataError) surfaces as InvalidArgument, never as a psycopg exception."""
    with pytest.raises(InvalidArgument, match="nothing was written"):
        storage._run("probe", lambda c: c.execute("SELECT %s::text", ("a\x00b",)))
    with pytest.raises(InvalidArgument, match="InvalidTextRepresentation"):
        storage._run("probe", lambda c: c.execute("SELECT 'x'::int"))
    with pytest.raises(InvalidArgument, match="NumericValueOutOfRange"):
        storage._run("probe", lambda c: c.execute("SELECT 2147483647::int + 1"))


def test_text_with_nul_cannot_reach_the_tables(storage, raw):
    """Postgres text cannot hold NUL: ids, names, headers and errors with NUL are rejected
    by validation; bytes go to bytea and round-trip."""
    with pytest.raises(InvalidArgument):
        storage.enqueue(NewTask("h-nul", "q", "h", b"", {"k": "v\x00"}))
    storage.enqueue(NewTask("e-nul", "q", "h"))
    claim = storage.claim_due("q", 1, LEASE)[0]
    with pytest.raises(InvalidArgument):
        storage.reschedule("e-nul", claim.token, timedelta(0), ErrorInfo("T", "m\x00"))
    assert storage.get("e-nul").status is Status.IN_FLIGHT
    assert count_rows(raw, storage.schema) == 1
    rows = raw.execute(
        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(storage.schema, "attempts"))
    ).fetchone()
    assert rows == (0,)


def test_raw_psycopg_error_never_escapes_for_bad_sql(storage):
    with pytest.raises(Exception) as info:
        storage._run("probe", lambda c: c.execute("SELECT * FROM no_such_table"))
    assert not isinstance(info.value, psycopg.Error)
