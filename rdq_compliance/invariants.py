"""Checks the conformance suite, the stateful machine (and the chaos checker) share.

Each is a small pure function over values a backend returned; none knows who is asking,
so this module imports nothing of the suite, the machine or the chaos package.

**Storage-clock windows** (rule ``storage-clock``: time is the storage's clock). A
timestamp a backend writes during a call must be a reading of the storage clock taken
during that call: it lies within ``[t0, t1]``, the clock read just before and just after
the call (:func:`between`), and a derived one
(``lease_expires_at = claimed_at + lease``) is what it is derived from
(:func:`close_to`). Both allow :data:`CLOCK_SLACK` either side, for backends that store
milliseconds while their ``now()`` reads microseconds.

**Invariant H** (``contract.md#attempts-and-their-numbering``): for every task,
``attempt_no`` values are unique and strictly increasing in insertion order, over the
task's whole existence, redrives included, and start at 1 or above.
:func:`history_problem` says what breaks it in one task; :func:`assert_history` fails
with rule ``history-numbering`` (see :mod:`rdq_compliance.rules`).

**Failure messages** name tokens by their first characters (:func:`short`) and list at
most :data:`MAX_LISTED` problems (:func:`listed`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime, timedelta

from rdq_compliance import rules
from rdq_core.model import Task

__all__ = [
    "CLOCK_SLACK",
    "MAX_LISTED",
    "assert_history",
    "between",
    "close_to",
    "history_problem",
    "listed",
    "short",
]

#: How far a stored timestamp may sit outside the storage clock readings around the call
#: that wrote it (a backend may store milliseconds while ``now()`` reads microseconds).
CLOCK_SLACK = timedelta(milliseconds=1)

#: How many problems a failure message lists before it says "and N more".
MAX_LISTED = 10


# ---- storage-clock windows ---------------------------------------------------------------


def between(
    value: datetime | None, low: datetime, high: datetime, slack: timedelta = CLOCK_SLACK
) -> bool:
    """``low - slack <= value <= high + slack`` (False for ``None``)."""
    return value is not None and low - slack <= value <= high + slack


def close_to(value: datetime | None, expected: datetime, slack: timedelta = CLOCK_SLACK) -> bool:
    """``value`` within ``slack`` of ``expected`` (False for ``None``)."""
    return value is not None and abs(value - expected) <= slack


# ---- invariant H ---------------------------------------------------------------------------


def history_problem(task: Task) -> str | None:
    """What breaks invariant H in ``task.attempts``, or ``None``."""
    numbers = [a.attempt_no for a in task.attempts]
    if any(n < 1 for n in numbers):
        return f"attempt numbers {numbers} include one below 1"
    if any(b <= a for a, b in itertools.pairwise(numbers)):
        return f"attempt numbers {numbers} are not unique and strictly increasing"
    return None


def assert_history(task: Task, context: str = "") -> None:
    """Fail with rule ``history-numbering`` unless ``task`` keeps invariant H."""
    problem = history_problem(task)
    where = f" ({context})" if context else ""
    assert problem is None, rules.message(
        "history-numbering", f"task {task.id!r}{where}: {problem}"
    )


# ---- failure messages ----------------------------------------------------------------------


def short(token: str) -> str:
    """A token as failure messages show it."""
    return f"{token[:8]}…"


def listed(problems: Sequence[str]) -> str:
    """Problems joined for a failure message, at most :data:`MAX_LISTED` of them."""
    shown = "; ".join(problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    return shown + (f"; and {more} more" if more > 0 else "")
