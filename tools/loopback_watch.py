"""Watch that a test run and its kit containers talk to loopback addresses only.

    python tools/loopback_watch.py -- pytest tests/test_container_backends.py -n 2

runs the command and, every 0.2 s until it exits, snapshots the machine's TCP and UDP
sockets (psutil, which reads ``/proc/net`` as ``ss -tunp`` does) and keeps each socket
owned by a watched process whose peer is not in 127.0.0.0/8 or ``::1``. Watched: the
command's process tree, and the processes of every container labelled ``rdq.kit`` (their
PID 1 on the host and its descendants; with the host network they share the host's
sockets). It prints how many snapshots and sockets it saw, every non-loopback peer
found, and exits 1 if there was one (else the command's exit code).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time

import psutil


def _loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


def _tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return set()


def _container_pids() -> set[int]:
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", "label=rdq.kit"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    if not ids:
        return set()
    out = subprocess.run(
        ["docker", "inspect", "--format", "{{json .State.Pid}}", *ids],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    pids: set[int] = set()
    for pid in (json.loads(x) for x in out):
        if pid:
            pids |= _tree(int(pid))
    return pids


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: loopback_watch.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    proc = subprocess.Popen(command)
    snapshots, sockets = 0, set()
    foreign: dict[tuple[str, int, str], str] = {}
    while proc.poll() is None:
        watched = _tree(proc.pid) | _container_pids()
        for conn in psutil.net_connections(kind="inet"):
            if conn.pid not in watched or not conn.raddr:
                continue
            sockets.add((conn.pid, conn.laddr, conn.raddr))
            if not _loopback(conn.raddr.ip):
                try:
                    name = psutil.Process(conn.pid).name()
                except psutil.Error:
                    name = "?"
                foreign[(conn.raddr.ip, conn.raddr.port, name)] = time.strftime("%H:%M:%S")
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
