"""Who made a namespace, and when: the record a server keeps with each namespace, and the
sweep that drops the namespaces of runs that died.

A run killed by SIGKILL (or SIGTERM: Python's default handler runs no clean-up) leaves
its namespaces on a server it was given by DSN: nothing of the kit is left to drop them.
So a server that can records, with every namespace it creates, an :class:`Owner`: the
host, the boot and the pid namespace the kit ran in, its pid and that process's start
time, and when the namespace was made. The next run on that server sweeps
(:func:`sweep`): a namespace whose owner ran on this machine and is gone — no process
with that pid, or one started at another time (the pid was reused) — is dropped; one
whose owner is alive is left alone, whatever its age; one made on another machine (or in
another container) is dropped only when older than :data:`FOREIGN_AFTER_S`, since its
owner cannot be asked.

A backend's ``Server`` fills the hook in two places:

- ``create_namespace`` stores :func:`owner_record` with the namespace, in the same step
  as the namespace where the store can (a schema comment, a field of the namespace's
  marker key, a document, a one-row table);
- :meth:`~rdq_compliance.provision.backend.Server.recorded_namespaces` returns every
  namespace of the kit's on the server with the record stored with it (``None`` when
  there is none: a namespace made before records were kept, or one half made).

A namespace without a record is never dropped: the sweep cannot tell whose it is; it is
counted, and named, in the sweep's report.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

__all__ = [
    "FOREIGN_AFTER_S",
    "Owner",
    "SweepReport",
    "owner_record",
    "sweep",
]

#: A namespace whose owner ran elsewhere (another host, boot or pid namespace) is dropped
#: once it is older than this: no kit run lasts a day.
FOREIGN_AFTER_S = 24 * 3600.0
#: What every record starts with (and its format's version).
PREFIX = "rdq-owner/1 "


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


@functools.cache
def _process_facts(pid: int) -> tuple[str, str, int, float]:
    """Where process ``pid`` (this one) runs and when it started: read once per pid, so
    a forked child reads its own."""
    return (
        socket.gethostname(),
        _boot_id(),
        _pid_namespace(),
        round(psutil.Process(pid).create_time(), 2),
    )


@dataclass(frozen=True)
class Owner:
    """The process that made a namespace, and when (seconds since the epoch)."""

    host: str
    boot: str
    pidns: int
    pid: int
    started: float
    created: float

    @classmethod
    def current(cls, created: float | None = None) -> Owner:
        """This process, making a namespace now (or at ``created``)."""
        pid = os.getpid()
        host, boot, pidns, started = _process_facts(pid)
        return cls(
            host=host,
            boot=boot,
            pidns=pidns,
            pid=pid,
            started=started,
            created=round(time.time() if created is None else created, 3),
        )

    def encode(self) -> str:
        """The record a server stores (plain ASCII, under 300 characters)."""
        return PREFIX + json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, text: str | bytes | None) -> Owner | None:
        """The owner a record names; ``None`` for no record or one that is not the kit's."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not text or not text.startswith(PREFIX):
            return None
        try:
            data = json.loads(text[len(PREFIX) :])
            return cls(
                host=str(data["host"]),
                boot=str(data["boot"]),
                pidns=int(data["pidns"]),
                pid=int(data["pid"]),
                started=float(data["started"]),
                created=float(data["created"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def here(self) -> bool:
        """Whether the owner ran where this process runs (same host, boot, pid namespace):
        then whether it lives can be asked."""
        me = Owner.current()
        return (self.host, self.boot, self.pidns) == (me.host, me.boot, me.pidns)

    def alive(self) -> bool:
        """Whether the owner's process still runs (asked only :meth:`here`): a process with
        that pid started at the recorded time (within 1 s)."""
        try:
            started = psutil.Process(self.pid).create_time()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.Error:
            return True  # there, but not ours to read: never drop what may be in use
        return abs(started - self.started) < 1.0

    def describe(self, now: float) -> str:
        """``pid 123 on host h, 42 s old``."""
        return f"pid {self.pid} on {self.host}, {_age(now - self.created)} old"


def owner_record() -> str:
    """The record to store with a namespace this process creates now."""
    return Owner.current().encode()


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class SweepReport:
    """What a sweep found and did: namespace → why, in each group."""

    #: dropped: the owner is gone (or, made elsewhere, older than FOREIGN_AFTER_S)
    dropped: dict[str, str] = field(default_factory=dict)
    #: left: the owner lives (here), or made elsewhere and younger than the limit
    kept: dict[str, str] = field(default_factory=dict)
    #: left: no owner record (made before records were kept, or half made)
    unrecorded: list[str] = field(default_factory=list)
    #: dropping failed: namespace → the error
    failed: dict[str, str] = field(default_factory=dict)
    #: the server keeps no records (``recorded_namespaces`` is not supported): why
    unsupported: str | None = None
    #: the server could not list its namespaces now: the error
    error: str | None = None

    def summary(self) -> str | None:
        """One line for the run's header, or ``None`` when there is nothing to say."""
        if self.unsupported is not None:
            return None
        if self.error is not None:
            return f"could not list the namespaces of earlier runs to sweep: {self.error}"
        parts = []
        if self.dropped:
            owners = sorted({why for why in self.dropped.values()})
            parts.append(
                f"dropped {len(self.dropped)} namespace(s) left by dead runs "
                f"({'; '.join(owners[:3])}{'; ...' if len(owners) > 3 else ''})"
            )
        if self.failed:
            first = next(iter(self.failed.items()))
            parts.append(
                f"could not drop {len(self.failed)} ({first[0]}: {first[1]})"
            )
        if self.unrecorded:
            parts.append(
                f"left {len(self.unrecorded)} namespace(s) with no owner record "
                f"(e.g. {self.unrecorded[0]}; made by an older kit: drop them by hand)"
            )
        return "; ".join(parts) or None


def sweep(
    records: Mapping[str, str | bytes | None],
    drop: Callable[[str], object],
    *,
    now: float | None = None,
    foreign_after: float = FOREIGN_AFTER_S,
) -> SweepReport:
    """Drop (``drop(namespace)``) the namespaces of ``records`` (namespace → stored
    record) whose owners died, as the module docstring says; return what was done."""
    now = time.time() if now is None else now
    report = SweepReport()
    for namespace, text in sorted(records.items()):
        owner = Owner.decode(text)
        if owner is None:
            report.unrecorded.append(namespace)
            continue
        if owner.here():
            if owner.alive():
                report.kept[namespace] = f"{owner.describe(now)}, running"
                continue
            why = f"{owner.describe(now)}, gone"
        elif now - owner.created > foreign_after:
            why = f"{owner.describe(now)}, made elsewhere"
        else:
            report.kept[namespace] = f"{owner.describe(now)}, made elsewhere"
            continue
        try:
            drop(namespace)
        except Exception as exc:  # one namespace that cannot go does not stop the rest
            report.failed[namespace] = f"{type(exc).__name__}: {exc}"[:300]
        else:
            report.dropped[namespace] = why
    return report
