"""The catalogue of the deliberately broken backends: bug class → variant per store → the
rule it breaks → the layer of the kit that must catch it.

Every backend object in ``tests/broken/`` is listed here, once (a variant of a bug, or a
store's ``control``); ``tests/test_broken_catalogue.py`` fails on one that is not, and on
a name listed here that does not exist. The kit's proofs read their cases from here
instead of keeping tables of their own:

===========================  =====================================================
layer                        proof (reads :func:`cases`)
===========================  =====================================================
:class:`Suite`               ``tests/test_kit_catches_bug_classes.py`` (memory),
                             ``tests/backends/redis/test_redis_variants.py``,
                             ``tests/backends/mongo/test_mongo_variants.py``,
                             ``tests/test_store_suite_variants.py`` (SQLite and
                             PostgreSQL)
:class:`Machine`             ``tests/test_stateful_finds_bugs.py``
:class:`Campaign`            ``tests/chaos/test_chaos_finds_bugs.py`` (the standard
                             suite), the server-freeze, partition, clock-skew and
                             failover tests (a campaign with one ``fault``)
:class:`DurabilityCheck`     ``tests/backends/redis/test_redis_durability.py``
===========================  =====================================================

A bug has one name on every store (the backend attribute, ``tests.broken.<store>:<name>``;
its storage class is the same name in CamelCase). The classes are keyed by the ids of the
contract's bug classes (``docs/contract.md``, section 8, "Bug classes"), which lists the
same classes with the rules that catch each: the rules of :attr:`BugClass.rules`
(``tests/test_contract_doc.py`` fails when the two disagree). A variant a layer is not
expected to catch says why in ``excused``. ``acknowledged-work-lost`` is a setting of a
real backend (asynchronous replication, no persistence), not code:
:class:`Configuration`.

``python -m tests.broken.catalogue`` prints the catalogue as JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

#: The stores, one module of ``tests/broken/`` each.
STORES = ("memory", "sqlite", "postgres", "redis", "mongo")
#: The checkout: ``by`` and scenario files are relative to it.
ROOT = Path(__file__).resolve().parents[2]

KIT = "tests/test_kit_catches_bug_classes.py"
REDIS_SUITE = "tests/backends/redis/test_redis_variants.py"
MONGO_SUITE = "tests/backends/mongo/test_mongo_variants.py"
STORE_SUITE = "tests/test_store_suite_variants.py"
MACHINE = "tests/test_stateful_finds_bugs.py"
STANDARD = "tests/chaos/test_chaos_finds_bugs.py"
FREEZE = "tests/chaos/test_chaos_server_freeze.py"
PARTITION = "tests/chaos/test_chaos_partition.py"
FAILOVER = "tests/chaos/test_chaos_failover.py"


#: The server contract's clock-skew body, run once per server backend.
SKEW = "tests/server_contract/test_clock_skew.py"


# ---- the layers ---------------------------------------------------------------------------------


def rule_ids(spec: str) -> tuple[str, ...]:
    """The rule ids a catcher's ``spec`` accepts: one id, or ids joined by ``|``."""
    return tuple(spec.split("|"))


def names_rule(text: str, spec: str) -> bool:
    """Whether a failure's ``text`` names one of the rules ``spec`` accepts."""
    return any(f"[{rule}]" in text for rule in rule_ids(spec))


@dataclass(frozen=True)
class Suite:
    """The conformance suite fails the variant.

    ``catchers``: ``module.py::test_name`` (every parametrization counts: at least one must
    fail, and every failing one must name the rule) or ``module.py::test_name[param]``
    (exactly that one must fail) → the rule id its failure names (``"a|b"``: either one;
    see :func:`names_rule`). ``where``: ``server``,
    or, for Redis, ``cluster`` (the local 3-master cluster) or ``guard`` (the server with
    the undeclared-key guard). ``workers``: a failure also names two workers holding a
    victim. ``also``: more suite test functions run beside the catchers. ``caught=False``:
    the suite alone must *not* catch it there (another layer does)."""

    by: str
    catchers: Mapping[str, str]
    where: str = "server"
    workers: bool = False
    also: tuple[str, ...] = ()
    caught: bool = True

    layer = "suite"

    @property
    def rules(self) -> frozenset[str]:
        return frozenset(r for spec in self.catchers.values() for r in rule_ids(spec))

    @property
    def functions(self) -> list[str]:
        """The catching test functions (parametrizations dropped)."""
        return sorted({k.split("::", 1)[1].split("[", 1)[0] for k in self.catchers})

    @property
    def modules(self) -> list[str]:
        """The suite modules holding them (``test_claim``, ...)."""
        return sorted({k.split("::", 1)[0].removesuffix(".py") for k in self.catchers})

    @property
    def keyword(self) -> str:
        """``-k`` for the catching functions and ``also`` (names are unique in the suite)."""
        return " or ".join(sorted({*self.functions, *self.also}))


@dataclass(frozen=True)
class Machine:
    """The stateful machine finds the bug from scratch and shrinks it, its violation naming
    one of ``rules`` (:mod:`tests.stateful_hunt`)."""

    rules: frozenset[str]
    by: str = MACHINE

    layer = "machine"


@dataclass(frozen=True)
class Campaign:
    """A chaos campaign catches the variant: a violation of one of ``rules`` (the first is
    the main one; empty: any violation), naming the task and the workers.

    ``scenario``: a built-in name or a file of the checkout. ``fault``: the one fault that
    exposes the bug — the same campaign without it passes (the control run), and each
    task the variant mishandled is appended to the file named by ``victims_env``.
    ``within``: every rule the run reports is one of these (None: any)."""

    by: str
    scenario: str
    rules: tuple[str, ...]
    fault: str | None = None
    within: frozenset[str] | None = None
    victims_env: str | None = None

    layer = "campaign"


@dataclass(frozen=True)
class DurabilityCheck:
    """The durability check (:mod:`rdq_compliance.suite.durability`: acknowledged work
    across a SIGKILL and restart of the server) fails and names ``rule``."""

    by: str
    rule: str = "durability"

    layer = "durability check"

    @property
    def rules(self) -> frozenset[str]:
        return frozenset({self.rule})


Catch = Suite | Machine | Campaign | DurabilityCheck
C = TypeVar("C", Suite, Machine, Campaign, DurabilityCheck)


# ---- what is listed -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One bug on one store: ``tests.broken.<store>:<name>``."""

    store: str
    name: str
    bug_class: str  # the id of its class (``docs/contract.md``, "Bug classes")
    title: str  # the bug, in one line
    catches: tuple[Catch, ...] = ()
    excused: Mapping[str, str] = field(default_factory=dict)  # layer -> why not there

    @property
    def dotted(self) -> str:
        """The name the kit is given: ``--rdq-backend=tests.broken.<store>:<name>``."""
        return f"tests.broken.{self.store}:{self.name}"

    @property
    def rules(self) -> frozenset[str]:
        """Every rule id a layer's catch of it names."""
        out: set[str] = set()
        for c in self.catches:
            out |= set(c.rules)
        return frozenset(out)

    def __str__(self) -> str:
        return self.dotted


@dataclass(frozen=True)
class Configuration:
    """A real backend set up without a guarantee it can give (``options``), and the
    setting that keeps it (``control``: the same layer passes it)."""

    backend: str
    name: str
    bug_class: str
    title: str
    options: Mapping[str, str]
    control: Mapping[str, str]
    catches: tuple[Catch, ...]

    def __str__(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.backend}[{opts}]"


@dataclass(frozen=True)
class Control:
    """A store's unbroken copy through its variants' plumbing
    (``tests.broken.<store>:control``): ``passes`` says what it is run through, and must
    pass, so a variant's failure is its one change."""

    store: str
    passes: str
    by: str | None
    name: str = "control"

    @property
    def dotted(self) -> str:
        return f"tests.broken.{self.store}:{self.name}"


@dataclass(frozen=True)
class BugClass:
    """A bug class of the contract (``key``: its id there) and its broken backends."""

    key: str
    title: str
    variants: tuple[Variant, ...] = ()
    configurations: tuple[Configuration, ...] = ()

    @property
    def rules(self) -> frozenset[str]:
        """Every rule id a layer's catch of one of its variants or configurations names:
        the rules the contract lists for the class."""
        out: set[str] = set()
        for v in self.variants:
            out |= v.rules
        for cfg in self.configurations:
            for c in cfg.catches:
                out |= set(c.rules)
        return frozenset(out)


@dataclass(frozen=True)
class _Excused:
    catches: tuple[Catch, ...]
    why: Mapping[str, str]


def _excused(*catches: Catch, **why: str) -> _Excused:
    """A variant's catches, and the layers (``suite=``, ``machine=``, ...) that do not
    catch it, each with the reason."""
    return _Excused(catches, why)


def _bug(
    key: str, name: str, title: str, **stores: Catch | tuple[Catch, ...] | _Excused
) -> tuple[Variant, ...]:
    """One bug's variants: ``store=catch``, ``store=(catch, ...)`` or ``store=_excused(...)``."""
    out = []
    for store, spec in stores.items():
        assert store in STORES, f"{name}: unknown store {store!r}"
        if isinstance(spec, _Excused):
            catches, why = spec.catches, dict(spec.why)
        else:
            catches, why = (spec if isinstance(spec, tuple) else (spec,)), {}
        out.append(Variant(store, name, key, title, catches, why))
    return tuple(out)


def _m(*rules: str) -> Machine:
    return Machine(frozenset(rules))


def _kit(catchers: Mapping[str, str]) -> Suite:
    return Suite(KIT, dict(catchers))


def _standard(*rules: str) -> Campaign:
    return Campaign(STANDARD, "standard", rules)


def _skew() -> Campaign:
    return Campaign(SKEW, "clock", ("storage-clock",), fault="clock_skew")


_STALE = "test_lease.py::test_stale_token_is_refused_and_changes_nothing"
_REDRIVEN = (
    "test_redrive_purge.py::"
    "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept"
)
_EXPIRED = "test_lease.py::test_expired_lease_is_reclaimed_with_a_lease_expired_attempt"
_NEIGHBOURS = "test_neighbours.py::test_queues_stored_side_by_side_stay_apart"
_DLQ_ORDER = "test_dlq.py::test_dlq_pages_in_dead_letter_order_when_ids_sort_the_other_way"
_INTERLEAVED = "test_claim.py::test_expired_leases_and_due_tasks_are_claimed_in_one_due_order"
_LATE = "test_late_outcome.py::test_a_late_outcome_and_a_reclaim_never_both_win"
_LATE_MACHINE = (
    "the machine makes one call at a time: a late outcome never lands between a reclaim's "
    "read and its write"
)
_LATE_CAMPAIGN = (
    "the standard campaign's pauses run far past the lease, so the paused worker always "
    "reports after the reclaim has committed (measured: the whole conformance suite but "
    "test_late_outcome.py passes it too)"
)


#: What a late outcome overwritten by a reclaim breaks: a complete or dead-letter whose
#: task is claimed again, ``terminal-final``; a reschedule (PENDING, due later) whose task
#: is claimed before its time, ``claim-due-only``. Which of them a run hits is down to
#: which outcomes lost the race (one run of the SQLite variant hit one reschedule only).
_OVERWRITTEN = "terminal-final|claim-due-only"


def _late(catch: Suite) -> _Excused:
    """The late-outcome variant of one store: caught by ``catch`` only."""
    return _excused(catch, machine=_LATE_MACHINE, campaign=_LATE_CAMPAIGN)


_RECLAIM_AFTER_REDRIVE = "test_history.py::test_reclaim_after_redrive_numbers_from_history"
_CLUSTER_KEYS = {
    "test_enqueue.py::test_payload_bytes_round_trip": "cluster-keys",
    "test_claim.py::test_claims_come_out_oldest_due_first": "cluster-keys",
}
_CLOCK_LEANING = (
    "test_extend_lease_sets_expiry_to_storage_now_plus_lease",
    "test_live_lease_is_not_reclaimed_before_it_expires",
    "test_expired_lease_is_reclaimed_with_a_lease_expired_attempt",
    "test_future_task_is_not_claimed",
)
_FREEZE_RULES = ("fencing", "outcome-recorded")
_PARTITION_RULES = ("lease-respected", "one-claim", "fencing")
#: The heartbeat taken as applied returns an expiry the client estimated (the storage
#: time of its last answer plus the time since), off by that answer's latency: on a busy
#: machine past the storage-clock rule's margin, so that rule may name it too.
_PARTITION_WITHIN = frozenset({*_PARTITION_RULES, "storage-clock"})
#: What a lost acknowledged claim or outcome shows up as (see rdq_compliance.rules).
LOSS_RULES = frozenset(
    {
        "outcome-recorded",
        "no-loss",
        "one-claim",
        "execution-count",
        "durability",
        "history-numbering",
        "lease-expired-recorded",
        "reclaim-expired",
        "fencing",
    }
)

CLASSES: tuple[BugClass, ...] = (
    BugClass(
        "double-claim",
        "Claim without a row lock / check-then-act claim: two workers get one task",
        _bug(
            "double-claim", "check_then_act_claim",
            "check-then-act claim: two workers get one task",
            memory=(
                _kit({"test_exclusive.py::test_threads_never_share_a_claim": "one-claim"}),
                _m("one-claim"),
            ),
            sqlite=_standard("one-claim"),
            redis=Suite(
                REDIS_SUITE,
                {"test_exclusive.py::test_threads_never_share_a_claim": "one-claim"},
                workers=True,
            ),
            mongo=Suite(
                MONGO_SUITE, {"test_exclusive.py::test_threads_never_share_a_claim": "one-claim"}
            ),
        ),
    ),
    BugClass(
        "live-lease-stolen",
        "Reclaim ignoring lease_expires_at: a live lease is stolen",
        _bug(
            "live-lease-stolen", "reclaim_ignores_lease",
            "reclaim ignoring lease_expires_at: a live lease is stolen",
            memory=(
                _kit(
                    {
                        "test_claim.py::"
                        "test_task_with_live_lease_is_not_claimed_by_another_claim": (
                            "lease-respected"
                        ),
                        "test_lease.py::test_live_lease_is_not_reclaimed_before_it_expires": (
                            "lease-respected"
                        ),
                        "test_lease.py::"
                        "test_extended_lease_is_not_reclaimed_at_the_original_expiry": (
                            "lease-respected"
                        ),
                    }
                ),
                _m("one-claim", "lease-respected"),
            ),
            sqlite=_standard("lease-respected"),
        ),
    ),
    BugClass(
        "unfenced-outcome",
        "Outcome accepted without checking the token: a stale worker overwrites the result",
        _bug(
            "unfenced-outcome", "outcome_ignores_token",
            "outcome accepted without checking the token",
            memory=(
                _kit(
                    {
                        f"{_STALE}[complete-reclaimed]": "fencing",
                        f"{_STALE}[reschedule-reclaimed]": "fencing",
                        f"{_STALE}[dead_letter-reclaimed]": "fencing",
                        "test_lease.py::test_at_most_one_outcome_per_token": "fencing",
                    }
                ),
                _m("fencing"),
            ),
            sqlite=_standard("fencing"),
            redis=Suite(
                REDIS_SUITE,
                {f"{_STALE}[{m}-reclaimed]": "fencing" for m in ("complete", "reschedule",
                                                                  "dead_letter")},
            ),
            mongo=Suite(MONGO_SUITE, {_STALE: "fencing"}),
        )
        + _bug(
            "unfenced-outcome", "token_not_rotated_on_reclaim",
            "reclaim keeps the expired claim's token: fencing silently off",
            memory=(
                _kit({f"{_STALE}[complete-reclaimed]": "fencing", _EXPIRED: "reclaim-expired"}),
                _m("fencing"),
            ),
        )
        + _bug(
            "unfenced-outcome", "reclaim_overwrites_late_outcome",
            "reclaim reads without a lock and saves unguarded: a late "
            "outcome committed between is overwritten",
            memory=_late(_kit({_LATE: _OVERWRITTEN})),
            sqlite=_late(Suite(STORE_SUITE, {_LATE: _OVERWRITTEN})),
            postgres=_late(Suite(STORE_SUITE, {_LATE: _OVERWRITTEN})),
            redis=_late(Suite(REDIS_SUITE, {_LATE: _OVERWRITTEN})),
            mongo=_late(Suite(MONGO_SUITE, {_LATE: _OVERWRITTEN})),
        )
        + _bug(
            "unfenced-outcome", "outcome_fenced_by_clock",
            "fencing by clock, not token: a late worker's result is refused",
            memory=(
                _kit({"test_lease.py::test_expired_worker_can_still_report_until_reclaimed": (
                    "fencing"
                )}),
                _m("fencing"),
            ),
        ),
    ),
    BugClass(
        "numbering-from-counter",
        "LEASE_EXPIRED numbered from attempt_count: after a redrive the reclaim is wedged",
        _bug(
            "numbering-from-counter", "lease_expired_numbered_from_count",
            "LEASE_EXPIRED numbered from attempt_count: redriven task wedged (UNIQUE)",
            memory=(
                _kit(
                    {
                        _RECLAIM_AFTER_REDRIVE: "history-numbering",
                        "test_history.py::test_numbering_continues_across_two_redrives": (
                            "history-numbering"
                        ),
                    }
                ),
                _m("history-numbering"),
            ),
            sqlite=_standard("drain-timeout", "drain-complete"),
            mongo=Suite(MONGO_SUITE, {_RECLAIM_AFTER_REDRIVE: "history-numbering"}),
        )
        + _bug(
            "numbering-from-counter", "reclaim_without_lease_expired_attempt",
            "reclaim records no LEASE_EXPIRED attempt",
            memory=(_kit({_EXPIRED: "reclaim-expired"}), _m("reclaim-expired")),
            redis=Suite(
                REDIS_SUITE,
                {
                    _EXPIRED: "reclaim-expired",
                    "test_history.py::test_lease_expiries_are_numbered_in_sequence": (
                        "history-numbering"
                    ),
                    _RECLAIM_AFTER_REDRIVE: "history-numbering",
                },
            ),
        )
        + _bug(
            "numbering-from-counter", "reclaim_in_two_writes",
            "the reclaim's LEASE_EXPIRED attempt written by a second write",
            mongo=Suite(MONGO_SUITE, {_EXPIRED: "reclaim-expired"}),
        ),
    ),
    BugClass(
        "bad-redrive",
        "Redrive that resets history, keeps attempt_count, or leaves the task not due",
        _bug(
            "bad-redrive", "redrive_resets_history", "redrive resets history",
            memory=(_kit({_REDRIVEN: "redrive"}), _m("redrive")),
        )
        + _bug(
            "bad-redrive", "redrive_keeps_attempt_count", "redrive keeps attempt_count",
            memory=(_kit({_REDRIVEN: "redrive"}), _m("redrive")),
        )
        + _bug(
            "bad-redrive", "redrive_leaves_not_due", "redrive leaves the task not due",
            memory=(
                _kit({f"{_REDRIVEN}[one-failure]": "redrive", f"{_REDRIVEN}[retried]": "redrive"}),
                _m("redrive"),
            ),
        )
        + _bug(
            "bad-redrive", "redrive_any_status",
            "redrive by ids touches tasks that are not DEAD",
            memory=(
                _kit({"test_redrive_purge.py::"
                      "test_redrive_by_ids_changes_only_the_selected_dead_tasks": "redrive"}),
                _m("redrive"),
            ),
        ),
    ),
    BugClass(
        "unclaimable-claimed",
        "Tasks claimed before next_attempt_at, or SUCCEEDED/DEAD tasks claimed again",
        _bug(
            "unclaimable-claimed", "claims_before_due",
            "PENDING tasks claimed before next_attempt_at",
            memory=(
                _kit(
                    {
                        "test_claim.py::test_future_task_is_not_claimed": "claim-due-only",
                        "test_transitions.py::test_rescheduled_task_is_claimable_only_once_due": (
                            "claim-due-only"
                        ),
                    }
                ),
                _m("claim-due-only"),
            ),
        )
        + _bug(
            "unclaimable-claimed", "claims_terminal_tasks", "SUCCEEDED/DEAD tasks claimed again",
            memory=(
                _kit({"test_claim.py::test_succeeded_and_dead_tasks_are_never_claimed_again": (
                    "terminal-final"
                )}),
                _m("terminal-final"),
            ),
        )
        + _bug(
            "unclaimable-claimed", "reschedule_ignores_delay",
            "reschedule ignores its delay: the task is due at once",
            memory=(
                _kit({"test_transitions.py::"
                      "test_reschedule_returns_the_task_to_pending_due_after_the_delay": (
                          "transition"
                      )}),
                _m("transition"),
            ),
        ),
    ),
    BugClass(
        "lost-task",
        "A task lost: deleted on failure, dropped on a crash, or missing from the DLQ",
        _bug(
            "lost-task", "reschedule_deletes_task", "task lost: deleted on failure",
            memory=(
                _kit(
                    {
                        "test_transitions.py::"
                        "test_reschedule_returns_the_task_to_pending_due_after_the_delay": (
                            "no-loss"
                        ),
                        "test_transitions.py::test_reschedule_keeps_the_error_exactly": "no-loss",
                        "test_history.py::test_reschedule_and_expiry_share_one_numbering": (
                            "no-loss"
                        ),
                        "test_stats.py::test_stats_count_tasks_by_status": "stats",
                    }
                ),
                _m("no-loss"),
            ),
        )
        + _bug(
            "lost-task", "expired_leases_never_reclaimed",
            "task lost: dropped on a crash (an expired lease is never reclaimed)",
            memory=(_kit({_EXPIRED: "reclaim-expired"}), _m("reclaim-expired")),
        )
        + _bug(
            "lost-task", "dlq_misses_retryable_deaths",
            "task lost: DEAD but missing from the DLQ (budget-exhausted deaths hidden)",
            memory=(
                _kit({"test_dlq.py::test_dlq_lists_every_dead_task_with_its_whole_history": (
                    "no-loss"
                )}),
                _m("no-loss"),
            ),
        )
        + _bug(
            "lost-task", "dlq_drops_first_task",
            "task lost: DEAD but missing from the DLQ (oldest never listed)",
            memory=(
                _kit(
                    {
                        "test_dlq.py::test_dlq_lists_every_dead_task_with_its_whole_history": (
                            "no-loss"
                        ),
                        "test_dlq.py::"
                        "test_dlq_pages_return_every_dead_task_once_in_dead_letter_order": (
                            "dlq-paging"
                        ),
                    }
                ),
                _m("no-loss"),
            ),
        )
        + _bug(
            "lost-task", "dlq_page_boundary_skip",
            "DLQ paging skips one task per page boundary",
            memory=(
                _kit(
                    {
                        "test_dlq.py::"
                        "test_dlq_pages_return_every_dead_task_once_in_dead_letter_order": (
                            "dlq-paging"
                        ),
                        "test_dlq.py::"
                        "test_dlq_paging_is_stable_while_tasks_are_dead_lettered_between_pages": (
                            "dlq-paging"
                        ),
                    }
                ),
                _m("no-loss", "dlq-paging"),
            ),
        )
        + _bug(
            "lost-task", "dlq_cursor_compares_ids_only",
            "the DLQ's keyset cursor compares ids, not (dead time, id)",
            memory=_excused(
                _kit({_DLQ_ORDER: "dlq-paging"}),
                machine="the machine's drawn ids find it too (it failed the variant in the "
                "run that added it), not proved here: the conformance test is the one "
                "written for it",
            ),
            sqlite=Suite(STORE_SUITE, {_DLQ_ORDER: "dlq-paging"}),
            postgres=Suite(STORE_SUITE, {_DLQ_ORDER: "dlq-paging"}),
        )
        + _bug(
            "lost-task", "purge_any_status", "task lost: purge by ids deletes live tasks",
            memory=(
                _kit({"test_redrive_purge.py::"
                      "test_purge_by_ids_deletes_only_the_selected_dead_tasks": "purge"}),
                _m("purge"),
            ),
        )
        + _bug(
            "lost-task", "reclaim_drops_task",
            "task lost: dropped on a crash (expired claims deleted, not reclaimed)",
            sqlite=_standard("no-loss"),
        )
        + _bug(
            "lost-task", "dead_letter_deletes",
            "task lost: deleted when dead-lettered, missing from the DLQ",
            sqlite=(
                Campaign("tests/test_pytest_report.py", "tests/chaos/tiny.toml", ("no-loss",)),
                Campaign("tests/chaos/test_chaos_campaign.py", "tests/chaos/smoke.toml", ()),
            ),
        ),
    ),
    BugClass(
        "stale-heartbeat",
        "Heartbeat that extends a lease the worker no longer holds",
        _bug(
            "stale-heartbeat", "extend_lease_ignores_token",
            "heartbeat extends a lease the worker no longer holds",
            memory=(
                _kit(
                    {
                        f"{_STALE}[extend_lease-reclaimed]": "fencing",
                        f"{_STALE}[extend_lease-completed]": "fencing",
                    }
                ),
                _m("fencing"),
            ),
            sqlite=_standard("fencing"),
        ),
    ),
    BugClass(
        "wrong-claim-batch",
        "Limit ignored, queues not isolated, ordering by due time ignored",
        _bug(
            "wrong-claim-batch", "limit_ignored", "limit ignored",
            memory=(
                _kit({"test_claim.py::test_claim_returns_exactly_limit_when_more_are_due": (
                    "claim-limit"
                )}),
                _m("claim-limit"),
            ),
        )
        + _bug(
            "wrong-claim-batch", "queues_not_isolated", "queues not isolated",
            memory=(
                _kit({"test_claim.py::test_claim_takes_only_tasks_of_its_own_queue": (
                    "queue-isolation"
                )}),
                _m("queue-isolation"),
            ),
        )
        + _bug(
            "wrong-claim-batch", "queues_bucketed",
            "queues kept apart by hash bucket, not by name: two of one bucket mix",
            # the memory variant names its neighbour queues, and the machine plays on two of
            # them; the SQLite and PostgreSQL variants name none (the suite's spread names)
            memory=(_kit({_NEIGHBOURS: "queue-isolation"}), _m("queue-isolation")),
            sqlite=Suite(STORE_SUITE, {_NEIGHBOURS: "queue-isolation"}),
            postgres=Suite(STORE_SUITE, {_NEIGHBOURS: "queue-isolation"}),
        )
        + _bug(
            "wrong-claim-batch", "pending_before_expired_leases",
            "due PENDING tasks served before expired leases",
            memory=_excused(
                _kit({_INTERLEAVED: "claim-order"}),
                machine="not proved here: the conformance test is the one written for it",
            ),
            sqlite=Suite(STORE_SUITE, {_INTERLEAVED: "claim-order"}),
            postgres=Suite(STORE_SUITE, {_INTERLEAVED: "claim-order"}),
        )
        + _bug(
            "wrong-claim-batch", "newest_first", "ordering by due time ignored (newest first)",
            memory=(
                _kit({"test_claim.py::test_claims_come_out_oldest_due_first": "claim-order"}),
                _m("claim-order"),
            ),
        ),
    ),
    BugClass(
        "enqueue-not-idempotent",
        "Enqueue that resets an existing task, or accepts one id in two queues",
        _bug(
            "enqueue-not-idempotent", "enqueue_resets_existing", "enqueue resets an existing task",
            memory=(
                _kit({"test_enqueue.py::test_re_enqueue_changes_nothing_whatever_the_state": (
                    "enqueue-idempotent"
                )}),
                _m("enqueue-idempotent"),
            ),
        )
        + _bug(
            "enqueue-not-idempotent", "enqueue_id_in_two_queues",
            "enqueue accepts one id in two queues",
            memory=(
                _kit({"test_enqueue.py::test_same_id_in_another_queue_raises_id_conflict": (
                    "enqueue-idempotent"
                )}),
                _m("enqueue-idempotent"),
            ),
        ),
    ),
    BugClass(
        "worker-clock",
        "Time taken from the worker's clock instead of the storage's",
        _bug(
            "worker-clock", "client_clock",
            "time taken from the client's clock, not the storage's",
            memory=(
                _kit({"test_claim.py::test_claim_stamps_the_lease_from_the_storage_clock": (
                    "storage-clock"
                )}),
                _m("storage-clock"),
            ),
            postgres=_skew(),
            redis=(
                Suite(
                    REDIS_SUITE,
                    {"test_claim.py::test_claim_stamps_the_lease_from_the_storage_clock": (
                        "storage-clock"
                    )},
                    also=_CLOCK_LEANING,
                    caught=False,
                ),
                _skew(),
            ),
            mongo=_skew(),
        ),
    ),
    BugClass(
        "undeclared-keys",
        "A server-side script that touches keys it did not declare: fails on a cluster",
        _bug(
            "undeclared-keys", "undeclared_key_enqueue",
            "a script touches a key not in KEYS (the id index, in ARGV)",
            redis=(
                Suite(REDIS_SUITE, _CLUSTER_KEYS, where="cluster"),
                Suite(REDIS_SUITE, _CLUSTER_KEYS, where="guard"),
                Suite(REDIS_SUITE, _CLUSTER_KEYS, where="server", caught=False),
            ),
        ),
    ),
    BugClass(
        "acknowledged-work-lost",
        "Acknowledged work lost when the server restarts or fails over",
        configurations=(
            Configuration(
                "postgres", "acknowledged_work_lost_on_failover", "acknowledged-work-lost",
                "asynchronous replication: a failover loses acknowledged work",
                {"pg_replica": "async"}, {"pg_replica": "sync"},
                (
                    Campaign(
                        FAILOVER, "failover", ("outcome-recorded", "execution-count"),
                        fault="failover", within=LOSS_RULES,
                    ),
                ),
            ),
            Configuration(
                "redis", "acknowledged_work_lost_on_failover", "acknowledged-work-lost",
                "asynchronous replication: a failover loses acknowledged work",
                {"redis_replica": "async"}, {"redis_replica": "wait"},
                (
                    Campaign(
                        FAILOVER, "failover", ("outcome-recorded", "execution-count"),
                        fault="failover", within=LOSS_RULES,
                    ),
                ),
            ),
            Configuration(
                "redis", "acknowledged_work_lost_on_restart", "acknowledged-work-lost",
                "no persistence: a restart loses acknowledged work",
                {"redis_persistence": "none"}, {"redis_persistence": "aof"},
                (DurabilityCheck("tests/backends/redis/test_redis_durability.py"),),
            ),
        ),
    ),
    BugClass(
        "payload-altered",
        "What is enqueued does not come back byte for byte",
        _bug(
            "payload-altered", "payload_truncated_at_nul",
            "payload cut at the first NUL byte",
            memory=(
                _kit({"test_enqueue.py::test_payload_bytes_round_trip": "round-trip"}),
                _m("round-trip"),
            ),
        ),
    ),
    BugClass(
        "wrong-transition",
        "A claim, outcome or heartbeat that makes the wrong state change",
        _bug(
            "wrong-transition", "complete_records_no_attempt",
            "complete records no SUCCESS attempt",
            memory=(
                _kit({"test_transitions.py::test_complete_makes_the_task_succeeded": (
                    "transition"
                )}),
                _m("transition"),
            ),
        )
        + _bug(
            "wrong-transition", "claim_stops_short",
            "a batch claim returns one task whatever the limit",
            memory=(
                _kit(
                    {
                        "test_claim.py::test_claim_returns_exactly_limit_when_more_are_due": (
                            "claim-complete"
                        ),
                        "test_claim.py::test_claim_limit_above_available_returns_all_due": (
                            "claim-complete"
                        ),
                    }
                ),
                _m("claim-complete"),
            ),
        )
        + _bug(
            "wrong-transition", "heartbeat_keeps_the_claims_lease",
            "a heartbeat renews the claim's lease, not the one it asks for",
            memory=(
                _kit(
                    {
                        "test_lease.py::test_a_claim_holds_the_lease_it_asked_for": (
                            "lease-per-claim"
                        ),
                    }
                ),
                _m("storage-clock"),
            ),
        )
        + _bug(
            "wrong-transition", "reschedule_completes",
            "a retryable failure recorded as a success",
            sqlite=_excused(
                campaign="no test of the kit runs it yet: a variant kept ready for the chaos "
                "checker (a retry reported, a success recorded)",
            ),
        ),
    ),
    BugClass(
        "bad-spi-call",
        "Another SPI call does the wrong thing: input, stats, the DLQ view, selectors, "
        "housekeeping",
        _bug(
            "bad-spi-call", "enqueue_skips_validation", "enqueue skips input validation",
            memory=_excused(
                _kit(
                    {
                        "test_bad_input.py::test_bad_queue_name_is_rejected": "bad-input",
                        "test_bad_input.py::test_bad_task_id_is_rejected": "bad-input",
                    }
                ),
                machine="bad input is the conformance suite's job (test_bad_input.py): the "
                "machine only ever sends valid input, so a backend that skips validation "
                "behaves like the model",
            ),
        )
        + _bug(
            "bad-spi-call", "stats_across_queues", "stats count every queue",
            memory=(_kit({"test_stats.py::test_stats_are_per_queue": "stats"}), _m("stats")),
        )
        + _bug(
            "bad-spi-call", "dlq_browse_is_a_receive",
            "listing the DLQ changes the tasks it lists",
            memory=(
                _kit({"test_dlq.py::test_dlq_listing_does_not_change_tasks": "dlq-paging"}),
                _m("dlq-paging"),
            ),
        )
        + _bug(
            "bad-spi-call", "empty_filter_means_everything",
            "an empty selector selects every dead task",
            memory=(
                _kit(
                    {
                        "test_redrive_purge.py::test_empty_selector_selects_nothing": (
                            "empty-selector"
                        ),
                        "test_dlq.py::test_empty_dlq_filter_lists_nothing": "empty-selector",
                    }
                ),
                _m("empty-selector"),
            ),
        )
        + _bug(
            "bad-spi-call", "purge_succeeded_ignores_age",
            "purge_succeeded deletes recent results",
            memory=(
                _kit({"test_stats.py::test_purge_succeeded_keeps_tasks_younger_than_older_than": (
                    "purge-succeeded"
                )}),
                _m("purge-succeeded"),
            ),
        ),
    ),
    BugClass(
        "failing-read",
        "A read that fails: the machine's catch-all (model-equivalence)",
        _bug(
            "failing-read", "get_fails_after_redrive",
            "get raises a driver error after a redrive",
            memory=_excused(
                _m("model-equivalence"),
                suite="no conformance rule is about a crashing read: only the machine's "
                "comparison with the model (model-equivalence) sees it",
            ),
        ),
    ),
    BugClass(
        "unanswered-call-applied",
        "A call the server left unanswered taken as applied: only one fault exposes it",
        _bug(
            "unanswered-call-applied", "acks_timed_out_reports",
            "an outcome report unanswered for 1 s taken as applied (only a server freeze)",
            **{
                s: Campaign(
                    FREEZE, "tests/chaos/freeze.toml", _FREEZE_RULES, fault="server_pause",
                    within=frozenset(_FREEZE_RULES), victims_env="RDQ_FREEZE_VICTIMS",
                )
                for s in ("postgres", "redis")
            },
        )
        + _bug(
            "unanswered-call-applied", "hb_timeout_taken_as_extended",
            "a heartbeat unanswered for 0.4 s taken as applied (only a network partition)",
            **{
                s: Campaign(
                    PARTITION, "partition", _PARTITION_RULES, fault="partition",
                    within=_PARTITION_WITHIN, victims_env="RDQ_PARTITION_VICTIMS",
                )
                for s in ("postgres", "redis")
            },
        ),
    ),
)

CONTROLS: tuple[Control, ...] = (
    Control("memory", "the whole conformance suite (the claim split into hooks)", KIT),
    Control(
        "sqlite",
        "the conformance suite and the standard chaos suite (the claim split into hooks); "
        "no test of the kit runs it",
        None,
    ),
    Control(
        "redis",
        "the whole conformance suite on the server, the cluster-keys tests on the cluster",
        REDIS_SUITE,
    ),
    Control("mongo", "every catching test of the mongo variants", MONGO_SUITE),
)


# ---- reading it --------------------------------------------------------------------------------


def variants(store: str | None = None) -> list[Variant]:
    """Every variant (of ``store``), in catalogue order."""
    return [v for c in CLASSES for v in c.variants if store is None or v.store == store]


def variant(store: str, name: str) -> Variant:
    """The variant ``tests.broken.<store>:<name>``; a clear error if it is not listed."""
    for v in variants(store):
        if v.name == name:
            return v
    raise LookupError(
        f"tests.broken.{store}:{name} is not in the catalogue; listed for {store}: "
        f"{', '.join(v.name for v in variants(store))}"
    )


def control(store: str) -> Control:
    (found,) = [c for c in CONTROLS if c.store == store]
    return found


def configurations() -> list[Configuration]:
    return [cfg for c in CLASSES for cfg in c.configurations]


def cases(
    kind: type[C], store: str | None = None, *, by: str | None = None
) -> list[tuple[Variant, C]]:
    """Each variant (of ``store``) with each of its catches of ``kind`` (proved by ``by``)."""
    return [
        (v, c)
        for v in variants(store)
        for c in v.catches
        if isinstance(c, kind) and (by is None or c.by == by)
    ]


def relative(path: str | Path) -> str:
    """A file of the checkout as the catalogue names it (``by=relative(__file__)``)."""
    return Path(path).resolve().relative_to(ROOT).as_posix()


def scenario(campaign: Campaign) -> str:
    """What :func:`~rdq_compliance.chaos.scenario.load_scenario` takes for the campaign's
    scenario: a built-in name, or the file's absolute path."""
    name = campaign.scenario
    return str(ROOT / name) if "/" in name else name


def dotted_names() -> set[str]:
    """Every backend object the catalogue lists, as ``tests.broken.<store>:<name>``."""
    return {v.dotted for v in variants()} | {c.dotted for c in CONTROLS}


def proofs() -> Iterator[tuple[str, str]]:
    """(proving test module, the name it must use) for every catch and control."""
    for v in variants():
        for c in v.catches:
            yield c.by, v.dotted
    for cfg in configurations():
        for c in cfg.catches:
            yield c.by, cfg.backend
    for ctl in CONTROLS:
        if ctl.by is not None:
            yield ctl.by, ctl.dotted


# ---- as data ------------------------------------------------------------------------------------


def _catch_json(c: Catch) -> dict[str, Any]:
    out: dict[str, Any] = {"layer": c.layer, "by": c.by}
    if isinstance(c, Suite):
        out.update(catchers=dict(c.catchers), where=c.where, workers=c.workers,
                   also=list(c.also), caught=c.caught)  # fmt: skip
    elif isinstance(c, Machine):
        out.update(rules=sorted(c.rules))
    elif isinstance(c, Campaign):
        out.update(scenario=c.scenario, rules=list(c.rules), fault=c.fault,
                   within=None if c.within is None else sorted(c.within),
                   victims_env=c.victims_env)  # fmt: skip
    else:
        out.update(rule=c.rule)
    return out


def as_json() -> dict[str, Any]:
    """The catalogue as plain data: classes → variants per store → catches."""
    return {
        "classes": [
            {
                "key": c.key,
                "title": c.title,
                "variants": [
                    {
                        "name": v.dotted,
                        "store": v.store,
                        "title": v.title,
                        "catches": [_catch_json(x) for x in v.catches],
                        "excused": dict(v.excused),
                    }
                    for v in c.variants
                ],
                "configurations": [
                    {
                        "backend": cfg.backend,
                        "name": cfg.name,
                        "title": cfg.title,
                        "options": dict(cfg.options),
                        "control": dict(cfg.control),
                        "catches": [_catch_json(x) for x in cfg.catches],
                    }
                    for cfg in c.configurations
                ],
            }
            for c in CLASSES
        ],
        "controls": [
            {"name": c.dotted, "passes": c.passes, "by": c.by} for c in CONTROLS
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """Print the catalogue as JSON."""
    json.dump(as_json(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
