"""rdq names -> rq names, and back (storage half: the standard library only).

rq's keys are fixed ``rq:`` keys (``rq:queue:<queue>``, ``rq:job:<job id>``, ``rq:wip:<queue>``,
``rq:worker:<worker name>``, ...; the prefix is process-wide, ``RQ_KEY_PREFIX``), so a
namespace cannot be a key prefix of its own. It is carried in the *names* instead:

- an rdq queue ``q`` of namespace ``ns`` is the rq queue ``<NS>.q``;
- an rdq task id ``t`` is the rq job id ``<NS>-<T>``;
- the adapter's workers and schedulers are named ``<NS>.w.<hex>`` / ``<NS>.s.<hex>``;

where ``<NS>`` and ``<T>`` are :func:`escape`\\ d. rq accepts job ids of
``[A-Za-z0-9_-]+`` only (``rq.job.JOB_ID_PATTERN``, job.py L55) while an rdq task id is any
printable string of up to 255 characters, so every other character (and ``_`` itself) is
written ``_xx`` per UTF-8 byte: a one-to-one mapping, not a restriction. ``<NS>`` keeps
only ``[A-Za-z0-9]`` (its ``-`` and ``_`` escaped too), so it never contains ``.`` or
``-``: the first one ends it, and no namespace's names are a prefix of another's. Every
rq key of a namespace therefore has ``:<NS>.`` or ``:<NS>-`` right after one of its
colons (:func:`key_patterns`), which is how :mod:`rdq_rq.admin` finds them to drop.

A mapping, not a guard: nothing here refuses an id the SPI accepted.
"""

from __future__ import annotations

import string

_ALNUM = frozenset(string.ascii_letters + string.digits)
_TASK_KEEP = _ALNUM | {"-"}


def escape(text: str, keep: frozenset[str] = _TASK_KEEP) -> str:
    """``text`` with every character outside ``keep`` written ``_xx`` per UTF-8 byte."""
    out = []
    for ch in text:
        if ch in keep:
            out.append(ch)
        else:
            out.extend(f"_{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def unescape(text: str) -> str:
    """The inverse of :func:`escape`."""
    if "_" not in text:
        return text
    raw = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "_":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(ch.encode())
            i += 1
    return raw.decode("utf-8", "surrogatepass")


class Names:
    """The rq names of one rdq namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.ns = escape(namespace, _ALNUM)
        self._queue_prefix = f"{self.ns}."
        self._job_prefix = f"{self.ns}-"

    def queue(self, queue: str) -> str:
        """The rq queue name of an rdq queue."""
        return self._queue_prefix + queue

    def rdq_queue(self, rq_queue: str) -> str | None:
        """The rdq queue of an rq queue name (``None``: not of this namespace)."""
        if not rq_queue.startswith(self._queue_prefix):
            return None
        return rq_queue[len(self._queue_prefix) :]

    def job_id(self, task_id: str) -> str:
        """The rq job id of an rdq task id."""
        return self._job_prefix + escape(task_id)

    def task_id(self, job_id: str) -> str | None:
        """The rdq task id of an rq job id (``None``: not of this namespace)."""
        if not job_id.startswith(self._job_prefix):
            return None
        return unescape(job_id[len(self._job_prefix) :])

    def worker(self, suffix: str) -> str:
        return f"{self.ns}.w.{suffix}"

    def scheduler(self, suffix: str) -> str:
        return f"{self.ns}.s.{suffix}"


def key_patterns(namespace: str) -> tuple[str, str]:
    """``SCAN MATCH`` patterns of every rq key of ``namespace`` (see the module docstring;
    the escaped namespace has no glob character)."""
    ns = escape(namespace, _ALNUM)
    return (f"rq:*:{ns}.*", f"rq:*:{ns}-*")


def member_of(namespace: str, member: str) -> bool:
    """Whether a member of rq's process-wide sets (``rq:queues``: queue keys,
    ``rq:workers``: worker keys) names a queue or worker of ``namespace``."""
    ns = escape(namespace, _ALNUM)
    return f":{ns}." in member or f":{ns}-" in member
