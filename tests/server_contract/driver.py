"""What a server backend's contract tests need to know about it: :class:`ServerDriver`.

A contract body (``tests/server_contract/test_*.py``) is written once and takes a driver;
each server backend fills one (``tests/backends/<name>/driver.py``), as River's
``riverdrivertest.Exercise`` runs one body per driver. A driver holds facts (names,
texts, defaults, bounds) and the few calls whose form differs per backend (open a
storage with short timeouts, ask a paused server, count a namespace's connections). It
asserts nothing of its own: what is checked is in the bodies.

The facts come in families, one per group of contract tests; a driver without a family
(``None``) has those tests skipped, with the reason in :attr:`ServerDriver.why_not`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from rdq_compliance.provision.backend import (
    CUT_CONNECTIONS,
    KILL_SERVER,
    PAUSE_SERVER,
    RESTART_SERVER,
    Backend,
    ProvisionUnavailable,
    Server,
)
from rdq_compliance.provision.options import RungOptions
from rdq_core.spi import Storage

#: ``(key, value, expected)``: ``--rdq-option key=value`` must be refused with a message
#: ``--rdq-option key=<shown>: expected <expected>...`` (``shown`` is ``repr(value)``
#: unless the fourth item says otherwise).
BadOption = tuple[str, str, str] | tuple[str, str, str, str]
#: ``(id, options)``: one way to start the local rung (``{}``: the default server).
RungCase = tuple[str, Mapping[str, str]]
#: What a local rung's server usually declares.
LOCAL_FAULTS = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER, CUT_CONNECTIONS})


@dataclass(frozen=True)
class Ladder:
    """The provisioning ladder and the local rung's server (``test_provisioning.py``)."""

    #: the option naming the folders to search instead of ``PATH`` (``pg_bin_dir``)
    bin_dir_option: str
    #: the DSN of the local rung's server on ``port``
    local_dsn: Callable[[int], str]
    #: where the local rung keeps its data, given its workdir
    datadir: Callable[[Path], Path]
    #: the class of a server given by DSN, its exact ``origin`` (given the local server
    #: and its DSN), its faults
    given_type: type[Server]
    given_origin: Callable[[Server, str], str]
    given_faults: frozenset[str]
    #: ``local binaries: <this>`` when no binary is found (``pg_bin_dir=""``)
    missing_binaries: str
    #: a folder holding only ``present`` makes the rung name each of ``missing`` as not
    #: found there (with ``options`` added to the request)
    partial_binaries: tuple[tuple[str, ...], tuple[str, ...], Mapping[str, str]]
    #: the rungs' options and their defaults
    local_options: RungOptions
    local_defaults: Mapping[str, object]
    container_options: RungOptions
    container_defaults: Mapping[str, object]
    #: refused by both rungs before any work; refused by the ladder (key, value, match)
    bad_options: Sequence[BadOption]
    ladder_bad_option: tuple[str, str, str]
    #: a regex the local server's declared durability must match in full
    durability: Callable[[Server], str]
    #: what the server's log says after a clean stop (None: it writes nothing then)
    clean_stop_log: str | None
    #: raises the driver's error (or asserts) unless a paused ``server`` keeps silent
    assert_silent: Callable[[Server], None]
    #: why the local binaries for ``options`` are missing (None: they are there)
    missing_for: Callable[[Mapping[str, str]], str | None]
    #: the faults the local rung's server declares
    local_faults: frozenset[str] = LOCAL_FAULTS
    #: what more the local server's ``origin`` says (after ``on 127.0.0.1:PORT``)
    origin_details: Callable[[Server], Sequence[str]] = lambda server: ()
    #: the rung's server binaries found with ``PATH=/nonexistent``, and the usual folders
    #: they may come from (empty: none is installed in one here, the test skips)
    found_off_path: Callable[[], Mapping[str, Path]] | None = None
    usual_dirs: Callable[[], Sequence[Path]] = lambda: ()
    #: what the server's log says when its port was taken
    port_taken_log: str = "Address already in use"
    #: the system user the server runs as when we are root (None: as us)
    server_user: str | None = None
    #: how many acknowledged calls of each kind the durability check must have made
    #: before its kill, for its pass to show something (a slow server makes fewer)
    durability_load: int = 100
    #: whether admin calls (``create_namespace``) fail while the server is killed
    admin_fails_while_down: bool = True
    #: how many connections of ``namespace`` the server has (None: it cannot say)
    connections: Callable[[Server, str], int] | None = None
    #: a storage whose connections were cut replaces them before its next call, which
    #: then succeeds (False: that call may be ``BackendUnavailable``, a later one not)
    cut_reconnects_first: bool = False
    #: the ways a SIGKILLed runner starts the rung (every one must leave nothing)
    runner_cases: Sequence[RungCase] = (("server", {}),)


@dataclass(frozen=True)
class Outage:
    """A server that is down, closed, or loses replies (``test_server_down.py``)."""

    #: a storage on a private local server, with the timeouts the bounds below assume
    open_down: Callable[[Server, str], Storage]
    #: a regex each call's error matches while the server is killed (``{call}``: the
    #: call's name)
    down_text: str
    #: the driver's own exceptions, which must never come out of a storage
    native_errors: tuple[type[BaseException], ...]
    #: a storage on a closed ``port`` with a password (``s3cret``) in its DSN, that DSN
    closed_port_storage: Callable[[int], Storage]
    closed_port_dsn: Callable[[int], str]
    #: a regex each call on it matches
    closed_port_text: str
    #: how the DSN is shown in messages: the password masked (or the user info without
    #: it), e.g. ``postgresql://postgres:***@127.0.0.1``
    masked: str
    #: every call on ``open_down``'s storage gives up within this while the server is
    #: killed; one opened with the backend's default timeouts within this. These bounds
    #: (and the closed-port, server-down and recovery ones below) are the kit's fail-fast
    #: promises, not hang guards: each must stay below the driver's own wait it replaces
    fail_fast_s: float = 3.0
    default_fails_within: float = 3.0
    #: after the restart, the first call succeeds within this (None: within 15 s)
    recover_s: float | None = None
    #: the bounds of a call's wait on the closed port (s)
    closed_port_within: tuple[float, float] = (0.0, 3.0)
    #: a regex the ``Server`` for that DSN fails with (``{port}``: the closed port), and
    #: its bound (s)
    server_down_text: str = "does not answer"
    server_down_within: float = 3.0
    #: the errors carry no chained driver exception (no traceback of the driver)
    unchained: bool = False
    #: before the kill: whether the storage holds pooled connections (None: no pool)
    pooled: Callable[[Storage], bool] | None = None
    #: after recovery, what more settles (a pool refilled), as a call that raises if not
    settles: Callable[[Storage], None] | None = None


@dataclass(frozen=True)
class ReplyLoss:
    """A reply lost after the server acted, through :mod:`tests._tcp_proxy`
    (``test_server_down.py``)."""

    #: the ways of losing replies (a backend may also make the retry look new)
    modes: Sequence[str]
    #: a storage through ``proxy`` (to ``server``) on ``namespace`` in ``mode``, warmed
    #: up (scripts cached, indexes made) so that the next request is the one asked for
    open: Callable[[Any, Server, str, str], Storage]
    #: the request a ``complete`` sends (None: the next one), and how many tries it makes
    complete_request: Callable[[bytes], bool] | None
    complete_tries: int
    #: a regex the unknown outcome's error matches
    unknown_text: str


@dataclass(frozen=True)
class Packaging:
    """The storage and plugin halves, the entry point, honest capabilities
    (``test_packaging.py``)."""

    storage_modules: Sequence[str]
    plugin_modules: Sequence[str]
    #: a DSN where no server answers, fast
    unreachable_dsn: str
    backend_class: type[Backend]
    storage_class: type[Storage]
    #: the clock the storage declares, and what in it names the server's clock
    clock: str
    clock_marker: str
    #: the entry point (None: the installed distribution's, by the backend's name)
    entry_point: Callable[[], EntryPoint] | None = None
    max_payload_bytes: int | None = None
    #: the server's own limit, which the declared one must be below (None: no check)
    server_payload_limit: int | None = None
    #: what an unreachable server's durability starts with
    unknown_durability: str = "unknown: the settings could not be read ("


@dataclass(frozen=True)
class Skew:
    """The clock-skew campaign (``test_clock_skew.py``)."""

    #: on the shared server (True) or on a local one the kit starts (False)
    on_shared: bool


@dataclass(frozen=True)
class ServerDriver:
    """One server backend, for the contract bodies."""

    #: the backend's name (``--rdq-backend``), and where its ``Backend`` object is
    name: str
    backend_ref: str
    #: the store of ``tests/broken/`` holding its variants (None: it has none)
    store: str | None
    #: a DSN of the shared server that answers, or a skip (None: the local rung serves)
    shared_dsn: Callable[[], str] | None
    #: folders its worker processes need on ``PYTHONPATH`` (a package not installed)
    pythonpath: Sequence[str] = ()
    ladder: Ladder | None = None
    outage: Outage | None = None
    reply_loss: ReplyLoss | None = None
    packaging: Packaging | None = None
    skew: Skew | None = None
    #: family (or one body's key, such as ``port_taken``) -> why the backend has none,
    #: or cannot be held to it (shown as the skip reason)
    why_not: Mapping[str, str] = field(default_factory=dict)
    #: one body's key -> a bug of the backend that fails it (reported, not yet fixed):
    #: its case is a strict xfail, which fails once the bug is fixed
    known_bugs: Mapping[str, str] = field(default_factory=dict)

    @property
    def backend(self) -> Backend:
        module, _, attr = self.backend_ref.partition(":")
        found = getattr(importlib.import_module(module), attr)
        assert isinstance(found, Backend), self.backend_ref
        return found

    def open(self, dsn: str, namespace: str) -> Storage:
        return self.backend.open(dsn, namespace)

    def __str__(self) -> str:
        return self.name


def installed_entry_point(name: str) -> EntryPoint:
    """The ``rdq.backends`` entry point ``name`` of the installed distributions."""
    (found,) = [e for e in entry_points(group="rdq.backends") if e.name == name]
    return found


def why_missing(find: Callable[[], object]) -> str | None:
    """What ``find()`` (a rung's binary search) says is missing, or None."""
    try:
        find()
    except ProvisionUnavailable as exc:
        return str(exc)
    return None


def slots(server: Server) -> Sequence[Any]:
    """The processes of a local rung's server (``LocalFaults.process_slots``)."""
    return server.process_slots()  # type: ignore[attr-defined, no-any-return]


def ports(server: Server) -> list[int]:
    return [slot.port for slot in slots(server)]


def each_call(storage: Storage) -> Iterator[tuple[str, Callable[[], object]]]:
    """Every SPI call a worker makes, on task ``t`` of queue ``q``, by name."""
    from datetime import timedelta

    from rdq_core.model import NewTask

    lease = timedelta(minutes=5)
    yield "enqueue", lambda: storage.enqueue(NewTask("t", "q", "h"))
    yield "claim_due", lambda: storage.claim_due("q", 1, lease)
    yield "complete", lambda: storage.complete("t", "0" * 32)
    yield "extend_lease", lambda: storage.extend_lease("t", "0" * 32, lease)
    yield "get", lambda: storage.get("t")
    yield "stats", lambda: storage.stats("q")
    yield "dlq_list", lambda: storage.dlq_list("q")
    yield "now", storage.now
