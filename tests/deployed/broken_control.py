"""The control on a deliberately broken backend, for the deployed harness's own tests:
rdq's worker loop on ``tests.broken.sqlite:reclaim_ignores_lease``, whose claim takes an
IN_FLIGHT task claimed more than 0.5 s ago whatever its lease (bug class
``live-lease-stolen``). Its workers import the backend by that name, so they need the
checkout root on ``PYTHONPATH`` (:func:`tests._paths.pythonpath`)."""

from __future__ import annotations

from rdq_compliance.deployed.control import CoreSystem

#: A scenario with no fault: three workers, two jobs that sleep past the 0.5 s the broken
#: claim waits (an idle worker takes one), two short ones. A second run of a job here is
#: the backend's doing alone.
NO_FAULTS = """\
name = "no-faults"
workers = 3
window = 1
drain_margin = 10

[jobs]
succeed = 2
sleep = 2
"""


def reclaim_ignores_lease() -> CoreSystem:
    return CoreSystem("tests.broken.sqlite:reclaim_ignores_lease")
