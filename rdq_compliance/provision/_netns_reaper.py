"""The reaper of the kit's network namespaces: deletes them when their owner dies.

Run as a script (``python -I -S _netns_reaper.py``), stdlib only, never imported (like
``_container_reaper.py`` beside it). Its stdin is a pipe whose only writer is the owner
process; its first line is ``{"prefix": "rdq-<pid>-"}``. It answers ``ready`` and waits.
``quit`` on stdin (the owner cleaned up itself) or end of file (the owner is gone, however
it died: the kernel closes a dead process's descriptors, SIGKILL included) make it delete
every namespace whose name starts with the prefix (``ip netns delete``; the veth pairs
living in them go with them), then exit.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys


def delete(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    names = [ln.split()[0] for ln in out.stdout.splitlines() if ln.strip()]
    gone = []
    for name in names:
        if name.startswith(prefix):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
            gone.append(name)
    return gone


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if not first.strip():
        return 0
    prefix = str(json.loads(first)["prefix"])
    if not prefix.startswith("rdq-") or not prefix.endswith("-"):
        return 2
    with contextlib.suppress(OSError):
        sys.stdout.write("ready\n")
        sys.stdout.flush()
    why = "the owner process is gone"
    for line in stdin:
        if line.strip() == b"quit":
            why = ""
            break
    gone = delete(prefix)
    if why and gone:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"rdq netns reaper: {why}: deleted {', '.join(gone)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
