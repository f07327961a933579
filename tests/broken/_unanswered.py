"""What the fault-only variants share: a client that takes an unanswered call as applied.

Two bugs of the same family, each on PostgreSQL and Redis
(:mod:`tests.broken.postgres`, :mod:`tests.broken.redis`):

``acks_timed_out_reports`` — only a **server freeze** exposes it. The real storage, except
that an outcome report (``complete``) runs as an explicit transaction and, when the
server has not answered within :data:`ACK_TIMEOUT` seconds, the client tears the
connection down and takes the report as applied — the optimistic client that "knows" its
write went through, instead of raising :class:`~rdq_core.errors.BackendUnavailable`
(outcome unknown). The server, once it runs again, sees the transaction's connection gone
before its ``COMMIT`` (PostgreSQL) or ``EXEC`` (Redis ``MULTI``) and drops it; the worker
has journaled an accepted outcome that no history holds: rule ``outcome-recorded``.
Nothing else the nemesis does makes a report hang that long: a killed server or a cut
connection fails the call at once (a reset, not a hang), and a paused *worker* does not
wait on its own calls. A server frozen past the lease (``server_pause``) does. Victims
(tasks whose report was taken as applied without an answer): ``$RDQ_FREEZE_VICTIMS``.

``hb_timeout_taken_as_extended`` — only a **network partition** exposes it. The real
storage, except that a heartbeat (``extend_lease``) the server has not answered within
:data:`HB_TIMEOUT` seconds is taken as applied when it was *sent while the lease still had
more than half of its length left* (estimated on the storage's clock from the last answer
for that claim): "it left while the lease was live, so it extended it". The client returns
the expiry it expected (send time + lease) instead of raising ``BackendUnavailable``.
Otherwise it behaves as the real one (a heartbeat sent later than that still raises
``BackendUnavailable``). Why only a partition: the fabricated expiry is at most half a
lease past the real one, and it shows only if **another worker reclaims the task in that
half lease** while the first one's call hangs — a hang during which the rest of the
system goes on. A killed server or a cut connection fails the call at once (a reset, not
a timeout); a paused worker makes no call; a frozen server (frozen past 1.5 leases, as
every shipped freeze is) hangs everybody, so no reclaim happens before the fabricated
expiry has passed. A partition of one worker from a running server does: the checker then
finds a claim made while the history says the previous holder's lease was still extended
(rule ``lease-respected``, or ``one-claim``), naming the task and both workers. The
expiry it returns is the client's estimate (the storage time of the last answer plus the
time since, on the client's clock), off by that answer's latency: rule ``storage-clock``
may name it too, when the latency passes that rule's margin. Victims
(tasks whose heartbeat was taken as applied): ``$RDQ_PARTITION_VICTIMS``.

The victims files (``task id`` per line) let a test check that the violation the checker
names is one the bug produced. The worker processes import the variants by their dotted
names: the checkout root on ``PYTHONPATH`` (:func:`tests._paths.pythonpath`).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from rdq_core.errors import BackendUnavailable
from rdq_core.model import Claim

#: Seconds after which an unanswered report is taken as applied (well under a freeze of
#: 2-3 leases; far above any report's latency while the server runs).
ACK_TIMEOUT = 1.0
#: Seconds after which an unanswered heartbeat is given up (well under a partition of
#: 2-3 leases of 1 s; far above a heartbeat's latency while the network works).
HB_TIMEOUT = 0.4
FREEZE_VICTIMS_ENV = "RDQ_FREEZE_VICTIMS"
PARTITION_VICTIMS_ENV = "RDQ_PARTITION_VICTIMS"


def victim(env: str, task_id: str) -> None:
    """Append ``task_id`` to the victims file named by ``$env`` (if it is set)."""
    path = os.environ.get(env)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(task_id + "\n")


class TimeoutTakenAsExtended:
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
                box["value"] = super(TimeoutTakenAsExtended, self)._extend_lease(  # type: ignore[misc]
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
                victim(PARTITION_VICTIMS_ENV, task_id)
                return sent_at + lease  # the bug: "it left while the lease was live"
        raise BackendUnavailable(f"extend_lease of {task_id}: no answer in {HB_TIMEOUT}s")
