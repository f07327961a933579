"""The ``memory`` backend plugin (entry point ``rdq.backends: memory``).

Its storage half is the reference store itself, :class:`rdq_core.memory.MemoryStore`;
this module is only the plugin half: a namespace is one store object in this process,
so the backend serves threads of one process and declares no ``multi_process``.
:class:`MemoryBackend` takes a store factory, which makes it the quickest way to build
a variant of the reference store (the kit's own broken backends are built so).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from rdq_compliance.provision.backend import Backend, ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions
from rdq_core.memory import MemoryStore
from rdq_core.spi import Storage


class _MemoryServer(Server):
    dsn = "memory:"
    origin = "in-process"
    version = "the reference store, rdq_core.memory"

    def __init__(self, backend: MemoryBackend) -> None:
        self._backend = backend

    def create_namespace(self) -> str:
        ns = uuid.uuid4().hex
        self._backend.stores[ns] = self._backend.store_factory()
        return ns

    def drop_namespace(self, namespace: str) -> None:
        self._backend.stores.pop(namespace, None)

    def close(self) -> None:
        self._backend.stores.clear()


class MemoryBackend(Backend):
    """``--rdq-backend=memory``: the reference store, shared by threads of one process."""

    name = "memory"

    def __init__(
        self, store_factory: Callable[[], MemoryStore] = MemoryStore, name: str = "memory"
    ) -> None:
        self.name = name
        self.stores: dict[str, MemoryStore] = {}
        self.store_factory = store_factory

    def options(self) -> tuple[RungOptions, ...]:
        """None: the store lives in the process."""
        return ()

    def provision(self, request: ProvisionRequest) -> Server:
        return _MemoryServer(self)

    def open(self, dsn: str, namespace: str) -> Storage:
        store = self.stores.get(namespace)
        if store is None:
            store = self.stores[namespace] = self.store_factory()
        return store


backend = MemoryBackend()
