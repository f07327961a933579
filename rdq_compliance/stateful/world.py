"""The world the stateful machine plays in: ids, queues, payloads, leases, and the
machine's timing (:class:`MachineConfig`). See :mod:`rdq_compliance.stateful` for why
leases come in two lengths only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from hypothesis import strategies as st

from rdq_compliance.invariants import CLOCK_SLACK
from rdq_core.model import (
    ByIds,
    DlqFilter,
    ErrorInfo,
    Outcome,
    Selector,
)

# ---- the world the machine plays in -------------------------------------------------------------

#: Task ids; a small pool, so duplicates and ids of another queue come up often.
TASK_IDS = ("t0", "t1", "t2", "t3")
#: The machine's two queues as a program names them; :attr:`MachineConfig.queues` holds
#: the names stored (``qa`` is the first, ``qb`` the second), which the runner takes from
#: :func:`rdq_compliance.queue_names.queue_pair`: the backend's neighbour queues, when it
#: names them, else a pair drawn from the run's seed.
QUEUES = ("qa", "qb")
HANDLERS = ("h1", "h2")
#: How many logical workers, each with its own connection.
WORKERS = 3
ERRORS: tuple[ErrorInfo | None, ...] = (
    None,
    ErrorInfo("app.Timeout", "timed out"),
    ErrorInfo("app.Bad", "bad input", "line 1"),
)
HEADERS: tuple[dict[str, str], ...] = ({}, {"trace": "a1"}, {"lang": "é", "empty": ""})
#: Payloads: any bytes, and the ones stores have mangled (NUL, not UTF-8, empty).
PAYLOADS: st.SearchStrategy[bytes] = st.one_of(
    st.sampled_from((b"", b"\x00", b"a\x00b", b"\xff\xfe\x00\x80")), st.binary(max_size=8)
)
#: Lease lengths (see "Time" above): two claims in three expire by the next step.
LEASES = ("instant", "long")
LEASE: st.SearchStrategy[str] = st.integers(0, 2).map(lambda n: LEASES[n == 2])
#: Enqueue delays: ``past`` is a back-dated task, due already.
DELAYS = ("now", "past", "instant", "long")
RETRY_DELAYS = ("now", "instant", "long")
#: How a dead-letter call names its failure.
FAILURES = {"permanent": Outcome.PERMANENT_FAILURE, "retryable": Outcome.RETRYABLE_FAILURE}
#: What a worker reports in a ``work`` step.
OUTCOMES = ("complete", "retry", "fail", "exhausted", "crash")
DLQ_FILTERS = (
    DlqFilter(everything=True),
    DlqFilter(),
    DlqFilter(handler="h1"),
    DlqFilter(error_type="app.Timeout"),
    DlqFilter(handler="h2", error_type="app.Bad"),
)
#: Most steps act on the first queue (long histories need several steps on one queue);
#: one in four on the other, which is enough to test isolation.
QUEUE: st.SearchStrategy[str] = st.integers(0, 3).map(lambda n: QUEUES[n == 3])
SELECTORS: st.SearchStrategy[Selector] = st.one_of(
    st.just(DlqFilter(everything=True)),
    st.lists(st.sampled_from(TASK_IDS), max_size=3, unique=True).map(ByIds),
    st.sampled_from(DLQ_FILTERS[1:]),
)


@dataclass(frozen=True)
class MachineConfig:
    """Timing of the machine. The defaults keep an example well under a second."""

    instant: timedelta = timedelta(microseconds=200)
    long: timedelta = timedelta(minutes=10)
    past: timedelta = timedelta(seconds=-1)
    #: How far a backend's timestamp may be from the model's (coarse storage clocks).
    tolerance: timedelta = CLOCK_SLACK
    #: How long a claim by every worker at once may take before it counts as hung.
    thread_timeout: float = 30.0
    #: How long the storage clock may take to pass an ``instant`` deadline.
    settle_timeout: float = 30.0
    #: The queue names stored for the program's ``qa`` and ``qb``.
    queues: tuple[str, str] = QUEUES

    def queue(self, label: str) -> str:
        """The name stored for the program's queue ``label``."""
        return self.queues[QUEUES.index(label)]

    def lease(self, tier: str) -> timedelta:
        return {"instant": self.instant, "long": self.long}[tier]

    def delay(self, tier: str) -> timedelta:
        if tier == "now":
            return timedelta(0)
        if tier == "past":
            return self.past
        return self.lease(tier)
