"""``storage-clock``: the storage has one clock, and it does not run backwards.

Due-ness and leases follow *the storage's* clock (``contract.md#the-storage-clock``).
Every claim reports the storage time it was stamped with (``claimed_at``), every
acknowledged heartbeat the new expiry (its storage time is the expiry minus the claim's
lease, or minus the backend's fixed lease, ``FinalState.fixed_lease_us``, when its lease
model gives one). If call A was acknowledged before call B was invoked — in real time,
by the journals' ``t``, which the harness keeps true even for a worker whose clock it
skews — then one storage clock stamped A no later than B. A history where B's storage
time is earlier than A's by more than :data:`TOLERANCE_US` was not stamped by one clock:
typically by each client's own (a script with ``now`` in ``ARGV``, a Mongo filter with a
client datetime, SQL with a client timestamp), which only shows once the clients' clocks
disagree — under the nemesis's clock skew.

Decided over the whole run, across tasks and workers (a sweep in real-time order). The
tolerance covers a store whose shards keep their own, NTP-disciplined clocks; a store
on one machine is exact. One finding per pair of workers (the first such pair of calls),
so a skewed run names each offending worker pair once instead of every call.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rdq_compliance.chaos.checker.engine import CheckerRule, History, runs
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, finding
from rdq_compliance.chaos.checker.format import ms, storage_time
from rdq_compliance.chaos.checker.index import CLAIM, HEARTBEAT
from rdq_compliance.chaos.checker.view import Context
from rdq_compliance.chaos.events import INVOKE, OK
from rdq_compliance.rule import Need

#: How far (µs) a later call's storage time may lie before an earlier one's.
TOLERANCE_US = 100_000
#: How far apart (s) in real time two calls must be to be ordered (journal times of
#: different processes come from one host's clock; this is their resolution, with room).
REAL_MARGIN_S = 0.002


def real_margin(ctx: Context) -> float:
    """:data:`REAL_MARGIN_S`, widened by twice the largest measured uncertainty of a
    host's clock when the workers ran on several hosts (the harness journals each host's
    offset and its uncertainty as ``host``/``clock`` events, and the journals' times were
    moved onto the runner's clock by that offset): two calls on different hosts are
    ordered only when their gap exceeds what the measurement cannot rule out."""
    worst = 0.0
    for e in ctx.ix.events:
        if e.get("op") == "host" and e.get("kind") == "clock":
            u = e.get("uncertainty")
            if isinstance(u, (int, float)) and u > worst:
                worst = float(u)
    return REAL_MARGIN_S + 2 * worst


@dataclass(frozen=True)
class StampedCall:
    """A storage call that reported a storage time."""

    invoked: float  # journal t of its invoke
    answered: float  # journal t of its ok
    stime: int  # the storage time it was stamped with (µs)
    proc: str
    task: str
    op: str
    event: int  # position of its ok event


def _calls(ctx: Context) -> list[StampedCall]:
    """Every claim (one per claimed task) and acknowledged heartbeat with its storage
    time and real-time span."""
    out: list[StampedCall] = []
    claim_invoked: dict[str, float] = {}  # proc -> t of its open claim invoke
    hb_invoked: dict[tuple[str, str], float] = {}  # (proc, token) -> t of heartbeat invoke
    lease_of: dict[str, int] = {}  # token -> lease (µs)
    for pos, e in enumerate(ctx.ix.events):
        op, typ, t, proc = e.get("op"), e.get("type"), e.get("t"), e.get("proc")
        if not isinstance(t, (int, float)) or not isinstance(proc, str):
            continue
        if op == CLAIM:
            if typ == INVOKE:
                claim_invoked[proc] = t
            elif typ == OK:
                start = claim_invoked.pop(proc, None)
                for c in e.get("claims") or []:
                    at, until = c.get("claimed_at"), c.get("lease_expires_at")
                    if not isinstance(at, int) or not isinstance(until, int):
                        continue
                    lease_of[str(c.get("token"))] = until - at
                    if start is not None:
                        out.append(
                            StampedCall(start, t, at, proc, str(c.get("task")), "claim", pos)
                        )
            else:
                claim_invoked.pop(proc, None)
        elif op == HEARTBEAT:
            key = (proc, str(e.get("token")))
            if typ == INVOKE:
                hb_invoked[key] = t
                continue
            start = hb_invoked.pop(key, None)
            expiry = e.get("lease_expires_at")
            lease = ctx.final.fixed_lease_us or lease_of.get(key[1])
            if typ == OK and start is not None and isinstance(expiry, int) and lease is not None:
                out.append(
                    StampedCall(
                        start, t, expiry - lease, proc, str(e.get("task")), "heartbeat", pos
                    )
                )
    return out


def reversals(ctx: Context) -> Iterator[tuple[StampedCall, StampedCall]]:
    """Every call ``b`` (in the order calls began) stamped more than :data:`TOLERANCE_US`
    before the latest-stamped call ``a`` answered before ``b`` began, with that ``a``."""
    calls = _calls(ctx)
    margin = real_margin(ctx)
    by_answer = sorted(calls, key=lambda c: c.answered)
    by_invoke = sorted(calls, key=lambda c: c.invoked)
    latest: StampedCall | None = None  # of the calls answered so far, the latest stamped
    i = 0
    for b in by_invoke:
        while i < len(by_answer) and by_answer[i].answered < b.invoked - margin:
            a = by_answer[i]
            if latest is None or a.stime > latest.stime:
                latest = a
            i += 1
        if latest is not None and latest.stime - b.stime > TOLERANCE_US:
            yield latest, b


def _storage_clock(ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for a, b in reversals(ctx):
        pair = (a.proc, b.proc)
        if pair in seen:
            continue
        seen.add(pair)
        if a.proc == b.proc:
            whose = (
                f"does the backend take some of its times from its client, {a.proc}, whose "
                "clock is not the storage's?"
            )
        else:
            whose = (
                f"does the backend take the time from its client, whose clock differs "
                f"between {a.proc} and {b.proc}?"
            )
        out.append(
            finding(
                STORAGE_CLOCK,
                b.task,
                [],
                f"the {b.op} of {b.task!r} by {b.proc} was stamped {storage_time(b.stime)} "
                f"by the storage, {ms(a.stime - b.stime)} before the {a.op} of {a.task!r} by "
                f"{a.proc} ({storage_time(a.stime)}), though that call was answered "
                f"{(b.invoked - a.answered) * 1000:.1f} ms before this one began (real "
                f"time): the storage's clock ran backwards between them, so these times "
                f"were not stamped by one clock ({whose})",
                workers=(b.proc, a.proc),
                anchor=b.event,
                whole_timeline=True,
            )
        )
    return out


@runs(whole=(_storage_clock,))
def check_storage_clock(events: History, final: FinalState) -> list[Violation]:
    """Only the ``storage-clock`` rule (see :func:`rdq_compliance.chaos.checker.check`)."""


# ---- the rule --------------------------------------------------------------------------------

STORAGE_CLOCK = CheckerRule(
    id="storage-clock",
    text="due-ness and leases follow the storage's clock",
    checks=(check_storage_clock,),
    needs=Need(("claim", "extend"), "claim or heartbeat"),
)
