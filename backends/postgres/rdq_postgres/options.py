"""The ``--rdq-option`` settings of the postgres rungs, declared once (plugin half).

Both kit-owned rungs parse them with the kit's shared parser
(:mod:`rdq_compliance.provision.options`), so a bad value fails the same way whichever
rung reads it: ``--rdq-option pg_start_timeout='soon': expected a positive number (...)``.

========================  ===============================================================
``pg_bin_dir``            folders (``os.pathsep``-separated) holding ``initdb`` and
                          ``postgres``; searched *instead of* ``PATH`` and the usual
                          folders (empty: none) — local rung
``pg_user``               the system user to run the server as when we are root
                          (``postgres``) — local rung
``pg_max_connections``    ``max_connections`` of the server (200) — both rungs
``pg_replica``            ``async``: a primary and one streaming replica
                          (``pg_basebackup -R``) behind a switchable forwarder, which
                          declares the ``failover`` fault; ``sync``: the same with
                          ``synchronous_standby_names='*'`` and
                          ``synchronous_commit=remote_apply``; ``none`` (the default): one
                          server — local rung (:mod:`rdq_postgres.replica`)
``pg_start_timeout``      seconds to wait for the server to accept connections (60) —
                          both rungs
``pg_image``              the container image (:data:`DEFAULT_IMAGE`; where no registry
                          answers, ``rdq-local/postgres`` from tools/build_local_images.sh)
                          — container rung
``pg_network``            the container's network mode: ``auto``, ``host``, ``published``
                          (:mod:`rdq_compliance.provision.kit_container`) — container rung
========================  ===============================================================
"""

from __future__ import annotations

from rdq_compliance.provision.options import OptionValues, Paths, RungOptions, option
from rdq_core.errors import InvalidArgument

__all__ = [
    "CONTAINER_OPTIONS",
    "DEFAULT_IMAGE",
    "DEFAULT_OS_USER",
    "LOCAL_OPTIONS",
    "PG_BIN_DIR",
    "PG_IMAGE",
    "PG_MAX_CONNECTIONS",
    "PG_NETWORK",
    "PG_REPLICA",
    "PG_START_TIMEOUT",
    "PG_USER",
    "REPLICA_MODES",
    "replica_mode",
]

#: The system user the server runs as when we are root.
DEFAULT_OS_USER = "postgres"
#: The image of the container rung: the official image's current major version, alpine
#: (small); rdq_postgres supports PostgreSQL 13 and newer.
DEFAULT_IMAGE = "postgres:16-alpine"

PG_BIN_DIR = option(
    "pg_bin_dir",
    Paths,
    None,
    "folders holding initdb and postgres, searched instead of PATH and the usual folders",
)
PG_USER = option(
    "pg_user", str, DEFAULT_OS_USER, "the system user to run the server as when we are root"
)
PG_MAX_CONNECTIONS = option(
    "pg_max_connections", int, 200, "max_connections of the server", positive=True
)
PG_START_TIMEOUT = option(
    "pg_start_timeout",
    float,
    60.0,
    "seconds to wait for the server to accept connections",
    positive=True,
)
#: ``pg_replica`` values: no replica, an asynchronous one, a synchronous one.
REPLICA_MODES: tuple[str, ...] = ("none", "async", "sync")
PG_REPLICA = option(
    "pg_replica",
    str,
    "none",
    "none (one server), async (a primary and a streaming replica: the failover fault), or "
    "sync (the same, synchronous_commit=remote_apply)",
)
PG_IMAGE = option("pg_image", str, DEFAULT_IMAGE, "the container image")
PG_NETWORK = option(
    "pg_network", str, "auto", "the container's network mode: auto, host or published"
)

#: Rung 2, :mod:`rdq_postgres.local`.
LOCAL_OPTIONS = RungOptions(
    "postgres local binaries",
    [PG_BIN_DIR, PG_USER, PG_MAX_CONNECTIONS, PG_REPLICA, PG_START_TIMEOUT],
)
#: Rung 3, :mod:`rdq_postgres.container`.
CONTAINER_OPTIONS = RungOptions(
    "postgres container", [PG_IMAGE, PG_NETWORK, PG_MAX_CONNECTIONS, PG_START_TIMEOUT]
)


def replica_mode(values: OptionValues) -> str:
    """``pg_replica`` checked against :data:`REPLICA_MODES`."""
    mode = values[PG_REPLICA].strip().lower()
    if mode not in REPLICA_MODES:
        raise InvalidArgument(
            f"--rdq-option pg_replica={values[PG_REPLICA]!r}: expected one of "
            f"{', '.join(REPLICA_MODES)} ({PG_REPLICA.help}; default {PG_REPLICA.show_default()})"
        )
    return mode
