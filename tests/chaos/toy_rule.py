"""A toy checker rule, as its rule family module would hold it: a check and one
declaration, nothing else edited (see ``test_declared_once.py``).

- ``toy-single-claim``: a task is claimed at most once (:func:`check_single_claim`).
"""

from __future__ import annotations

from rdq_compliance.chaos.checker.engine import CheckerRule, History, runs
from rdq_compliance.chaos.checker.final_state import FinalState
from rdq_compliance.chaos.checker.findings import Finding, Violation, finding
from rdq_compliance.chaos.checker.view import Context, View
from rdq_compliance.rule import Need


def _single_claim(ctx: Context, v: View, out: list[Finding]) -> None:
    if len(v.claims) > 1:
        first, second = v.claims[0], v.claims[1]
        detail = f"claimed {len(v.claims)} times, by {first.proc} and then {second.proc}"
        out.append(finding(SINGLE_CLAIM, v.task_id, (first, second), detail))


@runs(per_task=(_single_claim,))
def check_single_claim(events: History, final: FinalState) -> list[Violation]:
    """A task is claimed at most once (rule ``toy-single-claim``)."""


SINGLE_CLAIM = CheckerRule(
    id="toy-single-claim",
    text="a task is claimed at most once",
    checks=(check_single_claim,),
    needs=Need(("claim",), "claim"),
)
