"""Hunting the deliberately broken backends with the stateful machine (SPEC §5).

Shared by the kit's own test (``tests/test_stateful_finds_bugs.py``) and the figures
script (``benchmarks/stateful_bugs.py``). A hunt runs the machine **from scratch**: no
``@example``, no example database (``database=None``), a fixed seed; it records when the
first failure was found (examples run, seconds), the rule it broke, and the program
hypothesis shrank it to (steps, and the program as hypothesis printed it).

``tests/`` must be importable (``tests/conftest.py`` puts it on ``sys.path``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import hypothesis
import rdq_broken_backends as broken
from rdq_memory.plugin import MemoryBackend

from rdq_compliance import stateful
from rdq_compliance.session import Session
from rdq_compliance.settings import Settings
from rdq_core.model import Task

#: The hunt's budget: the ci profile's programs (up to 30 steps), many more of them.
HUNT_EXAMPLES = 3000
#: "A few steps": the most a shrunk program may have.
MAX_SHRUNK_STEPS = 12
SEED = 0


@dataclass(frozen=True)
class Case:
    """A broken variant, the SPEC §5 class it stands for, and the rule ids that may name it."""

    variant: str
    bug_class: str
    rules: frozenset[str]

    def __str__(self) -> str:
        return self.variant


def _case(variant: str, bug_class: str, *rules: str) -> Case:
    return Case(variant, bug_class, frozenset(rules))


CASES = [
    _case("check_then_act_claim", "§5.1 check-then-act claim: two workers get one task",
          "one-claim"),
    _case("reclaim_ignores_lease", "§5.2 reclaim ignoring lease_expires_at: live lease stolen",
          "one-claim", "lease-respected"),
    _case("outcome_ignores_token", "§5.3 outcome accepted without checking the token",
          "fencing"),
    _case("token_not_rotated_on_reclaim", "§5.3 (extra) reclaim keeps the expired token",
          "fencing"),
    _case("outcome_fenced_by_clock", "§2/§5.3 (extra) fencing by clock, not by token",
          "fencing"),
    _case("lease_expired_numbered_from_count",
          "§5.4 LEASE_EXPIRED numbered from attempt_count: redriven task wedged",
          "history-numbering"),
    _case("reclaim_without_lease_expired_attempt",
          "§2/§5.4 (extra) reclaim records no LEASE_EXPIRED attempt", "reclaim-expired"),
    _case("redrive_resets_history", "§5.5 redrive resets history", "redrive"),
    _case("redrive_keeps_attempt_count", "§5.5 redrive keeps attempt_count", "redrive"),
    _case("redrive_leaves_not_due", "§5.5 redrive leaves the task not due", "redrive"),
    _case("redrive_any_status", "§5.5/§4 (extra) redrive by ids touches live tasks", "redrive"),
    _case("claims_before_due", "§5.6 PENDING tasks claimed before next_attempt_at",
          "claim-due-only"),
    _case("claims_terminal_tasks", "§5.6 SUCCEEDED/DEAD tasks claimed again", "terminal-final"),
    _case("reschedule_ignores_delay", "§5.6 (extra) reschedule ignores its delay",
          "transition"),
    _case("worker_clock_claim", "§2 (extra) claim on the worker's clock, 500 ms fast",
          "storage-clock"),
    _case("complete_records_no_attempt", "§2 (extra) complete records no SUCCESS attempt",
          "transition"),
    _case("reschedule_deletes_task", "§5.7 task lost: deleted on failure", "no-loss"),
    _case("expired_leases_never_reclaimed",
          "§5.7 task lost: dropped on a crash (expired lease never reclaimed)",
          "reclaim-expired"),
    _case("dlq_misses_retryable_deaths", "§5.7 task lost: DEAD but missing from the DLQ",
          "no-loss"),
    _case("dlq_drops_first_task", "§5.7 task lost: oldest DEAD task never listed", "no-loss"),
    _case("dlq_page_boundary_skip", "§4/§5.7 (extra) DLQ paging skips a task per page",
          "no-loss", "dlq-paging"),
    _case("purge_any_status", "§5.7 (extra) purge by ids deletes live tasks", "purge"),
    _case("purge_succeeded_ignores_age", "§4 (extra) purge_succeeded deletes recent results",
          "purge-succeeded"),
    _case("extend_lease_ignores_token", "§5.8 heartbeat extends a lease no longer held",
          "fencing"),
    _case("limit_ignored", "§5.9 limit ignored", "claim-limit"),
    _case("queues_not_isolated", "§5.9 queues not isolated", "queue-isolation"),
    _case("newest_first", "§5.9 ordering by due time ignored (newest first)", "claim-order"),
    _case("enqueue_resets_existing", "§5.10 enqueue resets an existing task",
          "enqueue-idempotent"),
    _case("enqueue_id_in_two_queues", "§5.10 one id accepted in two queues",
          "enqueue-idempotent"),
    _case("payload_truncated_at_nul", "§1 (extra) payload cut at the first NUL byte",
          "round-trip"),
    _case("stats_across_queues", "§4 (extra) stats count every queue", "stats"),
    _case("claim_stops_short", "§2 (extra) a batch claim returns one task whatever the limit",
          "claim-complete"),
    _case("get_fails_after_redrive", "(machine only) get raises a driver error after a redrive",
          "model-equivalence"),
    _case("dlq_browse_is_a_receive", "§4 (extra) listing the DLQ changes the tasks it lists",
          "dlq-paging"),
    _case("empty_filter_means_everything", "§4 (extra) an empty selector selects everything",
          "empty-selector"),
]  # fmt: skip

class GetFailsAfterRedrive(broken._Broken):
    """The machine's catch-all rule (``model-equivalence``): a read that fails.

    Incident: a migration added a column the row decoder of ``get`` did not know, and
    only tasks that had been through a redrive carried a value in it: ``get`` of such a
    task raised a driver error from deep inside the decoder. No conformance rule is about
    a crashing read, so this variant lives here, not in ``rdq_broken_backends``.
    """

    def _get(self, task_id: str) -> Task:
        task = super()._get(task_id)
        if task.redrive_count:
            self._victim(task_id)
            raise RuntimeError(f"row decoder: unknown value in column 'redriven_by' of {task_id}")
        return task


#: Broken backends only the machine hunts (``hunt`` looks here after rdq_broken_backends).
machine_only = SimpleNamespace(
    get_fails_after_redrive=MemoryBackend(GetFailsAfterRedrive, "get-fails-after-redrive")
)

#: Broken variants the machine does not hunt, and why.
NOT_HUNTED = {
    "enqueue_skips_validation": (
        "bad input is the conformance suite's job (test_bad_input.py): the machine only "
        "ever sends valid input, so a backend that skips validation behaves like the model"
    ),
    "reference_with_claim_hooks": "not broken: the control",
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
    backend = getattr(backends, case.variant, None) or getattr(machine_only, case.variant)
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
    )


def _violation(error: BaseException | None) -> stateful.StatefulViolation | None:
    stack = [] if error is None else [error]
    while stack:
        e = stack.pop()
        if isinstance(e, stateful.StatefulViolation):
            return e
        stack += list(getattr(e, "exceptions", []))
    return None
