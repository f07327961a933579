"""Where the machine runs (:class:`Target`), what a run did (:class:`RunStats`), the
violation it raises, and the small records the machine keeps between steps."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rdq_compliance import rules
from rdq_compliance.provision.backend import StorageSpec
from rdq_core.model import (
    DlqFilter,
    DlqPage,
    QueueStats,
    Task,
)
from rdq_core.spi import Storage

# ---- where the machine runs ---------------------------------------------------------------------


class Target(Protocol):
    """Where the machine runs: a fresh, isolated namespace per example. A started
    :class:`rdq_compliance.session.Session` is one (what every runner passes)."""

    name: str

    def create_namespace(self) -> StorageSpec: ...

    def open(self, spec: StorageSpec) -> Storage: ...

    def drop_namespace(self, spec: StorageSpec) -> None: ...


@dataclass
class RunStats:
    """What a run did; filled in as it goes (the kit's own tests read it)."""

    examples: int = 0
    steps: int = 0
    failures: int = 0
    first_failure_example: int | None = None
    first_failure_seconds: float | None = None
    #: Steps of the last failing example: hypothesis replays the shrunk program last.
    shrunk_steps: int | None = None
    #: The first rule broken in the run (kept if hypothesis cannot replay its program).
    first_violation: StatefulViolation | None = None
    started: float = field(default_factory=time.perf_counter)
    #: called with the stats as each program begins (the runner's progress line)
    on_example: Callable[[RunStats], None] | None = None

    def begin_example(self) -> None:
        """A program begins: count it and tell ``on_example``."""
        self.examples += 1
        if self.on_example is not None:
            self.on_example(self)

    def failed(self, steps: int, violation: StatefulViolation | None = None) -> None:
        self.failures += 1
        if self.first_failure_example is None:
            self.first_failure_example = self.examples
            self.first_failure_seconds = time.perf_counter() - self.started
        if self.first_violation is None:
            self.first_violation = violation
        self.shrunk_steps = steps


class StatefulViolation(AssertionError):
    """The backend broke a rule; the message starts with the rule's id."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(rules.message(rule, detail))
        self.rule = rule
        self.detail = detail


# ---- small records ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """What a call did: returned ``value`` or raised ``error``."""

    value: Any = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        if self.error is None:
            return f"returned {self.value!r}"
        return f"raised {type(self.error).__name__}({str(self.error)[:300]!r})"


def attempt(fn: Callable[..., Any], *args: Any) -> Result:
    try:
        return Result(fn(*args))
    except Exception as exc:  # every outcome is compared, none escapes unexamined
        return Result(error=exc)


@dataclass(eq=False)
class HeldClaim:
    """A claim a worker holds (a value of the ``claims`` bundle), current or stale."""

    serial: int
    worker: int
    task_id: str
    token: str
    model_token: str

    def __repr__(self) -> str:
        return f"<claim #{self.serial} of {self.task_id!r} by worker {self.worker}>"


@dataclass
class ClaimLife:
    """The life of one claim handed out, for the one rule: when it was live, how it ended."""

    serial: int
    worker: int
    task_id: str
    token: str
    claimed_at: datetime
    lease_end: datetime
    #: when an outcome with this token was accepted
    ended_at: datetime | None = None
    #: when another claim took the task over
    superseded_at: datetime | None = None
    #: lease end at the moment another claim took the task over
    lease_end_at_takeover: datetime | None = None
    outcomes: int = 0


@dataclass
class Paging:
    """A DLQ listing in progress, one page per step, other steps in between."""

    queue: str
    filter: DlqFilter | None
    size: int
    cursor: str
    model_cursor: str | None
    mutations: int
    #: DEAD (matching the filter) when the listing started and ever since: id -> dead_at
    stayed: dict[str, datetime | None]
    seen: dict[str, int]


@dataclass
class Observation:
    """The backend's and the model's observable state after a step."""

    t0: datetime
    t1: datetime
    tasks: dict[str, Task | None]
    model: dict[str, Task | None]
    stats: dict[str, QueueStats]
    dlq: dict[str, DlqPage]


