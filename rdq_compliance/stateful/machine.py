"""The machine: :class:`BackendVsModel`, its rules and its invariants (see
:mod:`rdq_compliance.stateful` for what it checks and how time is handled)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import NoReturn

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from rdq_compliance.invariants import between, close_to, history_problem
from rdq_compliance.stateful.model import ReferenceModel, numbering_differs, task_differences
from rdq_compliance.stateful.records import (
    ClaimLife,
    HeldClaim,
    Observation,
    Paging,
    Result,
    RunStats,
    StatefulViolation,
    Target,
    attempt,
)
from rdq_compliance.stateful.world import (
    DELAYS,
    DLQ_FILTERS,
    ERRORS,
    FAILURES,
    HANDLERS,
    HEADERS,
    LEASE,
    OUTCOMES,
    PAYLOADS,
    QUEUE,
    RETRY_DELAYS,
    SELECTORS,
    TASK_IDS,
    WORKERS,
    MachineConfig,
)
from rdq_core.errors import NotFound
from rdq_core.memory import DueTask
from rdq_core.model import (
    ByIds,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Status,
    Task,
)
from rdq_core.spi import Storage

# ---- rule selection -----------------------------------------------------------------------------


def _without_swarm_testing(machine: RuleBasedStateMachine) -> None:
    """Let every program use every rule (hypothesis's "swarm testing" otherwise disables a
    random subset of rules per program).

    Measured on the broken backends (``benchmarks/stateful_bugs.py``): with swarm testing
    the bugs took about as many examples to find or more (the ``numbering-from-counter``
    chain needs four rules enabled at once), and shrunk programs kept up to ten do-nothing
    steps, because each rule's on/off flag is drawn inside whichever step first looks at
    that rule and the shrinker cannot delete such a step; without it every class shrank to
    1-5 steps. This reaches into hypothesis internals; if they change, swarm testing
    simply stays on.
    """
    try:
        from hypothesis.strategies._internal.featureflags import FeatureFlags

        machine._rules_strategy.enabled_rules_strategy = st.just(FeatureFlags())
    except (ImportError, AttributeError):  # pragma: no cover - another hypothesis version
        pass


# ---- the machine --------------------------------------------------------------------------------

_CONTEXT_RULES = {
    "enqueue": "enqueue-idempotent",
    "reenqueue": "enqueue-idempotent",
    "claim": "transition",
    "reclaim": "reclaim-expired",
    "report": "transition",
    "extend": "lease-respected",
    "redrive": "redrive",
    "purge": "purge",
    "purge_succeeded": "purge-succeeded",
    "dlq": "dlq-paging",
}


class BackendVsModel(RuleBasedStateMachine):
    """The backend under test and the reference model, driven step by step."""

    claims = Bundle("claims")

    def __init__(
        self,
        target: Target,
        config: MachineConfig | None = None,
        stats: RunStats | None = None,
    ) -> None:
        super().__init__()
        _without_swarm_testing(self)
        self.target = target
        self.config = config or MachineConfig()
        self.stats = stats or RunStats()
        self.stats.begin_example()
        self.steps = 0
        self.step_label = "before the first step"
        self.context = ""
        self.mutations = 0
        self.serial = 0
        self.known: set[str] = set()
        self.records: dict[str, list[ClaimLife]] = defaultdict(list)
        self.by_token: dict[str, ClaimLife] = {}
        self.settle_to: datetime | None = None
        self.paging: Paging | None = None
        self._observed: tuple[int, Observation] | None = None
        self.model = ReferenceModel()
        self.spec = target.create_namespace()
        self.storages: list[Storage] = []
        try:
            self.observer = self._connect()
            self.workers = [self._connect() for _ in range(WORKERS)]
            #: The lease a claim or heartbeat asking for ``td`` gets, by the backend's lease
            #: model (``Capabilities.lease_for``): what the model is given and the checks
            #: expect; the backend is asked for ``td`` itself.
            self.held = self.observer.capabilities().lease_for
        except BaseException:
            self.teardown()  # hypothesis only tears down a machine it could build
            raise

    def _connect(self) -> Storage:
        storage = self.target.open(self.spec)
        self.storages.append(storage)
        return storage

    def teardown(self) -> None:
        for storage in reversed(self.storages):
            try:
                storage.close()
            except Exception:  # a failing close must not hide the step that failed
                pass
        self.target.drop_namespace(self.spec)

    # ---- plumbing ---------------------------------------------------------------------------

    def _begin(self, label: str, context: str) -> None:
        self.steps += 1
        self.stats.steps += 1
        self.step_label = label
        self.context = context

    def _fail(self, rule: str, detail: str) -> NoReturn:
        violation = StatefulViolation(rule, f"step {self.steps} {self.step_label}: {detail}")
        self.stats.failed(self.steps, violation)
        raise violation

    def _now(self) -> datetime:
        got = attempt(self.observer.now)
        if not got.ok:
            self._fail("storage-clock", f"now() {got.describe()}")
        value: datetime = got.value
        return value

    def _get(self, task_id: str) -> Task | None:
        got = attempt(self.observer.get, task_id)
        if isinstance(got.error, NotFound):
            return None
        if not got.ok:
            self._fail("model-equivalence", f"get({task_id!r}) {got.describe()}")
        task: Task = got.value
        return task

    def _model_get(self, task_id: str) -> Task | None:
        try:
            return self.model.get(task_id)
        except NotFound:
            return None

    def _used(self, stamp: datetime | None, t0: datetime, t1: datetime) -> datetime:
        """The storage time a call used, if what it wrote says so plausibly; else ``t0``."""
        if stamp is not None and between(stamp, t0, t1, self.config.tolerance):
            return stamp
        return t0

    def _same(self, rule: str, what: str, got: Result, want: Result, values: bool = True) -> None:
        if got.ok and want.ok:
            if values and got.value != want.value:
                self._fail(
                    rule, f"{what}: backend returned {got.value!r}, reference {want.value!r}"
                )
            return
        if not got.ok and not want.ok and type(got.error) is type(want.error):
            return
        self._fail(rule, f"{what}: backend {got.describe()}, reference {want.describe()}")

    def _deadline(self, tier: str, *whens: datetime | None) -> None:
        """Remember an ``instant`` deadline set by this step (the backend's and the model's
        reading of it: the later one) for :meth:`_settle`."""
        if tier != "instant":
            return
        for when in whens:
            if when is not None:
                self.settle_to = when if self.settle_to is None else max(self.settle_to, when)

    def _settle(self) -> None:
        """Let every ``instant`` deadline set by this step pass on the storage clock
        (usually it has: the step's own checks take longer than ``instant``)."""
        if self.settle_to is None:
            return
        when, self.settle_to = self.settle_to, None
        deadline = time.monotonic() + self.config.settle_timeout
        while (now := self._now()) <= when:
            if time.monotonic() > deadline:
                self._fail("storage-clock", f"the storage clock stands still at {now}")
            time.sleep(min(0.001, (when - now).total_seconds()))

    # ---- producer ---------------------------------------------------------------------------

    @initialize(pending=st.integers(0, 2), dead=st.integers(0, 2), queue=QUEUE)
    def start_with_tasks(self, pending: int, dead: int, queue: str) -> None:
        """Start with ``dead`` tasks already in the DLQ and ``pending`` tasks due now, all
        in ``queue`` (ids ``t0``, ``t1``, ... in that order, handlers alternating), so
        programs spend their steps on what happens to tasks rather than on making them.
        The dead ones get there through the SPI like any other: enqueue, claim,
        dead-letter (checked against the model as they go)."""
        queue = self.config.queue(queue)
        self._begin(f"start_with_tasks(pending={pending}, dead={dead}, {queue!r})", "enqueue")
        for n, task in enumerate(TASK_IDS[: dead + pending]):
            self._enqueue(NewTask(task, queue, HANDLERS[n % len(HANDLERS)]), "now")
        if dead:
            self.context = "report"
            for n, h in enumerate(self._claim(0, queue, dead, "long")):
                error = ERRORS[1 + n % (len(ERRORS) - 1)]
                self._report(
                    "dead_letter", h, None, _dead_letter(h, error, Outcome.PERMANENT_FAILURE)
                )
        self._settle()

    @rule(
        task=st.sampled_from(TASK_IDS),
        queue=QUEUE,
        handler=st.sampled_from(HANDLERS),
        payload=PAYLOADS,
        headers=st.sampled_from(HEADERS),
        delay=st.sampled_from(DELAYS),
    )
    def enqueue(
        self,
        task: str,
        queue: str,
        handler: str,
        payload: bytes,
        headers: dict[str, str],
        delay: str,
    ) -> None:
        queue = self.config.queue(queue)
        self._begin(f"enqueue({task!r}, {queue!r}, delay={delay})", "enqueue")
        self._enqueue(
            NewTask(task, queue, handler, payload, headers, self.config.delay(delay)), delay
        )
        self._settle()

    def _enqueue(self, new: NewTask, delay: str) -> None:
        t0 = self._now()
        got = attempt(self.observer.enqueue, new)
        t1 = self._now()
        stored = self._get(new.id) if got.value is True else None
        used = self._used(None if stored is None else stored.created_at, t0, t1)
        want = attempt(self.model.at(used).enqueue, new)
        self.known.add(new.id)
        self._same("enqueue-idempotent", f"enqueue of {new.id!r} in {new.queue!r}", got, want)
        if got.value is False:
            self.context = "reenqueue"
        if got.value is True:
            self.mutations += 1
            model_task = self._model_get(new.id)
            self._deadline(
                delay,
                None if stored is None else stored.next_attempt_at,
                None if model_task is None else model_task.next_attempt_at,
            )

    # ---- workers ----------------------------------------------------------------------------

    @rule(
        target=claims,
        worker=st.integers(0, WORKERS - 1),
        queue=QUEUE,
        limit=st.integers(1, 3),
        lease=LEASE,
    )
    def claim(self, worker: int, queue: str, limit: int, lease: str) -> object:
        queue = self.config.queue(queue)
        self._begin(f"claim(worker={worker}, {queue!r}, limit={limit}, lease={lease})", "claim")
        held = self._claim(worker, queue, limit, lease)
        self._settle()
        return multiple(*held)

    @rule(
        target=claims,
        worker=st.integers(0, WORKERS - 1),
        queue=QUEUE,
        limit=st.integers(1, 3),
        lease=LEASE,
        outcome=st.sampled_from(OUTCOMES),
        error=st.sampled_from(ERRORS),
    )
    def work(
        self,
        worker: int,
        queue: str,
        limit: int,
        lease: str,
        outcome: str,
        error: ErrorInfo | None,
    ) -> object:
        """One turn of a worker loop: claim, then report one outcome for every task claimed
        (``retry`` reschedules due now, ``exhausted`` dead-letters a retryable failure,
        ``crash``: the worker dies before reporting, its claims stay until they expire)."""
        queue = self.config.queue(queue)
        self._begin(
            f"work(worker={worker}, {queue!r}, limit={limit}, lease={lease}, {outcome})", "report"
        )
        held = self._claim(worker, queue, limit, lease)
        self._settle()  # an instant lease has expired before the report: always, not sometimes
        for h in held:
            if outcome == "complete":
                self._report("complete", h, None, _complete(h))
            elif outcome == "crash":
                break
            elif outcome == "retry":
                self._report("reschedule", h, "now", _reschedule(h, timedelta(0), error))
            else:
                how = Outcome.PERMANENT_FAILURE if outcome == "fail" else Outcome.RETRYABLE_FAILURE
                self._report("dead_letter", h, None, _dead_letter(h, error, how))
        self.context = "report"
        self._settle()
        return multiple(*held)

    def _claim(self, worker: int, queue: str, limit: int, lease: str) -> list[HeldClaim]:
        td = self.config.lease(lease)
        t0 = self._now()
        got = attempt(self.workers[worker].claim_due, queue, limit, td)
        t1 = self._now()
        if not got.ok:
            self._claim_raised(f"worker {worker}", queue, limit, t0, got)
        claims: list[Claim] = list(got.value)
        what = f"claim_due({queue!r}, limit={limit}) by worker {worker}"
        for c in claims:
            self._check_claim_time(what, c, self.held(td), t0, t1)
        at = max((c.claimed_at for c in claims), default=t0)
        due = self.model.claimable(queue, at)
        ids = [c.task.id for c in claims]
        self._check_claimable(what, queue, claims, due, at)
        expected = min(limit, len(due))
        if len(ids) > limit:
            self._fail("claim-limit", f"{what} returned {len(ids)} tasks {ids}")
        if len(ids) < expected:
            left = [d for d in due if d.id not in ids][: expected - len(ids)]
            rule_id = "reclaim-expired" if any(d.reclaim for d in left) else "claim-complete"
            self._fail(
                rule_id,
                f"{what} at {at.isoformat()} took {ids}, but {len(due)} were due "
                f"({self._describe_due(due)}); left behind: {[d.id for d in left]}",
            )
        if ids:
            latest = max(d.due_at for d in due if d.id in ids)
            skipped = [d for d in due if d.id not in ids and d.due_at < latest]
            if skipped:
                self._fail(
                    "claim-order",
                    f"{what} took {ids} (latest due {latest.isoformat()}) and left "
                    f"{[d.id for d in skipped]}, due earlier ({self._describe_due(due)})",
                )
        natural = {d.id for d in due[:limit]}
        model = self.model.at(at)
        if set(ids) == natural:
            want = attempt(model.claim_due, queue, limit, self.held(td))
        else:  # tied on due time: the backend's choice is as good as the model's
            want = attempt(model.claim_ids, queue, ids, self.held(td))
        if not want.ok:
            raise want.error  # type: ignore[misc]
        held = self._accept_claims(what, worker, claims, want.value)
        self._deadline(lease, max((c.lease_expires_at for c in claims), default=None))
        return held

    @rule(target=claims, queue=QUEUE, limit=st.integers(1, 2))
    def claim_together(self, queue: str, limit: int) -> object:
        """Every worker claims at the same moment (threads released by one barrier).

        Always with the long lease: which worker wins which task is up to the scheduler,
        so the machine hands the claims on in task-id order and no lease expires inside
        the race; the set of tasks claimed, and so the program, replays exactly.
        """
        queue = self.config.queue(queue)
        self._begin(f"claim_together({queue!r}, limit={limit})", "claim")
        lease = "long"
        td = self.config.lease(lease)
        barrier = threading.Barrier(WORKERS)
        results: list[Result | None] = [None] * WORKERS

        def run(i: int) -> None:
            try:
                barrier.wait(timeout=self.config.thread_timeout)
            except threading.BrokenBarrierError:
                pass
            results[i] = attempt(self.workers[i].claim_due, queue, limit, td)

        t0 = self._now()
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(WORKERS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(self.config.thread_timeout)
        t1 = self._now()
        batch: list[tuple[datetime, int, int, Claim]] = []
        for i, res in enumerate(results):
            if res is None:
                self._fail(
                    "model-equivalence",
                    f"worker {i}'s claim_due did not return within {self.config.thread_timeout}s",
                )
            if not res.ok:
                self._claim_raised(f"worker {i} (all claiming at once)", queue, limit, t0, res)
            claims = list(res.value)
            what = f"claim_due({queue!r}, limit={limit}) by worker {i} (all claiming at once)"
            if len(claims) > limit:
                self._fail("claim-limit", f"{what} returned {len(claims)} tasks")
            for n, c in enumerate(claims):
                self._check_claim_time(what, c, self.held(td), t0, t1)
                batch.append((c.claimed_at, i, n, c))
        # One at a time in claim-time order, as the storage serialised them: each claimed
        # task must be claimable then (a task may go to two workers only if the first
        # one's lease had expired by the second claim).
        batch.sort(key=lambda b: b[:3])
        taken: dict[str, tuple[int, Claim]] = {}
        for at, i, _, c in batch:  # the one rule first: it is what such a race breaks
            first = taken.get(c.task.id)
            if first is not None and first[1].lease_expires_at > at:
                self._fail(
                    "one-claim",
                    f"claims made at the same moment handed task {c.task.id!r} to worker "
                    f"{first[0]} (at {first[1].claimed_at.isoformat()}, lease until "
                    f"{first[1].lease_expires_at.isoformat()}) and to worker {i} (at "
                    f"{at.isoformat()})",
                )
            taken[c.task.id] = (i, c)
        held: list[HeldClaim] = []
        for at, i, _, c in batch:
            what = f"claim_due({queue!r}, limit={limit}) by worker {i} (all claiming at once)"
            self._check_claimable(what, queue, [c], self.model.claimable(queue, at), at)
            want = attempt(self.model.at(at).claim_ids, queue, [c.task.id], self.held(td))
            if not want.ok:
                raise want.error  # type: ignore[misc]
            held += self._accept_claims(what, i, [c], want.value)
        self._settle()
        return multiple(*sorted(held, key=lambda h: h.task_id))

    def _describe_due(self, due: Sequence[DueTask]) -> str:
        return (
            ", ".join(
                f"{d.id} {'lease expired' if d.reclaim else 'due'} {d.due_at.isoformat()}"
                for d in due
            )
            or "none"
        )

    def _check_claim_time(
        self, what: str, c: Claim, lease: timedelta, t0: datetime, t1: datetime
    ) -> None:
        if not between(c.claimed_at, t0, t1, self.config.tolerance):
            self._fail(
                "storage-clock",
                f"{what}: task {c.task.id!r} claimed_at {c.claimed_at.isoformat()} is not the "
                f"storage clock at the claim (between {t0.isoformat()} and {t1.isoformat()})",
            )
        if not close_to(c.lease_expires_at, c.claimed_at + lease, self.config.tolerance):
            self._fail(
                "storage-clock",
                f"{what}: task {c.task.id!r} lease_expires_at {c.lease_expires_at.isoformat()}"
                f" is not claimed_at + lease ({(c.claimed_at + lease).isoformat()})",
            )

    def _check_claimable(
        self, what: str, queue: str, claims: Sequence[Claim], due: Sequence[DueTask], at: datetime
    ) -> None:
        ids = [c.task.id for c in claims]
        if len(set(ids)) != len(ids):
            self._fail("one-claim", f"{what} returned one task twice: {ids}")
        due_ids = {d.id for d in due}
        for c in claims:
            tid = c.task.id
            if tid in due_ids:
                continue
            m = self._model_get(tid)
            if m is None:
                self._fail("model-equivalence", f"{what} claimed {tid!r}, a task that is gone")
            if m.queue != queue:
                self._fail("queue-isolation", f"{what} claimed {tid!r} of queue {m.queue!r}")
            if m.status.terminal:
                self._fail("terminal-final", f"{what} claimed {tid!r}, which is {m.status.value}")
            if m.status is Status.PENDING:
                due_at = m.next_attempt_at.isoformat() if m.next_attempt_at else None
                self._fail(
                    "claim-due-only",
                    f"{what} claimed {tid!r} at {at.isoformat()}; it is due at {due_at}",
                )
            live = [r for r in self.records[tid] if r.superseded_at is None and r.ended_at is None]
            holder = (
                f" (held by worker {live[-1].worker}, claim #{live[-1].serial})" if live else ""
            )
            expires = m.lease_expires_at.isoformat() if m.lease_expires_at else None
            self._fail(
                "lease-respected",
                f"{what} took {tid!r} at {at.isoformat()} while its lease runs until "
                f"{expires}{holder}",
            )

    def _claim_raised(self, who: str, queue: str, limit: int, t0: datetime, got: Result) -> None:
        due = self.model.claimable(queue, t0)[:limit]
        reclaims = [d for d in due if d.reclaim]
        wedged = [d for d in reclaims if d.task.next_attempt_no != d.task.attempt_count + 1]
        detail = (
            f"claim_due({queue!r}, limit={limit}) by {who} {got.describe()}; the reference "
            f"claims {[d.id for d in due]}"
        )
        if wedged:
            d = wedged[0]
            self._fail(
                "history-numbering",
                f"{detail}. Reclaiming {d.id!r} (expired lease, redriven {d.task.redrive_count}"
                f"x) must record LEASE_EXPIRED as attempt {d.task.next_attempt_no} "
                f"(max attempt_no + 1), not attempt_count + 1 = {d.task.attempt_count + 1}",
            )
        self._fail("reclaim-expired" if reclaims else "model-equivalence", detail)

    def _accept_claims(
        self, what: str, worker: int, claims: Sequence[Claim], model_claims: Sequence[Claim]
    ) -> list[HeldClaim]:
        by_id = {m.task.id: m for m in model_claims}
        held = []
        for c in claims:
            m = by_id[c.task.id]
            if c.reclaimed != m.reclaimed:
                self._fail(
                    "reclaim-expired",
                    f"{what}: task {c.task.id!r} reclaimed={c.reclaimed}, reference "
                    f"reclaimed={m.reclaimed}",
                )
            diffs = task_differences(c.task, m.task, self.config.tolerance)
            if diffs:
                rule_id = "reclaim-expired" if m.reclaimed else "transition"
                if numbering_differs(c.task, m.task):
                    rule_id = "history-numbering"
                self._fail(
                    rule_id, f"{what}: the claimed task {c.task.id!r} differs: " + "; ".join(diffs)
                )
            earlier = self.by_token.get(c.token)
            if earlier is not None:
                self._fail(
                    "fencing",
                    f"{what}: task {c.task.id!r} came with the token of claim #{earlier.serial} "
                    f"(worker {earlier.worker}, task {earlier.task_id!r}); every claim must mint "
                    "a fresh token, or the earlier holder can still report",
                )
            self.serial += 1
            rec = ClaimLife(
                self.serial, worker, c.task.id, c.token, c.claimed_at, c.lease_expires_at
            )
            for prev in self.records[c.task.id]:
                if prev.superseded_at is None and prev.ended_at is None:
                    prev.superseded_at = c.claimed_at
                    prev.lease_end_at_takeover = prev.lease_end
            self.records[c.task.id].append(rec)
            self.by_token[c.token] = rec
            held.append(HeldClaim(self.serial, worker, c.task.id, c.token, m.token))
            self.mutations += 1
        if any(m.reclaimed for m in model_claims):
            self.context = "reclaim"
        return held

    @rule(claim=claims, lease=LEASE)
    def extend_lease(self, claim: HeldClaim, lease: str) -> None:
        self._begin(f"extend_lease({claim!r}, lease={lease})", "extend")
        td = self.config.lease(lease)
        t0 = self._now()
        got = attempt(self.workers[claim.worker].extend_lease, claim.task_id, claim.token, td)
        t1 = self._now()
        held = self.held(td)
        used = self._used(got.value - held if got.ok else None, t0, t1)
        want = attempt(self.model.at(used).extend_lease, claim.task_id, claim.model_token, held)
        self._same("fencing", f"extend_lease with {claim!r}", got, want, values=False)
        if got.ok:
            if not close_to(got.value, want.value, self.config.tolerance):
                self._fail(
                    "storage-clock",
                    f"extend_lease({lease}) with {claim!r} returned {got.value.isoformat()}, "
                    f"expected storage now + lease ({want.value.isoformat()})",
                )
            self.by_token[claim.token].lease_end = got.value
            self.mutations += 1
            self._deadline(lease, got.value)
        self._settle()

    @rule(claim=claims)
    def complete(self, claim: HeldClaim) -> None:
        self._begin(f"complete({claim!r})", "report")
        self._report("complete", claim, None, _complete(claim))
        self._settle()

    @rule(claim=claims, delay=st.sampled_from(RETRY_DELAYS), error=st.sampled_from(ERRORS))
    def reschedule(self, claim: HeldClaim, delay: str, error: ErrorInfo | None) -> None:
        self._begin(f"reschedule({claim!r}, delay={delay})", "report")
        self._report(
            "reschedule", claim, delay, _reschedule(claim, self.config.delay(delay), error)
        )
        self._settle()

    @rule(claim=claims, error=st.sampled_from(ERRORS), failure=st.sampled_from(tuple(FAILURES)))
    def dead_letter(self, claim: HeldClaim, error: ErrorInfo | None, failure: str) -> None:
        """``failure``: ``permanent`` (PERMANENT_FAILURE) or ``retryable`` (a retryable
        failure that spent its budget)."""
        self._begin(f"dead_letter({claim!r}, {failure})", "report")
        self._report("dead_letter", claim, None, _dead_letter(claim, error, FAILURES[failure]))
        self._settle()

    def _report(
        self,
        kind: str,
        claim: HeldClaim,
        delay: str | None,
        call: Report,
    ) -> None:
        t0 = self._now()
        got = attempt(call, self.workers[claim.worker], claim.token)
        t1 = self._now()
        stored = self._get(claim.task_id) if got.ok else None
        finished = stored.attempts[-1].finished_at if stored and stored.attempts else None
        used = self._used(finished, t0, t1)
        want = attempt(call, self.model.at(used), claim.model_token)
        self._same("fencing", f"{kind} with {claim!r}", got, want, values=False)
        if got.ok:
            self.mutations += 1
            rec = self.by_token[claim.token]
            rec.outcomes += 1
            rec.ended_at = used if rec.ended_at is None else rec.ended_at
            if delay is not None:
                model_task = self._model_get(claim.task_id)
                self._deadline(
                    delay,
                    None if stored is None else stored.next_attempt_at,
                    None if model_task is None else model_task.next_attempt_at,
                )

    # ---- operator ---------------------------------------------------------------------------

    @rule(queue=QUEUE, selector=SELECTORS)
    def redrive(self, queue: str, selector: Selector) -> None:
        queue = self.config.queue(queue)
        self._begin(f"redrive({queue!r}, {selector!r})", "redrive")
        expected = self.model.selected_ids(queue, selector)
        t0 = self._now()
        got = attempt(self.observer.redrive, queue, selector)
        t1 = self._now()
        stamp = None
        if got.ok and got.value:
            for tid in expected:
                task = self._get(tid)
                if task is not None and task.status is Status.PENDING:
                    stamp = task.next_attempt_at
                    break
        want = attempt(self.model.at(self._used(stamp, t0, t1)).redrive, queue, selector)
        rule_id = "empty-selector" if _selects_nothing(selector) else "redrive"
        self._same(rule_id, f"redrive({queue!r}, {selector!r}) (count)", got, want)
        if want.ok and want.value:
            self.mutations += 1
        self._settle()

    @rule(queue=QUEUE, selector=SELECTORS)
    def purge(self, queue: str, selector: Selector) -> None:
        queue = self.config.queue(queue)
        self._begin(f"purge({queue!r}, {selector!r})", "purge")
        t0 = self._now()
        got = attempt(self.observer.purge, queue, selector)
        want = attempt(self.model.at(t0).purge, queue, selector)
        rule_id = "empty-selector" if _selects_nothing(selector) else "purge"
        self._same(rule_id, f"purge({queue!r}, {selector!r}) (count)", got, want)
        if want.ok and want.value:
            self.mutations += 1

    @rule(queue=QUEUE, older_than=st.sampled_from(("long", "zero")))
    def purge_succeeded(self, queue: str, older_than: str) -> None:
        """``zero`` deletes every SUCCEEDED task (all finished before ``t0``), ``long`` none:
        no task finishes near the cutoff, so the answer never depends on the call's time."""
        queue = self.config.queue(queue)
        self._begin(f"purge_succeeded({queue!r}, older_than={older_than})", "purge_succeeded")
        td = timedelta(0) if older_than == "zero" else self.config.long
        t0 = self._now()
        got = attempt(self.observer.purge_succeeded, queue, td)
        want = attempt(self.model.at(t0).purge_succeeded, queue, td)
        self._same("purge-succeeded", f"purge_succeeded({queue!r}, {td})", got, want)
        if want.ok and want.value:
            self.mutations += 1

    @rule(
        queue=QUEUE,
        size=st.integers(1, 2),
        filter=st.one_of(st.none(), st.sampled_from(DLQ_FILTERS)),
    )
    def dlq_first_page(self, queue: str, size: int, filter: DlqFilter | None) -> None:
        queue = self.config.queue(queue)
        self._begin(f"dlq_list({queue!r}, {filter!r}, limit={size})", "dlq")
        what = f"dlq_list({queue!r}, {filter!r}, limit={size}) first page"
        got = attempt(self.observer.dlq_list, queue, filter, None, size)
        want = attempt(self.model.dlq_list, queue, filter, None, size)
        self._same("dlq-paging", what, got, want, values=False)
        if not got.ok:
            return
        self._same_page(queue, what, got.value, want.value)
        self.paging = None
        if got.value.next_cursor is not None:
            stayed = {
                tid: self.model.dead_at(tid)
                for tid in self.model.selected_ids(queue, filter or DlqFilter(everything=True))
            }
            self.paging = Paging(
                queue, filter, size, got.value.next_cursor, want.value.next_cursor,
                self.mutations, stayed, {t.id: 1 for t in got.value.tasks},
            )  # fmt: skip

    @precondition(lambda self: self.paging is not None)
    @rule(foreign=st.booleans())
    def dlq_next_page(self, foreign: bool) -> None:
        """The next page of the listing in progress; ``foreign``: its cursor on the other
        queue, which must be refused with ``StaleCursor`` (and the listing goes on)."""
        p = self.paging
        assert p is not None
        self._begin(f"dlq_list({p.queue!r}, cursor, foreign={foreign})", "dlq")
        if foreign:
            other = next(q for q in self.config.queues if q != p.queue)
            got = attempt(self.observer.dlq_list, other, p.filter, p.cursor, p.size)
            want = attempt(self.model.dlq_list, other, p.filter, p.model_cursor or "x", p.size)
            self._same("dlq-paging", f"dlq_list({other!r}) with a cursor of {p.queue!r}",
                       got, want, values=False)  # fmt: skip
            return
        what = f"dlq_list({p.queue!r}, {p.filter!r}, limit={p.size}) next page"
        got = attempt(self.observer.dlq_list, p.queue, p.filter, p.cursor, p.size)
        if not got.ok:
            self._fail("dlq-paging", f"{what} {got.describe()}")
        page: DlqPage = got.value
        if p.mutations == self.mutations and p.model_cursor is not None:
            want = attempt(self.model.dlq_list, p.queue, p.filter, p.model_cursor, p.size)
            if not want.ok:
                raise want.error  # type: ignore[misc]
            self._same_page(p.queue, what, page, want.value)
            p.model_cursor = want.value.next_cursor
        else:  # the DLQ changed since the listing began: only the contract's promise holds
            p.model_cursor = None
            if len(page.tasks) > p.size:
                self._fail("dlq-paging", f"{what} returned {len(page.tasks)} tasks")
        for t in page.tasks:
            p.seen[t.id] = p.seen.get(t.id, 0) + 1
            if p.seen[t.id] > 1 and t.id in p.stayed:
                self._fail("dlq-paging", f"{what} listed {t.id!r} again (it stayed DEAD)")
        if page.next_cursor is None:
            skipped = sorted(set(p.stayed) - set(p.seen))
            if skipped:
                self._fail(
                    "dlq-paging",
                    f"{what}: the listing ended without {skipped}, DEAD all along "
                    f"(listed: {sorted(p.seen)})",
                )
            self.paging = None
        else:
            p.cursor = page.next_cursor

    def _same_page(self, queue: str, what: str, got: DlqPage, want: DlqPage) -> None:
        g_ids, w_ids = [t.id for t in got.tasks], [t.id for t in want.tasks]
        foreign = [f"{t.id!r} of queue {t.queue!r}" for t in got.tasks if t.queue != queue]
        if foreign:
            self._fail("queue-isolation", f"{what}: backend listed {', '.join(foreign)}")
        if g_ids != w_ids:
            rule_id = "no-loss" if set(w_ids) - set(g_ids) else "dlq-paging"
            self._fail(rule_id, f"{what}: backend listed {g_ids}, reference {w_ids}")
        if (got.next_cursor is None) != (want.next_cursor is None):
            self._fail(
                "dlq-paging",
                f"{what}: backend next_cursor {got.next_cursor!r}, reference "
                f"{'a cursor' if want.next_cursor else 'None (last page)'}",
            )
        for g, w in zip(got.tasks, want.tasks, strict=True):
            diffs = task_differences(g, w, self.config.tolerance)
            if diffs:
                self._fail("no-loss", f"{what}: DLQ entry {g.id!r} differs: " + "; ".join(diffs))

    def _same_stats(self, queue: str, got: QueueStats, want: QueueStats, t1: datetime) -> None:
        due_hi = self.model.due_count(queue, t1)
        fields = ("pending", "in_flight", "succeeded", "dead")
        wrong = [f for f in fields if getattr(got, f) != getattr(want, f)]
        if wrong or not want.due <= got.due <= due_hi:
            due = str(want.due) if due_hi == want.due else f"{want.due}..{due_hi}"
            self._fail(
                "stats",
                f"stats({queue!r}) backend {_stats(got)}, reference {_stats(want)} (due {due})",
            )

    # ---- invariants ---------------------------------------------------------------------------

    def _observe(self) -> Observation:
        if self._observed is not None and self._observed[0] == self.steps:
            return self._observed[1]
        t0 = self._now()
        ids = sorted(self.known | set(self.model.task_ids()))
        tasks = {tid: self._get(tid) for tid in ids}
        stats: dict[str, QueueStats] = {}
        dlq: dict[str, DlqPage] = {}
        for q in self.config.queues:
            got = attempt(self.observer.stats, q)
            if not got.ok:
                self._fail("stats", f"stats({q!r}) {got.describe()}")
            stats[q] = got.value
            got = attempt(self.observer.dlq_list, q, None, None, 1000)
            if not got.ok:
                self._fail("no-loss", f"dlq_list({q!r}) {got.describe()}")
            dlq[q] = got.value
        # listing the DLQ is a read: the tasks it listed must be as they were just before
        for page in dlq.values():
            for listed in page.tasks:
                before, after = tasks.get(listed.id), self._get(listed.id)
                if before is None or after is None:
                    continue
                diffs = task_differences(after, before, timedelta(0))
                if diffs:
                    said = "; ".join(diffs).replace("backend=", "after=")
                    self._fail(
                        "dlq-paging",
                        f"listing the DLQ changed task {listed.id!r}: "
                        + said.replace("reference=", "before="),
                    )
        t1 = self._now()
        obs = Observation(t0, t1, tasks, {tid: self._model_get(tid) for tid in ids}, stats, dlq)
        self._observed = (self.steps, obs)
        return obs

    @invariant()
    def history_keeps_invariant_h(self) -> None:
        """Invariant H: attempt numbers unique and strictly increasing, on every task."""
        for tid, task in self._observe().tasks.items():
            if task is not None:
                problem = history_problem(task)
                if problem:
                    self._fail("history-numbering", f"task {tid!r}: {problem}")

    @invariant()
    def model_and_backend_agree(self) -> None:
        """Every task, the stats and the DLQ of every queue are what the reference says."""
        obs = self._observe()
        for tid, got in obs.tasks.items():
            want = obs.model[tid]
            if got is None and want is None:
                continue
            if got is None:
                assert want is not None
                rule_id = {"purge": "purge", "purge_succeeded": "purge-succeeded"}.get(
                    self.context, "no-loss"
                )
                self._fail(
                    rule_id,
                    f"task {tid!r} is gone from the backend; the reference has it "
                    f"{want.status.value} with attempts {[a.outcome.value for a in want.attempts]}",
                )
            elif want is None:
                self._fail(
                    _CONTEXT_RULES.get(self.context, "model-equivalence"),
                    f"task {tid!r} is {got.status.value} in the backend; the reference has "
                    "no such task",
                )
            else:
                diffs = task_differences(got, want, self.config.tolerance)
                if diffs:
                    self._fail(self._task_rule(got, want), f"task {tid!r}: " + "; ".join(diffs))
        for q in self.config.queues:
            self._same_stats(q, obs.stats[q], self._model_stats(q, obs), obs.t1)
            want_page = self.model.dlq_list(q, None, None, 1000)
            self._same_page(q, f"dlq_list({q!r}) after the step", obs.dlq[q], want_page)
        if self.paging is not None:
            p = self.paging
            for tid in list(p.stayed):
                m = obs.model.get(tid)
                if (
                    m is None
                    or m.status is not Status.DEAD
                    or self.model.dead_at(tid) != p.stayed[tid]
                ):
                    del p.stayed[tid]

    @invariant()
    def one_live_claim_per_task(self) -> None:
        """The one rule: a task's claims never overlap while both tokens are valid, and at
        most one outcome is accepted per claim token."""
        for tid, recs in self.records.items():
            for rec in recs:
                if rec.outcomes > 1:
                    self._fail(
                        "fencing",
                        f"task {tid!r}: {rec.outcomes} outcomes accepted for claim #{rec.serial} "
                        f"(worker {rec.worker}); at most one per token",
                    )
                if rec.superseded_at is None:
                    continue
                if rec.ended_at is not None and rec.ended_at > rec.superseded_at:
                    self._fail(
                        "fencing",
                        f"task {tid!r}: an outcome of claim #{rec.serial} (worker {rec.worker}) "
                        f"was accepted after another claim took the task over",
                    )
                live_until = rec.lease_end_at_takeover or rec.lease_end
                if rec.ended_at is None and live_until > rec.superseded_at:
                    takeover = next(r for r in recs if r.claimed_at == rec.superseded_at
                                    and r.serial > rec.serial)  # fmt: skip
                    self._fail(
                        "one-claim",
                        f"task {tid!r}: claim #{takeover.serial} (worker {takeover.worker}) at "
                        f"{takeover.claimed_at.isoformat()} while claim #{rec.serial} (worker "
                        f"{rec.worker}) was live until {live_until.isoformat()}",
                    )

    def _model_stats(self, queue: str, obs: Observation) -> QueueStats:
        counts = {s: 0 for s in Status}
        for task in obs.model.values():
            if task is not None and task.queue == queue:
                counts[task.status] += 1
        return QueueStats(
            pending=counts[Status.PENDING],
            due=self.model.due_count(queue, obs.t0),
            in_flight=counts[Status.IN_FLIGHT],
            succeeded=counts[Status.SUCCEEDED],
            dead=counts[Status.DEAD],
        )

    def _task_rule(self, got: Task, want: Task) -> str:
        if self.context in ("reenqueue", "redrive", "purge", "purge_succeeded"):
            return _CONTEXT_RULES[self.context]
        if (got.payload, dict(got.headers)) != (want.payload, dict(want.headers)):
            return "round-trip"
        if numbering_differs(got, want):
            return "history-numbering"
        return _CONTEXT_RULES.get(self.context, "model-equivalence")


Report = Callable[[Storage, str], object]


def _complete(claim: HeldClaim) -> Report:
    return lambda storage, token: storage.complete(claim.task_id, token)


def _reschedule(claim: HeldClaim, delay: timedelta, error: ErrorInfo | None) -> Report:
    return lambda storage, token: storage.reschedule(claim.task_id, token, delay, error)


def _dead_letter(claim: HeldClaim, error: ErrorInfo | None, outcome: Outcome) -> Report:
    return lambda storage, token: storage.dead_letter(claim.task_id, token, error, outcome)


def _selects_nothing(selector: Selector) -> bool:
    if isinstance(selector, ByIds):
        return not selector.ids
    return selector.is_empty


def _stats(s: QueueStats) -> str:
    return (
        f"pending={s.pending} due={s.due} in_flight={s.in_flight} "
        f"succeeded={s.succeeded} dead={s.dead}"
    )
