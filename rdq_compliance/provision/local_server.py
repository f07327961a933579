"""A local rung's server: the processes it runs (:class:`ProcessSlot`) and the faults of
its ``Server`` (:class:`LocalFaults`, the twin of
:class:`~rdq_compliance.provision.container_server.ContainerFaults`).

A backend's ``local.py`` says *what to run and how to probe it*, and nothing of how to
lock, kill or clean up::

    @dataclass
    class LocalMyNode(ProcessSlot):          # one server process
        binary: Path
        workdir: Path
        start_timeout: float
        port: int = 0
        process: ManagedProcess | None = None

        datadir = property(lambda self: self.workdir / "data")
        log_path = property(lambda self: self.workdir / "my.log")

        def argv(self): return [self.binary, "--port", str(self.port), ...]
        def probe(self): return my_driver.ping(self.port)

    class LocalMyServer(LocalFaults, MyServer):  # LocalFaults first among the bases
        faults = frozenset({KILL_SERVER, RESTART_SERVER, PAUSE_SERVER})
        start_errors = (ProcessFailed, OSError, my_driver.Error)

        def __init__(self, node: LocalMyNode) -> None:
            super().__init__(dsn_of(node), origin=...)
            self.node = node
            self.hold_processes()

        def process_slots(self): return [self.node]

    def start_local_server(request):
        node = LocalMyNode(...)
        return start_rung(node, node.start_on_free_port, LocalMyServer,
                          failure="the local my-server did not start")

**A slot** (:class:`ProcessSlot`) runs its :meth:`~ProcessSlot.argv` as a
:class:`~rdq_compliance.provision.process.ManagedProcess` (it dies with the kit, even on
SIGKILL) and returns from :meth:`~ProcessSlot.start` once :meth:`~ProcessSlot.probe`
answers; it raises :class:`~rdq_compliance.provision.ports.PortInUse` when the server's
log says its port was taken, which :meth:`~ProcessSlot.start_on_free_port` retries on a
fresh port. Its other verbs (kill, stop, pause, resume, pids, remove) are no-ops when no
process runs.

**The faults** (:class:`LocalFaults`), one lock ordering them and the close:

- :meth:`~LocalFaults.kill`: SIGKILL every slot's process tree; it stays down;
- :meth:`~LocalFaults.restart`: a clean stop of what runs, every slot started again on its
  port and data, then :meth:`~LocalFaults.wait_ready`;
- :meth:`~LocalFaults.pause` / :meth:`~LocalFaults.resume`: SIGSTOP / SIGCONT every
  process of every slot;
- :meth:`~LocalFaults.close`: resume, the server's own ``close`` (drop the namespaces it
  made) while it runs, :meth:`~LocalFaults.tidy_after_kill` after a kill, stop, then
  :meth:`~LocalFaults.remove_data`; idempotent;
- :meth:`~LocalFaults.faulting`: the frame of a backend's own fault (a failover).

After a kill, restart or failover the server's own connections are gone: the faults call
the ``Server``'s ``forget_connections``. A restart (or failover) whose start fails with
one of :attr:`~LocalFaults.start_errors` is ``ProvisionUnavailable`` naming the server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rdq_compliance.provision.backend import ProvisionUnavailable, ServerStartFailed
from rdq_compliance.provision.ports import PortInUse, start_on_free_port
from rdq_compliance.provision.process import ManagedProcess, ProcessFailed, remove_tree

__all__ = ["LocalFaults", "ProcessSlot", "start_rung"]

L = TypeVar("L", bound="Discardable")
S = TypeVar("S", bound="LocalFaults")


class Discardable(Protocol):
    """What a rung started: :meth:`discard` stops it and deletes what it left."""

    def discard(self) -> None: ...


#: Seconds a server that failed to start may take to stop before it is SIGKILLed.
FAILED_START_GRACE = 2.0


class ProcessSlot:
    """One server process of a local rung: what it runs, how it is known ready, and its
    verbs (see the module docstring).

    A subclass (usually a dataclass) has ``process`` (``None`` before the start and after
    a stop), ``port``, ``datadir``, ``log_path`` and ``start_timeout``, and fills
    :meth:`argv` and :meth:`probe` (or :meth:`readiness`). It may change
    :attr:`stop_signal` / :attr:`stop_grace`, :meth:`launch_options` (the process's
    folder, environment, user and the paths its watchdog removes if the kit dies),
    :meth:`prepare`, :meth:`take_ports` and :meth:`port_taken`.
    """

    process: ManagedProcess | None
    port: int
    datadir: Path
    log_path: Path
    start_timeout: float
    #: What :meth:`stop` sends first (``SIGTERM``; a PostgreSQL postmaster prefers
    #: ``SIGINT``), and how long the server may take to exit before every process of its
    #: tree is SIGKILLed.
    stop_signal: int = signal.SIGTERM
    stop_grace: float = 10.0

    # ---- what a backend fills ------------------------------------------------------

    def argv(self) -> Sequence[str | os.PathLike[str]]:
        """The server's command line for :attr:`port` and :attr:`datadir`."""
        raise NotImplementedError

    def probe(self) -> object:
        """Readiness: a true value once the server answers (an exception: not yet)."""
        raise NotImplementedError

    def readiness(self) -> Callable[[], object]:
        """The probe of one start (a probe that keeps state per start returns a new one)."""
        return self.probe

    def launch_options(self) -> dict[str, Any]:
        """Further :class:`ManagedProcess` keywords: ``cwd``, ``env``, ``user`` and the
        ``cleanup_paths`` its watchdog removes if the kit dies (default: the data)."""
        return {"cwd": self.datadir, "cleanup_paths": [self.datadir]}

    def prepare(self) -> None:
        """Before every start (default: make :attr:`datadir`)."""
        self.datadir.mkdir(parents=True, exist_ok=True)

    def take_ports(self, port: int) -> None:
        """Listen on ``port`` (a fresh free one) from the next start on; a server that
        needs more ports takes them here."""
        self.port = port

    def port_taken(self, log: str) -> bool:
        """Whether ``log`` (what the server wrote during a failed start) says its port
        was taken."""
        return "Address already in use" in log

    # ---- starting ------------------------------------------------------------------

    @property
    def server_name(self) -> str:
        """The server binary's file name (the first word of its command line)."""
        return os.path.basename(os.fspath(self.argv()[0]))

    def describe(self) -> str:
        """``postgres on 127.0.0.1:5433``, for messages."""
        return f"{self.server_name} on 127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server on its port and data and wait until :meth:`readiness` says it
        is ready; :class:`PortInUse` if its log says the port was taken meanwhile."""
        self.prepare()
        offset = _size(self.log_path)
        process = ManagedProcess(
            self.argv(),
            log_path=self.log_path,
            stop_signal=self.stop_signal,
            grace=self.stop_grace,
            **self.launch_options(),
        )
        process.start()
        self.process = process
        try:
            process.wait_ready(self.readiness(), self.start_timeout, what=self.describe())
        except ProcessFailed as exc:
            process.stop(grace=FAILED_START_GRACE)
            self.process = None
            if self.port_taken(_read_from(self.log_path, offset)):
                raise PortInUse(self.port, self.server_name) from exc
            raise

    def start_on_free_port(self) -> None:
        """:meth:`start` on fresh free ports (:func:`~rdq_compliance.provision.ports.
        start_on_free_port`: again on another one while a port was taken meanwhile)."""

        def start_on(port: int) -> None:
            self.take_ports(port)
            self.start()

        start_on_free_port(start_on)

    # ---- the verbs -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the slot's process is started and alive."""
        return self.process is not None and self.process.running

    def kill(self) -> None:
        """SIGKILL the slot's process tree (a no-op when it was never started)."""
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        """A clean shutdown (:attr:`stop_signal`), SIGKILL after the grace period;
        releases the watchdog; idempotent."""
        process, self.process = self.process, None
        if process is not None:
            process.stop()

    def pause(self) -> None:
        """SIGSTOP the slot's process tree while it runs."""
        if self.process is not None and self.process.running:
            self.process.pause()

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped."""
        if self.process is not None:
            self.process.resume()

    @property
    def paused(self) -> bool:
        """Whether the slot's process is stopped by :meth:`pause`."""
        return self.process is not None and self.process.paused

    def pids(self) -> list[int]:
        """The process ids of the slot's process tree (none when not started)."""
        return self.process.pids() if self.process is not None else []

    def remove(self) -> None:
        """Delete the data and the log (override to delete more)."""
        remove_tree(self.datadir)
        remove_tree(self.log_path)

    def discard(self) -> None:
        """Stop the server and delete what it left; idempotent."""
        self.stop()
        self.remove()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


class LocalFaults:
    """Mixin: the faults of a local rung's ``Server`` (see the module docstring). Put it
    first among the bases and call :meth:`hold_processes` from ``__init__``."""

    #: What a failed start raises (``ProcessFailed``; a backend adds its driver's errors
    #: and ``OSError``): :func:`start_rung`, a restart and a failover turn them into
    #: ``ProvisionUnavailable`` naming the server.
    start_errors: tuple[type[BaseException], ...] = (ProcessFailed,)

    if TYPE_CHECKING:  # the Server's (never defined here: it would hide the Server's own)
        origin: str

        def forget_connections(self) -> None: ...

    def hold_processes(self) -> None:
        """Call once from ``__init__``: the faults' lock and state."""
        self._fault_lock = threading.Lock()
        self._killed = False
        self._closed = False

    # ---- what a backend fills ------------------------------------------------------

    def process_slots(self) -> Sequence[ProcessSlot]:
        """The processes the faults act on (evaluated at each fault: a failover may
        change them)."""
        raise NotImplementedError

    def wait_ready(self) -> None:
        """After a restart has started every slot (each answers its own probe): wait for
        what more the server needs to be ready, e.g. a cluster's state (override)."""

    def tidy_after_kill(self) -> None:
        """At :meth:`close` of a killed server, before its slots are stopped: what a kill
        left behind that only the server can free (override)."""

    def remove_data(self) -> None:
        """At :meth:`close`, after the stop (also when it failed): delete what the server
        left (default: every slot's :meth:`~ProcessSlot.remove`; a server with more, e.g.
        a replica's relays, closes that too)."""
        for slot in self.process_slots():
            slot.remove()

    # ---- the faults ----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ProvisionUnavailable(f"{self.origin} was closed")

    @contextlib.contextmanager
    def faulting(self, failure: str) -> Iterator[None]:
        """The frame of a fault that starts processes (a restart, a failover): under the
        faults' lock, on a server not closed, its connections forgotten first; a
        :attr:`start_errors` error becomes ``ProvisionUnavailable("<failure>: ...")``
        (``failure`` may name ``{origin}``); afterwards the server is up again."""
        with self._fault_lock:
            self._check_open()
            self.forget_connections()
            try:
                yield
            except self.start_errors as exc:
                if isinstance(exc, ProvisionUnavailable):
                    raise
                raise ProvisionUnavailable(f"{failure.format(origin=self.origin)}: {exc}") from exc
            self._killed = False

    def kill(self) -> None:
        """SIGKILL the server (every slot's tree); it stays down until :meth:`restart`."""
        with self._fault_lock:
            self._check_open()
            for slot in self.process_slots():
                slot.kill()
            self._killed = True
            self.forget_connections()

    def restart(self) -> None:
        """Start the server again on the same ports and data (a clean stop first of what
        runs, paused or not: it releases the old watchdogs); returns once it is ready."""
        with self.faulting("could not restart {origin}"):
            slots = self.process_slots()
            for slot in slots:
                slot.stop()
            for slot in slots:
                slot.start()
            self.wait_ready()

    def pause(self) -> None:
        """SIGSTOP every process: connections stay open, nothing answers until
        :meth:`resume`."""
        with self._fault_lock:
            self._check_open()
            for slot in self.process_slots():
                slot.pause()

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped (a no-op on a server that is not paused)."""
        with self._fault_lock:
            self._check_open()
            for slot in self.process_slots():
                slot.resume()

    def pids(self) -> list[int]:
        """Every process id of the server, over all its slots, sorted."""
        return sorted(pid for slot in self.process_slots() for pid in slot.pids())

    def close(self) -> None:
        """Stop the server and delete its data; idempotent, fine after a kill or a pause."""
        with self._fault_lock:
            if self._closed:
                return
            self._closed = True
            slots = self.process_slots()
            for slot in slots:
                if slot.paused:
                    slot.resume()  # so that leftover namespaces can be dropped
            if not self._killed and all(slot.running for slot in slots):
                with contextlib.suppress(Exception):
                    super().close()  # type: ignore[misc]  # the Server's: drop namespaces
            self.forget_connections()
            try:
                if self._killed:
                    self.tidy_after_kill()
                for slot in slots:
                    slot.stop()
            finally:
                self.remove_data()


def start_rung(
    local: L,
    start: Callable[[], object],
    server: type[S],
    *,
    failure: str,
) -> S:
    """Rung 2 of a ladder: ``start()`` what ``local`` runs, then return ``server(local)``
    (a :class:`LocalFaults` ``Server`` class).

    If either fails, ``local.discard()`` stops and deletes what was started; an error of
    the server's :attr:`~LocalFaults.start_errors` raised by ``start()`` becomes
    :class:`~rdq_compliance.provision.backend.ServerStartFailed` (``"<failure>: ..."``;
    the ladder goes on to the next rung, and reports the failure when none serves), and
    so does a ``ProvisionUnavailable`` that ``start()`` raises (what the rung runs was
    found: it failed); anything else is raised as it is.
    """
    errors = server.start_errors
    try:
        try:
            start()
        except ServerStartFailed:
            raise
        except ProvisionUnavailable as exc:
            raise ServerStartFailed(str(exc)) from exc
        except errors as exc:
            raise ServerStartFailed(f"{failure}: {exc}") from exc
        return server(local)  # type: ignore[call-arg]  # its __init__ takes what it serves
    except BaseException:
        local.discard()
        raise
