"""The deployed checker's rules (the contract's section 9, "The deployed rules"), declared
apart from the checker (:mod:`rdq_compliance.deployed.verdicts`) so that the kit's list of
every rule (:mod:`rdq_compliance.rules`) can name them without importing it."""

from __future__ import annotations

from rdq_compliance.rule import Rule

__all__ = [
    "HANDED_OUT_WHILE_HELD",
    "LOST",
    "NEVER_RAN",
    "RAN_AFTER_DONE",
    "RULES",
    "STUCK",
    "SUPERSEDED_OUTCOME",
]

LOST = Rule(
    id="lost",
    text="every accepted job is finished, failed for good or held by the end of the drain",
)
NEVER_RAN = Rule(
    id="never-ran",
    text=(
        "a job the library records finished, failed for good or held ran first (the probe "
        "saw it start)"
    ),
)
RAN_AFTER_DONE = Rule(
    id="ran-after-done",
    text=(
        "a job never runs again once it was recorded finished, failed for good or held, or "
        "once a run of it succeeded or was held"
    ),
)
HANDED_OUT_WHILE_HELD = Rule(
    id="handed-out-while-held",
    text=(
        "a job is not handed to a second execution while its first runs, within its limits, "
        "on a live, running and connected worker"
    ),
)
SUPERSEDED_OUTCOME = Rule(
    id="superseded-outcome",
    text="a job's final outcome never comes from an execution after its job was handed to another",
)
STUCK = Rule(
    id="stuck",
    text="no job is left running after the drain with no live worker running it",
)
#: The deployed checker's rules, in the order
#: :func:`rdq_compliance.deployed.verdicts.judge` reports them.
RULES: tuple[Rule, ...] = (
    LOST, NEVER_RAN, RAN_AFTER_DONE, HANDED_OUT_WHILE_HELD, SUPERSEDED_OUTCOME, STUCK,
)  # fmt: skip
