"""The control on a deliberately broken backend, for the deployed harness's own tests:
rdq's worker loop on ``tests.broken.sqlite:reclaim_ignores_lease``, whose claim takes an
IN_FLIGHT task claimed more than 0.5 s ago whatever its lease (bug class
``live-lease-stolen``). Its workers import the backend by that name, so they need the
checkout root on ``PYTHONPATH`` (:func:`tests._paths.pythonpath`)."""

from __future__ import annotations

from rdq_compliance.deployed.control import CoreSystem

#: A scenario with no fault: two workers, three jobs that sleep past the 0.5 s the broken
#: claim waits. A worker takes a waiting job before a running one, so once both workers
#: are up and no job waits, the first one idle takes a job the other is running: a second
#: run of one job, the backend's doing alone (a worker slow to start, on a busy machine,
#: still finds one running, the three last 22.5 s on one worker).
NO_FAULTS = """\
name = "no-faults"
workers = 2
window = 1
drain_margin = 10

[jobs]
sleep = 3
"""


def reclaim_ignores_lease() -> CoreSystem:
    return CoreSystem("tests.broken.sqlite:reclaim_ignores_lease")
