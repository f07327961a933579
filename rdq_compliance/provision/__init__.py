"""What a backend's plugin half builds on: the :class:`Backend` and :class:`Server`
interfaces and the provisioning ladder, and the pieces every server backend's rungs share.

One small module per job:

========================  ===============================================================
``backend``               the ``Backend``/``Server`` interfaces, ``ProvisionRequest``,
                          ``StorageSpec``, ``ProvisionUnavailable``, the fault names
``ports``                 :func:`free_port`, :func:`port_open`, :func:`start_on_free_port`
                          (again on a fresh port while one was taken: :class:`PortInUse`)
``binaries``              :func:`find_binary`, :func:`find_binaries`, :func:`search_dirs`,
                          :class:`BinaryNotFound`
``users``                 :class:`RunAs`, :func:`server_user`, :func:`server_base`,
                          :func:`resolve_user`, :func:`chown_tree`, :func:`traversable_by`
                          (a server run as another user when root, and where it lives)
``process``               :class:`ManagedProcess` (a process that dies with the kit),
                          :class:`ProcessFailed`, :func:`run_to_completion`,
                          :func:`remove_tree`
``reaper_pipe``           the kit's end of a reaper (a helper that cleans up when the kit
                          dies: the watchdog of a ManagedProcess, the reapers of
                          containers and network namespaces), once for all three
``_watchdog``             the script that launches a ManagedProcess and reaps it when the
                          kit dies (stdlib only, run as ``python -I -S``, never imported;
                          so are ``_container_reaper`` and ``_netns_reaper``)
``local_server``          :class:`ProcessSlot` (one server process of a local rung: what it
                          runs, how it is probed, its verbs), :class:`LocalFaults` (the
                          mixin that gives a local rung's ``Server`` its faults and close),
                          :func:`start_rung`
``wrapped``               :class:`WrappedServer`: another plugin's server forwarded whole,
                          each namespace prepared for a different storage (an adapter's)
``admin``                 :class:`AdminHandle`: a ``Server``'s admin connection (lazy,
                          one call at a time, clear errors, forgotten after a kill) and
                          the namespaces it made, dropped at close
``options``               the one parser of ``--rdq-option`` rung options:
                          :func:`option`, :class:`RungOptions`
``containers``            :func:`docker_unavailable_reason`, :func:`wait_until_ready`
``kit_container``         :func:`start_kit_container` (a labelled server container,
                          reaped when the kit dies) from a :class:`ContainerSpec`, the
                          :class:`KitContainer` it returns (address, faults, removal),
                          :func:`check_network_mode` for a ``*_network`` option
``container_server``      :class:`ContainerFaults`, the mixin that gives a container
                          rung's ``Server`` its faults (kill, restart, pause) and close;
                          :func:`start_container_server` (the container, then its
                          ``Server``; the container removed if that fails)
``netns``                 the network namespaces of partitions (used by the chaos harness)
``ssh_hosts``             SSH test hosts: namespaces with a real sshd (the remote fleet's tests)
``owners``                who made a namespace and when: :func:`owner_record` (what a
                          ``Server`` stores with each namespace) and the sweep that drops
                          the namespaces of dead runs (``Server.recorded_namespaces``)
``forwarder``             a TCP relay (a replicated server's one address; a test host's relay)
========================  ===============================================================

**Import rule.** A backend's *storage* half imports only :mod:`rdq_core` and its driver,
so it is usable without the kit, and never this package; its *plugin* half (the
``Backend``, its ``Server`` and rungs) imports from here. This package imports only
:mod:`rdq_core`, the standard library and psutil (docker and testcontainers lazily, in the
container helpers), never a backend. Its modules import one another by module
(``from rdq_compliance.provision.owners import owner_record
from rdq_compliance.provision.ports import free_port``), never through this
``__init__``, so that importing any one of them does not need the others.
"""

from rdq_compliance.provision.admin import AdminHandle
from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    FAILOVER,
    FAULTS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    Backend,
    ProvisionRequest,
    ProvisionUnavailable,
    Server,
    ServerStartFailed,
    StorageSpec,
    UnsupportedFault,
)
from rdq_compliance.provision.binaries import (
    BinaryNotFound,
    find_binaries,
    find_binary,
    search_dirs,
)
from rdq_compliance.provision.container_server import ContainerFaults, start_container_server
from rdq_compliance.provision.containers import docker_unavailable_reason, wait_until_ready
from rdq_compliance.provision.kit_container import (
    ContainerSpec,
    KitContainer,
    check_network_mode,
    start_kit_container,
)
from rdq_compliance.provision.local_server import LocalFaults, ProcessSlot, start_rung
from rdq_compliance.provision.options import (
    Option,
    OptionValues,
    Paths,
    RungOptions,
    option,
)
from rdq_compliance.provision.owners import owner_record
from rdq_compliance.provision.ports import PortInUse, free_port, port_open, start_on_free_port
from rdq_compliance.provision.process import (
    ManagedProcess,
    ProcessFailed,
    remove_tree,
    run_to_completion,
)
from rdq_compliance.provision.users import (
    RunAs,
    chown_tree,
    resolve_user,
    server_base,
    server_user,
    traversable_by,
)

__all__ = [
    "CUT_CONNECTIONS",
    "FAILOVER",
    "FAULTS",
    "KILL_SERVER",
    "PAUSE_SERVER",
    "RESTART_SERVER",
    "AdminHandle",
    "Backend",
    "BinaryNotFound",
    "ContainerFaults",
    "ContainerSpec",
    "KitContainer",
    "LocalFaults",
    "ManagedProcess",
    "Option",
    "OptionValues",
    "Paths",
    "PortInUse",
    "ProcessFailed",
    "ProcessSlot",
    "ProvisionRequest",
    "ProvisionUnavailable",
    "RunAs",
    "RungOptions",
    "Server",
    "ServerStartFailed",
    "StorageSpec",
    "UnsupportedFault",
    "check_network_mode",
    "chown_tree",
    "docker_unavailable_reason",
    "find_binaries",
    "find_binary",
    "free_port",
    "option",
    "owner_record",
    "port_open",
    "remove_tree",
    "resolve_user",
    "run_to_completion",
    "search_dirs",
    "server_base",
    "server_user",
    "start_container_server",
    "start_kit_container",
    "start_on_free_port",
    "start_rung",
    "traversable_by",
    "wait_until_ready",
]
