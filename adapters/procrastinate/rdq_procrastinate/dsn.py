"""The adapter's settings carried in the DSN, and how its connections are made (storage half).

Two deployment settings of procrastinate travel with the address every process opens,
as query parameters of a URL DSN (taken out before the DSN reaches libpq, which refuses
parameters it does not know), e.g.
``postgresql://postgres@127.0.0.1:5432/test?procrastinate_stalled_threshold=5``:

- ``procrastinate_stalled_threshold`` (seconds, positive; default
  :data:`DEFAULT_STALLED_THRESHOLD_S`): procrastinate decides that a job is stalled when
  the worker that fetched it has not sent a heartbeat for ``seconds_since_heartbeat``
  (``JobManager.get_stalled_jobs``' argument, 30 s by default); a starting worker prunes
  workers silent for ``stalled_worker_timeout`` (also 30 s by default), and the docs ask
  to keep the two in step: the adapter uses this one value for both. Short enough that
  the kit's lease tests do not crawl.
- ``procrastinate_recipe_period`` (seconds, >= 0; default :data:`DEFAULT_RECIPE_PERIOD_S`):
  the period of the stalled-jobs recipe, a periodic task in procrastinate's docs
  (``cron="*/10 * * * *"``: every 10 minutes); 0 runs it at every claim, in every worker,
  unelected (see :mod:`rdq_procrastinate.storage`, "Schedule").

**Connections.** Every connection procrastinate's pool opens gets ``search_path`` set to
the namespace (a PostgreSQL schema holding procrastinate's tables and functions, whose
SQL names nothing schema-qualified, so it all resolves through the search path), and
``application_name`` ``rdq:<namespace>`` (the name the kit's ``cut_connections`` fault
looks for).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from rdq_core.errors import BackendUnavailable, InvalidArgument

__all__ = [
    "DEFAULT_RECIPE_PERIOD_S",
    "DEFAULT_STALLED_THRESHOLD_S",
    "RECIPE_PERIOD_PARAM",
    "STALLED_THRESHOLD_PARAM",
    "Settings",
    "connection_kwargs",
    "parse_seconds",
    "split_dsn",
    "with_settings",
]

#: The DSN query parameter naming the stalled threshold, in seconds.
STALLED_THRESHOLD_PARAM = "procrastinate_stalled_threshold"
#: The DSN query parameter naming the recipe's period, in seconds.
RECIPE_PERIOD_PARAM = "procrastinate_recipe_period"
#: The threshold the adapter deploys unless told otherwise (procrastinate's own: 30 s).
DEFAULT_STALLED_THRESHOLD_S = 2.0
#: The recipe's period unless told otherwise (procrastinate's docs: 10 minutes).
DEFAULT_RECIPE_PERIOD_S = 0.2
#: A namespace is a schema the postgres backend created: plain lower-case letters.
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: Seconds to wait for a TCP connection (only when the DSN does not say).
CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class Settings:
    """The adapter's deployment settings (``None``: not given, the default applies)."""

    threshold: float | None = None
    recipe_period: float | None = None

    @property
    def threshold_s(self) -> float:
        return DEFAULT_STALLED_THRESHOLD_S if self.threshold is None else self.threshold

    @property
    def recipe_period_s(self) -> float:
        return DEFAULT_RECIPE_PERIOD_S if self.recipe_period is None else self.recipe_period

    def merged(self, other: Settings) -> Settings:
        """These settings, overridden by what ``other`` gives."""
        return Settings(
            other.threshold if other.threshold is not None else self.threshold,
            other.recipe_period if other.recipe_period is not None else self.recipe_period,
        )


def parse_seconds(name: str, text: str, where: str, *, zero: bool) -> float:
    """Seconds from ``text`` (finite; positive, or >= 0 with ``zero``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        meaning = (
            "the period of procrastinate's stalled-jobs recipe, 0 for every claim; default "
            f"{DEFAULT_RECIPE_PERIOD_S}"
            if name == RECIPE_PERIOD_PARAM
            else "procrastinate's stalled threshold: get_stalled_jobs' seconds_since_heartbeat "
            f"and the worker's stalled_worker_timeout; default {DEFAULT_STALLED_THRESHOLD_S}"
        )
        kind = "a number of seconds >= 0" if zero else "a positive number of seconds"
        raise InvalidArgument(f"{where} {name}={text!r}: expected {kind} ({meaning})")
    return value


def split_dsn(dsn: str) -> tuple[str, Settings]:
    """``dsn`` without the adapter's parameters, and the settings they named."""
    if "://" not in dsn or "?" not in dsn:
        return dsn, Settings()
    parts = urlsplit(dsn)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    threshold = period = None
    kept = []
    for key, value in pairs:
        if key == STALLED_THRESHOLD_PARAM:
            threshold = parse_seconds(key, value, "the DSN's", zero=False)
        elif key == RECIPE_PERIOD_PARAM:
            period = parse_seconds(key, value, "the DSN's", zero=True)
        else:
            kept.append((key, value))
    query = urlencode(kept, safe="/:,")
    base = urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
    return base, Settings(threshold, period)


def with_settings(dsn: str, settings: Settings) -> str:
    """``dsn`` (a URL) carrying ``settings`` (the ones given) in its query."""
    base, _ = split_dsn(dsn)
    params = []
    if settings.threshold is not None:
        params.append(f"{STALLED_THRESHOLD_PARAM}={settings.threshold!r}")
    if settings.recipe_period is not None:
        params.append(f"{RECIPE_PERIOD_PARAM}={settings.recipe_period!r}")
    if not params:
        return base
    joiner = "&" if urlsplit(base).query else "?"
    return base + joiner + "&".join(params)


def schema_name(value: object) -> str:
    if not isinstance(value, str) or not _SCHEMA_RE.fullmatch(value):
        raise InvalidArgument(
            f"invalid procrastinate namespace {value!r}: a PostgreSQL schema name of 1 to 63 "
            "characters from [a-z0-9_], not starting with a digit"
        )
    return value


def connection_kwargs(dsn: str, namespace: str) -> dict[str, Any]:
    """Connection keywords for ``psycopg`` (they override the DSN's own): the namespace
    first and only on the search path, the kit's application name, a connect timeout."""
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise BackendUnavailable(f"invalid postgres DSN: {exc}") from None
    options = given.get("options") or ""
    kwargs: dict[str, Any] = {
        "application_name": f"rdq:{namespace}",
        "options": f"{options} -c search_path={schema_name(namespace)}".strip(),
    }
    if "connect_timeout" not in given:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
    return kwargs
