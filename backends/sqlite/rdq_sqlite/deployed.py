"""The control deployed on the SQLite backend: rdq's worker loop as a deployed system
(entry point ``rdq.systems: rdq-core-sqlite``, :mod:`rdq_compliance.deployed.control`)."""

from __future__ import annotations

from rdq_compliance.deployed.control import CoreSystem


def system() -> CoreSystem:
    """rdq's worker loop on the sqlite backend."""
    return CoreSystem("sqlite")
