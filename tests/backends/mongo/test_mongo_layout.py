"""The layout the conformance suite cannot see: one database ``rdq_<12 hex>`` per
namespace, isolated from every other; dropping a namespace removes its database and
nothing else; the indexes are created idempotently (a second opener changes nothing,
not even the enqueue counter); and the server is named honestly in its origin and the
run's report header (SecantusDB is never presented as MongoDB)."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from datetime import timedelta

from rdq_mongo import schema
from rdq_mongo.server import NAMESPACE_PREFIX, MongoServer
from rdq_mongo.storage import MongoStorage

from rdq_core.model import DlqFilter, NewTask

LEASE = timedelta(minutes=5)
INDEXES = {"_id_", "claim", "dlq", "done"}


def _indexes(client, namespace: str) -> dict:
    return {
        name: (info["key"], info.get("unique", False))
        for name, info in client[namespace][schema.TASKS].index_information().items()
    }


def test_each_namespace_is_its_own_database_and_they_are_isolated(mongo_server):
    client = mongo_server.admin.connection()
    a, b = mongo_server.create_namespace(), mongo_server.create_namespace()
    sa, sb = MongoStorage(mongo_server.dsn, a), MongoStorage(mongo_server.dsn, b)
    try:
        for ns in (a, b):
            assert re.fullmatch(NAMESPACE_PREFIX + r"[0-9a-f]{12}", ns)
            assert ns in client.list_database_names()
        # the same ids and queues in both: no IdConflict, no shared state
        for st, payload in ((sa, b"a"), (sb, b"b")):
            for i in range(3):
                assert st.enqueue(NewTask(f"t{i}", "q", "h", payload))
        claims = sa.claim_due("q", 10, LEASE)
        assert len(claims) == 3 and {c.task.payload for c in claims} == {b"a"}
        sa.dead_letter(claims[0].task_id, claims[0].token, None)
        assert sb.stats("q").pending == 3 and sb.stats("q").in_flight == 0
        assert sb.dlq_list("q").tasks == () and sb.redrive("q", DlqFilter(everything=True)) == 0
        assert sb.purge("q", DlqFilter(everything=True)) == 0 and sa.stats("q").dead == 1
        assert sb.get("t0").payload == b"b"
    finally:
        sa.close()
        sb.close()
        mongo_server.drop_namespace(a)
        mongo_server.drop_namespace(b)


def test_dropping_a_namespace_removes_its_database_and_nothing_else(mongo_server):
    client = mongo_server.admin.connection()
    kept, dropped = mongo_server.create_namespace(), mongo_server.create_namespace()
    stranger = f"rdqtest_stranger_{secrets.token_hex(4)}"
    client[stranger]["tasks"].insert_one({"_id": "x", "queue": "q"})
    try:
        for ns in (kept, dropped):
            st = MongoStorage(mongo_server.dsn, ns)
            for i in range(5):
                st.enqueue(NewTask(f"t{i}", "q", "h"))
            st.close()
        before = list(client[kept][schema.TASKS].find({}, sort=[("_id", 1)]))
        mongo_server.drop_namespace(dropped)
        assert dropped not in client.list_database_names()
        assert list(client[kept][schema.TASKS].find({}, sort=[("_id", 1)])) == before
        assert set(_indexes(client, kept)) == INDEXES
        assert client[stranger]["tasks"].count_documents({}) == 1
        mongo_server.drop_namespace(dropped)  # idempotent
    finally:
        client.drop_database(stranger)
        mongo_server.drop_namespace(kept)


def test_a_server_object_closes_only_the_namespaces_it_created(mongo_server):
    client = mongo_server.admin.connection()
    mine = mongo_server.create_namespace()
    other = MongoServer(mongo_server.dsn)
    theirs = other.create_namespace()
    other.close()
    try:
        names = client.list_database_names()
        assert theirs not in names and mine in names
    finally:
        mongo_server.drop_namespace(mine)


def test_indexes_are_created_idempotently_and_a_second_opener_changes_nothing(
    mongo_server, namespace
):
    client = mongo_server.admin.connection()
    first = MongoStorage(mongo_server.dsn, namespace)
    for i in range(3):
        first.enqueue(NewTask(f"t{i}", "q", "h"))
    indexes = _indexes(client, namespace)
    assert set(indexes) == INDEXES
    assert indexes["claim"][0] == [("queue", 1), ("due_us", 1), ("seq", 1)]
    counter = client[namespace][schema.COUNTERS].find_one({"_id": schema.SEQ_ID})
    assert counter is not None and counter["n"] == 3
    second = MongoStorage(mongo_server.dsn, namespace)  # opens (and ensures) again
    second.stats("q")
    schema.ensure(client[namespace])  # and once more, directly
    assert _indexes(client, namespace) == indexes
    assert client[namespace][schema.COUNTERS].count_documents({}) == 1
    assert client[namespace][schema.COUNTERS].find_one({"_id": schema.SEQ_ID})["n"] == 3
    assert second.enqueue(NewTask("t3", "q", "h"))
    assert [c.task_id for c in second.claim_due("q", 10, LEASE)] == ["t0", "t1", "t2", "t3"]
    first.close()
    second.close()


LABEL = re.compile(r"SecantusDB \d+\.\d+\S* \(MongoDB wire protocol, not MongoDB\)")


def _honest(text: str, secantus: bool) -> None:
    if secantus:
        assert LABEL.search(text), text
        # "MongoDB" appears only inside "MongoDB wire protocol, not MongoDB"
        assert "MongoDB" not in LABEL.sub("", text), text
    else:
        assert re.search(r"MongoDB \d+\.\d+", text) and "SecantusDB" not in text, text


def test_the_server_is_named_honestly(mongo_server, connect):
    flavour = mongo_server.flavour
    _honest(flavour.label, flavour.secantus)
    _honest(mongo_server.origin, flavour.secantus)
    caps = connect().capabilities()
    assert caps.durable is True
    _honest(caps.durability, flavour.secantus)


def test_the_report_header_names_the_server_honestly(mongo_server, tmp_path):
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "--pyargs", "rdq_compliance.suite",
            "--rdq-backend=mongo", f"--rdq-dsn={mongo_server.dsn}",
            "-k", "test_enqueue_returns_true_then_false_for_the_same_id", "-q",
            "-p", "no:cacheprovider", "-p", "no:xdist",
        ],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (header,) = [line for line in proc.stdout.splitlines() if line.startswith("rdq: mongo")]
    assert mongo_server.flavour.label in header, header
    _honest(header, mongo_server.flavour.secantus)
