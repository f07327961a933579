"""Server backends with one deliberate bug that only a network partition exposes.

``*_hb_timeout_taken_as_extended``: the real PostgreSQL / Redis storage, except that a
heartbeat (``extend_lease``) the server has not answered within :data:`HB_TIMEOUT`
seconds is taken as applied when it was *sent while the lease still had more than half
of its length left* (estimated on the storage's clock from the last answer for that
claim): "it left while the lease was live, so it extended it". The client returns the
expiry it expected (send time + lease) instead of raising
:class:`~rdq_core.errors.BackendUnavailable` (outcome unknown). Otherwise it behaves as the
real one (a heartbeat sent later than that still raises ``BackendUnavailable``).

Why only a partition: the fabricated expiry is at most half a lease past the real one,
and it shows only if **another worker reclaims the task in that half lease** while the
first one's call hangs — a hang during which the rest of the system goes on. A killed
server or a cut connection fails the call at once (a reset, not a timeout); a paused
worker makes no call; a frozen server (frozen past 1.5 leases, as every shipped freeze
is) hangs everybody, so no reclaim happens before the fabricated expiry has passed. A
partition of one worker from a running server does: the checker then finds a claim
made while the history says the previous holder's lease was still extended (rule
``lease-respected``, or ``one-claim``), naming the task and both workers.

The victims (tasks whose heartbeat was taken as applied) are appended to
``$RDQ_PARTITION_VICTIMS``. This folder must be on ``PYTHONPATH`` for the workers.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.storage import PostgresStorage
from rdq_redis.plugin import RedisBackend
from rdq_redis.storage import RedisStorage

from rdq_core.errors import BackendUnavailable
from rdq_core.model import Claim

#: Seconds after which an unanswered heartbeat is given up (well under a partition of
#: 2-3 leases of 1 s; far above a heartbeat's latency while the network works).
HB_TIMEOUT = 0.4
VICTIMS_ENV = "RDQ_PARTITION_VICTIMS"


def _victim(task_id: str) -> None:
    path = os.environ.get(VICTIMS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(task_id + "\n")


class _TimeoutTakenAsExtended:
    """Mixin over a real storage class (the bug is in :meth:`_extend_lease`)."""

    _known: dict[str, tuple[datetime, float]]

    def _remember(self, token: str, expiry: datetime) -> None:
        if not hasattr(self, "_known"):
            self._known = {}
        self._known[token] = (expiry, time.monotonic())

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        claims: list[Claim] = super()._claim_due(queue, limit, lease)  # type: ignore[misc]
        for c in claims:
            self._remember(c.token, c.lease_expires_at)
        return claims

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        sent = time.monotonic()
        known = getattr(self, "_known", {}).get(token)
        box: dict[str, Any] = {}
        done = threading.Event()

        def call() -> None:
            try:
                box["value"] = super(_TimeoutTakenAsExtended, self)._extend_lease(  # type: ignore[misc]
                    task_id, token, lease
                )
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=call, name=f"heartbeat-{task_id}", daemon=True).start()
        if done.wait(HB_TIMEOUT):
            if "error" in box:
                raise box["error"]
            self._remember(token, box["value"])
            return box["value"]  # type: ignore[no-any-return]
        if known is not None:
            expiry, answered = known
            sent_at = expiry - lease + timedelta(seconds=sent - answered)  # storage clock
            if sent_at < expiry - lease / 2:
                _victim(task_id)
                return sent_at + lease  # the bug: "it left while the lease was live"
        raise BackendUnavailable(f"extend_lease of {task_id}: no answer in {HB_TIMEOUT}s")


class _PgStorage(_TimeoutTakenAsExtended, PostgresStorage):
    pass


class _RedisStorage(_TimeoutTakenAsExtended, RedisStorage):
    pass


class PgHbTimeoutTakenAsExtended(PostgresBackend):
    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return _PgStorage(dsn, namespace)


class RedisHbTimeoutTakenAsExtended(RedisBackend):
    def open(self, dsn: str, namespace: str) -> RedisStorage:
        return _RedisStorage(dsn, namespace)


postgres_hb_timeout_taken_as_extended = PgHbTimeoutTakenAsExtended()
redis_hb_timeout_taken_as_extended = RedisHbTimeoutTakenAsExtended()
