"""The rules the kit checks, by id. Every failure message starts with one of these ids,
so a report names the rule broken; :data:`CONTRACT` (``docs/contract.md`` in the source
tree) says what each one forbids and which test, machine or checker rule holds it.

Each rule is declared once, as a :class:`~rdq_compliance.rule.Rule` value: a rule the
chaos checker decides in its checker module (see :mod:`rdq_compliance.chaos.checker`), a
rule of deployed campaigns in :mod:`rdq_compliance.deployed.rules`, every other one
here (:data:`SUITE_RULES`). :data:`DECLARED` and :data:`RULES` list them
all."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path

from rdq_compliance.chaos.checker import compose
from rdq_compliance.deployed import rules as deployed_rules
from rdq_compliance.rule import Need, Rule

#: The contract the kit holds a backend to, installed beside this module.
CONTRACT = Path(__file__).with_name("contract.md")

#: The rules the chaos checker does not decide: held by suite tests and the stateful
#: machine, or reported by a backend (``cluster-keys``).
SUITE_RULES: tuple[Rule, ...] = (
    Rule(id="claim-limit", text="claim_due never returns more than `limit` tasks"),
    Rule(id="claim-order", text="due tasks are claimed in order of due time"),
    Rule(id="queue-isolation", text="a claim only takes tasks of its own queue"),
    Rule(
        id="claim-due-only",
        text="PENDING tasks are claimed only once due",
        needs=Need(("reschedule",), "reschedule"),
    ),
    Rule(
        id="lease-per-claim",
        text=(
            "a claim holds the lease it asked for, at claim and at each heartbeat, whatever "
            "other workers ask"
        ),
    ),
    Rule(
        id="redrive",
        text="redrive: PENDING, due now, attempt_count 0, redrive_count+1, history kept",
        needs=Need(("redrive",), "redrive"),
    ),
    Rule(id="purge", text="purge deletes only the selected DEAD tasks with their history"),
    Rule(id="empty-selector", text="an empty selector selects nothing"),
    Rule(
        id="dlq-paging",
        text="DLQ pages never repeat or skip a task, whatever happens meanwhile",
    ),
    Rule(id="stats", text="stats count the queue's tasks by status"),
    Rule(
        id="purge-succeeded",
        text="purge_succeeded deletes only SUCCEEDED tasks older than asked",
    ),
    Rule(
        id="enqueue-idempotent",
        text="re-enqueue changes nothing; one id never in two queues",
    ),
    Rule(id="round-trip", text="payload bytes and headers come back exactly as enqueued"),
    Rule(id="bad-input", text="bad input raises the documented error and writes nothing"),
    Rule(
        id="claim-complete",
        text="a claim takes every due task up to its limit, leaving none behind",
    ),
    Rule(
        id="model-equivalence",
        text=(
            "after every step the backend's observable state equals the reference store's "
            "(stateful machine)"
        ),
    ),
    Rule(id="durability", text="acknowledged work survives a kill and restart of the server"),
    Rule(
        id="cluster-keys",
        text=(
            "a server-side script or transaction touches only keys it declared, all in one "
            "cluster slot"
        ),
    ),
)


def declare(rules: Iterable[Rule]) -> dict[str, Rule]:
    """Rule id -> its declaration; an id declared twice is an error."""
    out: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in out:
            raise ValueError(f"rule {rule.id!r} is declared twice")
        out[rule.id] = rule
    return out


#: Every rule's declaration, by id: the chaos checker's, the others, the deployed checker's.
DECLARED: dict[str, Rule] = declare((*compose.DECLARED, *SUITE_RULES, *deployed_rules.RULES))
#: Every rule id, with its one-line text.
RULES: dict[str, str] = {rule: d.text for rule, d in DECLARED.items()}


def message(rule: str, detail: str) -> str:
    """A failure message: ``[rule] what the rule says: what was seen``."""
    if rule not in DECLARED:
        raise KeyError(f"unknown rule id {rule!r}")
    return DECLARED[rule].message(detail)


_DECLARED = re.compile(r"^\s*Rules?\s+(?P<ids>[a-z0-9-]+(?:(?:\s*,\s*|\s+and\s+)[a-z0-9-]+)*)")
#: How a test that holds every rule of the chaos checker says so.
_CHECKER_RULES = re.compile(r"^\s*Rules of the chaos checker\b")
_NAMED = re.compile(r"\[([a-z0-9-]+)\]")


def declared_by(docstring: str | None) -> tuple[str, ...]:
    """The rule ids a suite test says it checks: its docstring opens ``Rule <id>`` or
    ``Rules <id>, <id> and <id>``, or ``Rules of the chaos checker`` (every rule id of
    :data:`rdq_compliance.chaos.checker.RULES`). ``()`` when it names none; an id that
    is not in :data:`RULES` is an error (``KeyError`` naming it and the close matches)."""
    if _CHECKER_RULES.match(docstring or ""):
        return tuple(compose.RULES)
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
