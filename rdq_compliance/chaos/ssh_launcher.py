"""Workers on other hosts over SSH: the remote :class:`~rdq_compliance.chaos.launcher.Launcher`.

Built on **asyncssh** (a maintained, pure-Python SSH client on ``cryptography``): one
connection per host carries every worker's channel, the SFTP session and the control
commands at once, from one event loop on a thread of the runner. It checks host keys
against a known-hosts file always (there is no switch to turn that off) and takes keys
from files or the user's SSH agent. Paramiko would do the same job, but it drives one
thread per connection and leaves host-key checking to a policy object that is easy to
set to "accept anything"; asyncssh's default is to refuse an unknown host.

What runs on a host: nothing but the interpreter the hosts file names (a venv with this
kit installed). Per worker the launcher opens a channel running the kit's own watchdog
(``rdq_compliance/provision/_watchdog.py`` of that venv, stdlib only) and tells it,
on its stdin, to start ``python -m rdq_compliance.chaos.worker_main``. That gives:

- **signals**: ``signal <n>`` on the watchdog's stdin (SIGKILL, SIGSTOP, SIGCONT,
  SIGTERM reach the worker process itself, with no extra SSH round trip per process);
- **cleanup that survives a SIGKILLed runner**: when the runner dies, its TCP connection
  closes, sshd closes the channel, the watchdog reads end of file on its stdin and kills
  the worker's tree (the same rule as on this machine: the workers die with the kit);
- **control points** (where a worker kills itself) are files on the host, written over
  SFTP (a write and an atomic rename);
- **journals** are files on the host, *mirrored* over SFTP while the campaign runs
  (every :data:`MIRROR_EVERY_S`; the nemesis tails the local copy) and fetched to the
  end once the workers stopped, with their logs.

**Clocks.** Each host's wall clock is measured against the runner's before the campaign
and after it, NTP-style: :data:`CLOCK_SAMPLES` round trips to a tiny remote loop
printing ``time.time()``, the offset taken from the round trip that was fastest, the
uncertainty half that round trip (plus the change between the two measurements). The
mirror moves every journal time onto the runner's clock (``t - offset``) and the runner
journals each host's offset and uncertainty (a ``clock`` event), which widen the
storage-clock rule's real-time margin for calls made on different hosts.

**A host that drops** (its connection lost: keepalives unanswered, a reset) is a fault,
not a crash: its workers are taken as gone (they die with their channel), the host is
reported once by :meth:`SshLauncher.lost_hosts` (the nemesis journals it) and its slots
move to the hosts still connected. Only when no host is left does :meth:`start` raise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import os
import shlex
import signal as signals
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from rdq_compliance.chaos.fleet_hosts import FleetHosts, Host
from rdq_compliance.chaos.launcher import ORPHAN_GRACE, ClockOffset, WorkerStart
from rdq_compliance.chaos.libfaketime import skew_env

T = TypeVar("T")

#: How often (s) the live journals are mirrored.
MIRROR_EVERY_S = 0.1
#: Round trips per clock measurement.
CLOCK_SAMPLES = 16
#: Seconds to connect to one host (and to wait for one remote command).
CONNECT_TIMEOUT_S = 15.0
#: asyncssh keepalives: a host that answers none of 3 in a row, 1 s apart, is lost.
KEEPALIVE_S = 1.0
KEEPALIVE_MISSES = 3

#: What a host's interpreter says of its kit: the version, a digest of the kit's and the
#: core's source files (the same version can hold other code: a checkout), the watchdog's
#: path. The runner runs the same probe with its own interpreter and compares.
_PROBE = r"""
import hashlib, importlib.metadata as m, json, os, sys
import rdq_compliance, rdq_compliance.provision as p, rdq_core
digest = hashlib.sha256()
for package in (rdq_compliance, rdq_core):
    root = os.path.dirname(package.__file__)
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith((".py", ".md", ".toml"))):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as fh:
                digest.update(fh.read())
print(json.dumps({"version": m.version("rdq"), "digest": digest.hexdigest()[:16],
                  "watchdog": os.path.join(os.path.dirname(p.__file__), "_watchdog.py"),
                  "site": os.path.join(os.path.dirname(rdq_compliance.__file__), "chaos",
                                       "faketime_site"),
                  "python": sys.executable}))
"""
_CLOCK = (
    "import sys, time\n"
    "for line in sys.stdin:\n"
    "    print(repr(time.time()), repr(time.monotonic()), flush=True)\n"
)


@functools.cache
def _runner_kit() -> dict[str, str]:
    """The probe's answer for the runner's own interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


class FleetError(RuntimeError):
    """A host that cannot be used for the fleet: which, what was wrong, what to do."""


class _Loop:
    """An asyncio event loop on a daemon thread; :meth:`call` runs a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rdq-ssh", daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = CONNECT_TIMEOUT_S) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:  # TimeoutError itself from Python 3.11 on
            future.cancel()
            raise TimeoutError(f"no answer within {timeout} s") from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)
        if not self.thread.is_alive():
            self.loop.close()


@dataclass(eq=False)
class HostLink:
    """One host's connection, its SFTP session and its folder for this campaign."""

    host: Host
    conn: asyncssh.SSHClientConnection
    sftp: asyncssh.SFTPClient
    workdir: str
    watchdog: str
    #: The host's folder of the kit's ``sitecustomize`` for processes under libfaketime
    #: (:data:`~rdq_compliance.chaos.libfaketime.SITE`).
    site: str = ""
    lost: bool = False
    reported: bool = False
    collected: bool = False  # connected to again after a loss, to fetch the journals
    clock: ClockOffset | None = None
    base: float = 0.0  # the host's time.time() - time.monotonic()
    workers: list[SshWorker] = field(default_factory=list)


@dataclass(frozen=True)
class RemoteProcess:
    """One process to start on a host under the kit's watchdog.

    ``argv`` is in the host's paths; ``env`` is added to the SSH session's environment by
    the watchdog (sent on its stdin, never on a command line); ``cwd`` is made if missing
    (``None``: the session's folder). ``files`` are written into the host's campaign
    folder first (name -> text). The process's journal is ``<name>.jsonl`` there (created
    empty, mirrored to the launcher's ``history_dir``), its log ``<log or name>.log``
    (fetched to its ``log_dir``); ``grace`` is what its watchdog gives it after the stop
    signal when the runner is gone."""

    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    log: str | None = None
    files: tuple[tuple[str, str], ...] = ()
    grace: float = ORPHAN_GRACE


#: The reply a closed channel gives to a command still waiting.
_CLOSED = {"done": "closed"}


@dataclass(eq=False)
class SshWorker:
    """A process on a remote host, behind the kit's watchdog there (a
    :class:`~rdq_compliance.chaos.launcher.WorkerHandle`); :meth:`command` asks its
    watchdog and waits for the answer."""

    name: str
    link: HostLink
    remote_pid: int
    process: asyncssh.SSHClientProcess[str]
    loop: _Loop
    local_journal: Path
    local_log: Path
    offset: float
    log_name: str = ""
    _returncode: int | None = None
    _ended: threading.Event = field(default_factory=threading.Event)
    _mirrored: int = 0
    _partial: bytes = b""
    _final: bool = False  # ended, and its journal mirrored once more since
    _watcher: asyncio.Task[None] | None = None
    #: The journal's SFTP handle, kept open while it is mirrored, and the session it
    #: belongs to (a host connected to again has a new one).
    _remote: asyncssh.SFTPClientFile | None = None
    _remote_sftp: asyncssh.SFTPClient | None = None
    #: One mirroring at a time (the mirror's loop and the final collect both mirror).
    _mirroring: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The watchdog's answers to commands (``{"done": ...}``), one command at a time.
    _replies: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    _commanding: asyncio.Lock = field(default_factory=asyncio.Lock)
    _channel_closed: bool = False
    released: bool = False

    @property
    def pid(self) -> int:
        return self.remote_pid

    @property
    def host(self) -> str:
        return self.link.host.name

    @property
    def running(self) -> bool:
        return not self._ended.is_set()

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def _ended_with(self, code: int | None) -> None:
        if not self._ended.is_set():
            self._returncode = code
            self._ended.set()

    def signal(self, signum: int) -> None:
        if self.running and not self.link.lost:
            with contextlib.suppress(Exception):
                self.loop.call(self._write(f"signal {int(signum)}\n"))

    async def _write(self, text: str) -> None:
        self.process.stdin.write(text)
        await self.process.stdin.drain()

    def command(self, command: str, timeout: float = CONNECT_TIMEOUT_S) -> dict[str, Any]:
        """Send ``command`` (``_watchdog.py``'s protocol) and return the watchdog's answer
        (its ``done`` is the command's first word); :class:`EOFError` if the channel
        closed first, :class:`TimeoutError` after ``timeout`` seconds."""
        return self.loop.call(self._request(command, timeout), timeout + 5.0)

    async def _request(self, command: str, timeout: float) -> dict[str, Any]:
        word = command.split(" ", 1)[0]
        async with self._commanding:
            while not self._replies.empty():  # answers nobody waited for (a signal's)
                self._replies.get_nowait()
            if self._channel_closed:
                raise EOFError(f"{self.name}: its watchdog's channel is closed")
            await self._write(command + "\n")
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: no answer to {command!r} in {timeout:g} s")
                reply = await asyncio.wait_for(self._replies.get(), left)
                if reply is _CLOSED:
                    raise EOFError(f"{self.name}: its watchdog's channel closed")
                if reply.get("done") == word:
                    return reply

    def wait(self, timeout: float | None = None) -> int | None:
        self._ended.wait(None if timeout is None else max(0.0, timeout))
        return self._returncode

    def release(self) -> None:
        """Tell the watchdog to make sure nothing is left (``quit``), close the channel."""
        if self.released:
            return
        self.released = True
        if self.link.lost:
            self._ended_with(None)
            return
        with contextlib.suppress(Exception):
            self.loop.call(self._quit(), timeout=10.0)
        self._ended_with(self._returncode)

    async def _quit(self) -> None:
        with contextlib.suppress(Exception):
            self.process.stdin.write("quit\n")
            self.process.stdin.write_eof()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait_closed(), 5.0)

    def local_pids(self) -> list[int]:
        return []

    def log_tail(self, lines: int = 30) -> str:
        if not self.local_log.exists() or not self.link.lost:
            with contextlib.suppress(Exception):
                self.loop.call(_fetch(self.link, f"{self.log_name}.log", self.local_log), 10.0)
        try:
            text = self.local_log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


async def _fetch(link: HostLink, name: str, local: Path) -> None:
    await link.sftp.get(f"{link.workdir}/{name}", os.fspath(local))


def shift_line(line: bytes, offset: float) -> bytes:
    """A journal line with its ``t`` moved from its host's clock onto the runner's."""
    if not offset:
        return line
    try:
        event = json.loads(line)
    except ValueError:
        return line  # a torn or foreign line: the checker reads it as it is
    t = event.get("t") if isinstance(event, dict) else None
    if isinstance(t, (int, float)):
        event["t"] = t - offset
        return (json.dumps(event, separators=(",", ":")) + "\n").encode()
    return line


class SshLauncher:
    """Start and reach workers on the hosts of ``fleet`` (see the module's docstring).

    ``dsn_for(host)`` is the DSN a worker on ``host`` connects with (its
    ``server_address`` in place of the server's own).
    """

    def __init__(
        self,
        fleet: FleetHosts,
        *,
        history_dir: Path,
        log_dir: Path,
        dsn_for: Callable[[Host], str],
        slots: int,
    ) -> None:
        self.fleet = fleet
        self.slots = slots
        self.history_dir = Path(history_dir)
        self.log_dir = Path(log_dir)
        self.dsn_for = dsn_for
        for folder in (self.history_dir, self.log_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.links: list[HostLink] = []
        #: Journals that could not be fetched whole (a lost host that did not answer again).
        self.gaps: list[str] = []
        self.first_clocks: dict[str, ClockOffset] = {}
        self._loop = _Loop()
        self._lock = threading.Lock()
        self._by_name: dict[str, SshWorker] = {}
        self._mirror: asyncio.Future[None] | None = None
        self._closed = False
        try:
            for host in fleet.hosts:
                self.links.append(self._loop.call(self._connect(host), CONNECT_TIMEOUT_S * 2))
            for link in self.links:
                link.clock = self._loop.call(self._measure(link), CONNECT_TIMEOUT_S * 2)
                self.first_clocks[link.host.name] = link.clock
            self._mirror = asyncio.run_coroutine_threadsafe(self._mirror_loop(), self._loop.loop)
        except BaseException:
            self.close()
            raise

    # ---- connecting -------------------------------------------------------------------

    async def _connect(self, host: Host, workdir: str | None = None) -> HostLink:
        where = f"host {host.name} ({host.url})"
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    host.address,
                    host.port,
                    username=host.user,
                    known_hosts=os.fspath(self.fleet.known_hosts),
                    client_keys=[os.fspath(k) for k in self.fleet.keys] or None,
                    keepalive_interval=KEEPALIVE_S,
                    keepalive_count_max=KEEPALIVE_MISSES,
                    connect_timeout=CONNECT_TIMEOUT_S,
                ),
                CONNECT_TIMEOUT_S,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise FleetError(
                f"{where}: its host key is not in {self.fleet.known_hosts} ({exc}); add it "
                "(ssh-keyscan, then check the fingerprint): host keys are always checked"
            ) from None
        except asyncssh.PermissionDenied:
            raise FleetError(
                f"{where}: the server refused every key offered ("
                + (", ".join(map(str, self.fleet.keys)) or "the SSH agent's")
                + "): add the public key to the user's authorized_keys"
            ) from None
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            raise FleetError(
                f"{where}: cannot connect: {type(exc).__name__}: {exc}; check that sshd "
                "answers at that address from this machine"
            ) from None
        try:
            probe = await conn.run(
                f"{shlex.quote(host.python)} -c {shlex.quote(_PROBE)}", check=False, timeout=30
            )
            if probe.exit_status != 0:
                raise FleetError(
                    f"{where}: {host.python} cannot import this kit there (exit "
                    f"{probe.exit_status}: {str(probe.stderr).strip()[-300:]}); install the kit "
                    "in that venv on the host, or point fleet.python at one that has it"
                )
            facts = json.loads(str(probe.stdout).strip().splitlines()[-1])
            ours = _runner_kit()
            if facts["version"] != ours["version"]:
                raise FleetError(
                    f"{where}: its kit is version {facts['version']}, the runner's is "
                    f"{ours['version']}: install the same version on every host"
                )
            if facts["digest"] != ours["digest"]:
                raise FleetError(
                    f"{where}: its kit ({facts['python']}) is version {facts['version']} "
                    f"like the runner's, but its code differs (source digest "
                    f"{facts['digest']}, the runner's {ours['digest']}): install the same "
                    "build on every host (a checkout's edits, or another commit)"
                )
            if workdir is None:
                made = await conn.run("mktemp -d /tmp/rdq-fleet-XXXXXXXX", check=True, timeout=30)
                workdir = str(made.stdout).strip()
            sftp = await conn.start_sftp_client()
        except BaseException:
            conn.close()
            raise
        return HostLink(host, conn, sftp, workdir, facts["watchdog"], facts.get("site", ""))

    async def _measure(self, link: HostLink) -> ClockOffset:
        proc = await link.conn.create_process(
            f"{shlex.quote(link.host.python)} -I -S -u -c {shlex.quote(_CLOCK)}"
        )
        best: tuple[float, float, float] | None = None  # (rtt, offset, base)
        try:
            for _ in range(CLOCK_SAMPLES):
                t0 = time.time()
                proc.stdin.write("\n")
                line = await asyncio.wait_for(proc.stdout.readline(), 10.0)
                t1 = time.time()
                remote, mono = (float(x) for x in line.split())
                rtt = t1 - t0
                if best is None or rtt < best[0]:
                    best = (rtt, remote - (t0 + t1) / 2, remote - mono)
        finally:
            proc.stdin.write_eof()
            proc.close()
        assert best is not None
        link.base = best[2]
        return ClockOffset(link.host.name, best[1], best[0] / 2, CLOCK_SAMPLES)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = CONNECT_TIMEOUT_S) -> T:
        """Run ``coro`` on the launcher's event loop, where its connections live."""
        return self._loop.call(coro, timeout)

    # ---- the Launcher interface --------------------------------------------------------

    def _live_links(self) -> list[HostLink]:
        return [ln for ln in self.links if not ln.lost and not ln.conn.is_closed()]

    def _link_for(self, slot: int) -> HostLink:
        live = self._live_links()
        if not live:
            raise FleetError(
                "every host of the fleet is lost: "
                + ", ".join(f"{ln.host.name} ({ln.host.url})" for ln in self.links)
            )
        preferred = self.links[slot % len(self.links)]
        return preferred if preferred in live else live[slot % len(live)]

    def host_of(self, slot: int) -> str:
        try:
            return self._link_for(slot).host.name
        except FleetError:
            return self.links[slot % len(self.links)].host.name

    def start(self, start: WorkerStart) -> SshWorker:
        """Start ``start`` on its slot's host, or on another one if that host is lost,
        even while the worker is being started there (a lost host is no crash)."""
        return self.spawn(start.slot, lambda link: self._worker_process(link, start))

    def spawn(self, slot: int, make: Callable[[HostLink], RemoteProcess]) -> SshWorker:
        """Start the process ``make(link)`` gives for the host of slot ``slot`` (slot *i*
        on host *i* mod the hosts), or on another host if that one is lost, even while
        the process is being started there (a lost host is no crash)."""
        while True:
            link = self._link_for(slot)  # FleetError once every host is lost
            process = make(link)
            try:
                return self._loop.call(self._spawn(link, process), CONNECT_TIMEOUT_S * 2)
            except FleetError:
                raise
            except (asyncssh.Error, OSError, TimeoutError, EOFError) as exc:
                if not link.conn.is_closed():
                    raise FleetError(
                        f"host {link.host.name}: starting {process.name} failed: "
                        f"{type(exc).__name__}: {exc}"
                    ) from None
                self._lose(link)  # journalled through lost_hosts(); the next host is tried

    def _worker_process(self, link: HostLink, start: WorkerStart) -> RemoteProcess:
        """The chaos worker of ``start`` as a process on ``link``'s host: its journal and
        control point in the host's campaign folder, the DSN the host reaches the server
        with, under the host's libfaketime if its slot is skewed."""
        host = link.host
        remote = f"{link.workdir}/{start.name}"
        config = replace(
            start.config,
            journal=f"{remote}.jsonl",
            control=f"{remote}.point",
            spec=replace(start.config.spec, dsn=self.dsn_for(host)),
        )
        env = dict(self.fleet.env)
        if start.skew is not None:
            if not host.faketime:
                raise FleetError(
                    f"host {host.name}: the scenario skews slot {start.slot}'s clock, but the "
                    "hosts file gives no faketime library for this host (its faketime key)"
                )
            env.update(skew_env(start.skew, Path(host.faketime)))
            config = replace(config, time_base=link.base)
        argv = (host.python, "-m", "rdq_compliance.chaos.worker_main", config.to_json())
        return RemoteProcess(
            start.name, argv, tuple(sorted(env.items())), files=((f"{start.name}.point", "none\n"),)
        )

    async def _spawn(self, link: HostLink, spec: RemoteProcess) -> SshWorker:
        host = link.host
        remote = f"{link.workdir}/{spec.name}"
        for name, text in spec.files:
            async with link.sftp.open(f"{link.workdir}/{name}", "w") as fh:
                await fh.write(text)
        async with link.sftp.open(f"{remote}.jsonl", "w"):
            pass
        if spec.cwd is not None:
            await link.conn.run(f"mkdir -p {shlex.quote(spec.cwd)}", check=True, timeout=30)
        log = spec.log or spec.name
        request = {
            "argv": list(spec.argv),
            "env_add": dict(spec.env),
            "cwd": spec.cwd,
            "log": f"{link.workdir}/{log}.log",
            "stop_signal": int(signals.SIGTERM),
            "grace": spec.grace,
            "cleanup": [],
        }
        process = await link.conn.create_process(
            f"{shlex.quote(host.python)} -I -S -u {shlex.quote(link.watchdog)}"
        )
        process.stdin.write(json.dumps(request) + "\n")
        first = json.loads(await asyncio.wait_for(process.stdout.readline(), 30.0) or "{}")
        if "started" not in first:
            process.close()
            raise FleetError(
                f"host {host.name}: the watchdog did not start {spec.name}: "
                f"{first.get('error', 'no answer')}"
            )
        assert link.clock is not None
        worker = SshWorker(
            spec.name,
            link,
            int(first["started"]),
            process,
            self._loop,
            self.history_dir / f"{spec.name}.jsonl",
            self.log_dir / f"{log}.log",
            link.clock.offset,
            log_name=log,
        )
        worker.local_journal.touch()
        worker._watcher = asyncio.ensure_future(self._watch(worker))
        with self._lock:
            link.workers.append(worker)
            self._by_name[spec.name] = worker
        return worker

    async def _watch(self, worker: SshWorker) -> None:
        """Read the watchdog's messages until the channel ends."""
        try:
            while True:
                line = await worker.process.stdout.readline()
                if not line:
                    break
                with contextlib.suppress(ValueError):
                    message = json.loads(line)
                    if "exited" in message:
                        worker._ended_with(message["exited"])
                    elif "done" in message:
                        worker._replies.put_nowait(message)
        except Exception:
            pass
        if worker.link.conn.is_closed():
            self._lose(worker.link)
        worker._ended_with(worker._returncode)
        worker._channel_closed = True
        worker._replies.put_nowait(_CLOSED)

    def _lose(self, link: HostLink) -> None:
        link.lost = True
        for w in link.workers:
            w._ended_with(w._returncode)

    def arm(self, name: str, point: str) -> None:
        worker = self._worker(name)
        if worker is None or worker.link.lost:
            return
        with contextlib.suppress(Exception):
            self._loop.call(self._arm(worker.link, name, point), 10.0)

    async def _arm(self, link: HostLink, name: str, point: str) -> None:
        await self._put(link, f"{name}.point", point + "\n")

    def put_text(self, link: HostLink, name: str, text: str) -> None:
        """Replace file ``name`` of ``link``'s campaign folder with ``text`` at once (a
        write, then an atomic rename over SFTP): a reader sees the old text or the new."""
        self._loop.call(self._put(link, name, text), 10.0)

    @staticmethod
    async def _put(link: HostLink, name: str, text: str) -> None:
        path = f"{link.workdir}/{name}"
        async with link.sftp.open(path + ".tmp", "w") as fh:
            await fh.write(text)
        await link.sftp.posix_rename(path + ".tmp", path)

    def _worker(self, name: str) -> SshWorker | None:
        with self._lock:
            return self._by_name.get(name)

    def journal_path(self, name: str) -> Path:
        return self.history_dir / f"{name}.jsonl"

    def clocks(self) -> list[ClockOffset]:
        return [ln.clock for ln in self.links if ln.clock is not None]

    def lost_hosts(self) -> list[str]:
        out = []
        for link in self.links:
            if (link.lost or link.conn.is_closed()) and not link.reported and not self._closed:
                link.lost = True
                link.reported = True
                out.append(link.host.name)
        return out

    # ---- journals --------------------------------------------------------------------------

    async def _mirror_loop(self) -> None:
        while True:
            await asyncio.sleep(MIRROR_EVERY_S)
            for link in self._live_links():
                for w in list(link.workers):
                    if w._final:
                        continue
                    ended = not w.running
                    with contextlib.suppress(Exception):
                        await self._mirror_one(w)
                        w._final = ended
                    if w._final:
                        await self._stop_mirroring(w)

    async def _mirror_one(self, worker: SshWorker) -> None:
        async with worker._mirroring:
            await self._mirror_more(worker)

    async def _mirror_more(self, worker: SshWorker) -> None:
        link = worker.link
        if worker._remote is None or worker._remote_sftp is not link.sftp:
            worker._remote = await link.sftp.open(f"{link.workdir}/{worker.name}.jsonl", "rb")
            worker._remote_sftp = link.sftp
        data = await worker._remote.read(-1, worker._mirrored)
        if not data:
            return
        worker._mirrored += len(data)
        data = worker._partial + data
        complete, _, worker._partial = data.rpartition(b"\n")
        if not complete:
            worker._partial = data
            return
        lines = (shift_line(ln + b"\n", worker.offset) for ln in complete.split(b"\n"))
        with worker.local_journal.open("ab") as out:
            out.write(b"".join(lines))

    @staticmethod
    async def _stop_mirroring(worker: SshWorker) -> None:
        if worker._remote is not None:
            with contextlib.suppress(Exception):
                await worker._remote.close()
            worker._remote = worker._remote_sftp = None

    def collect(self) -> None:
        """The rest of every journal, every log, and each host's clock measured again.

        A host lost mid-campaign is connected to again (once, :data:`CONNECT_TIMEOUT_S`):
        its workers are gone, but their journals are still on it, and the history is only
        complete with their last lines. A host that does not answer leaves its workers'
        journals ending at their last mirrored line: :attr:`gaps` names them."""
        for link in self.links:
            if link.lost or link.conn.is_closed():
                if not self._reconnect(link):
                    continue
            with contextlib.suppress(Exception):
                self._loop.call(self._collect(link), 60.0)

    def _reconnect(self, link: HostLink) -> bool:
        if link.collected:
            return True
        try:
            again = self._loop.call(self._connect(link.host, link.workdir), CONNECT_TIMEOUT_S * 2)
        except Exception as exc:  # unreachable still: the gap is reported, not raised
            names = [w.name for w in link.workers]
            self.gaps.append(
                f"host {link.host.name} did not answer again ({exc}): the journals of "
                f"{names} end at their last line mirrored before the host was lost, so "
                "what those workers did after it is missing from the history"
            )
            return False
        link.conn, link.sftp = again.conn, again.sftp
        link.collected = True
        return True

    async def _collect(self, link: HostLink) -> None:
        for w in list(link.workers):
            with contextlib.suppress(Exception):
                await self._mirror_one(w)
            await self._stop_mirroring(w)
            if w._partial:  # a last line torn by a SIGKILL: kept as it is
                with w.local_journal.open("ab") as out:
                    out.write(w._partial)
                w._partial = b""
            with contextlib.suppress(Exception):
                await _fetch(link, f"{w.log_name}.log", w.local_log)
        again = await self._measure(link)
        first = self.first_clocks.get(link.host.name, again)
        drift = abs(again.offset - first.offset)
        link.clock = ClockOffset(
            link.host.name,
            first.offset,
            max(first.uncertainty, again.uncertainty) + drift,
            first.samples + again.samples,
        )

    def leftovers(self) -> list[str]:
        """Every worker ever started on a host that still runs there (``kill -0``)."""
        out: list[str] = []
        for link in self.links:
            pids = sorted({w.remote_pid for w in link.workers})
            if not pids or link.conn.is_closed():
                continue
            listed = " ".join(map(str, pids))
            script = f"for p in {listed}; do kill -0 $p 2>/dev/null && echo $p; done"
            try:
                done = self._loop.call(link.conn.run(script, timeout=20), 30.0)
            except Exception as exc:
                out.append(f"{link.host.name}: not checked ({type(exc).__name__}: {exc})")
                continue
            out += [f"{link.host.name} pid {p}" for p in str(done.stdout).split()]
        return out

    def close(self) -> None:
        """Release every worker, remove the hosts' folders, close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._mirror is not None:
            self._mirror.cancel()
        for link in self.links:
            for w in list(link.workers):
                w.release()
            if not link.conn.is_closed():
                with contextlib.suppress(Exception):
                    self._loop.call(self._close_link(link), 30.0)
            link.conn.close()
        self._loop.close()

    async def _close_link(self, link: HostLink) -> None:
        await link.conn.run(f"rm -rf {shlex.quote(link.workdir)}", timeout=20)
        link.sftp.exit()
        await link.sftp.wait_closed()
        link.conn.close()
        await link.conn.wait_closed()
