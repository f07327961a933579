"""What a backend's plugin half builds on: the :class:`Backend` and :class:`Server`
interfaces and the provisioning ladder (:mod:`rdq_compliance.provision.backend`).

A backend's *storage* half imports only :mod:`rdq_core` and its driver, so it is usable
without the kit; its *plugin* half (the ``Backend`` and its rungs) imports from here.
"""

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    FAULTS,
    KILL_SERVER,
    RESTART_SERVER,
    Backend,
    ProvisionRequest,
    ProvisionUnavailable,
    Server,
    StorageSpec,
    UnsupportedFault,
)

__all__ = [
    "CUT_CONNECTIONS",
    "FAULTS",
    "KILL_SERVER",
    "RESTART_SERVER",
    "Backend",
    "ProvisionRequest",
    "ProvisionUnavailable",
    "Server",
    "StorageSpec",
    "UnsupportedFault",
]
