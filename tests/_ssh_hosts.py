"""What runs on the SSH test hosts (:mod:`rdq_compliance.provision.ssh_hosts`): a test's
check that a campaign left nothing behind on them."""

from __future__ import annotations

import re
import subprocess
import time

import psutil

from rdq_compliance.provision import ssh_hosts


def host_processes(hosts: ssh_hosts.SshHosts) -> dict[str, list[str]]:
    """Per host, the processes in its namespace other than its listening sshd."""
    out: dict[str, list[str]] = {}
    for h in hosts.hosts:
        pids = subprocess.run(
            ["ip", "netns", "pids", h.namespace], capture_output=True, text=True, check=False
        ).stdout.split()
        left = []
        for pid in pids:
            try:
                proc = psutil.Process(int(pid))
                cmd = " ".join(proc.cmdline())
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
            except psutil.NoSuchProcess:
                continue
            if re.search(r"sshd.* -D .*-f ", cmd) and not re.search(r"sshd: \S+@", cmd):
                continue  # the host's own listening sshd
            left.append(f"{pid} {cmd[:120]}")
        out[h.name] = left
    return out


def wait_no_workers(hosts: ssh_hosts.SshHosts, timeout: float) -> dict[str, list[str]]:
    """Wait until no host runs anything but its sshd; what is left after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        left = {k: v for k, v in host_processes(hosts).items() if v}
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)
