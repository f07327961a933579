"""The hosts of a remote fleet: the ``[fleet]`` table of a hosts file, read and checked.

A hosts file (``rdq-chaos run ... --fleet hosts.toml``) names the machines a campaign's
workers run on, reached over SSH::

    [fleet]
    python = "/opt/rdq/venv/bin/python"      # the worker command on every host (required)
    known_hosts = "~/.ssh/known_hosts"       # checked, always (default: that file)
    keys = ["~/.ssh/id_ed25519"]             # default: the SSH agent and ~/.ssh's keys
    env = { PYTHONPATH = "/opt/rdq/src" }    # set for every worker (optional)
    faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # every host's default

    [[fleet.hosts]]                          # or: hosts = ["ssh://rdq@10.0.0.11", ...]
    url = "ssh://rdq@10.0.0.11:22"
    name = "node1"                           # its lanes' name (default: the address)
    server_address = "10.0.0.5"              # the server's address as this host sees it
    faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # for clock skew

The kit installs nothing on a host: ``python`` must be an interpreter (a venv) on that
host that has this kit and the backend's driver installed, the same build as the
runner's (the launcher checks the version and a digest of the kit's source files). A
host's known-hosts entry is required: there is no setting that turns host-key checking
off.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: The keys a ``[fleet]`` table and a ``[[fleet.hosts]]`` entry may hold.
FLEET_KEYS = ("python", "known_hosts", "keys", "env", "faketime", "hosts")
HOST_KEYS = ("url", "name", "server_address", "faketime", "python")


class FleetConfigError(ValueError):
    """A hosts file that cannot be used: what is wrong and what to do."""


@dataclass(frozen=True)
class Host:
    """One host of the fleet."""

    name: str
    user: str | None
    address: str
    port: int
    python: str
    server_address: str | None = None
    faketime: str | None = None

    @property
    def url(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"ssh://{user}{self.address}:{self.port}"


@dataclass(frozen=True)
class FleetHosts:
    """A checked hosts file."""

    hosts: tuple[Host, ...]
    known_hosts: Path
    keys: tuple[Path, ...]
    source: str
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        return ", ".join(f"{h.name} ({h.url})" for h in self.hosts)


def load_fleet(path: Path) -> FleetHosts:
    """Read and check the hosts file ``path``."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FleetConfigError(f"no hosts file at {path}: give the path of a TOML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetConfigError(f"cannot read the hosts file {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FleetConfigError(f"the hosts file {path} is not valid TOML: {exc}") from None
    return fleet_from_dict(data, source=str(path), base=path.parent)


def fleet_from_dict(data: dict[str, Any], *, source: str, base: Path) -> FleetHosts:
    table = data.get("fleet")
    if not isinstance(table, dict):
        raise FleetConfigError(f"{source}: no [fleet] table (see the fleet page of the docs)")
    unknown = sorted(set(table) - set(FLEET_KEYS))
    if unknown:
        raise FleetConfigError(
            f"{source}: unknown key(s) {unknown} in [fleet]; known: {list(FLEET_KEYS)}"
        )
    python = table.get("python")
    if python is not None and (not isinstance(python, str) or not python):
        raise FleetConfigError(f"{source}: fleet.python must be the path of an interpreter")
    known = table.get("known_hosts", "~/.ssh/known_hosts")
    if not isinstance(known, str) or not known:
        raise FleetConfigError(
            f"{source}: fleet.known_hosts must be a file path; host keys are always checked"
        )
    known_hosts = _path(known, base)
    if not known_hosts.is_file():
        raise FleetConfigError(
            f"{source}: no known-hosts file at {known_hosts}: add the hosts' keys to it "
            "(ssh-keyscan, then check the fingerprints); host keys are always checked"
        )
    keys_raw = table.get("keys", [])
    if not isinstance(keys_raw, list) or not all(isinstance(k, str) for k in keys_raw):
        raise FleetConfigError(f"{source}: fleet.keys must be a list of key file paths")
    keys = tuple(_path(k, base) for k in keys_raw)
    for key in keys:
        if not key.is_file():
            raise FleetConfigError(f"{source}: no key file at {key}")
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, str) for k, v in env.items()
    ):
        raise FleetConfigError(
            f"{source}: fleet.env must be a table of variable names to strings"
        )
    entries = table.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise FleetConfigError(f"{source}: no hosts: add [[fleet.hosts]] entries with a url")
    faketime = table.get("faketime")
    if faketime is not None and not isinstance(faketime, str):
        raise FleetConfigError(f"{source}: fleet.faketime must be the library's path on the hosts")
    hosts = tuple(_host(e, i, source, python, faketime) for i, e in enumerate(entries))
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise FleetConfigError(f"{source}: two hosts have the same name: {names}")
    return FleetHosts(hosts, known_hosts, keys, source, tuple(sorted(env.items())))


def _path(text: str, base: Path) -> Path:
    p = Path(text).expanduser()
    return p if p.is_absolute() else (base / p).resolve()


def _host(
    entry: object, index: int, source: str, python: str | None, faketime: str | None
) -> Host:
    where = f"{source}: fleet.hosts[{index}]"
    if isinstance(entry, str):  # hosts = ["ssh://user@host:port", ...]
        entry = {"url": entry}
    if not isinstance(entry, dict):
        raise FleetConfigError(f"{where} must be an ssh:// url or a table with a url")
    unknown = sorted(set(entry) - set(HOST_KEYS))
    if unknown:
        raise FleetConfigError(f"{where}: unknown key(s) {unknown}; known: {list(HOST_KEYS)}")
    url = entry.get("url")
    if not isinstance(url, str):
        raise FleetConfigError(f"{where}: no url (ssh://user@host:port)")
    parts = urlsplit(url)
    if parts.scheme != "ssh" or not parts.hostname:
        raise FleetConfigError(f"{where}: url {url!r} is not ssh://user@host[:port]")
    if parts.password is not None:
        raise FleetConfigError(
            f"{where}: the url holds a password; use keys or the SSH agent instead"
        )
    try:
        port = parts.port or 22
    except ValueError:
        raise FleetConfigError(f"{where}: the url's port is not a number") from None
    interpreter = entry.get("python", python)
    if not isinstance(interpreter, str) or not interpreter:
        raise FleetConfigError(
            f"{where}: no worker interpreter: set fleet.python (or the host's python) to "
            "a venv's python on the host that has this kit installed"
        )
    for key in ("name", "server_address", "faketime"):
        if key in entry and not isinstance(entry[key], str):
            raise FleetConfigError(f"{where}: {key} must be a string")
    return Host(
        name=entry.get("name") or parts.hostname,
        user=parts.username,
        address=parts.hostname,
        port=port,
        python=interpreter,
        server_address=entry.get("server_address"),
        faketime=entry.get("faketime", faketime),
    )
