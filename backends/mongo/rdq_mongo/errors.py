"""Turning pymongo errors into SPI errors, and masking passwords in URIs (storage half).

No pymongo exception leaves rdq_mongo. Everything it raises becomes
``BackendUnavailable``, and the message says which of two cases it is:

- **nothing was done**: no server could be selected (down, unreachable, no primary —
  ``ServerSelectionTimeoutError``), the credentials were refused, or the server refused
  the command before running it (``NotWritablePrimary`` during a failover);
- **the outcome is unknown**: the connection dropped or no reply came in time after the
  command was sent (``AutoReconnect``, ``NetworkTimeout``), or the write was applied on
  the primary but its ``w:"majority"`` acknowledgement failed (``WriteConcernError``).

**Retryable writes and a lost reply.** The client runs with ``retryWrites=true``: pymongo
resends a single-document write once after a network error, and MongoDB recognises the
retry by its session and transaction number and answers with the first execution's
result instead of running it again — so a claim or an outcome whose first reply was lost
is applied exactly once. (SecantusDB 0.7 deduplicates such retries too: measured through
a reply-losing proxy, ``tests/backends/mongo/test_mongo_reply_lost.py``.) rdq_mongo does
not rely on the server deduplicating (the same tests run with the retry made to look
new): every outcome call appends an attempt carrying a nonce of *that call*, so when the
driver's retry finds its fence no longer true and the last attempt bears the call's own
nonce, the first try took effect and the call returns as a success; an enqueue finds its
own document by the nonce it stored; a claim whose retry matched nothing after a
network error reads the task back by the claim's fresh token and returns the claim if
the first try applied (never a task held by a token nobody has).

When the retry fails too, the caller gets ``BackendUnavailable`` (outcome unknown). The
caller's own retry is a *new* call: if the first took effect it is ``StaleClaim`` (the
token is no longer current, as the SPI demands of a repeated outcome) and the caller
settles it by reading the history — as :class:`rdq_core.worker.Worker` does.

``DuplicateKeyError`` never reaches this module (enqueue handles it); any other
``OperationFailure`` is a bug in rdq_mongo or a server that does not speak the subset it
needs: said so in the message.
"""

from __future__ import annotations

import pymongo.errors as px

from rdq_core.errors import BackendUnavailable, RdqError
from rdq_core.masking import mask_dsn as _mask

UNKNOWN = (
    "the outcome is unknown: the server may or may not have acted; retry it (a claim "
    "token stays valid)"
)
NOTHING = "nothing was done"
#: Server error codes that mean "refused before acting" (not primary, shutting down, ...).
_REFUSED_CODES = frozenset({10107, 13435, 11600, 11602, 189, 91, 13436})


def mask_uri(uri: str) -> str:
    """``uri`` with every secret in it replaced by ``***``: the kit's one masker,
    :func:`rdq_core.masking.mask_dsn`."""
    return _mask(uri)


def _detail(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ") or type(exc).__name__
    if len(text) > 400:
        text = text[:400] + "…"
    return f"{type(exc).__name__}: {text}"


def map_error(exc: BaseException, action: str, where: str) -> RdqError:
    """The SPI error for ``exc``, raised while doing ``action`` on ``where``."""
    if isinstance(exc, RdqError):
        return exc
    detail = _detail(exc)
    if isinstance(exc, px.ServerSelectionTimeoutError):
        return BackendUnavailable(
            f"{action}: no server of {where} could be reached ({detail}): it is down, "
            f"unreachable or has no primary; {NOTHING}"
        )
    if isinstance(exc, px.NotPrimaryError):
        return BackendUnavailable(
            f"{action}: {where} answered as a non-primary ({detail}): a failover in "
            f"progress?; {NOTHING}"
        )
    if isinstance(exc, px.ConnectionFailure):  # AutoReconnect, NetworkTimeout, ...
        return BackendUnavailable(
            f"{action}: lost the connection to {where} or no reply in time ({detail}); {UNKNOWN}"
        )
    if isinstance(exc, px.WriteConcernError):
        return BackendUnavailable(
            f"{action}: {where} applied the write but could not acknowledge it with "
            f'w:"majority", j:true ({detail}); {UNKNOWN}'
        )
    if isinstance(exc, px.OperationFailure):
        if exc.code in (18, 13):
            return BackendUnavailable(
                f"{action}: {where} refused the credentials or the command ({detail}); {NOTHING}"
            )
        if exc.code in _REFUSED_CODES:
            return BackendUnavailable(
                f"{action}: {where} refused the command for now ({detail}); {NOTHING}"
            )
        return BackendUnavailable(
            f"{action}: {where} failed the command ({detail}); this is a bug in rdq_mongo "
            f"or a server without the features it needs (MongoDB 6.0+); {UNKNOWN}"
        )
    if isinstance(exc, (px.InvalidOperation, px.ConfigurationError)):
        return BackendUnavailable(f"{action}: {where}: {detail}; {NOTHING}")
    return BackendUnavailable(f"{action}: {where} failed ({detail}); {UNKNOWN}")
