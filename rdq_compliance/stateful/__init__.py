"""Property-based interleavings: a hypothesis state machine against the reference model.

:class:`BackendVsModel` plays three logical workers, each with its own connection to the
backend under test, and a producer/operator connection, against the backend and the
in-memory reference store (:class:`~rdq_compliance.stateful.model.ReferenceModel`) side
by side. Its rules cover the whole SPI:

* ``start_with_tasks`` (the initial state: 0-2 tasks due now, 0-2 already in the DLQ) and
  ``enqueue`` (new ids, duplicates, an id of another queue, due in the past, now, after
  an instant, in 10 minutes; any payload bytes, headers);
* ``claim`` (one worker, limit 1-3, lease ``instant`` or ``long``), ``claim_together``
  (every worker at the same moment), ``work`` (a worker-loop turn: claim, then report an
  outcome for each task claimed, or crash without reporting);
* ``extend_lease``, ``complete``, ``reschedule``, ``dead_letter`` on any claim ever handed
  out, current or stale;
* ``redrive`` and ``purge`` by ids (also ids that are not DEAD, and the empty list) and by
  filter (handler, error type, everything, and the empty filter), ``purge_succeeded``;
* ``dlq_first_page`` / ``dlq_next_page`` (page sizes 1-3, with filters; the listing goes
  on across other steps, and a cursor of the other queue must be refused);

and time passes so leases expire (see below). After every step three invariants hold:
invariant H on every task's history, the one rule (no two live claims on a task, at
most one outcome accepted per claim token) and "the backend's observable state equals
the model's": every task by ``get`` (status, counts, payload, headers, the whole history
with its errors, every timestamp), ``stats`` and the whole DLQ of every queue, in order.

Runner-neutral: nothing here imports pytest. :func:`run` runs the machine on a
:class:`Target` — a started :class:`rdq_compliance.session.Session`, one fresh namespace
per example; the pytest entry point is ``rdq_compliance/suite/test_stateful.py``.

Time
----
Due-ness, leases and every stored timestamp are the storage's clock, which the machine
does not control, so it never races it:

* **The model runs on the backend's clock.** Around every backend call the machine reads
  ``storage.now()`` before (``t0``) and after (``t1``); the time the backend actually used
  is then read back from what the call produced (a claim's ``claimed_at``; a new task's
  ``created_at``; the ``finished_at`` of the attempt an outcome appended; a heartbeat's new
  expiry minus the lease; a redriven task's ``next_attempt_at``), checked to lie within
  ``[t0, t1]`` (rule ``storage-clock``), and the model's clock is set to exactly that time
  before the same call is made on the model. The model therefore decides due-ness and
  expiry at the instant the backend did and writes the same timestamps, so timestamps
  are compared too (within ``MachineConfig.tolerance``, 1 ms, for backends that store
  milliseconds) and no decision of the two ever sits on either side of a boundary. A
  call that produced no time (an empty claim, a refused report, a redrive of nothing)
  runs on the model at ``t0``: an empty claim is wrong exactly when something was due at
  ``t0``, which is no later than the backend's own time.
* **"Either is fine" branches**, where the contract leaves a choice: tasks tied on due
  time (any of them may fill the last slots of a claim: the machine checks the choice is a
  prefix of the due order up to ties, then has the model claim the same tasks); claims by
  several workers at once (each claimed task must have been claimable at its claim's time,
  and no task may go to a second worker while the first one's lease is live; the model
  then applies them in claim-time order); ``stats().due`` read between ``t0`` and ``t1``
  (any count between the model's at ``t0`` and at ``t1``); DLQ pages after the DLQ changed
  mid-listing (only the contract's promise, rule ``dlq-paging``: no repeat and no skip of
  a task that stayed DEAD; without changes, pages must equal the model's).
* **Leases and delays expire by letting the storage clock pass them: short real leases,
  no test-only clock offset.** Two lengths, nothing in between: ``instant`` (200 µs) and
  ``long`` (10 min). At the end of any step that set an instant lease or delay the
  machine waits until ``storage.now()`` is past it (usually it already is: the step's
  own checks take longer), so by the next step it has always expired; a long one never
  expires within an example. No decision depends on how fast the steps ran, so a
  program replays exactly (a medium "short" lease and an explicit wait step were tried:
  a GC pause or a slow backend let such leases expire on their own, and hypothesis
  reported ``FlakyStrategyDefinition`` while shrinking). A worker that reports after its
  lease expired is ``work(lease='instant', ...)`` or ``complete`` on an instant claim.

Reproduction: hypothesis prints the shrunk program (``state.claim(worker=0, ...)``) and a
``@reproduce_failure`` blob; :func:`run` adds a note with the backend, the profile, the
seed and the command that replays it. The ``ci`` profile is derandomized by a fixed seed
(rather than ``derandomize=True``, which forbids an example database), so a CI cache of
the database (``.hypothesis/rdq-stateful/<backend>/``) replays earlier failures first.
"""


from rdq_compliance.stateful.machine import BackendVsModel
from rdq_compliance.stateful.records import (
    RunStats,
    StatefulViolation,
    Target,
)
from rdq_compliance.stateful.runner import (
    CI_SEED,
    PROFILES,
    database_for,
    pick_seed,
    register_profiles,
    run,
    settings_for,
)
from rdq_compliance.stateful.world import MachineConfig

__all__ = [
    "CI_SEED",
    "PROFILES",
    "BackendVsModel",
    "MachineConfig",
    "RunStats",
    "StatefulViolation",
    "Target",
    "database_for",
    "pick_seed",
    "register_profiles",
    "run",
    "settings_for",
]
