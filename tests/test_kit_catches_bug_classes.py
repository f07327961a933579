"""The kit's proof that its conformance suite fails broken backends (SPEC §5).

For every deliberately broken backend in :mod:`rdq_broken_backends` the suite is run
against it, exactly as a backend author would run it
(``pytest --pyargs rdq_compliance.suite... --rdq-backend=rdq_broken_backends:<variant>``),
and this test checks that

(a) the run fails;
(b) the named suite tests — the ones that exist to catch this bug class — fail;
(c) each of their failure reports starts with the violated rule's id (``[rule-id]``),
    and at least one of them names a task the broken code path actually mishandled
    (the broken store records those task ids as it goes, so "names the task" means the
    task the bug hit, not any task).

The controls run the *whole* suite against the unbroken reference store and against
the hook-split copy of it the claim-side variants are built on: both must pass
(0 failures, >0 passed), so a variant's failures come from its one change.

Choice of scope (``RDQ_KIT_SCOPE``). The whole suite takes about 11 s per backend
(lease expiries are waited for on the storage clock, never faked), so "the whole
suite for each of ~30 variants" takes about 7 minutes. So:

- the controls always run the **whole** suite;
- each variant runs, by default (``modules``), the whole suite modules that hold its
  catching tests (about 80 s for the file in total, one process);
- ``RDQ_KIT_SCOPE=tests`` narrows each variant's run with ``-k`` to its catching test
  functions (about 40 s in total); ``RDQ_KIT_SCOPE=suite`` runs the whole suite for
  every variant. The assertions are the same in every scope.

Runs are in-process (``pytester.runpytest_inprocess``): no interpreter start-up per
run, and the test reads the broken store's record of its victims directly. The
in-process run sees ``tests/`` on ``sys.path`` (put there by ``tests/conftest.py``);
``PYTHONPATH`` is set as well so any process the suite spawns could import the
variants too (the multi-process race skips on in-process stores anyway).
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import rdq_broken_backends as broken

from rdq_compliance.rules import RULES

# pytester restores sys.modules after every in-process run, so whatever a run imports
# is imported again by the next one. Hypothesis (pulled in by its pytest plugin) costs
# about a second per run that way; imported here once, every run reuses it.
importlib.import_module("hypothesis")

SUITE = "rdq_compliance.suite"
SCOPES = ("tests", "modules", "suite")
SCOPE = os.environ.get("RDQ_KIT_SCOPE", "modules").strip().lower() or "modules"
TESTS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    """One broken variant, the SPEC §5 class it stands for, and what must catch it.

    ``catchers`` maps a suite test to the rule id its failure must name. A key is
    ``module.py::test_name`` (every parametrization counts; at least one must fail,
    and every failing one must name the rule) or ``module.py::test_name[param]``
    (exactly that parametrization must fail).
    """

    variant: str
    bug_class: str
    catchers: dict[str, str]
    extra_modules: tuple[str, ...] = field(default=())

    @property
    def functions(self) -> list[str]:
        return sorted({key.split("::", 1)[1].split("[", 1)[0] for key in self.catchers})

    @property
    def modules(self) -> list[str]:
        mods = {key.split("::", 1)[0].removesuffix(".py") for key in self.catchers}
        return sorted(mods | set(self.extra_modules))

    def __str__(self) -> str:
        return self.variant


CASES = [
    # ---- §5.1 --------------------------------------------------------------------------
    Case(
        "check_then_act_claim",
        "§5.1 check-then-act claim: two workers get one task",
        {"test_exclusive.py::test_threads_never_share_a_claim": "one-claim"},
    ),
    # ---- §5.2 --------------------------------------------------------------------------
    Case(
        "reclaim_ignores_lease",
        "§5.2 reclaim ignoring lease_expires_at: a live lease is stolen",
        {
            "test_claim.py::test_task_with_live_lease_is_not_claimed_by_another_claim": (
                "lease-respected"
            ),
            "test_lease.py::test_live_lease_is_not_reclaimed_before_it_expires": (
                "lease-respected"
            ),
            "test_lease.py::test_extended_lease_is_not_reclaimed_at_the_original_expiry": (
                "lease-respected"
            ),
        },
    ),
    # ---- §5.3 --------------------------------------------------------------------------
    Case(
        "outcome_ignores_token",
        "§5.3 outcome accepted without checking the token",
        {
            "test_lease.py::test_stale_token_is_refused_and_changes_nothing[complete-reclaimed]": (
                "fencing"
            ),
            "test_lease.py::test_stale_token_is_refused_and_changes_nothing"
            "[reschedule-reclaimed]": "fencing",
            "test_lease.py::test_stale_token_is_refused_and_changes_nothing"
            "[dead_letter-reclaimed]": "fencing",
            "test_lease.py::test_at_most_one_outcome_per_token": "fencing",
        },
    ),
    Case(
        "token_not_rotated_on_reclaim",
        "§5.3 (extra) reclaim keeps the expired claim's token: fencing silently off",
        {
            "test_lease.py::test_stale_token_is_refused_and_changes_nothing[complete-reclaimed]": (
                "fencing"
            ),
            "test_lease.py::test_expired_lease_is_reclaimed_with_a_lease_expired_attempt": (
                "reclaim-expired"
            ),
        },
    ),
    Case(
        "outcome_fenced_by_clock",
        "§2/§5.3 (extra) fencing by clock, not token: a late worker's result is refused",
        {"test_lease.py::test_expired_worker_can_still_report_until_reclaimed": "fencing"},
    ),
    # ---- §5.4 --------------------------------------------------------------------------
    Case(
        "lease_expired_numbered_from_count",
        "§5.4 LEASE_EXPIRED numbered from attempt_count: redriven task wedged (UNIQUE)",
        {
            "test_history.py::test_reclaim_after_redrive_numbers_from_history": (
                "history-numbering"
            ),
            "test_history.py::test_numbering_continues_across_two_redrives": ("history-numbering"),
        },
    ),
    Case(
        "reclaim_without_lease_expired_attempt",
        "§2/§5.4 (extra) reclaim records no LEASE_EXPIRED attempt",
        {
            "test_lease.py::test_expired_lease_is_reclaimed_with_a_lease_expired_attempt": (
                "reclaim-expired"
            ),
        },
    ),
    # ---- §5.5 --------------------------------------------------------------------------
    Case(
        "redrive_resets_history",
        "§5.5 redrive resets history",
        {
            "test_redrive_purge.py::"
            "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept": "redrive",
        },
    ),
    Case(
        "redrive_keeps_attempt_count",
        "§5.5 redrive keeps attempt_count",
        {
            "test_redrive_purge.py::"
            "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept": "redrive",
        },
    ),
    Case(
        "redrive_leaves_not_due",
        "§5.5 redrive leaves the task not due",
        {
            "test_redrive_purge.py::"
            "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept"
            "[one-failure]": "redrive",
            "test_redrive_purge.py::"
            "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept"
            "[retried]": "redrive",
        },
    ),
    Case(
        "redrive_any_status",
        "§5.5/§4 (extra) redrive by ids touches tasks that are not DEAD",
        {
            "test_redrive_purge.py::test_redrive_by_ids_changes_only_the_selected_dead_tasks": (
                "redrive"
            ),
        },
    ),
    # ---- §5.6 --------------------------------------------------------------------------
    Case(
        "claims_before_due",
        "§5.6 PENDING tasks claimed before next_attempt_at",
        {
            "test_claim.py::test_future_task_is_not_claimed": "claim-due-only",
            "test_transitions.py::test_rescheduled_task_is_claimable_only_once_due": (
                "claim-due-only"
            ),
        },
    ),
    Case(
        "claims_terminal_tasks",
        "§5.6 SUCCEEDED/DEAD tasks claimed again",
        {"test_claim.py::test_succeeded_and_dead_tasks_are_never_claimed_again": "terminal-final"},
    ),
    Case(
        "reschedule_ignores_delay",
        "§5.6 (extra) reschedule ignores its delay: the task is due at once",
        {
            "test_transitions.py::"
            "test_reschedule_returns_the_task_to_pending_due_after_the_delay": "transition",
        },
    ),
    Case(
        "worker_clock_claim",
        "§2 (extra) claim uses the worker's clock (500 ms fast), not the storage's",
        {"test_claim.py::test_claim_stamps_the_lease_from_the_storage_clock": "storage-clock"},
    ),
    Case(
        "complete_records_no_attempt",
        "§2 (extra) complete records no SUCCESS attempt",
        {"test_transitions.py::test_complete_makes_the_task_succeeded": "transition"},
    ),
    # ---- §5.7 --------------------------------------------------------------------------
    Case(
        "reschedule_deletes_task",
        "§5.7 task lost: deleted on failure",
        {
            "test_transitions.py::"
            "test_reschedule_returns_the_task_to_pending_due_after_the_delay": "no-loss",
            "test_transitions.py::test_reschedule_keeps_the_error_exactly": "no-loss",
            "test_history.py::test_reschedule_and_expiry_share_one_numbering": "no-loss",
            "test_stats.py::test_stats_count_tasks_by_status": "stats",
        },
    ),
    Case(
        "expired_leases_never_reclaimed",
        "§5.7 task lost: dropped on a crash (an expired lease is never reclaimed)",
        {
            "test_lease.py::test_expired_lease_is_reclaimed_with_a_lease_expired_attempt": (
                "reclaim-expired"
            ),
        },
    ),
    Case(
        "dlq_misses_retryable_deaths",
        "§5.7 task lost: DEAD but missing from the DLQ (budget-exhausted deaths hidden)",
        {"test_dlq.py::test_dlq_lists_every_dead_task_with_its_whole_history": "no-loss"},
    ),
    Case(
        "dlq_drops_first_task",
        "§5.7 task lost: DEAD but missing from the DLQ (oldest never listed)",
        {
            "test_dlq.py::test_dlq_lists_every_dead_task_with_its_whole_history": "no-loss",
            "test_dlq.py::test_dlq_pages_return_every_dead_task_once_in_dead_letter_order": (
                "dlq-paging"
            ),
        },
    ),
    Case(
        "dlq_page_boundary_skip",
        "§4/§5.7 (extra) DLQ paging skips one task per page boundary",
        {
            "test_dlq.py::test_dlq_pages_return_every_dead_task_once_in_dead_letter_order": (
                "dlq-paging"
            ),
            "test_dlq.py::test_dlq_paging_is_stable_while_tasks_are_dead_lettered_between_pages": (
                "dlq-paging"
            ),
        },
    ),
    Case(
        "purge_any_status",
        "§5.7 (extra) task lost: purge by ids deletes live tasks",
        {"test_redrive_purge.py::test_purge_by_ids_deletes_only_the_selected_dead_tasks": "purge"},
    ),
    Case(
        "purge_succeeded_ignores_age",
        "§4 (extra) purge_succeeded deletes recent results",
        {
            "test_stats.py::test_purge_succeeded_keeps_tasks_younger_than_older_than": (
                "purge-succeeded"
            ),
        },
    ),
    # ---- §5.8 --------------------------------------------------------------------------
    Case(
        "extend_lease_ignores_token",
        "§5.8 heartbeat extends a lease the worker no longer holds",
        {
            "test_lease.py::test_stale_token_is_refused_and_changes_nothing"
            "[extend_lease-reclaimed]": "fencing",
            "test_lease.py::test_stale_token_is_refused_and_changes_nothing"
            "[extend_lease-completed]": "fencing",
        },
    ),
    # ---- §5.9 --------------------------------------------------------------------------
    Case(
        "limit_ignored",
        "§5.9 limit ignored",
        {"test_claim.py::test_claim_returns_exactly_limit_when_more_are_due": "claim-limit"},
    ),
    Case(
        "queues_not_isolated",
        "§5.9 queues not isolated",
        {"test_claim.py::test_claim_takes_only_tasks_of_its_own_queue": "queue-isolation"},
    ),
    Case(
        "newest_first",
        "§5.9 ordering by due time ignored (newest first)",
        {"test_claim.py::test_claims_come_out_oldest_due_first": "claim-order"},
    ),
    # ---- §5.10 -------------------------------------------------------------------------
    Case(
        "enqueue_resets_existing",
        "§5.10 enqueue resets an existing task",
        {
            "test_enqueue.py::test_re_enqueue_changes_nothing_whatever_the_state": (
                "enqueue-idempotent"
            ),
        },
    ),
    Case(
        "enqueue_id_in_two_queues",
        "§5.10 enqueue accepts one id in two queues",
        {"test_enqueue.py::test_same_id_in_another_queue_raises_id_conflict": "enqueue-idempotent"},
    ),
    # ---- beyond §5: data and input -----------------------------------------------------
    Case(
        "payload_truncated_at_nul",
        "§1 (extra) payload cut at the first NUL byte",
        {"test_enqueue.py::test_payload_bytes_round_trip": "round-trip"},
    ),
    Case(
        "enqueue_skips_validation",
        "§4 (extra) enqueue skips input validation",
        {
            "test_bad_input.py::test_bad_queue_name_is_rejected": "bad-input",
            "test_bad_input.py::test_bad_task_id_is_rejected": "bad-input",
        },
    ),
    Case(
        "stats_across_queues",
        "§4 (extra) stats count every queue",
        {"test_stats.py::test_stats_are_per_queue": "stats"},
    ),
    Case(
        "claim_stops_short",
        "§2 (extra) a batch claim returns one task whatever the limit",
        {
            "test_claim.py::test_claim_returns_exactly_limit_when_more_are_due": (
                "claim-complete"
            ),
            "test_claim.py::test_claim_limit_above_available_returns_all_due": "claim-complete",
        },
    ),
    Case(
        "dlq_browse_is_a_receive",
        "§4 (extra) listing the DLQ changes the tasks it lists",
        {"test_dlq.py::test_dlq_listing_does_not_change_tasks": "dlq-paging"},
    ),
    Case(
        "empty_filter_means_everything",
        "§4 (extra) an empty selector selects every dead task",
        {
            "test_redrive_purge.py::test_empty_selector_selects_nothing": "empty-selector",
            "test_dlq.py::test_empty_dlq_filter_lists_nothing": "empty-selector",
        },
    ),
]


# ---- running the suite --------------------------------------------------------------------


@dataclass
class SuiteRun:
    ret: int
    passed: list[str]
    failed: dict[str, str]  # test key -> failure report text (setup/call/teardown)
    output: str

    def describe(self) -> str:
        listed = "\n".join(f"  {key}" for key in sorted(self.failed)) or "  (none)"
        return f"exit code {self.ret}, {len(self.passed)} passed, failed:\n{listed}"


def _key(report: pytest.TestReport) -> str:
    """``module.py::test_name[params]``. Taken from the report's location: the suite lives
    outside pytester's root directory, and its node ids then carry no module path."""
    name = report.nodeid.rpartition("::")[2]
    return f"{Path(report.location[0]).name}::{name}"


def run_suite(
    pytester: pytest.Pytester,
    backend: str,
    modules: list[str] | None = None,
    functions: list[str] | None = None,
) -> SuiteRun:
    targets = [SUITE] if modules is None else [f"{SUITE}.{m}" for m in modules]
    select = [] if functions is None else ["-k", " or ".join(functions)]
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-q", "--rdq-require-backend",
        f"--rdq-backend={backend}", *select, "--pyargs", *targets,
    )  # fmt: skip
    reports = result.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    failed: dict[str, str] = {}
    passed = []
    for rep in reports:
        key = _key(rep)
        if rep.failed:
            failed[key] = failed.get(key, "") + rep.longreprtext
        elif rep.passed and rep.when == "call":
            passed.append(key)
    return SuiteRun(result.ret, passed, failed, result.stdout.str())


@pytest.fixture
def suite_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    for name in [n for n in os.environ if n.startswith("RDQ_") and n != "RDQ_KIT_SCOPE"]:
        monkeypatch.delenv(name)  # the command line alone picks the backend and its settings
    return pytester


def _names_task(text: str, task_ids: list[str]) -> list[str]:
    return [t for t in task_ids if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", text)]


def _matching(run: SuiteRun, catcher: str) -> dict[str, str]:
    if "[" in catcher:
        return {k: v for k, v in run.failed.items() if k == catcher}
    return {k: v for k, v in run.failed.items() if k.split("[", 1)[0] == catcher}


# ---- the controls ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory", "rdq_broken_backends:reference_with_claim_hooks"])
def test_unbroken_reference_passes_the_whole_suite(suite_env: pytest.Pytester, backend: str):
    run = run_suite(suite_env, backend, None)
    assert run.ret == pytest.ExitCode.OK and not run.failed, (
        f"the unbroken store {backend!r} fails the suite: {run.describe()}\n{run.output[-4000:]}"
    )
    assert len(run.passed) > 0, f"nothing passed on {backend!r}: {run.describe()}"


def test_every_rule_id_of_the_cases_exists():
    unknown = {rule for case in CASES for rule in case.catchers.values()} - set(RULES)
    assert not unknown, f"cases name rule ids that rules.py does not define: {unknown}"
    exposed = {n for n, v in vars(broken).items() if isinstance(v, broken.MemoryBackend)}
    covered = {case.variant for case in CASES} | {"reference_with_claim_hooks"}
    assert exposed == covered, (
        f"broken backends without a case: {sorted(exposed - covered)}; "
        f"cases without a backend: {sorted(covered - exposed)}"
    )


# ---- the broken variants ----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=str)
def test_suite_fails_the_broken_backend(suite_env: pytest.Pytester, case: Case):
    backend = getattr(broken, case.variant)
    store_cls = backend.store_factory
    store_cls.victims.clear()

    assert SCOPE in SCOPES, f"RDQ_KIT_SCOPE={SCOPE!r}: use one of {SCOPES}"
    run = run_suite(
        suite_env,
        f"rdq_broken_backends:{case.variant}",
        None if SCOPE == "suite" else case.modules,
        case.functions if SCOPE == "tests" else None,
    )
    victims = list(store_cls.victims)
    where = f"{case.variant} ({case.bug_class})"

    # (a) the run fails, and the bug actually fired
    assert run.ret == pytest.ExitCode.TESTS_FAILED, (
        f"{where}: the suite did not fail: {run.describe()}"
    )
    assert victims, f"{where}: the broken code path never ran; the suite never exercised it"

    for catcher, rule in case.catchers.items():
        # (b) the tests that exist to catch this class fail
        hits = _matching(run, catcher)
        assert hits, f"{where}: {catcher} did not fail: {run.describe()}"
        # (c) every failure report of it names the rule, one names a task the bug hit
        unnamed = [k for k, text in hits.items() if f"[{rule}]" not in text]
        assert not unnamed, f"{where}: these failures do not name rule [{rule}]:\n" + "\n".join(
            f"--- {k}\n{hits[k][-1500:]}" for k in unnamed
        )
        named = {k: _names_task(text, victims) for k, text in hits.items()}
        assert any(named.values()), (
            f"{where}: no failure report of {catcher} names a task the bug hit "
            f"(victims {victims[:10]}):\n"
            + "\n".join(f"--- {k}\n{text[-1500:]}" for k, text in hits.items())
        )
