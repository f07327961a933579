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
=======
The rules: each rule family module declares its rules, one
:class:`~rdq_compliance.chaos.checker.engine.CheckerRule` value per rule id (its text,
the public checks that decide it, what exercises it); :mod:`~.compose` composes them
into :func:`check` (every check), :data:`RULES` (every rule id, with its text) and the
public checks, which this package exports by name (``check_mutual_exclusion``,
``check_fencing``, ...; each runs alone over a history and a final state). Each family
module's docstring says which check decides which rule.

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
``engine``                 what a check and a checker rule are, and how checks run over
                           a history
``exclusion``              mutual exclusion and lease expiry
``numbering``              the attempt history's numbering, and the executions
``outcomes``               fenced outcomes and heartbeats, and recorded outcomes
``endings``                where every task ends: nothing lost, drained, the DLQ exact,
                           terminal states final
``storage_clock``          one storage clock, never running backwards
``compose``                the rules of every family module composed: :func:`check`,
                           :data:`RULES` and the public checks
=========================  ==============================================================
"""

from __future__ import annotations

from rdq_compliance.chaos.checker.compose import CHECKS, RULES, check
from rdq_compliance.chaos.checker.engine import Check
from rdq_compliance.chaos.checker.final_state import FinalState, read_final_state
from rdq_compliance.chaos.checker.findings import Violation

__all__ = ["RULES", "FinalState", "Violation", "check", "read_final_state", *CHECKS]


def __getattr__(name: str) -> Check:
    """The public checks, by name (``check_fencing``, ...: :data:`compose.CHECKS`)."""
    try:
        return CHECKS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *CHECKS})
