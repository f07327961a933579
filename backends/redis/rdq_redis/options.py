"""The ``--rdq-option`` settings of the redis rungs, declared once (plugin half).

Both kit-owned rungs parse them with the kit's shared parser
(:mod:`rdq_compliance.provision.options`), so a bad value fails the same way whichever
rung reads it, before anything is started:
``--rdq-option redis_start_timeout='soon': expected a positive number (...)``.

=========================  ==============================================================
``redis_bin_dir``          folders (``os.pathsep``-separated) holding ``redis-server`` (and
                           ``redis-cli``, for a cluster); searched *instead of* ``PATH``
                           and the usual folders (empty: none) — local rung
``redis_persistence``      what the server keeps on disk (:data:`PERSISTENCE_MODES`):
                           ``aof`` (the default: AOF, ``appendfsync always``; durable),
                           ``everysec`` (AOF, ``appendfsync everysec``), ``rdb`` (RDB
                           snapshots on Redis's default schedule), ``none`` (nothing) —
                           both rungs
``redis_cluster``          start a Redis Cluster of this many masters (at least 3, no
                           replicas) instead of one server (not set: one server) — local
                           rung only
``redis_replica``          ``async``: a primary and one replica (``--replicaof``) behind
                           a switchable forwarder, which declares the ``failover`` fault;
                           ``wait``: the same, and the storage sends ``WAIT 1`` after
                           every write (DSN ``rdq_wait=1``); ``none`` (the default): one
                           server — local rung only (:mod:`rdq_redis.replica`)
``redis_start_timeout``    seconds to wait for the server (every node, and the cluster's
                           ``cluster_state:ok``) to be ready (30) — both rungs
``redis_image``            the container image (:data:`DEFAULT_IMAGE`; where no registry
                           answers, ``rdq-local/redis`` from tools/build_local_images.sh)
                           — container rung
``redis_network``          the container's network mode: ``auto``, ``host``, ``published``
                           (:mod:`rdq_compliance.provision.kit_container`) — container rung
=========================  ==============================================================
"""

from __future__ import annotations

from rdq_compliance.provision.options import OptionValues, Paths, RungOptions, option
from rdq_core.errors import InvalidArgument

__all__ = [
    "CONTAINER_OPTIONS",
    "DEFAULT_IMAGE",
    "LOCAL_OPTIONS",
    "MIN_CLUSTER_MASTERS",
    "PERSISTENCE_FLAGS",
    "PERSISTENCE_MODES",
    "REDIS_BIN_DIR",
    "REDIS_CLUSTER",
    "REDIS_IMAGE",
    "REDIS_NETWORK",
    "REDIS_PERSISTENCE",
    "REDIS_REPLICA",
    "REDIS_START_TIMEOUT",
    "REPLICA_MODES",
    "cluster_size",
    "persistence_mode",
    "replica_mode",
]

#: The image of the container rung: the official image, Redis 7 (the scripts use
#: Redis 7 commands and ``--appenddirname``), alpine (small).
DEFAULT_IMAGE = "redis:7-alpine"
#: ``redis-cli --cluster create`` refuses fewer masters.
MIN_CLUSTER_MASTERS = 3

#: ``redis_persistence`` value -> the ``redis-server`` arguments it means.
PERSISTENCE_FLAGS: dict[str, tuple[str, ...]] = {
    "aof": ("--appendonly", "yes", "--appendfsync", "always", "--save", ""),
    "everysec": ("--appendonly", "yes", "--appendfsync", "everysec", "--save", ""),
    "rdb": ("--appendonly", "no", "--save", "3600 1 300 100 60 10000"),
    "none": ("--appendonly", "no", "--save", ""),
}
PERSISTENCE_MODES: tuple[str, ...] = tuple(PERSISTENCE_FLAGS)

REDIS_BIN_DIR = option(
    "redis_bin_dir",
    Paths,
    None,
    "folders holding redis-server (and redis-cli for a cluster), searched instead of PATH "
    "and the usual folders",
)
REDIS_PERSISTENCE = option(
    "redis_persistence",
    str,
    "aof",
    "what the server keeps: aof (appendfsync always; durable), everysec (AOF, appendfsync "
    "everysec), rdb (snapshots), none",
)
REDIS_CLUSTER = option(
    "redis_cluster",
    int,
    None,
    "start a Redis Cluster of this many masters (at least 3) instead of one server",
    positive=True,
)
#: ``redis_replica`` values: no replica, an asynchronous one, one confirmed by ``WAIT``.
REPLICA_MODES: tuple[str, ...] = ("none", "async", "wait")
REDIS_REPLICA = option(
    "redis_replica",
    str,
    "none",
    "none (one server), async (a primary and a replica: the failover fault), or wait (the "
    "same, every write confirmed by WAIT 1)",
)
REDIS_START_TIMEOUT = option(
    "redis_start_timeout",
    float,
    30.0,
    "seconds to wait for the server (and a cluster's cluster_state:ok)",
    positive=True,
)
REDIS_IMAGE = option("redis_image", str, DEFAULT_IMAGE, "the container image")
REDIS_NETWORK = option(
    "redis_network", str, "auto", "the container's network mode: auto, host or published"
)

#: Rung 2, :mod:`rdq_redis.local`.
LOCAL_OPTIONS = RungOptions(
    "redis local binaries",
    [REDIS_BIN_DIR, REDIS_PERSISTENCE, REDIS_CLUSTER, REDIS_REPLICA, REDIS_START_TIMEOUT],
)
#: Rung 3, :mod:`rdq_redis.container` (it reads ``redis_cluster`` only to refuse it).
CONTAINER_OPTIONS = RungOptions(
    "redis container",
    [REDIS_IMAGE, REDIS_NETWORK, REDIS_PERSISTENCE, REDIS_CLUSTER, REDIS_START_TIMEOUT],
)


def persistence_mode(values: OptionValues) -> str:
    """``redis_persistence`` checked against :data:`PERSISTENCE_MODES`."""
    mode = values[REDIS_PERSISTENCE].strip().lower()
    if mode not in PERSISTENCE_FLAGS:
        raise InvalidArgument(
            f"--rdq-option redis_persistence={values[REDIS_PERSISTENCE]!r}: expected one of "
            f"{', '.join(PERSISTENCE_MODES)} ({REDIS_PERSISTENCE.help}; default "
            f"{REDIS_PERSISTENCE.show_default()})"
        )
    return mode


def cluster_size(values: OptionValues) -> int | None:
    """``redis_cluster`` (``None``: one server), at least :data:`MIN_CLUSTER_MASTERS`."""
    size = values[REDIS_CLUSTER]
    if size is not None and size < MIN_CLUSTER_MASTERS:
        raise InvalidArgument(
            f"--rdq-option redis_cluster={size}: expected at least {MIN_CLUSTER_MASTERS} "
            f"masters (a Redis Cluster needs {MIN_CLUSTER_MASTERS}; {REDIS_CLUSTER.help}; "
            f"default {REDIS_CLUSTER.show_default()})"
        )
    return size


def replica_mode(values: OptionValues) -> str:
    """``redis_replica`` checked against :data:`REPLICA_MODES` (and not with a cluster)."""
    mode = values[REDIS_REPLICA].strip().lower()
    if mode not in REPLICA_MODES:
        raise InvalidArgument(
            f"--rdq-option redis_replica={values[REDIS_REPLICA]!r}: expected one of "
            f"{', '.join(REPLICA_MODES)} ({REDIS_REPLICA.help}; default "
            f"{REDIS_REPLICA.show_default()})"
        )
    if mode != "none" and values[REDIS_CLUSTER] is not None:
        raise InvalidArgument(
            f"--rdq-option redis_replica={mode} with redis_cluster: a replicated cluster is "
            "not offered; give one of the two"
        )
    return mode
