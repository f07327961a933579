"""The durability check itself (rdq_compliance.suite.durability), on the reference store
behind a pretend server: it passes when nothing is lost, names the rule and the tasks when
the restart loses everything, names a claim the store forgot, and refuses to pass a run
too thin to mean anything."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from rdq_compliance.provision.backend import KILL_SERVER, RESTART_SERVER, Server
from rdq_compliance.suite.durability import (
    AckedClaim,
    AckedOutcome,
    DurabilityPlan,
    Ledger,
    durability_problems,
    run_durability_check,
)
from rdq_core.errors import BackendUnavailable
from rdq_core.memory import MemoryStore
from rdq_core.model import NewTask, Outcome

QUICK = DurabilityPlan(workers=3, before_kill=0.3, down=0.1, after_restart=0.1)


class PretendServer(Server):
    """A reference store that a restart keeps (``keeps``) or replaces by an empty one."""

    dsn = "memory://pretend"
    origin = "a pretend server"
    faults = frozenset({KILL_SERVER, RESTART_SERVER})

    def __init__(self, keeps: bool) -> None:
        self.keeps = keeps
        self.store = MemoryStore()
        self.down = False

    def create_namespace(self) -> str:
        return "ns"

    def drop_namespace(self, namespace: str) -> None:
        pass

    def close(self) -> None:
        pass

    def kill(self) -> None:
        self.down = True

    def restart(self) -> None:
        if not self.keeps:
            self.store = MemoryStore()
        self.down = False


class Handle:
    """What a storage handle on the pretend server does: the live store, or unavailable."""

    def __init__(self, server: PretendServer) -> None:
        self.server = server

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            if self.server.down:
                raise BackendUnavailable("the pretend server is down; nothing was done")
            return getattr(self.server.store, name)(*args)

        return call


def test_a_server_that_keeps_everything_passes() -> None:
    server = PretendServer(keeps=True)
    report = run_durability_check(server, lambda: Handle(server), QUICK)  # type: ignore[arg-type, return-value]
    assert report.ok, report.message
    assert report.message == ""
    assert min(report.ledger.before_kill()) >= QUICK.least_before_kill
    assert report.ledger.unknown > 0  # calls made while it was down


def test_a_restart_that_loses_everything_fails_naming_the_rule_and_the_tasks() -> None:
    server = PretendServer(keeps=False)
    report = run_durability_check(server, lambda: Handle(server), QUICK)  # type: ignore[arg-type, return-value]
    assert not report.ok
    assert report.message.startswith(
        "[durability] acknowledged work survives a kill and restart of the server: "
        "after a SIGKILL and restart of a pretend server: "
    )
    for kind in ("enqueues", "claims", "outcomes"):
        assert f"acknowledged {kind} lost: task 'w" in report.message
    assert "gone (NotFound)" in report.message


def test_a_claim_the_store_forgot_is_named_with_what_the_task_is_now() -> None:
    store = MemoryStore()
    store.enqueue(NewTask("t-1", "durability", "h"))
    now = store.now()
    ledger = Ledger(enqueued={"t-1": False})
    ledger.claims.append(AckedClaim("t-1", "f" * 32, now, now + timedelta(minutes=30), "w0", False))
    ledger.outcomes.append(AckedOutcome("t-1", now, Outcome.SUCCESS, "w0", False))
    problems = durability_problems(store, ledger, DurabilityPlan(least_before_kill=1))
    assert problems == [
        f"1 of 1 acknowledged claims lost: task 't-1' claimed by w0 at {now.isoformat()} "
        "(token ffffffff…), now PENDING, attempt_count 0, 0 attempt(s) in the history",
        f"1 of 1 acknowledged outcomes lost: task 't-1': SUCCESS by w0 of the claim at "
        f"{now.isoformat()}, now PENDING, attempt_count 0, 0 attempt(s) in the history",
    ]


def test_a_run_too_thin_to_show_anything_is_not_a_pass() -> None:
    problems = durability_problems(MemoryStore(), Ledger(), DurabilityPlan())
    assert problems == [
        "the load was too thin to show anything: 0 enqueues, 0 claims and 0 outcomes "
        "acknowledged before the kill (at least 20 of each are needed)"
    ]


class SlowHandle(Handle):
    """A server answering each call 20 ms late (a loaded one): 0.3 s of load is far too
    little for 20 acknowledged outcomes."""

    def __getattr__(self, name: str) -> Any:
        call = super().__getattr__(name)

        def slow(*args: Any) -> Any:
            time.sleep(0.02)
            return call(*args)

        return slow


def test_a_slow_server_is_loaded_until_the_run_means_something() -> None:
    server = PretendServer(keeps=True)
    report = run_durability_check(server, lambda: SlowHandle(server), QUICK)  # type: ignore[arg-type, return-value]
    assert report.ok, report.message
    assert min(report.ledger.before_kill()) >= QUICK.least_before_kill


def test_the_load_stops_at_its_cap_and_the_run_is_then_too_thin() -> None:
    server = PretendServer(keeps=True)
    capped = DurabilityPlan(
        workers=1, before_kill=0.1, most_before_kill=0.3, down=0.05, after_restart=0.05,
        least_before_kill=10_000,
    )  # fmt: skip
    t0 = time.monotonic()
    report = run_durability_check(server, lambda: SlowHandle(server), capped)  # type: ignore[arg-type, return-value]
    # stopped by the 0.3 s cap: 10,000 calls of 20 ms each would take over 200 s
    assert time.monotonic() - t0 < 60
    assert not report.ok and "the load was too thin" in report.message
