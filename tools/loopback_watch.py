"""Watch that a test run and its kit containers talk to loopback addresses only.

    python tools/loopback_watch.py -- pytest tests/test_container_backends.py -n 2

runs the command and, every 0.2 s until it exits, snapshots the machine's TCP and UDP
sockets (psutil, which reads ``/proc/net`` as ``ss -tunp`` does) and keeps each socket
owned by a watched process whose peer is not in 127.0.0.0/8 or ``::1``. Watched: the
command's process tree, and the processes of the containers that tree made (labelled
``rdq.kit``, and ``rdq.pid`` naming a process the tree has held; their PID 1 on the host
and its descendants; with the host network they share the host's sockets): another run's
kit containers are not watched. It prints how many snapshots and sockets it saw, every
non-loopback peer found, and exits 1 if there was one (else the command's exit code).

``--allow-kit-veths`` also accepts peers in the kit's own veth ranges (``10.199.0.0/16``,
:mod:`rdq_compliance.provision.netns`; ``10.198.0.0/16``, the SSH test hosts of
:mod:`rdq_compliance.provision.ssh_hosts`, whose sshd and the workers it starts are in
the run's process tree) and then also watches inside the network
namespaces of watched processes (a partition campaign's workers run in their own: their
sockets are read from ``/proc/<tid>/net/tcp*`` of one thread per namespace — the
runner's harness thread enters one too — as ``psutil`` sees only the watcher's).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time

import psutil

from rdq_compliance.provision.kit_container import KIT_LABEL, PID_LABEL


def _loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


KIT_VETHS = (ipaddress.ip_network("10.199.0.0/16"), ipaddress.ip_network("10.198.0.0/16"))


def _in_kit_veths(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in KIT_VETHS)


def _hex_ip(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def _namespace_peers(pids: set[int]) -> list[tuple[str, int, str]]:
    """Connected peers ``(ip, port, "netns <inode>")`` in the namespaces of ``pids`` other
    than ours (one ``/proc/<pid>/net/tcp*`` read per namespace)."""
    ours = os.stat("/proc/self/ns/net").st_ino
    seen: dict[int, int] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")  # a thread may have entered a namespace
        except OSError:
            continue
        for tid in tids:
            try:
                inode = os.stat(f"/proc/{pid}/task/{tid}/ns/net").st_ino
            except OSError:
                continue
            if inode != ours:
                seen.setdefault(inode, int(tid))
    out = []
    for inode, pid in seen.items():
        for table in ("tcp", "tcp6", "udp", "udp6"):
            try:
                with open(f"/proc/{pid}/net/{table}") as fh:
                    rows = fh.read().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                remote = row.split()[2]
                ip_hex, port_hex = remote.split(":")
                port = int(port_hex, 16)
                if port:
                    out.append((_hex_ip(ip_hex), port, f"netns {inode}"))
    return out


def _tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return set()


def _kit_containers() -> list[tuple[int, int]]:
    """``(PID 1 on the host, the kit process that made it)`` of every running kit
    container of the machine (its ``rdq.kit`` and ``rdq.pid`` labels)."""
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label={KIT_LABEL}"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    if not ids:
        return []
    template = f'{{{{json .State.Pid}}}} {{{{index .Config.Labels "{PID_LABEL}"}}}}'
    out = subprocess.run(
        ["docker", "inspect", "--format", template, *ids],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines()]
    return [
        (int(r[0]), int(r[1])) for r in rows if len(r) == 2 and r[0].isdigit() and r[1].isdigit()
    ]


def owned_containers(containers: list[tuple[int, int]], owners: set[int]) -> list[int]:
    """The PIDs 1 of those ``(PID 1, maker)`` containers that a process of ``owners``
    made (a stopped container's PID 1 is 0: left out)."""
    return [pid for pid, maker in containers if pid and maker in owners]


def _container_pids(owners: set[int]) -> set[int]:
    """The processes of the running kit containers ``owners`` made."""
    pids: set[int] = set()
    for pid in owned_containers(_kit_containers(), owners):
        pids |= _tree(pid)
    return pids


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: loopback_watch.py [--allow-kit-veths] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    veths = "--allow-kit-veths" in argv[: argv.index("--")]

    def allowed(ip: str) -> bool:
        return _loopback(ip) or (veths and _in_kit_veths(ip))

    command = argv[argv.index("--") + 1 :]
    proc = subprocess.Popen(command)
    snapshots, sockets = 0, set()
    foreign: dict[tuple[str, int, str], str] = {}
    # every process the command's tree has held (a container's maker may exit a moment
    # before its reaper removes the container)
    owners: set[int] = set()
    while proc.poll() is None:
        tree = _tree(proc.pid)
        owners |= tree
        watched = tree | _container_pids(owners)
        for conn in psutil.net_connections(kind="inet"):
            if conn.pid not in watched or not conn.raddr:
                continue
            sockets.add((conn.pid, conn.laddr, conn.raddr))
            if not allowed(conn.raddr.ip):
                try:
                    name = psutil.Process(conn.pid).name()
                except psutil.Error:
                    name = "?"
                foreign[(conn.raddr.ip, conn.raddr.port, name)] = time.strftime("%H:%M:%S")
        if veths:
            for ip, port, where in _namespace_peers(watched):
                sockets.add((where, ip, port))
                if not allowed(ip):
                    foreign[(ip, port, where)] = time.strftime("%H:%M:%S")
        snapshots += 1
        time.sleep(0.2)
    print(
        f"loopback_watch: {snapshots} snapshots, {len(sockets)} connected sockets of the "
        f"run and its containers, {len(foreign)} non-loopback peer(s)",
        file=sys.stderr,
    )
    for (ip, port, name), when in sorted(foreign.items()):
        print(f"loopback_watch: {name} -> {ip}:{port} (seen {when})", file=sys.stderr)
    return 1 if foreign else int(proc.returncode or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
