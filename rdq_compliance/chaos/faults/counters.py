"""What the nemesis did (and the fleet suffered): :class:`Counters`."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from rdq_compliance.chaos.faults.combined import Families
from rdq_compliance.chaos.faults.family import Counts, FaultFamily
from rdq_compliance.chaos.faults.registry import BUILTIN

C = TypeVar("C", bound=Counts)

_OWN = ("families", "by_family", "unexpected_exits", "spawned", "notes")


class Counters:
    """Each fault family's counts (:meth:`of`), and the loop's own: workers that exited
    unexpectedly, workers spawned, notes.

    A family's count reads and writes as an attribute too (``counters.pauses``), and is
    given by keyword (``Counters(clock_skews=4)``); :meth:`as_dict` lists every count
    under its key, family by family."""

    def __init__(self, families: Families | None = None, **counts: Any) -> None:
        families = BUILTIN if families is None else families
        object.__setattr__(self, "families", families)
        object.__setattr__(self, "by_family", {f.name: f.new_counts() for f in families})
        self.unexpected_exits = 0
        self.spawned = 0
        self.notes: list[str] = []
        for name, value in counts.items():
            setattr(self, name, value)

    def of(self, family: FaultFamily[Any, C]) -> C:
        """``family``'s counts."""
        counts: C = self.by_family[family.name]
        return counts

    def _owner(self, name: str, *, settable: bool) -> object | None:
        by_family = self.__dict__.get("by_family")
        if by_family is None or name.startswith("_"):
            return None
        for counts in by_family.values():
            if name in {f.name for f in dataclasses.fields(counts)} or (
                not settable and hasattr(counts, name)
            ):
                return counts
        return None

    def __getattr__(self, name: str) -> Any:
        owner = self._owner(name, settable=False)
        if owner is None:
            raise AttributeError(f"'Counters' object has no attribute {name!r}")
        return getattr(owner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
            return
        owner = self._owner(name, settable=True)
        if owner is None:
            raise AttributeError(f"no fault family counts {name!r}")
        setattr(owner, name, value)

    def __repr__(self) -> str:
        return f"Counters({self.as_dict()}, notes={self.notes!r})"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for family in self.families:
            out.update(self.of(family).as_dict())
        out["unexpected_exits"] = self.unexpected_exits
        out["workers_spawned"] = self.spawned
        return out
