"""One asyncio loop in a daemon thread: how a synchronous storage calls pgqueuer.

pgqueuer's claim and outcome API (``Queries.dequeue``, ``log_jobs``, ``retry_job``,
``update_heartbeat``, ...) is async only; its sync API (``SyncQueries``) can only
enqueue (docs/reference/drivers.md). The rdq SPI is synchronous and shared between
threads, so each storage owns a :class:`LoopThread` and submits coroutines to it with
:func:`asyncio.run_coroutine_threadsafe`, waiting for the result. Standard library only.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["LoopThread"]


class LoopThread:
    """An event loop running forever in a daemon thread until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:  # pragma: no cover - misuse
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait for its thread (idempotent)."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout)
