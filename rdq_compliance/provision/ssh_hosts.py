"""SSH test hosts on this one machine: network namespaces, each running a real OpenSSH sshd.

The chaos harness runs campaign workers on other machines over SSH (asyncssh). To test
that path without other machines, :class:`SshHosts` builds "hosts" here: a host is a
Linux network namespace with its own network stack, reached only through a veth pair
this module creates, with a real ``sshd`` listening in it. A worker started over SSH on
host *i* sees only that host's addresses (its ``lo`` and its end of the veth pair), and
reaches the server under test only through a relay on the machine's end of the pair, as
a worker on another machine would. What a host shares with the machine: the filesystem
and the process table (a namespace isolates the network, nothing else), so the workers'
interpreter and an SFTP upload are the machine's own paths.

For owner process *P* (the one that calls :meth:`SshHosts.open`), host *i* (0-based;
named ``h<i>``) takes a **slot** *s*, the lowest number no other open host of *P* holds
(several :class:`SshHosts` may be open in one process at once: each host's names are
unique in it), and is:

- the namespace ``rdq-s<P>-<s>``, its ``lo`` up;
- a veth pair: ``rdqs<P>m<s>`` in the machine's namespace, address ``10.198.<o>.1/30``;
  its peer, created inside the namespace as ``eth0``, ``10.198.<o>.2/30``, where *o* is
  the host's **octet** (below). The namespace has no default route: the one network it
  reaches is its own /30;
- an nftables table ``inet rdqs`` in the namespace whose ``output`` chain lets out only
  the loopback, replies (``ct state established,related``: the sshd's side of an SSH
  connection) and new connections to the relays' ports on the machine's end of the
  pair; so a worker cannot reach some other service the machine listens with on every
  address (the machine's end of the pair is one of its addresses);
- ``sshd -D -e -f <workdir>/sshd_h<i>.conf`` run as ``ip netns exec <ns> sshd ...``
  through a :class:`~rdq_compliance.provision.process.ManagedProcess` (log in the
  workdir), listening on ``10.198.<o>.2:22``, root logging in with the one client key
  only; ready once it greets a TCP connection from the machine's namespace with its
  ``SSH-`` banner;
- per ``relays`` entry ``(host, port)``, a
  :class:`~rdq_compliance.provision.forwarder.Forwarder` in this process listening on
  ``10.198.<o>.1:<port>`` and relaying to ``(host, port)`` (e.g. a server on the
  machine's loopback, which a namespace cannot reach itself).

The workdir holds the client key pair (``id_ed25519``), ``authorized_keys`` (its public
half), one host key per host, ``known_hosts`` (one plain, unhashed line per host: its
address, port 22 being the default), the sshd configurations, pid files and logs.
:meth:`SshHosts.write_fleet_toml` writes the file the kit's fleet reads.

**Names.** The namespaces are ``rdq-s<P>-<i>`` rather than ``rdqs-<P>-<i>``: the kit's
namespace reaper (``_netns_reaper.py``) only accepts prefixes starting ``rdq-``, and
``rdq-<P>-`` is :class:`~rdq_compliance.provision.netns.Topology`'s own prefix (its
reaper deletes every ``rdq-<P>-*`` namespace, so an owner holding a Topology and SSH
hosts at once would lose its hosts when the Topology closes). ``rdq-s<P>-`` is matched
by neither that prefix nor :mod:`~rdq_compliance.provision.netns`'s name pattern.
Interface names have at most 15 characters (``IFNAMSIZ`` is 16 with the NUL): ``rdqs``
+ a pid (at most 7 digits: Linux's ``pid_max`` is at most 2**22) + ``m`` + a slot (at
most 3 digits: at most :data:`MAX_SLOTS` hosts open in one process) is 15 at most. A
name of a slot just taken that exists already was left by an earlier process with the
same pid (pids are reused; ``/run/netns`` outlives an owner whose reaper never ran): it
is deleted, and what runs in it killed, before the host is made.

**Octets.** The machine-side addresses all live in the machine's one namespace, so two
owners at once (two pytest-xdist workers) must not pick the same /30. Each host gets a
whole ``10.198.<o>.0/24`` to itself (of which it uses the first /30), and the octets are
chosen under an exclusive ``fcntl.flock`` on :data:`LOCK_FILE` (in ``/run``, else the
temp folder): under the lock, every octet that an IPv4 address or route of the machine's
namespace touches (``ip -4 addr``, ``ip -4 route show table all``; networks wider than a
/16, e.g. a default route, do not count: the hosts' /30s are more specific) is taken,
the lowest free ones are chosen, and their veth pairs and addresses are made *before*
the lock is released, so the next owner sees them in use. An address is freed when its
pair goes (the namespace is deleted): nothing else records the allocation, so nothing
can go stale.

**Clean-up.** Before anything is made, the kit's namespace reaper is started with the
prefix ``rdq-s<P>-`` (:func:`~rdq_compliance.provision.reaper_pipe.start_reaper`, as
:mod:`~rdq_compliance.provision.netns` does; one per process, shared by its open
:class:`SshHosts` and released when the last one closes): when the owner dies, SIGKILL
included, it deletes the namespaces. The sshds, which live in them (and keep a namespace, and so its
veth pair, alive while they run), die by their ManagedProcess watchdogs, with every
process started over SSH (the watchdog kills the whole tree). The relays are threads of
the owner and die with it. :meth:`SshHosts.close` does all of that at once; it deletes
nothing in the workdir. :func:`sweep_stale` removes the namespaces of owners no longer
alive (and kills what still runs in them).

Needs root, ``ip`` (iproute2), ``nft`` (nftables), ``sshd`` (openssh-server) and
``ssh-keygen`` (openssh-client): :func:`unavailable` says what is missing.

Command line: ``python -m rdq_compliance.provision.ssh_hosts up --out hosts.toml``
(``--count``, ``--workdir``, ``--relay HOST:PORT``, ``--python``) builds hosts and keeps
them until SIGINT or SIGTERM; ``... sweep`` runs :func:`sweep_stale`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import math
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import NoReturn

from rdq_compliance.provision import netns
from rdq_compliance.provision.forwarder import Forwarder
from rdq_compliance.provision.netns import REAPER_SCRIPT
from rdq_compliance.provision.process import ManagedProcess, ProcessFailed
from rdq_compliance.provision.reaper_pipe import ReaperNotReady, ReaperPipe, start_reaper

__all__ = [
    "MAX_HOSTS",
    "HostInfo",
    "SshHosts",
    "SshHostsError",
    "main",
    "namespaces",
    "sweep_stale",
    "unavailable",
]

#: A host's namespace is ``<NS_PREFIX><owner pid>-<index>``.
NS_PREFIX = "rdq-s"
#: The machine-side end of host i's veth pair is ``<LINK_PREFIX><owner pid>m<index>``.
LINK_PREFIX = "rdqs"
#: The name of the host's end of the pair, inside its namespace.
HOST_LINK = "eth0"
#: The range the hosts' /30s are taken from (one ``10.198.<o>.0/24`` per host).
NETWORK = ipaddress.IPv4Network("10.198.0.0/16")
#: One /24 of :data:`NETWORK` per host, on the whole machine.
MAX_HOSTS = 256
#: At most this many hosts open in one process at once (a slot has at most 3 digits).
MAX_SLOTS = 1000
SSH_PORT = 22
USER = "root"
#: Where sshd looks for its privilege separation directory (it refuses to start without).
PRIVSEP_DIR = Path("/run/sshd")
#: The lock under which owners choose their octets (see the module docstring).
LOCK_FILE = "rdq-ssh-hosts.lock"
#: Seconds an sshd may take to greet, and an owner to get the allocation lock: hang
#: guards (each wait ends as soon as the sshd greets or the lock is free; an sshd greets
#: within a second, even on a busy 2-core machine).
READY_TIMEOUT = 60.0
LOCK_TIMEOUT = 60.0
#: Seconds an sshd may take to exit on SIGTERM before its tree is SIGKILLed.
SSHD_GRACE = 1.0
#: The longest interface name Linux accepts.
IFNAME_MAX = 15
_NS_RE = re.compile(rf"^{re.escape(NS_PREFIX)}(\d+)-(\d+)$")
#: The route types ``ip route`` may print before a destination.
_ROUTE_TYPES = frozenset(
    {"unicast", "local", "broadcast", "multicast", "throw", "unreachable", "prohibit",
     "blackhole", "nat", "anycast"}
)  # fmt: skip
#: Characters refused in the workdir's path (sshd_config quoting, sshd's ``%`` tokens).
_BAD_PATH_CHARS = frozenset('"\'\\%\n\r')


class SshHostsError(RuntimeError):
    """A host could not be built (the command or step and its error named)."""


# ---- what this machine has -------------------------------------------------------------


def _sshd_binary() -> str | None:
    """``/usr/sbin/sshd``, else ``sshd`` on ``PATH`` (an absolute path: sshd re-executes
    itself and refuses to run from a relative one)."""
    if os.access("/usr/sbin/sshd", os.X_OK):
        return "/usr/sbin/sshd"
    found = shutil.which("sshd")
    return os.path.abspath(found) if found else None


def unavailable() -> str | None:
    """Why SSH test hosts cannot be built here (``None``: they can)."""
    if os.geteuid() != 0:
        return "SSH test hosts need root (network namespaces, veth pairs, nftables)"
    missing = [
        f"{tool} (Debian package {pkg})"
        for tool, pkg in (("ip", "iproute2"), ("nft", "nftables"), ("ssh-keygen", "openssh-client"))
        if shutil.which(tool) is None
    ]
    if _sshd_binary() is None:
        missing.append("sshd at /usr/sbin/sshd or on PATH (Debian package openssh-server)")
    if missing:
        return "SSH test hosts need " + " and ".join(missing)
    return None


def _run(argv: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
    try:
        return netns.run(argv, check=check, stdin=stdin)
    except netns.NetnsError as exc:
        raise SshHostsError(str(exc)) from None


# ---- namespaces of owners, dead or alive -----------------------------------------------


def namespaces(owner: int | None = None) -> list[str]:
    """The SSH hosts' namespaces that exist now (of ``owner`` only, if given)."""
    return netns.namespaces(owner, _NS_RE)


def sweep_stale() -> list[str]:
    """Delete the hosts' namespaces whose owner process is gone (SIGKILLing whatever
    still runs in them first, e.g. an sshd whose watchdog died too); the names deleted."""
    return netns.sweep_stale(_NS_RE)


# ---- the octets (one 10.198.<o>.0/24 per host, machine-wide) ---------------------------


def _lock_path() -> Path:
    run = Path("/run")
    base = run if run.is_dir() and os.access(run, os.W_OK) else Path(tempfile.gettempdir())
    return base / LOCK_FILE


@contextlib.contextmanager
def _allocation_lock(timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the machine-wide lock of the octets (released when the block ends or this
    process dies: the kernel drops a dead process's ``flock``)."""
    path = _lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SshHostsError(
                        f"another owner held {path} for over {timeout:.0f}s"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # releases the lock


def _machine_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network of the machine's namespace: its addresses (each as a /32 and
    with its prefix) and the destinations of its routes, in every table."""
    nets: list[ipaddress.IPv4Network] = []
    for line in _run(["ip", "-4", "-o", "addr", "show"]).splitlines():
        words = line.split()
        if "inet" in words and words.index("inet") + 1 < len(words):
            iface = ipaddress.IPv4Interface(words[words.index("inet") + 1])
            nets += [iface.network, ipaddress.IPv4Network(iface.ip)]
    for line in _run(["ip", "-4", "-o", "route", "show", "table", "all"]).splitlines():
        words = line.split()
        if words and words[0] in _ROUTE_TYPES:
            words = words[1:]
        if not words or words[0] == "default":
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(words[0], strict=False))
    return nets


def _used_octets(nets: Sequence[ipaddress.IPv4Network]) -> set[int]:
    """The third octets of :data:`NETWORK` that ``nets`` touch (networks wider than it
    left out: a host's /30 is more specific than any of them)."""
    used: set[int] = set()
    base = int(NETWORK.network_address)
    top = int(NETWORK.broadcast_address)
    for net in nets:
        if net.prefixlen < NETWORK.prefixlen or not net.overlaps(NETWORK):
            continue
        first = max(int(net.network_address), base)
        last = min(int(net.broadcast_address), top)
        used.update(range((first - base) >> 8, ((last - base) >> 8) + 1))
    return used


def _free_octets(count: int) -> list[int]:
    """The ``count`` lowest octets nothing on the machine uses (call under the lock)."""
    used = _used_octets(_machine_networks())
    free = [o for o in range(MAX_HOSTS) if o not in used]
    if len(free) < count:
        raise SshHostsError(
            f"{count} hosts need {count} free /24s of {NETWORK}; only {len(free)} are free "
            "on this machine (other owners' hosts, or the machine's own addresses and routes)"
        )
    return free[:count]


# ---- one host ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostInfo:
    """One SSH test host, as a client sees it."""

    name: str  # "h0", "h1", ...
    namespace: str
    address: str  # where its sshd listens: "10.198.<o>.2"
    port: int
    user: str
    server_address: str  # where its workers reach the relays: "10.198.<o>.1"
    url: str  # "ssh://root@10.198.<o>.2:22"


@dataclass
class _Host:
    """What :class:`SshHosts` made for one host (to take it down)."""

    info: HostInfo
    link: str  # the machine-side end of the veth pair
    config: Path
    host_key: Path
    log: Path
    sshd: ManagedProcess | None = None


def _link_name(owner: int, index: int) -> str:
    name = f"{LINK_PREFIX}{owner}m{index}"
    if len(name) > IFNAME_MAX:  # pid_max <= 2**22 and a slot < MAX_SLOTS keep it at 15
        raise SshHostsError(f"interface name {name!r} is longer than {IFNAME_MAX} characters")
    return name


def _sshd_config_text(host: _Host, workdir: Path) -> str:
    """The sshd configuration of ``host``: root by the client key only, SFTP, and a
    client that vanishes (a partition, a killed owner) dropped within ~6 s."""
    q = _quoted
    return "\n".join(
        [
            f"ListenAddress {host.info.address}",
            f"Port {SSH_PORT}",
            f"HostKey {q(host.host_key)}",
            # sshd expands ``%`` tokens here (the workdir has no ``%``: checked)
            f"AuthorizedKeysFile {q(workdir / 'authorized_keys')}",
            f"PidFile {q(workdir / f'sshd_{host.info.name}.pid')}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "AuthenticationMethods publickey",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "ClientAliveInterval 2",
            "ClientAliveCountMax 3",
            # a fleet runs many workers over one connection (a channel each; default 10)
            # and may open many connections at once (default: throttled past 10)
            "MaxSessions 100",
            "MaxStartups 100",
            "",
        ]
    )


def _quoted(path: Path) -> str:
    return f'"{path}"'


def _keygen(path: Path, comment: str) -> str:
    """A fresh ed25519 key pair at ``path`` (and ``path.pub``, returned without its
    comment: ``ssh-ed25519 AAAA...``)."""
    for p in (path, path.with_name(path.name + ".pub")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", os.fspath(path)])
    words = path.with_name(path.name + ".pub").read_text().split()
    return f"{words[0]} {words[1]}"


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, so a reader never
    sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _ssh_banner(address: str, port: int) -> bool:
    """Whether an SSH server greets a TCP connection to ``address:port`` (the readiness
    probe: from the machine's namespace, through the veth pair)."""
    with socket.create_connection((address, port), timeout=1.0) as sock:
        sock.settimeout(2.0)
        banner = b""
        while b"\n" not in banner and len(banner) < 256:  # all of it: no reset on close
            chunk = sock.recv(256)
            if not chunk:
                break
            banner += chunk
        return banner.startswith(b"SSH-")


def _guard_rules(host: HostInfo, ports: Sequence[int]) -> str:
    """The nftables table of a host's namespace: out only to lo, replies and the relays."""
    relays = (
        f"    ip daddr {host.server_address} tcp dport {{ {', '.join(map(str, ports))} }} accept\n"
        if ports
        else ""
    )
    return (
        "table inet rdqs {\n"
        "  chain output {\n"
        "    type filter hook output priority 0; policy drop;\n"
        '    oifname "lo" accept\n'
        "    ct state established,related accept\n"
        f"{relays}"
        "  }\n"
        "}\n"
    )


# ---- the hosts ---------------------------------------------------------------------------


class _ProcessShare:
    """What the open :class:`SshHosts` of this process share: the slots their hosts hold
    and the one namespace reaper (prefix ``rdq-s<P>-``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.slots: set[int] = set()
        self.reaper: ReaperPipe | None = None
        self.users = 0

    def take(self, count: int, prefix: str) -> list[int]:
        """``count`` free slots, the reaper started for the first user."""
        with self.lock:
            free = [s for s in range(MAX_SLOTS) if s not in self.slots][:count]
            if len(free) < count:
                raise SshHostsError(
                    f"{len(self.slots)} SSH hosts are open in this process; {count} more "
                    f"would pass {MAX_SLOTS}: close some first"
                )
            if self.users == 0:
                try:
                    self.reaper = start_reaper(
                        REAPER_SCRIPT, {"prefix": prefix}, what="SSH hosts' namespace reaper"
                    )
                except ReaperNotReady as exc:
                    raise SshHostsError(str(exc)) from None
            self.users += 1
            self.slots.update(free)
            return free

    def give_back(self, slots: Sequence[int]) -> None:
        """Free ``slots``; the last user releases the reaper (it deletes what is left)."""
        with self.lock:
            self.slots.difference_update(slots)
            self.users -= 1
            if self.users == 0 and self.reaper is not None:
                self.reaper.release()
                self.reaper = None


_SHARE = _ProcessShare()


class SshHosts:
    """``count`` SSH test hosts of this process, with ``relays`` to servers of the machine.

    ``workdir`` holds the keys, ``known_hosts``, the sshd configurations and logs (made if
    missing; one :class:`SshHosts` per workdir at a time). Use it as a context manager,
    or :meth:`open` and :meth:`close`. :attr:`hosts` is empty until it is open.
    """

    def __init__(
        self, count: int, workdir: Path, relays: Sequence[tuple[str, int]] = ()
    ) -> None:
        if not 1 <= count <= MAX_HOSTS:
            raise ValueError(f"count must be between 1 and {MAX_HOSTS}, got {count}")
        self.relays = tuple((str(h), int(p)) for h, p in relays)
        ports = [p for _, p in self.relays]
        for host, port in self.relays:
            if not host or not 1 <= port <= 65535:
                raise ValueError(f"a relay is (host, port), the port in 1..65535: {host!r}:{port}")
        if len(set(ports)) != len(ports):
            raise ValueError(f"two relays listen on one port (each keeps its own): {ports}")
        self.count = count
        self.workdir = Path(os.path.abspath(workdir))
        bad = sorted(set(os.fspath(self.workdir)) & _BAD_PATH_CHARS)
        if bad:
            raise ValueError(f"the workdir {self.workdir} must not contain {''.join(bad)!r}")
        self.owner = os.getpid()
        self.known_hosts = self.workdir / "known_hosts"
        self.client_key = self.workdir / "id_ed25519"
        self.hosts: list[HostInfo] = []
        self._hosts: list[_Host] = []
        self._namespaces: list[str] = []
        self._links: list[str] = []
        self._forwarders: list[Forwarder] = []
        self._slots: list[int] | None = None  # taken from the process's share while open
        self._opened = False

    @property
    def prefix(self) -> str:
        """The names of this owner's namespaces start with it (the reaper's prefix)."""
        return f"{NS_PREFIX}{self.owner}-"

    def server_address(self, index: int) -> str:
        """Where a worker on host ``index`` reaches the relays (the machine's end)."""
        return self.hosts[index].server_address

    # ---- building ---------------------------------------------------------------------

    def open(self) -> SshHosts:
        """Build the hosts; on failure, remove what was built and raise :class:`SshHostsError`
        (or :class:`~rdq_compliance.provision.process.ProcessFailed` for an sshd that did
        not start, with its log's tail)."""
        if self._opened:
            raise SshHostsError("these SSH hosts were opened already")
        if os.getpid() != self.owner:
            raise SshHostsError("SSH hosts are opened by the process that made the SshHosts")
        why = unavailable()
        if why:
            raise SshHostsError(why)
        self._opened = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._slots = _SHARE.take(self.count, self.prefix)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        client_pub = _keygen(self.client_key, f"rdq-ssh-hosts-{self.owner}")
        _write_atomically(self.workdir / "authorized_keys", client_pub + "\n", 0o600)
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        with _allocation_lock():
            octets = _free_octets(self.count)
            assert self._slots is not None
            for index, (slot, octet) in enumerate(zip(self._slots, octets, strict=True)):
                self._hosts.append(self._make_link(index, slot, octet))
        self.hosts = [h.info for h in self._hosts]
        ports = [p for _, p in self.relays]
        known = []
        for host in self._hosts:
            _run(
                ["ip", "netns", "exec", host.info.namespace, "nft", "-f", "-"],
                stdin=_guard_rules(host.info, ports),
            )
            public = _keygen(host.host_key, f"rdq-ssh-host-{host.info.name}")
            known.append(f"{host.info.address} {public}\n")
            _write_atomically(host.config, _sshd_config_text(host, self.workdir))
        _write_atomically(self.known_hosts, "".join(known))
        for host in self._hosts:
            for upstream in self.relays:
                self._forwarders.append(
                    Forwarder(
                        upstream,
                        name=f"rdq-ssh-relay-{host.info.name}-{upstream[1]}",
                        listen=(host.info.server_address, upstream[1]),
                    )
                )
        for host in self._hosts:
            self._start_sshd(host)
        for host in self._hosts:
            assert host.sshd is not None
            host.sshd.wait_ready(
                lambda h=host.info: _ssh_banner(h.address, h.port),
                READY_TIMEOUT,
                what=f"sshd of {host.info.name} ({host.info.address}:{host.info.port})",
            )

    def _make_link(self, index: int, slot: int, octet: int) -> _Host:
        """Host ``index``'s namespace and veth pair, named by its ``slot``, on
        ``10.198.<octet>.0/30`` (under the allocation lock: the machine-side address is
        what claims the octet)."""
        namespace = f"{self.prefix}{slot}"
        link = _link_name(self.owner, slot)
        if Path(f"/run/netns/{namespace}").exists():  # an earlier holder of this pid's
            netns.delete_namespace(namespace)
        _run(["ip", "link", "delete", link], check=False)
        subnet = NETWORK.network_address + (octet << 8)
        name = f"h{index}"
        info = HostInfo(
            name=name,
            namespace=namespace,
            address=str(subnet + 2),
            port=SSH_PORT,
            user=USER,
            server_address=str(subnet + 1),
            url=f"ssh://{USER}@{subnet + 2}:{SSH_PORT}",
        )
        self._namespaces.append(namespace)  # before it exists: close() deletes it if made
        _run(["ip", "netns", "add", namespace])
        _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        self._links.append(link)
        _run(
            ["ip", "link", "add", link, "type", "veth", "peer", "name", HOST_LINK,
             "netns", namespace]
        )  # fmt: skip
        _run(["ip", "addr", "add", f"{info.server_address}/30", "dev", link])
        _run(["ip", "-n", namespace, "addr", "add", f"{info.address}/30", "dev", HOST_LINK])
        _run(["ip", "link", "set", link, "up"])
        _run(["ip", "-n", namespace, "link", "set", HOST_LINK, "up"])
        return _Host(
            info=info,
            link=link,
            config=self.workdir / f"sshd_{name}.conf",
            host_key=self.workdir / f"ssh_host_{name}_ed25519",
            log=self.workdir / f"sshd_{name}.log",
        )

    def _start_sshd(self, host: _Host) -> None:
        sshd = _sshd_binary()
        ip = shutil.which("ip")
        assert sshd is not None and ip is not None  # unavailable() said so
        with contextlib.suppress(FileNotFoundError):
            host.log.unlink()  # a reused workdir: the log tail of an error is this run's
        host.sshd = ManagedProcess(
            [ip, "netns", "exec", host.info.namespace, sshd, "-D", "-e", "-f", host.config],
            log_path=host.log,
            cwd=self.workdir,
            grace=SSHD_GRACE,
        )
        host.sshd.start()

    # ---- the fleet's file -------------------------------------------------------------

    def write_fleet_toml(
        self, path: Path, python: str, extra: Mapping[str, object] | None = None
    ) -> Path:
        """Write the fleet file (TOML) for these hosts to ``path``; returns ``path``.

        ``[fleet]`` has ``python`` (the workers' interpreter on every host: the machine's
        own paths, which the hosts share), ``known_hosts`` and ``keys`` (absolute paths),
        then the keys of ``extra``; one ``[[fleet.hosts]]`` table per host (``url``,
        ``name``, ``server_address``). Written through a temporary file (a reader never
        sees half of it).
        """
        if not self.hosts:
            raise SshHostsError("the SSH hosts are not open: there is no host to write")
        fixed = {
            "python": python,
            "known_hosts": os.fspath(self.known_hosts),
            "keys": [os.fspath(self.client_key)],
        }
        extra = dict(extra or {})
        clash = sorted(set(extra) & {*fixed, "hosts"})
        if clash:
            raise ValueError(f"extra keys {clash} are the fleet file's own")
        lines = ["[fleet]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in {**fixed, **extra}.items()]
        for host in self.hosts:
            lines += [
                "",
                "[[fleet.hosts]]",
                f"url = {_toml_value(host.url)}",
                f"name = {_toml_value(host.name)}",
                f"server_address = {_toml_value(host.server_address)}",
            ]
        path = Path(path)
        _write_atomically(path, "\n".join(lines) + "\n")
        return path

    # ---- taking down ------------------------------------------------------------------

    def close(self) -> None:
        """Stop the sshds (and what runs under them), close the relays, delete the veth
        pairs and namespaces; nothing in the workdir is removed. Idempotent."""
        for host in self._hosts:
            if host.sshd is not None:
                with contextlib.suppress(ProcessFailed):
                    host.sshd.stop(SSHD_GRACE)
                host.sshd = None
        for forwarder in self._forwarders:
            forwarder.close()
        self._forwarders.clear()
        for link in self._links:
            # the pair goes at once (a deleted namespace takes it along only once the
            # kernel frees the namespace, a moment later); an error: it was never made
            _run(["ip", "link", "delete", link], check=False)
        self._links.clear()
        for name in self._namespaces:
            if Path(f"/run/netns/{name}").exists():
                _run(["ip", "netns", "delete", name], check=False)
        self._namespaces.clear()
        if self._slots is not None:
            _SHARE.give_back(self._slots)  # the last one's reaper deletes what is left
            self._slots = None

    def __enter__(self) -> SshHosts:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ---- TOML, by hand (no dependency) -------------------------------------------------------

_TOML_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a TOML key is a string, not {key!r}")
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(value: object) -> str:
    """``value`` as TOML: a string (or path), bool, int, float, list or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        return _toml_string(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"cannot write {value!r} ({type(value).__name__}) as TOML")


# ---- the command line --------------------------------------------------------------------

PROG = "python -m rdq_compliance.provision.ssh_hosts"


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr, exit status 2 (no usage block, no traceback)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message}\n")


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= count <= MAX_HOSTS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_HOSTS}, got {count}")
    return count


def _relay(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (a port in 1..65535), got {text!r}")
    return host.strip("[]"), int(port)


def _parser() -> _Parser:
    parser = _Parser(prog=PROG, description="SSH test hosts on this machine (needs root).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{up,sweep}")
    up = commands.add_parser("up", help="build hosts, write the fleet file, wait for Ctrl-C")
    up.add_argument("--count", type=_count, default=3, help="how many hosts (default 3)")
    up.add_argument("--workdir", type=Path, help="keys, configs and logs (default: a temp dir)")
    up.add_argument(
        "--relay", type=_relay, action="append", default=[], metavar="HOST:PORT",
        help="a server the hosts reach at their server_address:PORT (repeatable)",
    )  # fmt: skip
    up.add_argument("--python", default=sys.executable, help="the workers' interpreter")
    up.add_argument("--out", type=Path, required=True, help="the fleet file (TOML) to write")
    commands.add_parser("sweep", help="delete the namespaces of owners no longer alive")
    return parser


def _check_up_args(parser: _Parser, args: argparse.Namespace) -> None:
    ports = [p for _, p in args.relay]
    if len(set(ports)) != len(ports):
        parser.error(f"--relay: two relays on one port: {ports}")
    if not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        parser.error(f"--python: not an executable file: {args.python}")
    if not args.out.parent.is_dir():
        parser.error(f"--out: no such directory: {args.out.parent}")
    if args.workdir is not None:
        if args.workdir.exists() and not args.workdir.is_dir():
            parser.error(f"--workdir: not a directory: {args.workdir}")
        bad = sorted(set(os.path.abspath(args.workdir)) & _BAD_PATH_CHARS)
        if bad:
            parser.error(f"--workdir: must not contain {''.join(bad)!r}")


def _up(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    made = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="rdq-ssh-hosts-")) if made else args.workdir
    try:
        with SshHosts(args.count, workdir, args.relay) as hosts:
            hosts.write_fleet_toml(args.out, args.python)
            for h in hosts.hosts:
                print(f"{h.name}  {h.url}  namespace {h.namespace}  server {h.server_address}")
            print("hosts up; Ctrl-C to take them down", flush=True)
            while not stop.wait(0.5):
                pass
    except (SshHostsError, ProcessFailed, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if made:
            shutil.rmtree(workdir, ignore_errors=True)
    print("hosts down", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); its exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "sweep":
        why = unavailable()
        if why:
            print(f"{PROG}: {why}", file=sys.stderr)
            return 1
        gone = sweep_stale()
        print("\n".join(f"removed {name}" for name in gone) or "nothing to sweep", flush=True)
        return 0
    _check_up_args(parser, args)
    return _up(args)


if __name__ == "__main__":
    sys.exit(main())
