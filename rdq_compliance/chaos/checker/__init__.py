"""The chaos checker: pure functions over a history and the backend's final state.

A chaos run leaves a **history** (the events of :mod:`rdq_compliance.chaos.events`,
every journal concatenated) and, after its drain, a **final state** (every task read
back with ``get()``, and the whole DLQ listing). :func:`check` proves or refutes the
rules of the contract (``contract.md#4-rules``) on them and returns the violations, each
naming the rule broken, the task, the workers, the claim tokens and a timeline excerpt
of that task.

Everything is decided from the storage's own times (integer microseconds, read from
the storage's clock and reported in claim and heartbeat events, or kept in the
attempt history), never from the wall clock of a process (but for ``storage-clock``,
which orders calls in real time by the journals' true times to see that the storage's
clock never ran backwards), and only from what the history proves: an operation left
unknown (``info``, or an invoke whose process died) is never assumed to have failed,
nor to have succeeded. A correct backend gives no violation, whatever the faults.

Facts of the contract (``contract.md#2-the-model``, ``contract.md#3-the-spi``) the checker
relies on:

- a claim stamps ``claimed_at`` and ``lease_expires_at`` on the storage's clock; a
  reclaim (``reclaimed=True``) takes an IN_FLIGHT task whose lease expired and appends
  a LEASE_EXPIRED attempt that **starts at the expired claim's** ``claimed_at`` and
  **ends at the reclaim**;
- an accepted outcome appends one attempt that starts at its claim's ``claimed_at``
  (that is how a claim's outcome is found in the history, as the worker does);
- ``extend_lease`` sets ``lease_expires_at = now + lease`` with the lease the claim
  asked for (the reference worker asks one lease for both), so a heartbeat's storage
  time is its returned expiry minus the claim's lease;
- a worker journals a storage call's ``invoke`` before making it, and learns a token
  only from a claim it journals; so an unknown claim (claim ``info``) never reports.

The rules (one public function each; :func:`check` runs them all):

==================================  =================================================
:func:`check_mutual_exclusion`      ``one-claim``, ``lease-respected`` (the one rule)
:func:`check_reclaim_after_expiry`  ``lease-respected``, ``reclaim-expired``
:func:`check_lease_expired_recorded` ``lease-expired-recorded``
:func:`check_history_numbering`     ``history-numbering`` (invariant H)
:func:`check_execution_count`       ``execution-count``
:func:`check_fencing`               ``fencing`` (stale heartbeats and outcomes)
:func:`check_outcomes_recorded`     ``outcome-recorded``
:func:`check_no_loss`               ``no-loss``
:func:`check_drained`               ``drain-complete``, ``drain-timeout``
:func:`check_dlq`                   ``dlq-complete``
:func:`check_terminal_final`        ``terminal-final``
:func:`check_final_status`          ``transition``
:func:`check_storage_clock`         ``storage-clock`` (one storage clock, never running
                                    backwards in real-time order)
==================================  =================================================

One assumption goes beyond the contract, and only where the history cannot say more:
a LEASE_EXPIRED attempt of a claim whose reply was lost (its lease is unknown) is
judged against the lease every known claim of the run asked, if they all asked the
same one (the fleet's workers do); if leases differ, that check is skipped.

Cost: one pass to index the history, then one task at a time: a sort of its claims,
its view built, every rule run on it, the view dropped; a second pass over the events
only to cut the timeline excerpts of violated tasks.

The package, one job per module (each imports only the ones above it):

=========================  ==============================================================
``index``                  one pass over the history, grouped by task and by claim token
``final_state``            :class:`FinalState` and :func:`read_final_state` (the only I/O)
``view``                   the run's context, and one task's claims matched with attempts
``format``                 storage times, claims and attempts as text; timeline excerpts
``findings``               :func:`~findings.finding` (every rule's one way to report),
                           :class:`Violation` and its JSON form
``engine``                 what a rule is, and how rules run over a history
``exclusion``              ``one-claim``, ``lease-respected``, ``reclaim-expired``,
                           ``lease-expired-recorded``
``numbering``              ``history-numbering``, ``execution-count``
``outcomes``               ``fencing``, ``outcome-recorded``
``endings``                ``no-loss``, ``drain-*``, ``dlq-complete``, ``terminal-final``,
                           ``transition``
``storage_clock``          ``storage-clock``
``compose``                :func:`check` (every rule) and :data:`RULES`
=========================  ==============================================================
"""

from __future__ import annotations

from rdq_compliance.chaos.checker.compose import RULES, check
from rdq_compliance.chaos.checker.endings import (
    check_dlq,
    check_drained,
    check_final_status,
    check_no_loss,
    check_terminal_final,
)
from rdq_compliance.chaos.checker.exclusion import (
    check_lease_expired_recorded,
    check_mutual_exclusion,
    check_reclaim_after_expiry,
)
from rdq_compliance.chaos.checker.final_state import FinalState, read_final_state
from rdq_compliance.chaos.checker.findings import Violation
from rdq_compliance.chaos.checker.numbering import check_execution_count, check_history_numbering
from rdq_compliance.chaos.checker.outcomes import check_fencing, check_outcomes_recorded
from rdq_compliance.chaos.checker.storage_clock import check_storage_clock

__all__ = [
    "RULES",
    "FinalState",
    "Violation",
    "check",
    "check_dlq",
    "check_drained",
    "check_execution_count",
    "check_fencing",
    "check_final_status",
    "check_history_numbering",
    "check_lease_expired_recorded",
    "check_mutual_exclusion",
    "check_no_loss",
    "check_outcomes_recorded",
    "check_reclaim_after_expiry",
    "check_storage_clock",
    "check_terminal_final",
    "read_final_state",
]
