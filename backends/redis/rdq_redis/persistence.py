"""Whether a Redis server (or every master of a cluster) is **durable**: acknowledged
writes survive a kill and restart of the server process (``Capabilities.durable``,
rule ``durability``). Storage half: redis-py and ``rdq_core`` only.

Read once per storage and process, by its first ``capabilities()`` call that reaches the
server (the first enqueue makes one) (:func:`read`): on every
master ``CONFIG GET appendonly appendfsync save`` or, where ``CONFIG`` is refused (a
managed service that renames or forbids it), ``INFO persistence``; on a cluster also
``INFO replication``. It is a snapshot: a ``CONFIG SET`` later is not seen by a storage
already open.

**Durable only with ``appendonly yes`` and ``appendfsync always``.** Why, from what Redis 7
does with a write:

- a write command appends its AOF record to a buffer in the server's memory; before the
  event loop goes back to waiting (``beforeSleep``) the buffer is ``write()``\\ n to the
  AOF file — with ``always`` also ``fsync()``\\ ed — and only *then* are the replies of
  that loop iteration sent. With ``always`` a client's socket is never served for
  reading and writing in one iteration (the "write barrier"), and a failed ``write`` or
  ``fsync`` makes the server exit rather than reply. So a reply means the record is in
  the AOF (on the disk, even), and a restart replays it: **nothing acknowledged is lost
  to a kill**;
- with ``everysec`` the fsync runs once a second in a background thread, which alone
  would be harmless for a *process* kill (the kernel keeps what was written). But two
  paths send a reply before its record was written: when the previous background fsync
  is still running (a slow disk), the ``write()`` is postponed for up to two seconds
  while replies go out; and without the write barrier a client whose earlier reply did
  not fit its socket is served for reading and then writing in one iteration, so the
  reply to a command read in that iteration leaves before the ``write()``. A SIGKILL in
  either window loses acknowledged writes (rarely, but a chaos run is there to find
  rare things), and an OS crash loses up to about two seconds of them: **not durable**;
- ``appendfsync no`` has the second window too: **not durable**;
- ``appendonly no``: RDB snapshots (``save``) at best, so a kill loses everything since
  the last one, or everything at all without them: **not durable**;
- ``CONFIG`` refused and ``INFO`` saying ``aof_enabled:1``: the fsync policy cannot be
  read (``INFO`` does not show it), so **not declared durable** (nothing is promised that
  was not seen);
- on a **cluster** every master must be durable, and a master with connected replicas is
  not: killing it can promote a replica (after ``cluster-node-timeout``) that lacks the
  writes replication had not yet carried (replication is asynchronous), and the
  restarted master then resynchronises from it, discarding its own AOF. (A Sentinel
  that fails over a single server is not visible from the server and not detected.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from rdq_redis.connection import is_cluster, primaries

__all__ = ["NodePersistence", "Persistence", "judge", "read", "read_node"]


@dataclass(frozen=True)
class NodePersistence:
    """What one master says about its persistence (``None``: it would not say)."""

    node: str
    appendonly: str | None
    appendfsync: str | None
    save: str | None
    #: where it was read: ``CONFIG`` or ``INFO`` (``CONFIG`` refused)
    source: str
    #: connected replicas (read on a cluster only; ``None`` elsewhere)
    replicas: int | None = None


@dataclass(frozen=True)
class Persistence:
    """The verdict over every master: ``durable`` and why (``reason``, for humans)."""

    durable: bool
    reason: str
    nodes: tuple[NodePersistence, ...] = ()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _node_name(node: redis.Redis) -> str:
    kwargs = node.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def read_node(node: redis.Redis, *, replicas: bool = False) -> NodePersistence:
    """One node's persistence settings (``CONFIG GET``, else ``INFO persistence``)."""
    name = _node_name(node)
    replica_count: int | None = None
    if replicas:
        replica_count = int(node.info("replication").get("connected_slaves", 0))
    try:
        reply = node.config_get("appendonly", "appendfsync", "save")
        config = {_text(k): _text(v) for k, v in reply.items()}
    except redis.ResponseError:  # CONFIG renamed away, or not allowed for this user
        info = node.info("persistence")
        aof = "yes" if int(info.get("aof_enabled", 0)) == 1 else "no"
        return NodePersistence(name, aof, None, None, "INFO", replica_count)
    return NodePersistence(
        name,
        config.get("appendonly"),
        config.get("appendfsync"),
        config.get("save"),
        "CONFIG",
        replica_count,
    )


def _node_verdict(n: NodePersistence, cluster: bool) -> str | None:
    """Why this master is not durable, or ``None`` if it is."""
    if n.appendonly != "yes":
        if n.source == "INFO":
            return f"{n.node}: AOF off (INFO persistence): a kill loses acknowledged writes"
        if n.save:
            return (
                f"{n.node}: appendonly no, RDB snapshots (save {n.save!r}): a kill loses "
                "what was written since the last snapshot"
            )
        return f"{n.node}: appendonly no, no RDB snapshots: a restart loses everything"
    if n.appendfsync is None:
        return (
            f"{n.node}: appendonly yes, but the fsync policy cannot be read (CONFIG is "
            "refused and INFO does not show it), so durability is not declared"
        )
    if n.appendfsync != "always":
        return (
            f"{n.node}: appendonly yes, appendfsync {n.appendfsync}: a reply can leave before "
            "its AOF record is written, so a kill can lose acknowledged writes"
        )
    if cluster and n.replicas:
        return (
            f"{n.node}: a cluster master with {n.replicas} replica(s): a kill can promote a "
            "replica that lacks the latest acknowledged writes"
        )
    return None


def judge(nodes: list[NodePersistence], *, cluster: bool) -> Persistence:
    """The verdict over ``nodes`` (every master), see the module docstring."""
    problems = [p for p in (_node_verdict(n, cluster) for n in nodes) if p is not None]
    if not nodes:
        return Persistence(False, "no master answered")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Persistence(False, problems[0] + more, tuple(nodes))
    where = f"all {len(nodes)} masters" if cluster else nodes[0].node
    return Persistence(
        True,
        f"appendonly yes, appendfsync always on {where}: a reply leaves only after its AOF "
        "record is written to the file",
        tuple(nodes),
    )


def read(client: Any) -> Persistence:
    """The verdict for a client's server, or every master of its cluster."""
    cluster = is_cluster(client)
    nodes = [read_node(node, replicas=cluster) for node in primaries(client)]
    return judge(nodes, cluster=cluster)
