"""Network namespaces for partitions: a router namespace, one namespace per worker slot.

:class:`Topology` builds, for one owner process (the campaign runner):

- a **router** namespace ``rdq-<pid>-r``;
- per worker slot *i* a namespace ``rdq-<pid>-w<i>``, joined to the router by a veth
  pair (``rdq<pid>w<i>`` in the worker's namespace, ``rdq<pid>r<i>`` in the router) on
  ``10.199.<i>.0/30``: the worker side ``.2``, the router side ``.1``. No address and no
  link is ever put in the machine's own namespace;
- a **harness** namespace ``rdq-<pid>-h`` joined the same way (the next /30 after the
  workers'), for the owner's own connections to the server: :class:`InNamespace` runs
  calls on a thread that entered it (threads that thread starts, e.g. a driver's pool or
  monitor threads, are born in it too);
- in the router, a TCP **forwarder** on every ``10.199.<i>.1:<port>`` that relays to the
  server's real address (its listening sockets are created by a thread that entered the
  router namespace with ``setns(2)``; a socket keeps the namespace it was made in, and the
  upstream sockets are made in the machine's namespace). Its threads live in the owner
  process and die with it;
- an nftables table ``inet rdq`` in the router whose ``input`` and ``output`` chains drop
  every packet of the router-side links in the set ``@cut``: :meth:`Topology.partition`
  adds a slot's link, :meth:`Topology.heal` removes it. Packets are dropped **both ways**,
  so a partitioned client sees its calls hang (no reset, no error); its TCP connections
  survive the partition and resume on the heal. A milder fault, **loss**, drops a share
  of those packets instead (nftables ``numgen random``, set ``@lossy``: TCP retransmits,
  calls slow down): :meth:`Topology.lose` / :meth:`Topology.heal`.

A process runs inside slot *i*'s namespace through :meth:`Topology.command_prefix`
(``ip netns exec``, which execs: the pid stays the program's).

**Clean-up.** :meth:`Topology.close` deletes the namespaces (their links go with them).
Before anything is created a reaper process (``_netns_reaper.py``, stdlib only) is started
holding a pipe whose only writer is the owner: when the owner dies, SIGKILL included, the
reaper reads end of file and deletes every namespace named ``rdq-<pid>-*`` (the owner's
end of the pipe is a :class:`~rdq_compliance.provision.reaper_pipe.ReaperPipe`).
:func:`sweep_stale` removes the namespaces of owners that are no longer alive.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables): :func:`unavailable` says what is
missing. ``tc netem`` is not used (loss is done by nftables; a delay needs netem, which
this kit's host kernel lacks): :func:`netem_unavailable` reports whether a kernel has it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from rdq_compliance.provision.reaper_pipe import ReaperNotReady, ReaperPipe, start_reaper

T = TypeVar("T")

#: Every namespace the kit creates is named ``<PREFIX>-<owner pid>-<role>``.
PREFIX = "rdq"
#: The private range of the veth pairs: slot i gets ``10.199.<i>.0/30``.
NETWORK = "10.199"
MAX_SLOTS = 256
REAPER_SCRIPT = Path(__file__).with_name("_netns_reaper.py")
_CLONE_NEWNET = 0x40000000
_NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-[a-z0-9]+$")


class NetnsError(RuntimeError):
    """A namespace, link or firewall command failed (the command and its error named)."""


def unavailable() -> str | None:
    """Why partitions cannot be built here (``None``: they can)."""
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        return "network partitions need root (network namespaces, veth pairs, nftables)"
    if missing:
        pkg = {"ip": "iproute2", "nft": "nftables"}
        return "network partitions need " + " and ".join(
            f"{m} (Debian package {pkg[m]})" for m in missing
        )
    return None


def netem_unavailable() -> str | None:
    """Why ``tc netem`` (delay, loss) cannot be used here (``None``: it can)."""
    if shutil.which("tc") is None:
        return "tc (iproute2) is not installed"
    probe = f"{PREFIX}-{os.getpid()}-netem"
    try:
        run(["ip", "netns", "add", probe])
        try:
            run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem"])
        finally:
            run(["ip", "netns", "delete", probe], check=False)
    except NetnsError as exc:
        return f"tc netem does not work on this kernel ({exc})"
    return None


def run(argv: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
    """``argv``'s output; with ``check``, a :class:`NetnsError` naming it if it failed."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, input=stdin, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout



def namespaces(owner: int | None = None, pattern: re.Pattern[str] = _NAME_RE) -> list[str]:
    """The namespaces named by ``pattern`` (its group 1: the owner's pid) that exist now,
    of ``owner`` only if given; by default the partitions' (``rdq-<pid>-...``)."""
    out = run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [
        n for n in names if (m := pattern.match(n)) and (owner is None or int(m.group(1)) == owner)
    ]


def sweep_stale(pattern: re.Pattern[str] = _NAME_RE) -> list[str]:
    """Delete the namespaces named by ``pattern`` whose owner process is gone, SIGKILLing
    first whatever still runs in them (a process whose own watchdog died too); the names
    deleted."""
    gone = []
    for name in namespaces(pattern=pattern):
        m = pattern.match(name)
        assert m is not None
        if Path(f"/proc/{m.group(1)}").exists():
            continue
        delete_namespace(name)
        gone.append(name)
    return gone


def delete_namespace(name: str) -> None:
    """SIGKILL what runs in namespace ``name``, then delete it (no error if it is gone)."""
    for pid in run(["ip", "netns", "pids", name], check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run(["ip", "netns", "delete", name], check=False)


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise NetnsError(f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def listen_in(namespace: str, host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` inside ``namespace`` (made by a thread that
    entered it; the socket keeps that namespace, the calling thread keeps its own)."""
    result: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            _setns(f"/run/netns/{namespace}")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
            result.append(sock)
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=make, name=f"rdq-netns-{namespace}")
    thread.start()
    thread.join()
    if isinstance(result[0], BaseException):
        raise NetnsError(f"listening on {host}:{port} in {namespace}: {result[0]}")
    return result[0]


class _Forwarder:
    """Relays every connection accepted on ``listener`` to ``upstream`` (threads)."""

    def __init__(self, listener: socket.socket, upstream: tuple[str, int]) -> None:
        self.listener = listener
        self.upstream = upstream
        self._closed = False
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="rdq-forward", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10.0)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks |= {client, server}
            for src, dst in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), name="rdq-forward-pump", daemon=True
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
        except OSError:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._lock:
            socks, self._socks = self._socks, set()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class InNamespace:
    """Runs calls on one thread that entered ``namespace`` (so every socket they open,
    and every thread they start, is in it). :meth:`close` ends the thread."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._pool = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=f"rdq-in-{namespace}",
            initializer=_setns,
            initargs=(f"/run/netns/{namespace}",),
        )

    def call(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        return self._pool.submit(fn, *args, **kwargs).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@dataclass(frozen=True)
class Slot:
    """One worker slot's namespace and link."""

    index: int
    namespace: str
    link: str  # the router-side end
    host: str  # the router-side address (the forwarder listens there)


class Topology:
    """Namespaces, links, forwarders and the partition firewall of one owner process."""

    def __init__(
        self,
        slots: int,
        upstream: tuple[str, int],
        owner: int | None = None,
        *,
        loss_percent: int = 0,
    ) -> None:
        if not 1 <= slots < MAX_SLOTS:
            raise NetnsError(
                f"{slots} worker slots: at most {MAX_SLOTS - 1} fit 10.199.0.0/16 (one /30 each, "
                "plus the harness's)"
            )
        if not 0 <= loss_percent <= 100:
            raise NetnsError(f"loss_percent must be between 0 and 100, got {loss_percent}")
        self.loss_percent = loss_percent
        self.owner = os.getpid() if owner is None else owner
        self.upstream = upstream
        self.router = f"{PREFIX}-{self.owner}-r"
        self.slots = tuple(
            Slot(
                i,
                f"{PREFIX}-{self.owner}-w{i}",
                f"{PREFIX}{self.owner}r{i}",
                f"{NETWORK}.{i}.1",
            )
            for i in range(slots)
        )
        #: The owner's own namespace (never partitioned), after the workers' slots.
        self.harness = Slot(
            slots,
            f"{PREFIX}-{self.owner}-h",
            f"{PREFIX}{self.owner}r{slots}",
            f"{NETWORK}.{slots}.1",
        )
        self.cut: set[int] = set()
        self.lossy: set[int] = set()
        self._forwarders: list[_Forwarder] = []
        self._reaper: ReaperPipe | None = None

    @property
    def port(self) -> int:
        """The port the forwarders listen on (the server's own)."""
        return self.upstream[1]

    def open(self) -> Topology:
        """Build everything; on failure, remove what was built and raise :class:`NetnsError`."""
        config = {"prefix": f"{PREFIX}-{self.owner}-"}
        try:
            self._reaper = start_reaper(REAPER_SCRIPT, config, what="namespace reaper")
        except ReaperNotReady as exc:
            raise NetnsError(str(exc)) from None
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        run(["ip", "netns", "add", self.router])
        run(["ip", "-n", self.router, "link", "set", "lo", "up"])
        for s in (*self.slots, self.harness):
            worker_link = f"{PREFIX}{self.owner}w{s.index}"
            run(["ip", "netns", "add", s.namespace])
            run(["ip", "-n", s.namespace, "link", "set", "lo", "up"])
            run(
                ["ip", "link", "add", worker_link, "netns", s.namespace, "type", "veth",
                 "peer", "name", s.link, "netns", self.router]
            )  # fmt: skip
            run(["ip", "-n", self.router, "addr", "add", f"{s.host}/30", "dev", s.link])
            run(
                ["ip", "-n", s.namespace, "addr", "add", f"{NETWORK}.{s.index}.2/30",
                 "dev", worker_link]
            )  # fmt: skip
            run(["ip", "-n", self.router, "link", "set", s.link, "up"])
            run(["ip", "-n", s.namespace, "link", "set", worker_link, "up"])
        lose = f"numgen random mod 100 < {self.loss_percent} drop"
        run(
            ["ip", "netns", "exec", self.router, "nft", "-f", "-"],
            stdin=(
                "table inet rdq {\n"
                "  set cut { type ifname; }\n"
                "  set lossy { type ifname; }\n"
                "  chain input { type filter hook input priority 0; policy accept;"
                f" iifname @cut drop; iifname @lossy {lose}; }}\n"
                "  chain output { type filter hook output priority 0; policy accept;"
                f" oifname @cut drop; oifname @lossy {lose}; }}\n"
                "}\n"
            ),
        )
        for s in (*self.slots, self.harness):
            listener = listen_in(self.router, s.host, self.port)
            self._forwarders.append(_Forwarder(listener, self.upstream))

    def command_prefix(self, slot: int) -> list[str]:
        """Prepend to a command line to run it in ``slot``'s namespace."""
        return ["ip", "netns", "exec", self.slots[slot].namespace]

    def address(self, slot: int) -> tuple[str, int]:
        """Where a process in ``slot``'s namespace reaches the server."""
        return (self.slots[slot].host, self.port)

    def harness_address(self) -> tuple[str, int]:
        """Where a thread in the harness namespace reaches the server."""
        return (self.harness.host, self.port)

    def partition(self, slots: Sequence[int]) -> None:
        """Drop every packet between the router and ``slots``, both ways."""
        self._check(slots)
        self._nft("add", "cut", slots)
        self.cut |= set(slots)

    def lose(self, slots: Sequence[int]) -> None:
        """Drop :attr:`loss_percent` % of the packets between the router and ``slots``."""
        self._check(slots)
        if not self.loss_percent:
            raise NetnsError("this topology was built with loss_percent=0")
        self._nft("add", "lossy", slots)
        self.lossy |= set(slots)

    def heal(self, slots: Sequence[int]) -> None:
        """Let ``slots`` talk again, losing nothing (their connections resume)."""
        self._nft("delete", "cut", [s for s in slots if s in self.cut])
        self.cut -= set(slots)
        self._nft("delete", "lossy", [s for s in slots if s in self.lossy])
        self.lossy -= set(slots)

    def _check(self, slots: Sequence[int]) -> None:
        if any(not 0 <= s < len(self.slots) for s in slots):
            raise ValueError(f"worker slots are 0..{len(self.slots) - 1}, got {list(slots)}")

    def _nft(self, verb: str, table_set: str, slots: Sequence[int]) -> None:
        if not slots:
            return
        names = ", ".join(f'"{self.slots[s].link}"' for s in slots)
        run(
            ["ip", "netns", "exec", self.router, "nft", verb, "element", "inet", "rdq",
             table_set, f"{{ {names} }}"]
        )  # fmt: skip

    def close(self) -> None:
        """Stop the forwarders, delete the namespaces (and links); idempotent."""
        for f in self._forwarders:
            f.close()
        self._forwarders.clear()
        for name in [self.router, *(s.namespace for s in (*self.slots, self.harness))]:
            if Path(f"/run/netns/{name}").exists():
                run(["ip", "netns", "delete", name], check=False)
        if self._reaper is not None:
            self._reaper.release()
            self._reaper = None

    def __enter__(self) -> Topology:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
