"""The dramatiq adapter's expected-failure ledger: the gaps, what dramatiq 2.2.1 documents
as its design or plainly does not have, each with the docs or code that say so (links
pinned to the v2.2.1 tag). Plugin-half data: :mod:`rdq_dramatiq.plugin` hands it to the kit.

Test-id entries where a rule is only partly a gap (the rest of the rule's tests pass);
rule entries where every test of the rule needs what dramatiq does not have. What breaks
dramatiq's own promises, or loses or duplicates work, is a finding or a behaviour already
reported upstream (``findings/dramatiq``), never an entry here. The chaos campaign has no
entry: it fails on dramatiq, with violations that are gaps (its checker reads attempt
histories dramatiq does not keep; F2, a stale worker's retry, is within at-least-once
delivery) and others that upstream reports track (F3, Bogdanp/dramatiq#431; F4,
Bogdanp/dramatiq#545); ``tests/adapters/test_dramatiq.py`` reads every one of them and
holds each to one of those.
"""

from __future__ import annotations

__all__ = ["EXPECTED_FAILURES", "GAPS"]

_V = "https://github.com/Bogdanp/dramatiq/blob/v2.2.1"
_LUA = f"{_V}/dramatiq/brokers/redis/dispatch.lua"
_BROKER = f"{_V}/dramatiq/brokers/redis.py"
_GUIDE = f"{_V}/docs/source/guide.rst"

#: The gaps, by a short name; the ledger below gives each test or rule one of them.
GAPS: dict[str, str] = {
    "history": (
        "dramatiq keeps no attempt history: a message carries only the retry count and the "
        "last traceback the Retries middleware writes into it "
        f"({_V}/dramatiq/middleware/retries.py#L108-L112), an ack deletes the message "
        f"({_LUA}#L191-L196) and a reclaim records nothing ({_LUA}#L106-L124; recording "
        "recoveries was declined upstream, Bogdanp/dramatiq#383)"
    ),
    "own-reclaim": (
        "the lease is the worker process's, not the claim's: every call of a broker first "
        f"refreshes its own heartbeat ({_LUA}#L56-L58) and maintenance requeues only the "
        f"messages of brokers silent for heartbeat_timeout ({_LUA}#L110-L124; 'for a broker "
        f"process to be considered offline', {_BROKER}#L79-L81), so a worker never reclaims "
        "what it claimed itself, whatever time has passed"
    ),
    "heartbeat": (
        "the heartbeat is any call of the worker process and is never refused: dispatch.lua "
        f"ZADDs the broker's heartbeat before every command ({_LUA}#L56-L58), for every "
        "message it holds at once, including ones another worker's maintenance took away"
    ),
    "lease": (
        "one lease for every claim: a claim lives until its worker's last call plus "
        f"heartbeat_timeout, a RedisBroker setting ({_BROKER}#L76-L81, {_LUA}#L110-L111), "
        "whatever lease the claim asks (lease model 'fixed')"
    ),
    "idempotency": (
        "no producer-side idempotency: every RedisBroker.enqueue mints a new "
        "redis_message_id ('messages may be retried') and stores a new copy, whatever the "
        f"message_id ({_BROKER}#L163-L170); there is no per-queue id index to conflict on"
    ),
    "redrive": (
        "dramatiq has no redrive and no purge of chosen dead letters: 'From here, you can "
        "manually inspect the message and decide whether or not it should be put back on "
        f"the queue' ({_GUIDE}, 'Dead Letters'); RedisBroker.flush drops whole queues "
        f"({_BROKER}#L197-L204)"
    ),
    "purge-succeeded": (
        f"dramatiq keeps nothing of a succeeded message to purge: an ack deletes it "
        f"({_LUA}#L191-L196), and the result the Results middleware stored only expires "
        f"(result_ttl, {_V}/dramatiq/results/middleware.py#L59-L64)"
    ),
    "dead-letter-error": (
        "a dead letter keeps no error: the nack moves the message as it was stored "
        f"({_LUA}#L200-L212), not the exception the worker saw, so a DLQ filter by error "
        "type finds nothing"
    ),
    "per-process-claim": (
        "a claim belongs to the worker process that fetched it: the ack and nack remove the "
        f"message id from that broker's own ack set ({_LUA}#L24-L27, L191-L212), so another "
        "process (another storage handle) cannot report on it"
    ),
    "millisecond-clock": (
        "dramatiq's clock has millisecond resolution (current_millis(), "
        f"{_V}/dramatiq/common.py#L75-L77): a heartbeat sent in the claim's millisecond "
        "extends nothing (test_extend_lease_sets_expiry_to_storage_now_plus_lease, which "
        "then fails, as it did in about 2 of 3 tries here); the rest of the rule holds "
        "(test_extended_lease_is_not_reclaimed_at_the_original_expiry fails only at its end, "
        "on the SUCCESS attempt dramatiq does not keep)"
    ),
}

_FENCING = "test_stale_token_is_refused_and_changes_nothing"
_RE_ENQUEUE = "test_re_enqueue_changes_nothing_whatever_the_state"

#: rule id or test id -> reason (gap name: reason).
EXPECTED_FAILURES: dict[str, str] = {
    # ---- whole rules ------------------------------------------------------------------------
    "history-numbering": f"[history] {GAPS['history']}",
    "lease-per-claim": f"[lease] {GAPS['lease']}",
    "enqueue-idempotent": f"[idempotency] {GAPS['idempotency']}",
    "redrive": f"[redrive] {GAPS['redrive']}",
    "purge": f"[redrive] {GAPS['redrive']}",
    "purge-succeeded": f"[purge-succeeded] {GAPS['purge-succeeded']}",
    # ---- no attempt history: the rule's own part holds, the history check after it fails ----
    "test_claim_returns_the_task_with_its_full_history": f"[history] {GAPS['history']}",
    "test_extended_lease_is_not_reclaimed_at_the_original_expiry": (
        f"[history] the extended lease holds; the completed task has no attempts: "
        f"{GAPS['history']}"
    ),
    "test_expired_lease_is_reclaimed_with_a_lease_expired_attempt": (
        f"[history] the reclaim happens (maintenance) but is recorded nowhere: {GAPS['history']}"
    ),
    "test_expired_worker_can_still_report_until_reclaimed": (
        f"[history] the report is taken (the status is right); {GAPS['history']}"
    ),
    "test_at_most_one_outcome_per_token": (
        f"[history] the second complete is refused; {GAPS['history']}"
    ),
    "test_threads_never_share_a_claim": (
        f"[history] every task was claimed once and completed; {GAPS['history']}"
    ),
    "test_processes_never_share_a_claim": (
        f"[history] every task was claimed once and completed; {GAPS['history']}"
    ),
    "test_a_late_outcome_and_a_reclaim_never_both_win": (
        "[history] every reclaimed task ends SUCCEEDED with no attempts (the check names "
        f"outcome-recorded): {GAPS['history']}; [heartbeat] a late holder's heartbeat is "
        "taken after another worker's maintenance gave its message away, and its complete "
        "is then refused (the check names lease-respected, on the client clock's "
        f"timestamps): {GAPS['heartbeat']}"
    ),
    "test_late_outcomes_from_other_processes_never_beat_a_reclaim_too": (
        "[history] every reclaimed task ends SUCCEEDED with no attempts (the check names "
        f"outcome-recorded): {GAPS['history']}"
    ),
    **{
        f"test_dlq_pages_in_dead_letter_order_when_ids_sort_the_other_way[page-size-{n}]": (
            f"[history] a dead task has no attempts, so no dead-letter time to order by: "
            f"{GAPS['history']}"
        )
        for n in (1, 2, 5)
    },
    "test_queues_stored_side_by_side_stay_apart": f"[redrive] {GAPS['redrive']}",
    "test_expired_leases_and_due_tasks_are_claimed_in_one_due_order": (
        f"[own-reclaim] the expired claims are this handle's own: {GAPS['own-reclaim']}"
    ),
    "test_complete_makes_the_task_succeeded": f"[history] {GAPS['history']}",
    "test_reschedule_returns_the_task_to_pending_due_after_the_delay": (
        f"[history] {GAPS['history']}"
    ),
    "test_reschedule_keeps_the_error_exactly": f"[history] {GAPS['history']}",
    "test_dead_letter_makes_the_task_dead_with_the_given_outcome": f"[history] {GAPS['history']}",
    "test_redriven_task_is_pending_due_now_with_count_reset_and_history_kept[one-failure]": (
        "[history] the dead task's attempt_count is dramatiq's retry count, 0 for a message "
        f"nacked at its first failure; {GAPS['history']}"
    ),
    # ---- a worker never reclaims its own claim -------------------------------------------------
    "test_every_claim_mints_a_fresh_token": f"[own-reclaim] {GAPS['own-reclaim']}",
    f"{_FENCING}[complete-reclaimed]": f"[own-reclaim] {GAPS['own-reclaim']}",
    f"{_FENCING}[reschedule-reclaimed]": f"[own-reclaim] {GAPS['own-reclaim']}",
    f"{_FENCING}[dead_letter-reclaimed]": f"[own-reclaim] {GAPS['own-reclaim']}",
    f"{_FENCING}[extend_lease-reclaimed]": f"[own-reclaim] {GAPS['own-reclaim']}",
    "test_dlq_lists_every_dead_task_with_its_whole_history": (
        f"[own-reclaim] {GAPS['own-reclaim']} (the second claim_one finds the task still in "
        "flight and names claim-complete)"
    ),
    # ---- a DLQ without errors, claims per process ----------------------------------------------
    "test_dlq_filter_selects_exactly_the_matching_dead_tasks[last-error-type]": (
        f"[dead-letter-error] {GAPS['dead-letter-error']}"
    ),
    "test_dlq_filter_selects_exactly_the_matching_dead_tasks[handler-and-error-type]": (
        f"[dead-letter-error] {GAPS['dead-letter-error']}"
    ),
    "test_dlq_paging_is_stable_while_another_handle_dead_letters_from_another_thread": (
        f"[per-process-claim] {GAPS['per-process-claim']}"
    ),
    # ---- tests whose set-up redrives or purges ---------------------------------------------------
    "test_dlq_lists_no_task_that_is_not_dead": f"[redrive] set-up redrives: {GAPS['redrive']}",
    "test_dlq_pages_return_every_dead_task_once_in_dead_letter_order": (
        f"[redrive] set-up redrives: {GAPS['redrive']}"
    ),
    "test_dlq_paging_is_stable_while_tasks_are_redriven_or_purged": f"[redrive] {GAPS['redrive']}",
    "test_selectors_never_touch_another_queue": f"[redrive] {GAPS['redrive']}",
    "test_stats_count_tasks_by_status": f"[redrive] set-up redrives: {GAPS['redrive']}",
    "test_stats_are_per_queue": f"[redrive] set-up redrives: {GAPS['redrive']}",
    "test_purge_succeeded_with_zero_age_deletes_every_succeeded_task": (
        f"[redrive] set-up redrives: {GAPS['redrive']}; {GAPS['purge-succeeded']}"
    ),
    "test_purge_succeeded_keeps_tasks_younger_than_older_than": (
        f"[redrive] set-up redrives: {GAPS['redrive']}; {GAPS['purge-succeeded']}"
    ),
    "test_purge_succeeded_only_touches_its_queue": f"[purge-succeeded] {GAPS['purge-succeeded']}",
    **{
        f"{_RE_ENQUEUE}[REDRIVEN-{variant}]": f"[redrive] set-up redrives: {GAPS['redrive']}"
        for variant in (
            "identical",
            "different-fields-due-now",
            "different-fields-far-future",
            "different-fields-backdated",
        )
    },
    "test_same_id_in_another_queue_raises_id_conflict[REDRIVEN]": (
        f"[redrive] set-up redrives: {GAPS['redrive']}"
    ),
    # ---- the stateful machine and the chaos campaign -------------------------------------
    "test_backend_behaves_like_the_reference_model": (
        "[history] the machine compares every step with a reference store that keeps "
        f"attempt histories and succeeded tasks whole: {GAPS['history']}"
    ),
}
