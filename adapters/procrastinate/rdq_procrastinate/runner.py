"""One asyncio event loop in a daemon thread, for procrastinate's async-only worker API
(storage half).

procrastinate's worker-side calls (``fetch_job``, ``finish_job``, ``retry_job``,
``get_stalled_jobs``, ``register_worker``, ``update_heartbeat``, ...) are coroutines only;
the synchronous connectors refuse them (``SyncConnectorConfigurationError``). The SPI is
synchronous and shared by threads, so a :class:`LoopThread` runs one loop for one storage
and each call is handed to it with ``asyncio.run_coroutine_threadsafe`` and waited for:
calls from several threads run concurrently on the loop, as a procrastinate worker's
concurrent jobs do, bounded by the size of the connector's pool.

**Fork.** A loop thread does not survive ``fork``; a child never touches its parent's
loop or pool (closing them would end the parent's sessions): the storage starts a new
:class:`LoopThread` in the child and keeps the inherited one referenced in
:data:`INHERITED`, so nothing of it is finalised.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["INHERITED", "LoopThread"]

T = TypeVar("T")

#: Loops (and what runs on them) a child process inherited through fork: never used, never
#: closed, only kept referenced.
INHERITED: list[object] = []


class LoopThread:
    """An event loop running in a daemon thread of this process."""

    def __init__(self, name: str) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def inherited(self) -> bool:
        """Whether this loop belongs to a parent process (we were forked)."""
        return self.pid != os.getpid()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        """Stop the loop and wait for its thread (call after closing what runs on it)."""
        if self.inherited:
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()
