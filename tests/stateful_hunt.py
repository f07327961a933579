"""Hunting the deliberately broken backends with the stateful machine
(``contract.md#8-bug-classes``).

Shared by the kit's own test (``tests/test_stateful_finds_bugs.py``) and the figures
script (``benchmarks/stateful_bugs.py``). A hunt runs the machine **from scratch**: no
``@example``, no example database (``database=None``), a fixed seed; it records when the
first failure was found (examples run, seconds), the rule it broke, and the program
hypothesis shrank it to (steps, and the program as hypothesis printed it).

The broken backends are :mod:`tests.broken.memory`'s; the cases (which ones are hunted,
the rules that may name each) are :mod:`tests.broken.catalogue`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import hypothesis
from hypothesis.errors import Flaky
from rdq_memory.plugin import MemoryBackend

from rdq_compliance import stateful
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from tests.broken import catalogue
from tests.broken import memory as broken

#: The hunt's budget: the ci profile's programs (up to 30 steps), many more of them.
HUNT_EXAMPLES = 3000
#: "A few steps": the most a shrunk program may have.
MAX_SHRUNK_STEPS = 12
SEED = 0


@dataclass(frozen=True)
class Case:
    """A broken variant, the bug class it stands for, and the rule ids that may name it."""

    variant: str
    bug_class: str
    rules: frozenset[str]

    def __str__(self) -> str:
        return self.variant


#: The memory variants the machine hunts: the catalogue's (:mod:`tests.broken.catalogue`).
CASES = [
    Case(variant.name, variant.bug_class, machine.rules)
    for variant, machine in catalogue.cases(catalogue.Machine, "memory")
]

#: Broken variants the machine does not hunt, and why (the catalogue's excuses).
NOT_HUNTED = {
    **{v.name: why for v in catalogue.variants("memory") if (why := v.excused.get("machine"))},
    catalogue.control("memory").name: "not broken: the control",
}


@dataclass
class Hunt:
    """What one hunt found."""

    case: Case
    seed: int
    found: bool
    rule: str | None
    examples_to_find: int | None
    seconds_to_find: float | None
    seconds_total: float
    examples_total: int
    shrunk_steps: int | None
    program: list[str] = field(default_factory=list)
    message: str = ""
    error: BaseException | None = None
    victims: list[str] = field(default_factory=list)
    #: the failing program did not replay the same way (hypothesis's ``Flaky``), so
    #: hypothesis could not shrink or print it: a backend whose failure depends on timing
    unreplayable: bool = False

    def describe(self) -> str:
        head = (
            f"{self.case.variant} (seed {self.seed}): found={self.found} rule={self.rule} "
            f"after {self.examples_to_find} examples / {self.seconds_to_find}s, shrunk to "
            f"{self.shrunk_steps} steps, {self.seconds_total:.1f}s in all"
        )
        return head + "\n" + "\n".join(self.program) + ("\n" + self.message if self.message else "")


def program_lines(exc: BaseException) -> list[str]:
    """The shrunk program hypothesis printed (its notes), without the invariant checks."""
    notes: list[str] = []
    stack = [exc]
    while stack:
        e = stack.pop()
        notes += getattr(e, "__notes__", [])
        stack += list(getattr(e, "exceptions", []))
    lines = [ln.strip() for note in notes for ln in note.splitlines()]
    invariants = {"history_keeps_invariant_h", "model_and_backend_agree", "one_live_claim_per_task"}
    return [
        ln
        for ln in lines
        if ln.startswith(("state", "claims_", "(claims_"))
        and not any(f"state.{name}()" in ln for name in invariants)
    ]


def hunt(
    case: Case,
    *,
    seed: int = SEED,
    max_examples: int = HUNT_EXAMPLES,
    backends: object = broken,
) -> Hunt:
    """Run the machine from scratch against ``case.variant`` until it fails (or the budget
    runs out), shrinking what it found."""
    backend = getattr(backends, case.variant)
    assert isinstance(backend, MemoryBackend)
    store = backend.store_factory
    victims: list[str] = getattr(store, "victims", [])
    victims.clear()
    session = Session(Settings(backend=case.variant), backend=backend)
    session.start()
    settings = hypothesis.settings(
        stateful.settings_for("ci"), max_examples=max_examples, database=None
    )
    stats = stateful.RunStats()
    started = time.perf_counter()
    error: BaseException | None = None
    try:
        stateful.run(
            session,
            settings=settings,
            seed=seed,
            stats=stats,
        )
    except Exception as exc:  # the failure is what we hunt; report it, do not raise
        error = exc
    finally:
        session.close()
    violation = _violation(error)
    return Hunt(
        case=case,
        seed=seed,
        found=violation is not None,
        rule=None if violation is None else violation.rule,
        examples_to_find=stats.first_failure_example,
        seconds_to_find=(
            None if stats.first_failure_seconds is None else round(stats.first_failure_seconds, 2)
        ),
        seconds_total=time.perf_counter() - started,
        examples_total=stats.examples,
        shrunk_steps=stats.shrunk_steps,
        program=[] if error is None else program_lines(error),
        message="" if error is None else str(violation or error)[:2000],
        error=error,
        victims=list(victims),
        unreplayable=violation is not None and isinstance(violation.__cause__, Flaky),
    )


def _violation(error: BaseException | None) -> stateful.StatefulViolation | None:
    stack = [] if error is None else [error]
    while stack:
        e = stack.pop()
        if isinstance(e, stateful.StatefulViolation):
            return e
        stack += list(getattr(e, "exceptions", []))
    return None
