"""The expected-failure ledger of the procrastinate adapter (plugin half).

Each entry is a kit test that fails because of procrastinate's documented design (its
docs, or its code where the docs are silent): a **gap**, never a finding. The findings
(``findings/procrastinate/README.md``) are deliberately absent: their tests fail as
failures. Every link is pinned to the 3.10.0 tag (line numbers of the 3.10.0 wheel).
The gap ids (G1...) are those of ``findings/procrastinate/README.md``.
"""

from __future__ import annotations

_TAG = "https://github.com/procrastinate-org/procrastinate/blob/3.10.0/"

G1 = (
    "G1 no producer-chosen id: jobs get a bigserial id; the rdq id is the job's "
    "queueing_lock, procrastinate's only dedupe, which holds one job in 'todo' per lock "
    "(whatever the queue) and lets a new job in once the first is doing or finished: "
    f"{_TAG}procrastinate/sql/schema.sql#L99-L100 and "
    f'{_TAG}docs/howto/advanced/queueing_locks.md ("queueing_lock allows a single job in '
    'todo status. Meanwhile, it allows multiple jobs to be in doing status")'
)
G2 = (
    "G2 no claim token: finish_job/retry_job take the job id alone and the worker that "
    "reports is never checked, so a worker that reports a second time (here: after its own "
    "reschedule, once another worker fetched the job) is accepted: "
    f"{_TAG}procrastinate/sql/schema.sql#L264-L292, #L364-L402, "
    f"{_TAG}procrastinate/manager.py#L317-L348"
)
G3 = (
    "G3 finish_job accepts a 'todo' job (the trigger logs it as 'cancelled'), so a second "
    "report after the worker's own reschedule is accepted: "
    f"{_TAG}procrastinate/sql/schema.sql#L276-L285, #L462-L468"
)
G4 = (
    "G4 retry_job accepts a 'failed' job (the manual retry of failed jobs, "
    f"{_TAG}docs/howto/advanced/retry_failed.md): "
    f"{_TAG}procrastinate/sql/schema.sql#L376-L394"
)
G5_HEARTBEAT = (
    "G5 the heartbeat is the worker's (update_heartbeat(worker_id)), not a claim's: it "
    "takes no job, never refuses and returns nothing, so a stalled worker's heartbeat is "
    "taken as long as its row exists (a worker's row goes only when a starting worker "
    "prunes it, after stalled_worker_timeout, 30 s by default): "
    f"{_TAG}procrastinate/sql/schema.sql#L542-L551, {_TAG}procrastinate/manager.py#L1009-L1021"
)
G5_LEASE = (
    "G5 no lease per claim: a job is stalled once its worker's last heartbeat is older than "
    "the threshold the reclaimer passes (get_stalled_jobs' seconds_since_heartbeat); the "
    "lease asked for is not procrastinate's to take, and it runs from the worker's last "
    "heartbeat, which precedes the fetch (fetch_job does not touch it): "
    f"{_TAG}procrastinate/sql/queries.sql#L39-L53, {_TAG}procrastinate/worker.py#L48-L49, "
    f"{_TAG}docs/howto/production/retry_stalled_jobs.md"
)
G7_ERRORS = (
    "G7 no error, no outcome and no attempt rows: procrastinate keeps a status and "
    "status-transition events only (an error's type and message are not stored; 'failed' "
    "does not say whether the failure was permanent or the retries ran out): "
    f"{_TAG}procrastinate/sql/schema.sql#L33-L44, #L65-L78, #L90-L95"
)
G7_LEASE_EXPIRED = (
    "G7 no LEASE_EXPIRED attempt: the stalled-jobs recipe requeues with retry_job, the "
    "same call (and the same 'deferred_for_retry' event) as a worker's retry: "
    f"{_TAG}docs/howto/production/retry_stalled_jobs.md, "
    f"{_TAG}procrastinate/sql/schema.sql#L443-L484"
)
G8 = (
    "G8 fetch_job takes the job of highest priority, then lowest id, not the one due "
    f"earliest: {_TAG}procrastinate/sql/schema.sql#L251"
)
G10 = (
    "G10 the manual retry of a failed job (the Django admin's 'Retry Job', retry_job_by_id) "
    "increments attempts instead of resetting them; there is no redrive counter but the "
    f"'retried' events: {_TAG}procrastinate/sql/schema.sql#L386-L394, "
    f"{_TAG}procrastinate/contrib/django/admin.py#L139-L147"
)
G11 = (
    "G11 no call deletes a given failed job: delete_old_jobs deletes by age and status set, "
    "finish_job/cancel_job_by_id delete only todo/doing jobs, so purge deletes nothing: "
    f"{_TAG}procrastinate/manager.py#L275-L315, {_TAG}procrastinate/sql/queries.sql#L55-L69"
)
G12 = (
    "G12 queue and task names are varchar(128) (rdq allows 240): "
    f"{_TAG}procrastinate/sql/schema.sql#L67-L68"
)
STATEFUL = (
    "G5 + G7: the stateful machine holds every claim to claimed_at + the lease the lease "
    "model gives (Capabilities.lease_for), while procrastinate's lease runs from the worker's "
    "last heartbeat, before the fetch, + the stalled threshold (" + G5_LEASE + "); past "
    "that, procrastinate "
    "stores no error and no LEASE_EXPIRED attempt (" + G7_ERRORS + "), so the reference "
    "model can never match"
)


def _params(test: str, params: list[str], reason: str) -> dict[str, str]:
    return {f"{test}[{p}]": reason for p in params}


_REENQUEUE_STATES = ["IN_FLIGHT", "SUCCEEDED", "DEAD"]
_REENQUEUE_FIELDS = [
    "identical",
    "different-fields-due-now",
    "different-fields-backdated",
    "different-fields-far-future",
]
_FENCING = "test_stale_token_is_refused_and_changes_nothing"

EXPECTED_FAILURES: dict[str, str] = {
    # ---- enqueue (G1), names (G12) ----
    **_params(
        "test_re_enqueue_changes_nothing_whatever_the_state",
        [f"{s}-{f}" for s in _REENQUEUE_STATES for f in _REENQUEUE_FIELDS],
        G1,
    ),
    **_params("test_same_id_in_another_queue_raises_id_conflict", _REENQUEUE_STATES, G1),
    "test_longest_queue_and_handler_names_are_accepted": G12,
    # ---- claims and leases (G5, G8, G7) ----
    "test_claims_come_out_oldest_due_first": G8,
    "test_expired_leases_and_due_tasks_are_claimed_in_one_due_order": G8,
    "test_claim_stamps_the_lease_from_the_storage_clock": G5_LEASE,
    "test_a_claim_holds_the_lease_it_asked_for": G5_LEASE,
    "test_expired_lease_is_reclaimed_with_a_lease_expired_attempt": G7_LEASE_EXPIRED,
    "test_lease_expiries_are_numbered_in_sequence": G7_LEASE_EXPIRED,
    "test_reschedule_and_expiry_share_one_numbering": G7_LEASE_EXPIRED,
    # ---- fencing: the gaps (the findings F1, F2 are [complete|dead_letter|reschedule-reclaimed],
    # not here) ----
    f"{_FENCING}[complete-reclaimed-after-reschedule]": G2,
    f"{_FENCING}[dead_letter-reclaimed-after-reschedule]": G2,
    f"{_FENCING}[reschedule-reclaimed-after-reschedule]": G2,
    f"{_FENCING}[complete-rescheduled]": G3,
    f"{_FENCING}[dead_letter-rescheduled]": G3,
    f"{_FENCING}[reschedule-dead-lettered]": G4,
    f"{_FENCING}[extend_lease-reclaimed]": G5_HEARTBEAT,
    f"{_FENCING}[extend_lease-reclaimed-after-reschedule]": G5_HEARTBEAT,
    f"{_FENCING}[extend_lease-completed]": G5_HEARTBEAT,
    f"{_FENCING}[extend_lease-rescheduled]": G5_HEARTBEAT,
    f"{_FENCING}[extend_lease-dead-lettered]": G5_HEARTBEAT,
    # ---- errors and outcomes (G7) ----
    **_params(
        "test_reschedule_keeps_the_error_exactly",
        ["no-detail", "unicode", "empty-strings", "long"],
        G7_ERRORS,
    ),
    **_params(
        "test_dead_letter_makes_the_task_dead_with_the_given_outcome",
        ["PERMANENT_FAILURE", "RETRYABLE_FAILURE"],
        G7_ERRORS,
    ),
    "test_reclaim_after_redrive_numbers_from_history": G7_ERRORS,
    "test_dlq_lists_every_dead_task_with_its_whole_history": G7_ERRORS,
    "test_dlq_lists_no_task_that_is_not_dead": G7_ERRORS,
    **_params(
        "test_dlq_filter_selects_exactly_the_matching_dead_tasks",
        ["last-error-type", "handler-and-error-type"],
        G7_ERRORS,
    ),
    **_params(
        "test_redrive_by_filter_changes_only_the_matching_dead_tasks",
        ["last-error-type", "handler-and-error-type"],
        G7_ERRORS,
    ),
    # ---- redrive (G10) ----
    "test_redrive_by_ids_changes_only_the_selected_dead_tasks": G10,
    **_params(
        "test_redrive_by_filter_changes_only_the_matching_dead_tasks",
        ["handler", "everything", "everything-and-handler"],
        G10,
    ),
    **_params(
        "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept",
        ["one-failure", "retried", "redriven-before"],
        G10,
    ),
    "test_numbering_continues_across_two_redrives": G10,
    # ---- purge (G11) ----
    "test_purge_by_ids_deletes_only_the_selected_dead_tasks": G11,
    **_params(
        "test_purge_by_filter_deletes_only_the_matching_dead_tasks",
        [
            "handler",
            "last-error-type",
            "handler-and-error-type",
            "everything",
            "everything-and-handler",
        ],
        G11,
    ),
    "test_purged_id_can_be_enqueued_again_afresh": G11,
    **_params(
        "test_dlq_paging_is_stable_while_tasks_are_redriven_or_purged",
        ["page-size-1", "page-size-3"],
        G11,
    ),
    # ---- the stateful machine (G5, G7) ----
    "test_backend_behaves_like_the_reference_model": STATEFUL,
}
