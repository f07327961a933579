"""The adapter's one deployment setting, carried in the DSN (storage half).

pgqueuer decides how long a claim holds by the ``heartbeat_timeout`` the *dequeuing*
worker passes (``QueueManager.run(heartbeat_timeout=...)``, CLI ``--heartbeat-timeout``,
default 30 s; every worker of a deployment is meant to use the same value). The adapter
deploys one value for every storage of a run: a storage opened in a worker process has
nothing but the DSN and the namespace, so the value travels in the DSN as the query
option ``pgqueuer_heartbeat_timeout=<seconds>`` (a URL DSN ``...?pgqueuer_heartbeat_timeout=2``
or a key=value word ``pgqueuer_heartbeat_timeout=2``). :func:`split` takes it out again
before the DSN reaches libpq, which would refuse an unknown parameter.

Imports only the standard library and :mod:`rdq_core`.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rdq_core.errors import InvalidArgument
from rdq_core.masking import mask_dsn as _mask

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "LIBRARY_DEFAULT_HEARTBEAT_TIMEOUT",
    "OPTION",
    "mask",
    "parse_timeout",
    "split",
    "with_timeout",
]

#: The query option (and ``--rdq-option`` key) naming the heartbeat timeout, in seconds.
OPTION = "pgqueuer_heartbeat_timeout"
#: What the adapter deploys when nothing is said: short, so the kit's reclaim tests do
#: not crawl, and well above a heartbeat round trip on a loaded machine.
DEFAULT_HEARTBEAT_TIMEOUT = timedelta(seconds=2)
#: pgqueuer's own default (``QueueManager.run``, qm.py; CLI ``--heartbeat-timeout``).
LIBRARY_DEFAULT_HEARTBEAT_TIMEOUT = timedelta(seconds=30)

_KV_OPTION = re.compile(rf"(?:^|\s+){OPTION}\s*=\s*(\S+)")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def parse_timeout(text: object, where: str = OPTION) -> timedelta:
    """A heartbeat timeout in seconds (a positive, finite number) as a ``timedelta``."""
    try:
        seconds = float(str(text).strip())
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(
            f"{where}={text!r}: expected a positive number of seconds (pgqueuer's "
            f"heartbeat_timeout; the library's own default is "
            f"{LIBRARY_DEFAULT_HEARTBEAT_TIMEOUT.total_seconds():g})"
        )
    return timedelta(seconds=seconds)


def split(dsn: str) -> tuple[str, timedelta | None]:
    """``(the DSN without the option, the timeout it named or None)``."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        given = [v for k, v in pairs if k == OPTION]
        if not given:
            return dsn, None
        rest = [(k, v) for k, v in pairs if k != OPTION]
        clean = urlunsplit(
            (parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)
        )
        return clean, parse_timeout(given[-1])
    found = _KV_OPTION.findall(dsn)
    if not found:
        return dsn, None
    return _KV_OPTION.sub("", dsn).strip(), parse_timeout(found[-1])


def with_timeout(dsn: str, timeout: timedelta | None) -> str:
    """``dsn`` (without the option) carrying ``timeout`` (``None``: as it is)."""
    if timeout is None:
        return dsn
    seconds = f"{timeout.total_seconds():g}"
    if "://" in dsn:
        parts = urlsplit(dsn)
        pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
        pairs.append((OPTION, seconds))
        return urlunsplit(
            (parts.scheme, parts.netloc, parts.path, urlencode(pairs), parts.fragment)
        )
    return f"{dsn} {OPTION}={seconds}".strip()


def mask(dsn: str) -> str:
    """``dsn`` with every secret in it replaced by ``***``: the kit's one masker,
    :func:`rdq_core.masking.mask_dsn`."""
    return _mask(dsn)
