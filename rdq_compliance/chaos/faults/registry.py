"""The built-in fault families, in the order their tables are read and their faults
drawn from the seed. Adding a fault family is one new module and one line here."""

from __future__ import annotations

from rdq_compliance.chaos.faults import (
    clock_skew,
    connections,
    failover,
    network,
    process,
    redrive,
    server,
)
from rdq_compliance.chaos.faults.combined import Families

BUILTIN = Families(
    process.FAMILY,  # [faults.sigkill], [faults.pause]
    server.FAMILY,  # [faults.server_restart], [faults.server_pause]
    clock_skew.FAMILY,  # [faults.clock_skew]
    connections.FAMILY,  # [faults.cut_connections]
    failover.FAMILY,  # [faults.failover]
    network.FAMILY,  # [faults.partition], [faults.loss]
    redrive.FAMILY,  # redrive_interval
)
