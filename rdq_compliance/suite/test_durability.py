"""Conformance: acknowledged work survives a kill and restart of the server (bug class
``acknowledged-work-lost``).

Only for a backend that declares ``durable`` on a server the kit can kill and restart
(the local rungs: on a server given by DSN the kit owns no process). Worker threads
enqueue, claim and report outcomes in a tight loop while the server is SIGKILLed and
restarted; afterwards every acknowledged enqueue, claim and outcome must be there. The
logic is :mod:`rdq_compliance.suite.durability`.
"""

from __future__ import annotations

import pytest

from rdq_compliance.suite.durability import LEASE, OUTLIVES, run_durability_check

pytestmark = pytest.mark.rdq_conformance


@pytest.mark.rdq_requires("durable")
@pytest.mark.rdq_requires_fault("kill_server", "restart_server")
def test_acknowledged_work_survives_a_server_kill_and_restart(
    rdq_server, rdq_connect, rdq_capabilities
):
    """Rule durability: 4 workers enqueue, claim and complete (some reschedule, some
    dead-letter) for 1.5 s, or longer (up to 30 s) until 20 enqueues, claims and outcomes
    each are acknowledged; the server is SIGKILLed, down for 0.5 s, restarted; after
    0.5 s more, every acknowledged enqueue exists, every acknowledged claim is still held
    (or its attempt recorded), every acknowledged outcome is in the history. Its checks
    assume no claim is taken over during the run: on a backend whose lease model gives
    every claim a lease shorter than :data:`~rdq_compliance.suite.durability.OUTLIVES`,
    it is skipped, saying so."""
    held = rdq_capabilities.lease_for(LEASE)
    if held < OUTLIVES:
        pytest.skip(
            f"the backend's lease model ({rdq_capabilities.lease_model!r}) gives every claim "
            f"{held}, shorter than a durability run with its server restart may take "
            f"({OUTLIVES}): claims would be taken over during it, which its checks rule out; "
            f"deploy a fixed lease of at least {OUTLIVES} to run it"
        )
    report = run_durability_check(rdq_server, rdq_connect)
    assert report.ok, f"{report.message}\n({report.summary()})"
