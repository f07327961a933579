"""A toy backend written from the docs alone (docs/writing-a-backend.md and the generated
public interfaces page): ``tests/test_docs_toy_backend.py`` checks that every kit name it
imports is named there, and runs the kit on it.

Its "server" is a folder named by the DSN ``toy:///path``; a namespace is a sub-folder
holding the owner record the kit gives (``owner_record``), so a later run can sweep the
namespaces of runs that died. The storage half is the reference store
(``rdq_core.memory.MemoryStore``, "the contract in executable form"), one per namespace
in each process: the toy serves the threads of one process, as its capabilities say.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from rdq_compliance.provision import (
    Backend,
    ProvisionRequest,
    ProvisionUnavailable,
    RungOptions,
    Server,
    option,
    owner_record,
)
from rdq_core.errors import BackendUnavailable, InvalidArgument
from rdq_core.memory import MemoryStore
from rdq_core.spi import Storage

#: ``--rdq-option toy_prefix=...``: what the namespaces' folder names start with.
TOY_PREFIX = option("toy_prefix", str, "ns_", "what the toy's namespace folders start with")
DSN_OPTIONS = RungOptions("toy DSN", [TOY_PREFIX])
OWNER_FILE = "owner"


def folder_of(dsn: str) -> Path:
    """The folder a ``toy:///path`` DSN names; anything else is refused, saying why."""
    url = urlsplit(dsn)
    if url.scheme != "toy" or not url.path:
        raise InvalidArgument(f"toy DSN {dsn!r}: use toy:///absolute/folder")
    return Path(url.path)


class ToyServer(Server):
    """The folder at the DSN; a namespace is a sub-folder with its owner record."""

    origin = "given DSN (a folder: the docs' toy backend)"
    version = "toy 1 (the reference store per namespace)"

    def __init__(self, dsn: str, prefix: str) -> None:
        self.dsn = dsn
        self.root = folder_of(dsn)
        self.prefix = prefix
        if not self.root.is_dir():
            raise BackendUnavailable(f"toy server {dsn!r}: no folder {self.root}; create it")

    def create_namespace(self) -> str:
        namespace = f"{self.prefix}{uuid.uuid4().hex[:12]}"
        (self.root / namespace).mkdir()
        (self.root / namespace / OWNER_FILE).write_text(owner_record())
        return namespace

    def drop_namespace(self, namespace: str) -> None:
        shutil.rmtree(self.root / namespace, ignore_errors=True)
        STORES.pop((self.dsn, namespace), None)

    def recorded_namespaces(self) -> Mapping[str, str | None]:
        found: dict[str, str | None] = {}
        for path in self.root.glob(f"{self.prefix}*"):
            record = path / OWNER_FILE
            found[path.name] = record.read_text() if record.exists() else None
        return found

    def close(self) -> None:
        return None  # a given server stays; its namespaces were dropped by the kit


#: The stores of this process: (dsn, namespace) -> the reference store.
STORES: dict[tuple[str, str], MemoryStore] = {}


class ToyBackend(Backend):
    name = "toy"

    def options(self) -> tuple[RungOptions, ...]:
        return (DSN_OPTIONS,)

    def provision(self, request: ProvisionRequest) -> Server:
        if request.dsn is None:
            raise ProvisionUnavailable(
                "the toy backend has no server of its own: pass --rdq-dsn=toy:///a/folder"
            )
        return self.server_from_dsn(request.dsn, request)

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        values = DSN_OPTIONS.parse(request.options)
        return ToyServer(dsn, values[TOY_PREFIX])

    def open(self, dsn: str, namespace: str) -> Storage:
        if not (folder_of(dsn) / namespace).is_dir():
            raise InvalidArgument(f"toy namespace {namespace!r} does not exist at {dsn!r}")
        return STORES.setdefault((dsn, namespace), MemoryStore())


backend = ToyBackend()
