"""The rules the kit checks, by id. Every failure message starts with one of these ids,
so a report names the rule broken; :data:`CONTRACT` (``docs/contract.md`` in the source
tree) says what each one forbids and which test, machine or checker rule holds it."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

#: The contract the kit holds a backend to, installed beside this module.
CONTRACT = Path(__file__).with_name("contract.md")

RULES: dict[str, str] = {
    "one-claim": "no two workers hold a live claim on the same task",
    "claim-limit": "claim_due never returns more than `limit` tasks",
    "claim-order": "due tasks are claimed in order of due time",
    "queue-isolation": "a claim only takes tasks of its own queue",
    "claim-due-only": "PENDING tasks are claimed only once due",
    "terminal-final": "SUCCEEDED and DEAD tasks are never claimed again",
    "lease-respected": "a live lease is never taken over; reclaim only after expiry",
    "reclaim-expired": "an expired lease is reclaimed, with a LEASE_EXPIRED attempt",
    "lease-per-claim": (
        "a claim holds the lease it asked for, at claim and at each heartbeat, whatever "
        "other workers ask"
    ),
    "fencing": "outcomes and heartbeats need the current token and IN_FLIGHT",
    "history-numbering": "attempt_no unique, increasing, max+1 across redrives",
    "transition": "complete/reschedule/dead_letter make the documented state change",
    "redrive": "redrive: PENDING, due now, attempt_count 0, redrive_count+1, history kept",
    "purge": "purge deletes only the selected DEAD tasks with their history",
    "empty-selector": "an empty selector selects nothing",
    "no-loss": "no task vanishes: every task ends SUCCEEDED or DEAD or is visibly live",
    "dlq-paging": "DLQ pages never repeat or skip a task, whatever happens meanwhile",
    "stats": "stats count the queue's tasks by status",
    "purge-succeeded": "purge_succeeded deletes only SUCCEEDED tasks older than asked",
    "enqueue-idempotent": "re-enqueue changes nothing; one id never in two queues",
    "round-trip": "payload bytes and headers come back exactly as enqueued",
    "bad-input": "bad input raises the documented error and writes nothing",
    "storage-clock": "due-ness and leases follow the storage's clock",
    "claim-complete": "a claim takes every due task up to its limit, leaving none behind",
    "model-equivalence": (
        "after every step the backend's observable state equals the reference store's "
        "(stateful machine)"
    ),
    "lease-expired-recorded": (
        "a claim that ended without an outcome leaves a LEASE_EXPIRED attempt, and only "
        "such a claim"
    ),
    "execution-count": "no task runs more often than its history records attempts",
    "dlq-complete": "the DLQ lists exactly the DEAD tasks, once each, with their whole history",
    "outcome-recorded": "an acknowledged outcome is in the task's history, at its claim",
    "drain-complete": "after the drain every enqueued task is SUCCEEDED or DEAD",
    "drain-timeout": (
        "the run drains: no task still PENDING/IN_FLIGHT when the drain ends "
        "(at its deadline, or stalled)"
    ),
    "durability": "acknowledged work survives a kill and restart of the server",
    "cluster-keys": (
        "a server-side script or transaction touches only keys it declared, all in one "
        "cluster slot"
    ),
}


def message(rule: str, detail: str) -> str:
    """A failure message: ``[rule] what the rule says: what was seen``."""
    if rule not in RULES:
        raise KeyError(f"unknown rule id {rule!r}")
    return f"[{rule}] {RULES[rule]}: {detail}"


_DECLARED = re.compile(r"^\s*Rules?\s+(?P<ids>[a-z0-9-]+(?:(?:\s*,\s*|\s+and\s+)[a-z0-9-]+)*)")
_NAMED = re.compile(r"\[([a-z0-9-]+)\]")


def declared_by(docstring: str | None) -> tuple[str, ...]:
    """The rule ids a suite test says it checks: its docstring opens ``Rule <id>`` or
    ``Rules <id>, <id> and <id>``. ``()`` when it names none; an id that is not in
    :data:`RULES` is an error (``KeyError`` naming it and the close matches)."""
    match = _DECLARED.match(docstring or "")
    if match is None:
        return ()
    ids = tuple(re.split(r"\s*,\s*|\s+and\s+", match.group("ids")))
    for rule in ids:
        if rule not in RULES:
            close = difflib.get_close_matches(rule, RULES, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"unknown rule id {rule!r}{hint}")
    return ids


def named_in(text: str) -> tuple[str, ...]:
    """The known rule ids a failure message names as ``[id]`` (see :func:`message`), in
    order of first appearance."""
    out: list[str] = []
    for rule in _NAMED.findall(text):
        if rule in RULES and rule not in out:
            out.append(rule)
    return tuple(out)
