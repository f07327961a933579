"""Key names of one namespace: buckets, index shards, and the hash tags that keep every
script's keys in one cluster slot (storage half: imports only ``rdq_core``).

Every key of namespace ``ns`` starts ``rdq:{ns:`` (so ``SCAN MATCH rdq:{ns:*`` finds them
all and nothing else) and carries one of three hash tags:

- ``{ns:bbb}`` — a **bucket**, ``bbb`` = ``crc32(queue) mod 4096`` as 3 hex digits. All
  of a queue lives in its bucket (several queues may share one). Its keys:
  ``task`` ``pay`` ``hdr`` ``hist`` (hashes: task id → meta / payload / headers /
  history), ``ready`` ``lease`` ``done`` ``dlq`` (sorted sets, ordered by member),
  ``seq`` (enqueue counter) and ``rv`` (revoked enqueue reservations);
- ``{ns:isss}`` — an **id-index shard**, ``sss`` = ``crc32(task id) mod 4096``: one hash
  ``ids``, task id → ``queue NUL nonce``;
- ``{ns:meta}`` — the namespace's own record (format version, bucket count).

No key name contains a task id, a handler or an error text: those are hash fields and
set members. So the keys of every script are a fixed set known before the call, all
passed in ``KEYS`` and all with the same tag; a Lua script never builds a key name.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from functools import cached_property

from rdq_core.errors import InvalidArgument

#: Buckets per namespace; the first 3 hex digits of a claim token name the bucket.
BUCKETS = 4096
#: Shards of the id index per namespace.
ID_SHARDS = 4096
#: Queues whose bucket a :class:`Layout` remembers (beyond that it is computed each time).
QUEUES_REMEMBERED = 65_536
#: The namespace record's format version (bumped if the layout ever changes).
LAYOUT_VERSION = 1
NAMESPACE_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def namespace_name(namespace: object) -> str:
    """Validate a namespace name (it becomes part of every key and of a client name)."""
    if not isinstance(namespace, str) or not NAMESPACE_RE.fullmatch(namespace):
        raise InvalidArgument(
            f"invalid redis namespace {namespace!r}: use 1 to 64 characters from [A-Za-z0-9_-]"
        )
    return namespace


def bucket_of(queue: str) -> str:
    """The bucket of a queue: 3 lowercase hex digits."""
    return f"{zlib.crc32(queue.encode()) % BUCKETS:03x}"


def bucket_of_token(token: str) -> str:
    """The bucket a claim token was minted in (its first 3 hex digits)."""
    return token[:3]


def shard_of(task_id: str) -> str:
    """The id-index shard of a task id: 3 lowercase hex digits."""
    return f"{zlib.crc32(task_id.encode()) % ID_SHARDS:03x}"


def scan_pattern(namespace: str) -> str:
    """The ``SCAN MATCH`` pattern of every key of ``namespace`` (no glob character in it:
    namespace names are ``[A-Za-z0-9_-]``)."""
    return f"rdq:{{{namespace}:*"


def meta_key(namespace: str) -> str:
    return f"rdq:{{{namespace}:meta}}"


def client_name(namespace: str) -> str:
    """The ``CLIENT SETNAME`` of every connection a storage of ``namespace`` opens."""
    return f"rdq:{namespace}"


@dataclass(frozen=True)
class Bucket:
    """The keys of one bucket (one hash tag, so one cluster slot)."""

    namespace: str
    bucket: str
    _lists: dict[tuple[str, ...], list[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @cached_property
    def tag(self) -> str:
        return f"{{{self.namespace}:{self.bucket}}}"

    def key(self, name: str) -> str:
        return f"rdq:{self.tag}:{name}"

    def listed(self, names: tuple[str, ...]) -> list[str]:
        """The keys ``names`` (``("task", "hist", ...)``) as one list, a script's ``KEYS``:
        made once per bucket and shared, so callers must not change it."""
        got = self._lists.get(names)
        if got is None:
            got = self._lists[names] = [self.key(n) for n in names]
        return got

    @cached_property
    def task(self) -> str:
        return self.key("task")

    @cached_property
    def pay(self) -> str:
        return self.key("pay")

    @cached_property
    def hdr(self) -> str:
        return self.key("hdr")

    @cached_property
    def hist(self) -> str:
        return self.key("hist")

    @cached_property
    def ready(self) -> str:
        return self.key("ready")

    @cached_property
    def lease(self) -> str:
        return self.key("lease")

    @cached_property
    def done(self) -> str:
        return self.key("done")

    @cached_property
    def dlq(self) -> str:
        return self.key("dlq")

    @cached_property
    def seq(self) -> str:
        return self.key("seq")

    @cached_property
    def rv(self) -> str:
        return self.key("rv")

    def all(self) -> tuple[str, ...]:
        return (
            self.task, self.pay, self.hdr, self.hist, self.ready, self.lease, self.done,
            self.dlq, self.seq, self.rv,
        )  # fmt: skip


@dataclass(frozen=True)
class Shard:
    """The key of one id-index shard (its own hash tag)."""

    namespace: str
    shard: str

    @cached_property
    def tag(self) -> str:
        return f"{{{self.namespace}:i{self.shard}}}"

    @cached_property
    def ids(self) -> str:
        return f"rdq:{self.tag}:ids"


class Layout:
    """Key names of one namespace. Each :class:`Bucket` is made once (at most
    :data:`BUCKETS` of them) and its key names once, on first use, and the bucket of a
    queue is remembered (up to :data:`QUEUES_REMEMBERED` queues): a call's keys are then
    looked up, not computed and formatted."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace_name(namespace)
        self._buckets: dict[str, Bucket] = {}
        self._queues: dict[str, Bucket] = {}

    def bucket(self, bucket: str) -> Bucket:
        got = self._buckets.get(bucket)
        if got is None:
            got = Bucket(self.namespace, bucket)
            if len(self._buckets) < BUCKETS:  # only malformed names could pass the bound
                self._buckets[bucket] = got
        return got

    def of_queue(self, queue: str) -> Bucket:
        got = self._queues.get(queue)
        if got is None:
            got = self.bucket(bucket_of(queue))
            if len(self._queues) < QUEUES_REMEMBERED:
                self._queues[queue] = got
        return got

    def of_token(self, token: str) -> Bucket:
        return self.bucket(bucket_of_token(token))

    def shard(self, task_id: str) -> Shard:
        return Shard(self.namespace, shard_of(task_id))

    @property
    def meta(self) -> str:
        return meta_key(self.namespace)
