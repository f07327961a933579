"""rdq_compliance.provision.admin: a server's admin handle, on a fake driver.

The rules: the connection is opened on first use and kept; a driver error becomes the
backend's error for the action; a connection the error lost is opened again (once more
with ``retries``); ``forget`` closes it and the next call opens a new one; a child forked
from the owner never uses nor closes the parent's connection; ``close`` drops the
namespaces made and still there, stops at a server that does not answer, and closes the
connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from rdq_compliance.provision.admin import AdminHandle
from rdq_core.errors import BackendUnavailable, RdqError


class DriverError(Exception):
    pass


@dataclass
class FakeConn:
    number: int
    open: bool = True
    calls: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.open = False


class Mapped(RdqError):
    pass


def handle(**kwargs: object) -> tuple[AdminHandle[FakeConn], list[FakeConn]]:
    made: list[FakeConn] = []

    def connect() -> FakeConn:
        made.append(FakeConn(len(made)))
        return made[-1]

    admin: AdminHandle[FakeConn] = AdminHandle(
        connect=connect,
        disconnect=lambda conn: conn.close(),
        errors=(DriverError,),
        map_error=lambda exc, action: Mapped(f"{action} on the fake server: {exc}"),
        usable=lambda conn: conn.open,
        **kwargs,  # type: ignore[arg-type]
    )
    return admin, made


def test_the_connection_is_opened_lazily_and_kept() -> None:
    admin, made = handle()
    assert made == []
    assert admin.call("a", lambda c: c.number) == 0
    assert admin.call("b", lambda c: c.number) == 0
    assert len(made) == 1
    made[0].open = False  # closed under us: reopened
    assert admin.call("c", lambda c: c.number) == 1


def test_a_driver_error_becomes_the_backends_error_for_the_action() -> None:
    admin, _ = handle()

    def fail(conn: FakeConn) -> None:
        raise DriverError("relation is locked")

    with pytest.raises(Mapped, match="drop_namespace on the fake server: relation is locked"):
        admin.call("drop_namespace", fail)
    assert admin.call("again", lambda c: c.number) == 0, "a connection not lost is kept"


def test_a_lost_connection_is_opened_again_and_retried_when_asked() -> None:
    def lose(conn: FakeConn) -> None:
        conn.open = False
        raise DriverError("server closed the connection")

    admin, _ = handle(lost=lambda conn, exc: not conn.open)
    with pytest.raises(Mapped):
        admin.call("x", lose)
    assert admin.call("y", lambda c: c.number) == 1

    admin, _ = handle(lost=lambda conn, exc: not conn.open, retries=1)
    attempts: list[int] = []

    def lose_first(conn: FakeConn) -> int:
        attempts.append(conn.number)
        if conn.number == 0:
            lose(conn)
        return conn.number

    assert admin.call("z", lose_first) == 1
    assert attempts == [0, 1]


def test_forget_closes_the_connection_and_the_next_call_opens_one() -> None:
    admin, made = handle()
    admin.call("a", lambda c: None)
    admin.forget()
    assert not made[0].open
    admin.call("b", lambda c: None)
    assert len(made) == 2 and made[1].open
    admin.forget()
    admin.forget()  # idempotent


def test_a_forked_child_neither_uses_nor_closes_the_parents_connection() -> None:
    admin, made = handle()
    admin.call("a", lambda c: None)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        number = admin.call("in the child", lambda c: c.number)
        admin.forget()
        os.write(write_end, f"{number},{made[0].open}".encode())
        os._exit(0)
    os.close(write_end)
    report = os.read(read_end, 100).decode()
    os.close(read_end)
    os.waitpid(child, 0)
    assert report == "1,True", "the child opened its own and left the parent's open"
    assert made[0].open


def test_close_drops_the_leftover_namespaces_then_closes() -> None:
    admin, made = handle()
    for namespace in ("ns-b", "ns-a", "ns-gone"):
        admin.created(namespace)
    admin.dropped("ns-gone")
    admin.call("a", lambda c: None)
    dropped: list[str] = []
    admin.close(dropped.append, also=["ns-stock"])
    assert dropped == ["ns-stock", "ns-a", "ns-b"]
    assert not made[0].open
    dropped.clear()
    admin.close(dropped.append)
    assert dropped == [], "each namespace is dropped once"


def test_close_stops_at_a_server_that_does_not_answer() -> None:
    admin, _ = handle()
    admin.created("ns-1")
    admin.created("ns-2")
    tried: list[str] = []

    def unavailable(namespace: str) -> None:
        tried.append(namespace)
        raise BackendUnavailable("the server does not answer")

    admin.close(unavailable)
    assert tried == ["ns-1"]
