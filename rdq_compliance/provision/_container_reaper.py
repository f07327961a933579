"""The reaper of a kit container: removes it (and its volume) when the kit process dies.

Run as a script (``python -I -S _container_reaper.py``), stdlib only, never imported
(like ``_watchdog.py`` beside it). Its stdin is a pipe whose only writer is the kit
process; its first line is a JSON object ``{"docker_host": "unix:///var/run/docker.sock",
"label": "rdq.owner=<id>"}``. It then waits. ``quit`` on stdin (the kit removed its
container itself) or end of file (the kit process is gone, however it died: the kernel
closes a dead process's descriptors, SIGKILL included) make it remove, through the Docker
Engine API, every container and every volume carrying that label, then exit.

It is started *before* the container is created, so there is no moment at which a kit
container exists and nobody watches it. It speaks HTTP to the engine itself (a unix
socket or plain ``tcp://``), so it needs neither the docker SDK nor the docker CLI.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import sys
import time
import urllib.parse
from typing import Any


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _connection(docker_host: str, timeout: float = 30.0) -> http.client.HTTPConnection:
    url = urllib.parse.urlparse(docker_host)
    if url.scheme in ("unix", ""):
        return _UnixConnection(url.path or "/var/run/docker.sock", timeout)
    if url.scheme in ("tcp", "http"):
        return http.client.HTTPConnection(
            url.hostname or "localhost", url.port or 2375, timeout=timeout
        )
    raise ValueError(f"unsupported DOCKER_HOST {docker_host!r} (unix:// or tcp:// only)")


def _call(docker_host: str, method: str, path: str) -> Any:
    conn = _connection(docker_host)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status >= 400 and response.status != 404:
        raise OSError(f"{method} {path}: HTTP {response.status}: {body[:200]!r}")
    return json.loads(body) if body.strip() else None


def _log(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"rdq container reaper: {text}\n")
        sys.stderr.flush()


def remove_labelled(docker_host: str, label: str) -> tuple[int, int]:
    """Remove every container (force, with its anonymous volumes) and then every volume
    carrying ``label``; returns how many of each were removed."""
    filters = urllib.parse.quote(json.dumps({"label": [label]}))
    containers = _call(docker_host, "GET", f"/containers/json?all=1&filters={filters}") or []
    for container in containers:
        ident = container["Id"]
        if container.get("State") == "paused":
            with contextlib.suppress(OSError):
                _call(docker_host, "POST", f"/containers/{ident}/unpause")
        _call(docker_host, "DELETE", f"/containers/{ident}?force=1&v=1")
    volumes = (_call(docker_host, "GET", f"/volumes?filters={filters}") or {}).get("Volumes")
    for volume in volumes or []:
        _call(docker_host, "DELETE", f"/volumes/{urllib.parse.quote(volume['Name'])}?force=1")
    return len(containers), len(volumes or [])


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if not first.strip():
        return 0  # the kit died before telling us anything: nothing was created
    config = json.loads(first)
    docker_host, label = str(config["docker_host"]), str(config["label"])
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    why = "the kit process is gone"
    for line in stdin:
        if line.strip() == b"quit":
            why = ""
            break
    for attempt in range(5):
        try:
            removed = remove_labelled(docker_host, label)
        except (OSError, ValueError) as exc:
            _log(f"removing containers labelled {label} (try {attempt + 1}): {exc}")
            time.sleep(1.0)
            continue
        if why and any(removed):
            _log(f"{why}: removed {removed[0]} container(s), {removed[1]} volume(s) ({label})")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
