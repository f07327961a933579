"""dramatiq's own dispatch script, run with reads beside it in one MULTI (storage half).

Every write of dramatiq's Redis broker is one call of its Lua script ``dispatch.lua``
through ``RedisBroker._dispatch`` (``dramatiq/brokers/redis.py`` L259-280 at v2.2.1),
whose arguments are ``[command, current_millis(), queue, broker_id, heartbeat_timeout,
dead_message_ttl, _should_do_maintenance(command), _max_unpack_size(), *args]`` and whose
one key is the namespace. The script reports nothing for an ack or a nack: whether the
library took it (``SREM`` of the broker's ack set returned 1, dispatch.lua L191-212) is
not in its reply. :class:`Dispatcher` runs **the same script with the same arguments,
built from the same broker attributes**, inside a ``MULTI`` with plain reads before or
after it: a read before sees exactly the state the script then sees (nothing runs in
between), so ``SISMEMBER`` of the ack set says whether the script's ``SREM`` removed the
id. The reads decide nothing: the script runs whatever they say, and the adapter only
reports what it did. The timestamp the script used (the claim's and the heartbeat's time)
is known the same way: it is the one put in the arguments.

The MULTI goes over the broker's own client, the one ``RedisBroker(url=...)`` builds
(``redis.ConnectionPool.from_url``): the adapter configures nothing of it. With redis-py
8.2.0 that pool's connections carry no automatic retry (``Retry(NoBackoff(), 0)``, the
``Connection`` default when no retry is given), so a MULTI is sent once and a lost reply
is the adapter's ``BackendUnavailable`` (outcome unknown), as the SPI says. A redis-py
that retried a MULTI whose first try took effect would make the read see that try's
effect, and an applied ack would be reported refused; ``tests/adapters/test_dramatiq.py``
checks the broker's connections for that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis

__all__ = ["Dispatcher", "Observed"]

Read = Callable[[Any], object]


@dataclass(frozen=True)
class Observed:
    """One script call: its timestamp (ms, the caller's clock), what it returned, and the
    replies of the reads queued before and after it in the same MULTI."""

    timestamp_ms: int
    reply: Any
    before: tuple[Any, ...] = ()
    after: tuple[Any, ...] = ()


class Dispatcher:
    """Calls ``broker``'s dispatch script as ``RedisBroker._dispatch`` does, over
    ``client`` (a connection to the same server), in a MULTI with reads."""

    def __init__(self, broker: RedisBroker, client: redis.Redis) -> None:
        self.broker = broker
        self.client = client
        script = broker.scripts["dispatch"]
        self._source = script.script
        self._sha = script.sha

    def arguments(self, command: str, queue: str, *args: object) -> tuple[int, list[object]]:
        """``(timestamp, ARGV)`` exactly as ``RedisBroker._dispatch`` builds them (R L266-277)."""
        b = self.broker
        timestamp = current_millis()
        argv: list[object] = [
            command,
            timestamp,
            queue,
            b.broker_id,
            b.heartbeat_timeout,
            b.dead_message_ttl,
            b._should_do_maintenance(command),
            b._max_unpack_size(),
            *args,
        ]
        return timestamp, argv

    def run(
        self,
        command: str,
        queue: str,
        *args: object,
        before: Sequence[Read] = (),
        after: Sequence[Read] = (),
    ) -> Observed:
        """Run ``command`` on ``queue``; raise what the script or a read raised."""
        for attempt in (1, 2):
            timestamp, argv = self.arguments(command, queue, *args)
            pipe = self.client.pipeline(transaction=True)
            for read in before:
                read(pipe)
            pipe.evalsha(self._sha, 1, self.broker.namespace, *argv)
            for read in after:
                read(pipe)
            replies = pipe.execute(raise_on_error=False)
            n = len(before)
            reply = replies[n]
            if isinstance(reply, redis.exceptions.NoScriptError) and attempt == 1:
                # What redis-py's Script does on NOSCRIPT (a restarted server forgot it):
                # load it and call again; the script did not run, the reads changed nothing.
                self.client.script_load(self._source)
                continue
            for value in replies:
                if isinstance(value, Exception):
                    raise value
            return Observed(timestamp, reply, tuple(replies[:n]), tuple(replies[n + 1 :]))
        raise AssertionError("unreachable")  # pragma: no cover
