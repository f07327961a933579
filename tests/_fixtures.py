"""Fixture bodies the backends' conftests share: a namespace of a server for one test,
an object closed after the test, and the storages a test opens, all closed afterwards.
A fixture yields from one (``yield from namespace_of(server)``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)
T = TypeVar("T", bound=Closable)


class HasNamespaces(Protocol):
    def create_namespace(self) -> str: ...

    def drop_namespace(self, namespace: str) -> None: ...


def namespace_of(server: HasNamespaces) -> Iterator[str]:
    """A fresh namespace of ``server``, dropped after the test."""
    namespace = server.create_namespace()
    yield namespace
    server.drop_namespace(namespace)


def closed_after(thing: C) -> Iterator[C]:
    """``thing`` (a server, a storage), closed after the test."""
    yield thing
    thing.close()


class Storages(Generic[T]):
    """Open storages with ``open_`` (called as this object is); :meth:`close` closes every
    one opened."""

    def __init__(self, open_: Callable[..., T]) -> None:
        self._open = open_
        self.opened: list[T] = []

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        storage = self._open(*args, **kwargs)
        self.opened.append(storage)
        return storage

    def close(self) -> None:
        for storage in self.opened:
            storage.close()


def storages(open_: Callable[..., T]) -> Iterator[Storages[T]]:
    """The storages a test opens with ``open_``, all closed after the test."""
    yield from closed_after(Storages(open_))
