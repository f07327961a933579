"""rdq_compliance.provision.ssh_hosts: SSH test hosts (a namespace and a real sshd each).

Real hosts, nothing mocked: a client (asyncssh) logs in with the client key, the host
key checked against the written ``known_hosts``, runs commands and SFTP; a worker on a
host reaches the machine's Redis only through its relay; and nothing is left behind,
whether the owner closes the hosts, is SIGKILLed, or is the command line stopped by
SIGTERM. Needs root, ip, nft, sshd and ssh-keygen (skipped without them, a failure
under ``CI=true``), and the machine's Redis on 127.0.0.1:6379 for the relay.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from rdq_compliance.provision import ssh_hosts
from rdq_compliance.provision.ports import port_open
from rdq_compliance.provision.ssh_hosts import HostInfo, SshHosts
from tests._ci import missing
from tests._waiting import HANG_S

try:
    import asyncssh
except ImportError:  # pragma: no cover - a dev dependency
    asyncssh = None

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
REDIS = ("127.0.0.1", 6379)
CLI = [sys.executable, "-m", "rdq_compliance.provision.ssh_hosts"]


def _needs_hosts() -> None:
    why = ssh_hosts.unavailable()
    if why:
        missing(why)
    if asyncssh is None:
        missing("asyncssh is not installed (pip install asyncssh)")


def _leftovers(owner: int, workdir: Path) -> list[str]:
    """What of ``owner``'s hosts still exists: namespaces, links, sshds of ``workdir``."""
    out = [f"namespace {n}" for n in ssh_hosts.namespaces(owner)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [f"link {w}" for w in links.split() if w.startswith(f"rdqs{owner}m")]
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(str(workdir) in arg for arg in cmdline) and any("sshd" in a for a in cmdline):
            out.append(f"sshd pid {proc.info['pid']}")
    return out


def _wait_clean(owner: int, workdir: Path, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _leftovers(owner, workdir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _read_until(proc: subprocess.Popen[bytes], text: str, timeout: float) -> str:
    """What ``proc`` printed up to ``text`` (fails after ``timeout`` or at its exit); read
    from the pipe's descriptor itself (a buffered reader would hide lines from select)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while text.encode() not in seen:
            left = deadline - time.monotonic()
            assert left > 0 and sel.select(left), f"no {text!r} within {timeout}s: {seen!r}"
            chunk = os.read(fd, 65536)
            assert chunk, f"exited ({proc.wait()}) before {text!r}: {seen!r}"
            seen += chunk
    return seen.decode()


# ---- without root ------------------------------------------------------------------------


def test_the_octets_in_use_are_every_24_a_network_touches():
    nets = [
        ipaddress.IPv4Network(n)
        for n in ("10.198.3.1/32", "10.198.0.0/30", "10.198.10.0/23", "10.0.0.0/8",
                  "0.0.0.0/0", "10.199.0.0/30", "10.198.255.252/30")
    ]  # fmt: skip
    assert ssh_hosts._used_octets(nets) == {0, 3, 10, 11, 255}
    assert ssh_hosts._used_octets([ipaddress.IPv4Network("10.198.0.0/16")]) == set(range(256))


def test_bad_arguments_are_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match="count must be between 1 and 256"):
        SshHosts(0, tmp_path)
    with pytest.raises(ValueError, match="two relays listen on one port"):
        SshHosts(1, tmp_path, [("127.0.0.1", 5432), ("10.0.0.1", 5432)])
    with pytest.raises(ValueError, match=r"the port in 1\.\.65535"):
        SshHosts(1, tmp_path, [("127.0.0.1", 0)])
    with pytest.raises(ValueError, match="must not contain"):
        SshHosts(1, tmp_path / 'a"b')
    # the longest owner pid Linux can have still gives a 15-character interface name
    assert len(ssh_hosts._link_name(4194303, 255)) == 15


# ---- real hosts --------------------------------------------------------------------------

PROBE = textwrap.dedent(
    """
    import socket, sys
    def talk(host, port, send, timeout):
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as s:
                s.sendall(send)
                return s.recv(64).decode().strip()
        except OSError as exc:
            return type(exc).__name__
    relay, closed, other, hang_s = sys.argv[1:5]
    print(talk(relay, 6379, b"PING\\r\\n", float(hang_s)))  # the relay to the machine's Redis
    # another port of the machine: dropped, so it times out (a window no answer comes in,
    # however long: load cannot make a dropped packet answer)
    print(talk(relay, closed, b"x", 1.0))
    print(talk(other, 22, b"x", float(hang_s)))       # another host: no route
    """
)


async def _use_host(hosts: SshHosts, info: HostInfo, other: HostInfo, tmp: Path) -> None:
    options = {
        "port": info.port,
        "username": info.user,
        "client_keys": [str(hosts.client_key)],
        "known_hosts": str(hosts.known_hosts),
        "agent_path": None,
    }
    async with asyncssh.connect(info.address, **options) as conn:
        result = await conn.run("ip -4 -o addr", check=True, timeout=HANG_S)
        words = str(result.stdout).split()
        addrs = {words[i + 1].split("/")[0] for i, w in enumerate(words) if w == "inet"}
        assert addrs == {"127.0.0.1", info.address}, result.stdout
        with socket.socket() as closed:  # listens on every address of the machine
            closed.bind(("0.0.0.0", 0))
            closed.listen()
            argv = [info.server_address, str(closed.getsockname()[1]), other.address, str(HANG_S)]
            cmd = f"python3 -c {shlex.quote(PROBE)} {shlex.join(argv)}"
            result = await conn.run(cmd, check=True, timeout=3 * HANG_S)
        assert str(result.stdout).split() == ["+PONG", "TimeoutError", "OSError"], result

        data = os.urandom(100_000)
        (tmp / f"up-{info.name}.bin").write_bytes(data)
        remote = tmp / "remote" / f"{info.name}.bin"
        remote.parent.mkdir(exist_ok=True)
        async with conn.start_sftp_client() as sftp:
            await sftp.put(str(tmp / f"up-{info.name}.bin"), str(remote))
            assert await sftp.getsize(str(remote)) == len(data)
            await sftp.get(str(remote), str(tmp / f"back-{info.name}.bin"))
        assert (tmp / f"back-{info.name}.bin").read_bytes() == data
        assert remote.read_bytes() == data  # the hosts share the machine's filesystem

    (tmp / "empty_known_hosts").write_text("")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with asyncssh.connect(
            info.address, **{**options, "known_hosts": str(tmp / "empty_known_hosts")}
        ):
            pass


def test_hosts_take_ssh_and_sftp_and_reach_redis_through_their_relay(tmp_path):
    _needs_hosts()
    if not port_open(REDIS[1], REDIS[0]):
        missing(f"no Redis on {REDIS[0]}:{REDIS[1]} (the relay's server)")
    workdir = tmp_path / "work dir"  # sshd_config quotes its paths
    with SshHosts(2, workdir, [REDIS]) as hosts:
        h0, h1 = hosts.hosts
        assert (h0.name, h1.name) == ("h0", "h1")
        assert h0.namespace == f"rdq-s{os.getpid()}-0"
        for i, h in enumerate(hosts.hosts):
            octet = h.address.split(".")[2]
            assert h.address == f"10.198.{octet}.2" and h.port == 22 and h.user == "root"
            assert h.server_address == f"10.198.{octet}.1" == hosts.server_address(i)
            assert h.url == f"ssh://root@{h.address}:22"
        known = (workdir / "known_hosts").read_text().splitlines()
        assert [line.split()[:2] for line in known] == [
            [h0.address, "ssh-ed25519"], [h1.address, "ssh-ed25519"]
        ]

        async def both() -> None:
            await asyncio.gather(
                _use_host(hosts, h0, h1, tmp_path), _use_host(hosts, h1, h0, tmp_path)
            )

        asyncio.run(both())

        weird = 'py "th\\on"\n\t\x01é'
        fleet = hosts.write_fleet_toml(
            tmp_path / "fleet.toml", weird, {"timeout": 2.5, "a key": [1, True, {"x": "y"}]}
        )
        data = tomllib.loads(fleet.read_text())
        assert data == {
            "fleet": {
                "python": weird,
                "known_hosts": str(workdir / "known_hosts"),
                "keys": [str(workdir / "id_ed25519")],
                "timeout": 2.5,
                "a key": [1, True, {"x": "y"}],
                "hosts": [
                    {"url": h.url, "name": h.name, "server_address": h.server_address}
                    for h in hosts.hosts
                ],
            }
        }


def test_close_leaves_no_namespace_link_or_sshd_and_keeps_the_workdir(tmp_path):
    _needs_hosts()
    hosts = SshHosts(2, tmp_path, [REDIS]).open()
    sshds = [p.info["pid"] for p in psutil.process_iter(["pid", "cmdline"])
             if str(tmp_path) in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    assert len(sshds) == 2 and len(ssh_hosts.namespaces(os.getpid())) == 2
    hosts.close()
    assert _leftovers(os.getpid(), tmp_path) == []
    assert not any(psutil.pid_exists(p) for p in sshds)
    hosts.close()  # idempotent
    assert (tmp_path / "known_hosts").is_file() and (tmp_path / "sshd_h1.log").is_file()


def test_a_sigkilled_owner_leaves_nothing_behind(tmp_path):
    _needs_hosts()
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from rdq_compliance.provision.ssh_hosts import SshHosts
        hosts = SshHosts(1, Path({str(tmp_path)!r})).open()
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE
    )
    try:
        _read_until(owner, "ready", HANG_S)
        assert ssh_hosts.namespaces(owner.pid) == [f"rdq-s{owner.pid}-0"]
        assert any("sshd" in line for line in _leftovers(owner.pid, tmp_path))
    finally:
        owner.kill()
        owner.wait()
    assert _wait_clean(owner.pid, tmp_path, HANG_S) == []


def test_the_command_line(tmp_path):
    _needs_hosts()
    for argv, message in [
        (["up", "--count", "0", "--out", "f.toml"], "must be between 1 and 256"),
        (["up", "--count", "x", "--out", "f.toml"], "not a number"),
        (["up", "--relay", "nohost", "--out", "f.toml"], "expected HOST:PORT"),
        (["up"], "the following arguments are required: --out"),
        (["up", "--out", "/no/such/dir/f.toml"], "no such directory"),
        (["up", "--python", "/no/python", "--out", "f.toml"], "not an executable file"),
        (["down"], "invalid choice"),
        ([], "required"),
    ]:
        proc = subprocess.run([*CLI, *argv], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 2, (argv, proc)
        assert proc.stderr.count("\n") == 1 and message in proc.stderr, (argv, proc.stderr)
        assert "Traceback" not in proc.stderr

    out, workdir = tmp_path / "hosts.toml", tmp_path / "work"
    up = subprocess.Popen(
        [*CLI, "up", "--count", "1", "--workdir", str(workdir), "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        printed = _read_until(up, "hosts up; Ctrl-C to take them down", HANG_S)
        fleet = tomllib.loads(out.read_text())["fleet"]
        assert fleet["python"] == sys.executable
        assert fleet["known_hosts"] == str(workdir / "known_hosts")
        assert fleet["keys"] == [str(workdir / "id_ed25519")]
        [host] = fleet["hosts"]
        assert set(host) == {"url", "name", "server_address"} and host["name"] == "h0"
        assert host["url"].startswith("ssh://root@10.198.") and host["url"] in printed
        assert port_open(22, host["url"].split("@")[1].split(":")[0])
        up.send_signal(signal.SIGTERM)
        assert up.wait(HANG_S) == 0, up.stderr.read() if up.stderr else b""
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert _leftovers(up.pid, workdir) == []


def test_sweep_removes_the_namespaces_of_dead_owners(tmp_path):
    _needs_hosts()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"rdq-s{dead.pid}-0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in ssh_hosts.sweep_stale()
        assert stale not in ssh_hosts.namespaces()
        subprocess.run(["ip", "netns", "add", stale], check=True)
        proc = subprocess.run([*CLI, "sweep"], capture_output=True, text=True, timeout=HANG_S)
        assert proc.returncode == 0 and f"removed {stale}" in proc.stdout, proc
    finally:
        subprocess.run(["ip", "netns", "delete", stale], capture_output=True)
    # a live owner's namespace is not stale
    mine = f"rdq-s{os.getpid()}-99"
    subprocess.run(["ip", "netns", "add", mine], check=True)
    try:
        assert mine not in ssh_hosts.sweep_stale()
    finally:
        subprocess.run(["ip", "netns", "delete", mine], check=True)


def test_names_an_earlier_process_with_this_pid_left_are_replaced(tmp_path):
    """A pid is reused, and ``/run/netns`` outlives an owner whose reaper never ran: the
    namespace a new owner's host would get may exist already. It is the earlier holder's,
    so the new owner deletes it before it builds the host."""
    _needs_hosts()
    held = {int(name.rsplit("-", 1)[1]) for name in ssh_hosts.namespaces(os.getpid())}
    slot = min(set(range(ssh_hosts.MAX_SLOTS)) - held)
    left = f"rdq-s{os.getpid()}-{slot}"
    subprocess.run(["ip", "netns", "add", left], check=True)
    try:
        with SshHosts(1, tmp_path) as hosts:
            assert hosts.hosts[0].namespace == left
            assert port_open(22, hosts.hosts[0].address)
    finally:
        subprocess.run(["ip", "netns", "delete", left], capture_output=True)
    assert _leftovers(os.getpid(), tmp_path) == []


def test_two_sets_of_hosts_open_in_one_process_at_once(tmp_path):
    """Each host's names are unique in the process (its slot), so a second set opened
    beside a first one gets hosts of its own, and closing it leaves the first one's
    hosts up."""
    _needs_hosts()
    with SshHosts(2, tmp_path / "a") as first:
        with SshHosts(2, tmp_path / "b") as second:
            names = [h.namespace for h in first.hosts + second.hosts]
            assert len(set(names)) == 4 and [h.name for h in second.hosts] == ["h0", "h1"]
            assert all(port_open(22, h.address) for h in first.hosts + second.hosts)
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        ours = f"rdqs{os.getpid()}m"
        mine = sorted(w.split("@")[0].rstrip(":") for w in links.split() if w.startswith(ours))
        assert sorted(ssh_hosts.namespaces(os.getpid())) == sorted(
            h.namespace for h in first.hosts
        )
        assert mine == sorted(h.link for h in first._hosts)
        assert not [x for x in _leftovers(os.getpid(), tmp_path / "b") if "sshd" in x]
        assert all(port_open(22, h.address) for h in first.hosts)
    assert _leftovers(os.getpid(), tmp_path / "a") == []
