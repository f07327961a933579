"""The owner records and the sweep's decisions (:mod:`rdq_compliance.provision.owners`),
with crafted records; the same on each real server is ``tests/server_contract/test_sweep.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from rdq_compliance.provision.backend import Server
from rdq_compliance.provision.owners import FOREIGN_AFTER_S, Owner, owner_record, sweep
from rdq_compliance.session import sweep_server
from rdq_core.errors import BackendUnavailable


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_record_round_trips_and_anything_else_is_no_record() -> None:
    me = Owner.current()
    text = owner_record()
    assert text.isascii() and len(text) < 300
    back = Owner.decode(text)
    assert back is not None and (back.host, back.pid, back.started) == (
        me.host,
        me.pid,
        me.started,
    )
    assert Owner.decode(text.encode()) == back
    for junk in (None, "", "a comment someone wrote", "rdq-owner/1 {not json", "rdq-owner/1 {}"):
        assert Owner.decode(junk) is None, junk


def test_this_process_is_here_and_alive_a_reaped_one_and_a_reused_pid_are_not() -> None:
    me = Owner.current()
    assert me.here() and me.alive()
    gone = Owner(me.host, me.boot, me.pidns, _dead_pid(), me.started, me.created)
    assert gone.here() and not gone.alive()
    reused = Owner(me.host, me.boot, me.pidns, os.getpid(), me.started - 3600, me.created)
    assert not reused.alive(), "a pid started at another time is another process"
    elsewhere = Owner("another-host", me.boot, me.pidns, os.getpid(), me.started, me.created)
    assert not elsewhere.here()


def test_the_sweep_drops_only_what_dead_or_old_foreign_owners_left() -> None:
    me = Owner.current()
    now = time.time()
    dead = Owner(me.host, me.boot, me.pidns, _dead_pid(), me.started, now - 30)
    foreign = Owner("ci-runner-7", "other-boot", 1, 99, 1.0, now - 60)
    old_foreign = Owner("ci-runner-7", "other-boot", 1, 99, 1.0, now - FOREIGN_AFTER_S - 60)
    records = {
        "ns_live": me.encode(),
        "ns_dead": dead.encode(),
        "ns_foreign": foreign.encode(),
        "ns_old_foreign": old_foreign.encode(),
        "ns_unrecorded": None,
        "ns_stubborn": Owner(me.host, me.boot, me.pidns, dead.pid, me.started, now).encode(),
    }
    dropped: list[str] = []

    def drop(namespace: str) -> None:
        if namespace == "ns_stubborn":
            raise BackendUnavailable("postgres server at 'postgresql://u:***@h/db' said no")
        dropped.append(namespace)

    report = sweep(records, drop, now=now)
    assert dropped == ["ns_dead", "ns_old_foreign"]
    assert set(report.dropped) == {"ns_dead", "ns_old_foreign"}
    assert set(report.kept) == {"ns_live", "ns_foreign"}
    assert report.unrecorded == ["ns_unrecorded"]
    assert set(report.failed) == {"ns_stubborn"} and "said no" in report.failed["ns_stubborn"]
    assert f"pid {dead.pid} on {me.host}, 30 s old, gone" == report.dropped["ns_dead"]
    line = report.summary()
    assert line is not None
    assert "dropped 2 namespace(s) left by dead runs" in line
    assert "could not drop 1 (ns_stubborn" in line
    assert "1 namespace(s) with no owner record (e.g. ns_unrecorded" in line


def test_nothing_to_sweep_says_nothing() -> None:
    report = sweep({"ns": Owner.current().encode()}, lambda ns: pytest.fail("dropped " + ns))
    assert report.summary() is None and list(report.kept) == ["ns"]


class _Plain(Server):
    """A server that keeps no owner records (the hook's default)."""

    dsn = "x://"

    def create_namespace(self) -> str:
        return "ns"

    def drop_namespace(self, namespace: str) -> None:
        raise AssertionError("nothing may be dropped")

    def close(self) -> None:
        return None


class _Down(_Plain):
    def recorded_namespaces(self) -> dict[str, str | None]:
        raise BackendUnavailable("redis server at 'redis://:***@h' does not answer")


def test_a_server_without_records_is_left_alone_and_one_that_cannot_list_says_so() -> None:
    plain = sweep_server(_Plain())
    assert plain.unsupported is not None and "keeps no owner records" in plain.unsupported
    assert plain.summary() is None
    down = sweep_server(_Down())
    line = down.summary()
    assert line is not None and line.startswith("could not list the namespaces") and "***" in line
