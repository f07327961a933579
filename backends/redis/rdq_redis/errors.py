"""Turning redis-py errors into SPI errors, and masking passwords in DSNs (storage half).

No redis-py exception leaves rdq_redis. Everything it raises becomes
``BackendUnavailable``, and the message says which of two cases it is:

- **nothing was done**: the server could not be reached (connection refused, connect
  timeout), it refused before running anything (loading its data set, a replica, out of
  memory, the cluster down or a slot not served), or the call was never sent;
- **the outcome is unknown**: the connection dropped, or no reply came in time, after
  the call was sent — the server may have run the script. A caller retries with the same
  token (every outcome is fenced by it: a retried report either takes effect once or is
  refused as stale). The chaos journal records such a call as ``info`` (unknown), never
  as a failure.

``NOSCRIPT`` never reaches this module (redis-py reloads the script and runs it again; the
script had not run). ``MOVED``/``ASK`` are followed by redis-py's cluster client. A
``CROSSSLOT`` or a Lua error would be a bug in rdq_redis: said so in the message. A script
refused for reaching a key of another slot, or a key it did not declare (Redis Cluster, or
the ``rdq_check_keys`` guard anywhere), is moreover marked with the kit's rule
``cluster-keys`` (``RdqError.rule``; bug class ``undeclared-keys``), so the kit reports it
under that rule.
"""

from __future__ import annotations

import redis.exceptions as rx

from rdq_core.errors import BackendUnavailable, RdqError
from rdq_core.masking import mask_dsn as _mask

UNKNOWN = (
    "the outcome is unknown: the server may or may not have acted; retry it (a claim "
    "token stays valid)"
)
NOTHING = "nothing was done"


def mask_dsn(dsn: str) -> str:
    """``dsn`` with every secret in it replaced by ``***``: the kit's one masker,
    :func:`rdq_core.masking.mask_dsn`."""
    return _mask(dsn)


def _detail(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ") or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def is_connect_failure(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while connecting, before anything was sent."""
    text = str(exc)
    return "connecting to" in text or "Timeout connecting" in text


#: The kit's rule id a script that touches an undeclared or foreign-slot key breaks
#: (bug class ``undeclared-keys``); carried by the error as ``RdqError.rule``.
CLUSTER_KEYS_RULE = "cluster-keys"
#: What Redis (7.0+, new-style scripts) and redis-py say when a call or a script reaches
#: keys of several slots, or a key this node does not serve; and what the scripts'
#: undeclared-key guard (``rdq_check_keys``, :mod:`rdq_redis.scripts`) says.
_UNDECLARED_KEY_SIGNS = (
    "CROSSSLOT",
    "do not hash to the same slot",
    "non local key",
    "must map to the same key slot",
    "rdq check_keys:",
)


def is_undeclared_key_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a refusal of keys outside one slot (or outside ``KEYS``)."""
    if isinstance(exc, rx.ClusterCrossSlotError):
        return True
    text = str(exc)
    return any(sign in text for sign in _UNDECLARED_KEY_SIGNS)


def map_error(exc: BaseException, action: str, where: str) -> RdqError:
    """The SPI error for ``exc``, raised while doing ``action`` on ``where``."""
    if isinstance(exc, RdqError):
        return exc
    detail = _detail(exc)
    if isinstance(exc, rx.BusyLoadingError):
        return BackendUnavailable(
            f"{action}: {where} is loading its data set ({detail}); {NOTHING}"
        )
    if isinstance(exc, (rx.AuthenticationError, rx.AuthorizationError)):
        return BackendUnavailable(
            f"{action}: {where} refused the credentials ({detail}); {NOTHING}"
        )
    if isinstance(exc, rx.MaxConnectionsError):
        return BackendUnavailable(f"{action}: no free connection to {where} ({detail}); {NOTHING}")
    if isinstance(exc, (rx.ConnectionError, rx.TimeoutError)):
        if is_connect_failure(exc):
            return BackendUnavailable(
                f"{action}: cannot connect to {where} ({detail}): the server is down or "
                f"unreachable; {NOTHING}"
            )
        if isinstance(exc, rx.TimeoutError):
            return BackendUnavailable(
                f"{action}: no reply from {where} in time ({detail}); {UNKNOWN}"
            )
        return BackendUnavailable(
            f"{action}: lost the connection to {where} mid-call ({detail}); {UNKNOWN}"
        )
    if isinstance(exc, rx.ReadOnlyError):
        return BackendUnavailable(
            f"{action}: {where} answered as a read-only replica ({detail}): a failover in "
            f"progress?; {NOTHING}"
        )
    if isinstance(exc, rx.OutOfMemoryError):
        return BackendUnavailable(
            f"{action}: {where} is out of memory (maxmemory reached) ({detail}); {NOTHING}"
        )
    if isinstance(exc, (rx.ClusterDownError, rx.TryAgainError, rx.SlotNotCoveredError)):
        return BackendUnavailable(
            f"{action}: the cluster at {where} is not serving the slot ({detail}); {NOTHING}"
        )
    if is_undeclared_key_error(exc):
        return BackendUnavailable(
            f"{action}: {where} refused a key of another slot, or one the script did not "
            f"declare ({detail}); this is a bug in rdq_redis (every script's keys are "
            "declared in KEYS and share one hash tag); a script stops at that key and keeps "
            f"what it wrote before it (Redis does not roll a script back); {UNKNOWN}",
            rule=CLUSTER_KEYS_RULE,
        )
    if isinstance(exc, rx.ResponseError):
        text = str(exc)
        if "BUSY" in text.split(" ", 1)[0]:
            return BackendUnavailable(
                f"{action}: {where} is busy running a script ({detail}); {NOTHING}"
            )
        return BackendUnavailable(
            f"{action}: {where} refused the call ({detail}); this is a bug in rdq_redis or "
            f"its keys were changed by something else; {UNKNOWN}"
        )
    return BackendUnavailable(f"{action}: {where} failed ({detail}); {UNKNOWN}")
