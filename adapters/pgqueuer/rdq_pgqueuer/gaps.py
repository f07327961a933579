"""The pgqueuer adapter's expected-failure ledger: what pgqueuer 1.6.0 documents as its
design, by rule id or test id, each with the 1.6.0 docs or code it rests on (plugin half:
plain data, read by :class:`rdq_pgqueuer.plugin.PgqueuerBackend`).

Findings — behaviour that breaks what pgqueuer itself promises — are never here; they
are in ``findings/pgqueuer/README.md`` with their reproducers.

Links are pinned to the release tag ``v1.6.0`` (the tag name follows RELEASE.md's
``## v1.6.0`` heading; the paths are those of the 1.6.0 sdist, byte-identical to the
wheel).
"""

from __future__ import annotations

_BLOB = "https://github.com/janbjorge/pgqueuer/blob/v1.6.0"

#: G1: no fencing — an outcome or heartbeat is keyed by job id alone.
_G1 = (
    "G1 no fencing: pgqueuer's log_jobs, retry_job and update_heartbeat act on a job id "
    "alone (no status, no owner predicate) and return None, so a stale or never-issued "
    "claim's outcome or heartbeat is accepted and nothing is ever refused; pgqueuer "
    "documents delivery as at-least-once with 'no fencing tokens' "
    f"({_BLOB}/docs/adr/ADR-0004-delivery-is-at-least-once.md#L19-L32; code "
    f"{_BLOB}/pgqueuer/adapters/persistence/qb.py#L677-L715, #L752-L753, #L805-L819)"
)
#: G3: the lease is the reclaimer's heartbeat_timeout, one deployment setting.
_G3 = (
    "G3 no lease per claim: a picked job may be re-picked once its heartbeat is older "
    "than the heartbeat_timeout of the worker that dequeues (one value per deployment, "
    "the same on every worker; the adapter deploys 2 s, pgqueuer's default is 30 s); "
    "nothing is kept per claim "
    f"({_BLOB}/docs/guides/heartbeat.md#L28-L57, #L98-L103; code "
    f"{_BLOB}/pgqueuer/adapters/persistence/qb.py#L424-L439)"
)
#: G4: no producer-chosen id; the dedupe key holds only while the job is queued/picked.
_G4 = (
    "G4 idempotency only while live: pgqueuer numbers its jobs itself and its only "
    "idempotency is dedupe_key, unique while the job is queued or picked; once it is "
    "successful or failed (held) the key is free and the same id enqueues a new job, in "
    f"any entrypoint ({_BLOB}/docs/guides/reliability.md#L115-L125; code "
    f"{_BLOB}/pgqueuer/adapters/persistence/qb.py#L588-L649)"
)
#: G5: a successful job's row (payload, headers) is deleted.
_G5 = (
    "G5 succeeded jobs are deleted: 'Handler completes normally -> Job deleted, logged as "
    "successful'; only the log row (job id, status, time) stays, so a SUCCEEDED task has "
    f"no payload or headers left ({_BLOB}/docs/guides/retry.md#L182-L190; "
    f"{_BLOB}/docs/getting-started/core-concepts.md#L107-L110)"
)
#: G6: claim order is priority, then job id — not due time.
_G6 = (
    "G6 claim order is priority DESC, id ASC (insertion order), not due time: a job "
    "enqueued with a delay that becomes due before a later one is still picked after it "
    f"({_BLOB}/pgqueuer/adapters/persistence/qb.py#L397-L413; "
    f"{_BLOB}/docs/getting-started/core-concepts.md#L14)"
)

#: G10: a QueueManager never hands itself a job it still runs (its in-process job_context).
_G10 = (
    "G10 a worker never re-takes a job it still runs: QueueManager.run keeps the jobs it "
    "runs in job_context and skips one its own dequeue re-picked ('A late heartbeat lets "
    "our own dequeue re-pick a job still running here'); the run in hand goes on, and "
    "only another worker's dequeue (or this one's after the run ended) hands the job out "
    f"again ({_BLOB}/pgqueuer/core/qm.py#L467-L479, release before retry_job #L584-L585; "
    "pgqueuer's own test_job_not_retried_while_running, "
    f"{_BLOB}/test/test_retry.py#L261-L296); one storage is one QueueManager, so a suite "
    "test that reclaims its own expired claim through the same handle finds nothing to "
    "claim"
)

#: The mutations a claim token fences, as the suite names them.
_MUTATIONS = ("complete", "reschedule", "dead_letter", "extend_lease")

EXPECTED_FAILURES: dict[str, str] = {
    # G10, first: an entry found first wins, and these set-ups reclaim through the handle
    # that made the expired claim (the fencing test's set-up fails before G1 is reached).
    **{
        f"test_stale_token_is_refused_and_changes_nothing[{mutation}-reclaimed]": _G10
        for mutation in _MUTATIONS
    },
    "test_every_claim_mints_a_fresh_token": _G10,
    "test_dlq_lists_every_dead_task_with_its_whole_history": _G10,
    "test_lease_expiries_are_numbered_in_sequence": _G10,
    "test_reschedule_and_expiry_share_one_numbering": _G10,
    "test_reclaim_after_redrive_numbers_from_history": _G10,
    "test_numbering_continues_across_two_redrives": _G10,
    # G1, by test id — not as a rule entry: the chaos campaign's failure message names
    # only its first violations, so a rule entry for ``fencing`` would also cover a
    # campaign whose later violations are a finding's (lease-respected, terminal-final).
    # Every parametrization of this test fails (a stale token is never refused):
    "test_stale_token_is_refused_and_changes_nothing": _G1,
    "test_at_most_one_outcome_per_token": _G1,
    # a never-issued token on a task pgqueuer has a job for (on an unknown task there is
    # no job to hand pgqueuer: StaleClaim, and those four pass):
    **{
        f"test_never_issued_token_is_stale_claim[{mutation}-{state}]": _G1
        for mutation in _MUTATIONS
        for state in ("in_flight", "pending", "future", "succeeded", "dead")
    },
    # G3: the one test holding a claim to the lease it asked for.
    "lease-per-claim": _G3,
    # The stateful machine compares every step with the reference store and stops at the
    # first divergence, which is one of the gaps here; it shrinks to G5's (a completed
    # task's payload is gone: round-trip), the shortest.
    "test_backend_behaves_like_the_reference_model": (
        f"the machine stops at the first divergence from the reference store, one of this "
        f"ledger's gaps: shrunk, {_G5}; else G1 (a stale outcome accepted), G4, G6 or G10"
    ),
    # G4: re-enqueue after the job ended (successful, or failed = held) makes a new job.
    **{
        f"test_re_enqueue_changes_nothing_whatever_the_state[{state}-{variant}]": _G4
        for state in ("SUCCEEDED", "DEAD")
        for variant in (
            "identical",
            "different-fields-due-now",
            "different-fields-backdated",
            "different-fields-far-future",
        )
    },
    "test_same_id_in_another_queue_raises_id_conflict[SUCCEEDED]": _G4,
    "test_same_id_in_another_queue_raises_id_conflict[DEAD]": _G4,
    # G5: completing deletes the payload and headers.
    "test_complete_makes_the_task_succeeded": _G5,
    # G6: insertion order, not due order.
    "test_claims_come_out_oldest_due_first": _G6,
    "test_expired_leases_and_due_tasks_are_claimed_in_one_due_order": (
        f"{_G6}; and the expired claims are the same handle's, which it skips: {_G10}"
    ),
}
