"""What a rule is: one :class:`Rule` value per rule id, declared once.

A rule's declaration holds its id, its one-line text (every failure message under it
starts ``[id] text:``, :meth:`Rule.message`) and what exercises it in a chaos campaign
(:class:`Need`: calls of some SPI operations; :class:`NoNeed`: no call, with the reason;
``None``: no campaign judges it). A rule the chaos checker decides is a
:class:`~rdq_compliance.chaos.checker.engine.CheckerRule`, declared in its checker module
with the checks that decide it; the others are declared in :mod:`rdq_compliance.rules`,
which lists every rule (:data:`rdq_compliance.rules.RULES`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["OPS", "Counted", "Need", "NoNeed", "Rule", "needs_of"]

#: The SPI operations a campaign's calls are counted by: ``reclaim`` is a claim call that
#: took at least one expired lease, ``extend`` a heartbeat.
OPS = (
    "enqueue", "claim", "reclaim", "extend", "complete", "reschedule", "dead_letter",
    "redrive", "purge", "list", "stats",
)  # fmt: skip

#: What a rule id looks like (a failure message names it as ``[id]``).
_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class Counted(Protocol):
    """Calls counted by operation, fault window and outcome
    (:class:`~rdq_compliance.chaos.coverage.Coverage`)."""

    def count(self, op: str, window: str | None = None, outcome: str | None = None) -> int: ...


@dataclass(frozen=True)
class Need:
    """What exercises a rule: a call of one of ``ops`` that ended ok or refused (a call
    of unknown outcome tells the checker nothing certain)."""

    ops: tuple[str, ...]
    what: str  # in words, for the report

    def __post_init__(self) -> None:
        unknown = [op for op in self.ops if op not in OPS]
        if not self.ops or unknown:
            raise ValueError(f"a Need names operations of {OPS}, not {list(self.ops)}")

    def met(self, cov: Counted, window: str | None = None) -> bool:
        return any(cov.count(op, window, outcome) for op in self.ops for outcome in ("ok", "fail"))


@dataclass(frozen=True)
class NoNeed:
    """A rule no call exercises: a campaign judges it whatever calls it made (``why``
    says on what), so it is never reported "not exercised"."""

    why: str


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A rule: its ``id``, its one-line ``text``, and what exercises it in a chaos
    campaign (``needs``; ``None``: no campaign judges it)."""

    id: str
    text: str
    needs: Need | NoNeed | None = None

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.id):
            raise ValueError(f"rule id {self.id!r}: lower-case words joined by '-'")
        if not self.text.strip():
            raise ValueError(f"rule {self.id!r} has no text")

    def message(self, detail: str) -> str:
        """A failure message: ``[id] what the rule says: what was seen``."""
        return f"[{self.id}] {self.text}: {detail}"


def needs_of(rules: Iterable[Rule]) -> dict[str, Need]:
    """Rule id -> the calls that exercise it, for the rules some calls exercise."""
    return {r.id: r.needs for r in rules if isinstance(r.needs, Need)}
