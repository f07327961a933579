"""The control's worker process with a probe handler that stops when its lease is lost.

::

    python -m tests.deployed.cooperative_worker [the options of rdq_compliance.deployed.core_worker]

is :mod:`rdq_compliance.deployed.core_worker` whose ``probe`` handler, for a ``succeed`` or
``sleep`` job, waits on the claim's ``lease_lost`` event instead of sleeping: once rdq's
heartbeat finds the lease lost, the handler journals ``failed`` and raises
:class:`~rdq_core.worker.LeaseLost`, the cooperative cancellation ``rdq_core.worker``
asks of a long handler. Every other behaviour is the control's own handler. Run by
:class:`tests.deployed.broken_control.CooperativeSystem`.
"""

from __future__ import annotations

import json
import sys

from rdq_compliance.deployed import core_worker
from rdq_compliance.deployed.handler import writer
from rdq_core.worker import TaskContext

__all__ = ["handle"]


def handle(ctx: TaskContext) -> None:
    """The ``probe`` handler: a ``succeed`` or ``sleep`` job works until its time is up or
    its lease is lost, whichever comes first; any other job as the control runs it."""
    job = json.loads(ctx.payload)
    behaviour, seconds = str(job["behaviour"]), float(job.get("seconds", 0.0))
    if behaviour not in ("succeed", "sleep"):
        core_worker.handle(ctx)
        return
    probe = writer()
    exec_id = probe.started(ctx.task.id, ctx.attempt_no)
    if ctx.lease_lost.wait(seconds):
        probe.ended(exec_id, "failed", "stopped: its lease was lost")
        ctx.check()  # raises LeaseLost
    probe.ended(exec_id, "succeeded")


if __name__ == "__main__":
    core_worker.handle = handle  # the loop core_worker.main builds runs this handler
    sys.exit(core_worker.main())
