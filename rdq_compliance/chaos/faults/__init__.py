"""The fault families of the chaos harness: one module per family, composed.

Each family is one :class:`~rdq_compliance.chaos.faults.family.FaultFamily` object that
owns its ``[faults.*]`` TOML table(s), its settings, its set-up before the workers start
(and tear-down after), its planning (its faults in the seeded schedule, or a note saying
why none), its application by the nemesis, its counters and how the displays print
them, and its timeline marks:

- :mod:`~rdq_compliance.chaos.faults.process`: worker SIGKILL at a point, SIGSTOP past
  the lease;
- :mod:`~rdq_compliance.chaos.faults.server`: server kill and restart, server freeze;
- :mod:`~rdq_compliance.chaos.faults.clock_skew`: worker slots under libfaketime
  (:mod:`~rdq_compliance.chaos.libfaketime`);
- :mod:`~rdq_compliance.chaos.faults.connections`: connection cuts;
- :mod:`~rdq_compliance.chaos.faults.failover`: primary killed, replica promoted;
- :mod:`~rdq_compliance.chaos.faults.network`: worker slots partitioned from the
  server, or losing packets (through the network the launcher builds:
  :mod:`~rdq_compliance.chaos.faults.worker_network` on this machine,
  :mod:`~rdq_compliance.chaos.faults.host_network` on other hosts);
- :mod:`~rdq_compliance.chaos.faults.redrive`: redrives of the DLQ.

:mod:`~rdq_compliance.chaos.faults.registry` lists them in one place;
:mod:`~rdq_compliance.chaos.faults.combined` composes them;
:mod:`~rdq_compliance.chaos.faults.tables` reads the TOML tables for all of them (and
for the scenario). **Adding a fault** is one new module (a ``FaultFamily`` subclass and
its instance) and one line in the registry.
"""
