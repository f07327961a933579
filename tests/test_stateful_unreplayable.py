"""A backend that breaks a rule only sometimes: hypothesis cannot replay the failing
program the same way (its ``Flaky`` errors), and the stateful machine still fails the run
with the rule it saw broken first, naming the step, rather than with hypothesis's own
error or nothing."""

from __future__ import annotations

import hypothesis
import pytest
from rdq_memory.plugin import MemoryBackend

from rdq_compliance import stateful
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from rdq_core.memory import MemoryStore
from rdq_core.model import NewTask, Status
from tests.broken.memory import EnqueueResetsExisting


class ResetsOnce(EnqueueResetsExisting):
    """Re-enqueue resets an existing task that has left PENDING (bug class
    ``enqueue-not-idempotent``: its status changes, so the reset shows), the first time in
    the process only: the program that shows it never shows it again."""

    fired = False

    def _enqueue(self, task: NewTask) -> bool:
        row = self._rows.get(task.id)
        if (
            ResetsOnce.fired
            or row is None
            or row.task.queue != task.queue
            or row.task.status is Status.PENDING
        ):
            return MemoryStore._enqueue(self, task)  # the reference enqueue
        ResetsOnce.fired = True
        return super()._enqueue(task)


def _run(backend: MemoryBackend) -> None:
    session = Session(Settings(backend=backend.name), backend=backend)
    session.start()
    try:
        settings = hypothesis.settings(
            stateful.settings_for("ci"), max_examples=3000, database=None
        )
        stateful.run(session, settings=settings, seed=0)
    finally:
        session.close()


def test_a_rule_broken_once_fails_the_run_with_that_rule() -> None:
    ResetsOnce.fired = False
    with pytest.raises(stateful.StatefulViolation) as info:
        _run(MemoryBackend(ResetsOnce, "resets-once"))
    assert ResetsOnce.fired
    assert info.value.rule == "enqueue-idempotent", str(info.value)
    message = str(info.value)
    assert message.startswith("[enqueue-idempotent] ") and "step " in message, message
    assert "did not replay the same way" in message, message
    assert isinstance(info.value.__cause__, hypothesis.errors.Flaky), info.value.__cause__


def test_a_rule_broken_every_time_is_shrunk_as_before() -> None:
    with pytest.raises(stateful.StatefulViolation) as info:
        _run(MemoryBackend(EnqueueResetsExisting, "resets-always"))
    assert info.value.rule == "enqueue-idempotent", str(info.value)
    assert "did not replay" not in str(info.value)


def test_a_hunt_says_when_its_failing_program_did_not_replay() -> None:
    """``tests/test_stateful_finds_bugs.py`` tries another seed only for such a hunt."""
    from types import SimpleNamespace

    from tests import stateful_hunt as sh

    case = sh.Case("resets_once", "enqueue-not-idempotent", frozenset({"enqueue-idempotent"}))
    ResetsOnce.fired = False
    once = sh.hunt(case, backends=SimpleNamespace(resets_once=MemoryBackend(ResetsOnce, "once")))
    assert once.found and once.rule == "enqueue-idempotent" and once.unreplayable, once.describe()
    case = sh.Case("resets_always", "enqueue-not-idempotent", frozenset({"enqueue-idempotent"}))
    always = sh.hunt(
        case,
        backends=SimpleNamespace(
            resets_always=MemoryBackend(EnqueueResetsExisting, "resets-always")
        ),
    )
    assert always.found and not always.unreplayable, always.describe()
