"""The rq adapter's expected-failure ledger: what rq 3.0.0 does by design (its docs or its
code at the v3.0.0 tag), as rule id or test id -> reason. Data only (the plugin hands it
to the kit as ``Backend.expected_failures``).

Never an entry here: a finding (``findings/rq/README.md``). So no rule entry covers
``fencing`` or ``one-claim``: the tests where rq's acceptance of a stalled worker's late
report shows (F1, F2: ``test_stale_token_is_refused_and_changes_nothing[complete|
reschedule|dead_letter-reclaimed]``, the chaos campaign) stay failures; the entries below
name, test by test, only reports no rq worker ever makes (a token never issued, another
job's, a second report of an execution that already ended).
"""

from __future__ import annotations

RQ = "https://github.com/rq/rq/blob/v3.0.0/"

_LEASE = (
    "rq gives every execution the heartbeat TTL of the worker that runs it, "
    "min(job timeout, job_monitoring_interval) + 60 s, set at prepare_execution and at "
    "each maintain_heartbeats; no call takes a lease ("
    f"{RQ}rq/worker/base.py#L1112-L1126, {RQ}rq/executions.py#L212-L233): lease model "
    "'fixed', 61 s as deployed (rq_lease)"
)
_SCORE_SECONDS = (
    "rq scores an execution in rq:wip at current_timestamp() + TTL, a whole second "
    f"({RQ}rq/registry.py#L339-L355, {RQ}rq/utils.py#L394-L400): a lease ends up to 1 s "
    "before claim (or heartbeat) + TTL"
)
_DUE_SECONDS = (
    "ScheduledJobRegistry.schedule scores a job calendar.timegm(utctimetuple()), "
    f"truncated to the second ({RQ}rq/registry.py#L641-L652), and a Retry interval is a "
    f"whole number of seconds ({RQ}rq/job.py#L1917-L1947): a due time is up to 1 s "
    "before now + delay"
)
_DLQ_SECONDS = (
    "the DLQ is rq's FailedJobRegistry, scored current_timestamp() + failure_ttl, a whole "
    f"second ({RQ}rq/registry.py#L117-L135, {RQ}rq/utils.py#L394-L400): dead letters of one "
    "second come out by job id, not in the order they died"
)
_RETRY_ERROR = (
    "a job that returns Retry (rq's way to reschedule with a delay, "
    f"{RQ}docs/docs/results.md) gets a RETRIED Result without exc_string "
    f"(Job._handle_retry_result, {RQ}rq/job.py#L1703-L1760); the exception path "
    f"(handle_job_failure with retries left) writes no Result at all "
    f"({RQ}rq/worker/base.py#L734-L798): the error of a retried attempt is not kept"
)
_OUTCOME = (
    "rq records a failure as one Result type, FAILED, with its exc_string "
    f"({RQ}rq/results.py#L17-L23, {RQ}rq/job.py#L1670-L1701): the outcome a dead-letter "
    "names (RETRYABLE_FAILURE here) has no place, it reads back as PERMANENT_FAILURE"
)
_NO_REFUSAL = (
    "rq's outcome and heartbeat calls (_finalize_success -> handle_job_success / "
    "handle_job_retry, handle_job_failure, maintain_heartbeats) take the Job and "
    "Execution objects their worker loop hands them and check neither: the loop reports "
    "each execution once, right after running it "
    f"({RQ}rq/worker/base.py#L1582-L1620, {RQ}rq/worker/base.py#L734-L798, "
    f"{RQ}rq/worker/base.py#L1241-L1276). A report no rq worker makes -- a token never "
    "issued, another job's, a second report of an execution that already ended -- is "
    "not refused"
)
_STALE_HEARTBEAT = (
    "rq's heartbeat after its execution was reclaimed is a ZADD XX that finds no entry "
    f"and is dropped, never refused ({RQ}rq/executions.py#L131-L140): harmless, but "
    "accepted"
)
_RECLAIM_UNMARKED = (
    "rq's reclaim (StartedJobRegistry.cleanup, run by a worker's maintenance) re-enqueues "
    "an abandoned job with job.retry(), writing no Result and leaving no mark on the job "
    f"({RQ}rq/registry.py#L268-L337): no LEASE_EXPIRED attempt, no reclaimed=True claim, "
    "attempt_count not incremented"
)
_REDRIVE_BUDGET = (
    "FailedJobRegistry.requeue keeps retries_left, 0 after a dead-letter "
    f"({RQ}rq/registry.py#L196-L231), so rq's cleanup fails the redriven job's next "
    "abandoned execution (AbandonedJobError, into the FailedJobRegistry: "
    f"{RQ}docs/docs/results.md, 'Dealing with Interruptions') instead of re-enqueueing it"
)
_STATEFUL = (
    "the machine stops at its first divergence, at step 1: a queued job's due time is its "
    "enqueued_at, stamped by its own now() after created_at "
    f"(Queue._prepare_for_queue, {RQ}rq/queue.py#L1381-L1395), and rq's registry scores "
    "are whole seconds"
)

_OPS = ("complete", "reschedule", "dead_letter", "extend_lease")

EXPECTED_FAILURES: dict[str, str] = {
    "lease-per-claim": _LEASE,
    "test_claim_stamps_the_lease_from_the_storage_clock": _SCORE_SECONDS,
    "test_extend_lease_sets_expiry_to_storage_now_plus_lease": _SCORE_SECONDS,
    "test_created_at_and_next_attempt_at_come_from_the_storage_clock[plus-5s]": _DUE_SECONDS,
    "test_created_at_and_next_attempt_at_come_from_the_storage_clock[plus-1h]": _DUE_SECONDS,
    "test_created_at_and_next_attempt_at_come_from_the_storage_clock[minus-1h]": _DUE_SECONDS,
    "test_reschedule_returns_the_task_to_pending_due_after_the_delay": _DUE_SECONDS,
    "test_reschedule_keeps_the_error_exactly[no-detail]": _RETRY_ERROR,
    "test_reschedule_keeps_the_error_exactly[unicode]": _RETRY_ERROR,
    "test_reschedule_keeps_the_error_exactly[empty-strings]": _RETRY_ERROR,
    "test_reschedule_keeps_the_error_exactly[long]": _RETRY_ERROR,
    "test_dead_letter_makes_the_task_dead_with_the_given_outcome[RETRYABLE_FAILURE]": _OUTCOME,
    "test_reclaim_after_redrive_numbers_from_history": _OUTCOME,
    "test_at_most_one_outcome_per_token": _NO_REFUSAL,
    "test_backend_behaves_like_the_reference_model": _STATEFUL,
    "test_stale_token_is_refused_and_changes_nothing[extend_lease-reclaimed]": _STALE_HEARTBEAT,
    "test_expired_lease_is_reclaimed_with_a_lease_expired_attempt": _RECLAIM_UNMARKED,
    "test_lease_expiries_are_numbered_in_sequence": _RECLAIM_UNMARKED,
    "test_reschedule_and_expiry_share_one_numbering": _RECLAIM_UNMARKED,
    "test_numbering_continues_across_two_redrives": _REDRIVE_BUDGET,
    **{
        f"test_dlq_pages_in_dead_letter_order_when_ids_sort_the_other_way[page-size-{n}]": (
            _DLQ_SECONDS
        )
        for n in (1, 2, 5)
    },
    "test_expired_leases_and_due_tasks_are_claimed_in_one_due_order": (
        f"{_SCORE_SECONDS}; {_DUE_SECONDS}: 300 ms apart, the test's expiries and due times "
        "fall in the same seconds and cannot interleave"
    ),
    "test_dlq_lists_every_dead_task_with_its_whole_history": (
        _RETRY_ERROR + "; and " + _RECLAIM_UNMARKED
    ),
    **{
        f"test_never_issued_token_is_stale_claim[{op}-{target}]": _NO_REFUSAL
        for op in _OPS
        for target in ("in_flight", "pending", "future", "succeeded", "dead")
    },
    **{
        f"test_stale_token_is_refused_and_changes_nothing[{op}-{situation}]": _NO_REFUSAL
        for op in _OPS
        for situation in (
            "reclaimed-after-reschedule",
            "never-issued",
            "other-tasks-token",
            "completed",
            "rescheduled",
            "dead-lettered",
        )
    },
}
