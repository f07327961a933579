"""A toy fault family that opens a coverage window, as its module would hold it: nothing
else edited but the registry's one line (see ``test_declared_once.py``).

``[faults.brownout] count``: the server browns out (journaled ``brownout``) and recovers
(``recovered``); the calls begun or answered meanwhile are counted in the ``brownout``
window, where ``fencing`` must then be exercised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from rdq_compliance.chaos.faults.family import Counts, FaultFamily
from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.faults.windows import Requirement, Span


@dataclass(frozen=True)
class BrownoutSettings:
    brownouts: int = 0


@dataclass
class BrownoutCounts(Counts):
    browned_out: int = 0


class BrownoutFaults(FaultFamily[BrownoutSettings, BrownoutCounts]):
    name = "brownout"
    tables = ("brownout",)
    marks = ("brownout", "recovered")
    windows = (Span("brownout", ("brownout",), ("recovered",), 35),)
    exercises: ClassVar[Mapping[str, tuple[Requirement, ...]]] = {
        "brownout": (Requirement("fencing", "brownout"),),
    }

    def parse(self, faults: Table) -> BrownoutSettings:
        t = faults.table("brownout")
        count = t.count(10)
        t.done(("count",))
        return BrownoutSettings(count)

    def new_counts(self) -> BrownoutCounts:
        return BrownoutCounts()


FAMILY = BrownoutFaults()
