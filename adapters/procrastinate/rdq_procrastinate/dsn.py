"""The adapter's settings carried in the DSN, and how its connections are made (storage half).

Two deployment settings of procrastinate travel with the address every process opens,
as query parameters of a URL DSN (taken out before the DSN reaches libpq, which refuses
parameters it does not know), e.g.
``postgresql://postgres@127.0.0.1:5432/test?procrastinate_stalled_threshold=5``:

- ``procrastinate_stalled_threshold`` (seconds, positive; default
  :data:`DEFAULT_STALLED_THRESHOLD_S`): procrastinate decides that a job is stalled when
  the worker that fetched it has not sent a heartbeat for ``seconds_since_heartbeat``
  (``JobManager.get_stalled_jobs``' argument, 30 s by default). Short enough that the
  kit's lease tests do not crawl. The workers' ``stalled_worker_timeout`` (the prune at a
  worker's start) stays at procrastinate's default (:mod:`rdq_procrastinate.storage`).
- ``procrastinate_recipe_period`` (whole seconds; default
  :data:`DEFAULT_RECIPE_PERIOD_S`): the period of the stalled-jobs recipe, a periodic
  task in procrastinate's docs (``cron="*/10 * * * *"``: every 600 s). A period must be
  one a cron line gives at regular intervals (:func:`recipe_cron`): a divisor of 60
  seconds (the docs' cron page: "an optional 6th column is supported for seconds [...]
  allowing you to make a periodic task as frequent as "1 per second""), or a whole
  number of minutes dividing an hour, the docs' 600 among them.

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
    "DOCS_RECIPE_PERIOD_S",
    "RECIPE_PERIOD_PARAM",
    "STALLED_THRESHOLD_PARAM",
    "Settings",
    "connection_kwargs",
    "parse_period",
    "parse_seconds",
    "recipe_cron",
    "split_dsn",
    "with_settings",
]

#: The DSN query parameter naming the stalled threshold, in seconds.
STALLED_THRESHOLD_PARAM = "procrastinate_stalled_threshold"
#: The DSN query parameter naming the recipe's period, in seconds.
RECIPE_PERIOD_PARAM = "procrastinate_recipe_period"
#: The threshold the adapter deploys unless told otherwise (procrastinate's own: 30 s).
DEFAULT_STALLED_THRESHOLD_S = 2.0
#: The recipe's period unless told otherwise: the shortest a cron line gives, "* * * * * *".
DEFAULT_RECIPE_PERIOD_S = 1
#: The recipe's period in procrastinate's docs: ``cron="*/10 * * * *"``.
DOCS_RECIPE_PERIOD_S = 600
#: A namespace is a schema the postgres backend created: plain lower-case letters.
_SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: Seconds to wait for a TCP connection (only when the DSN does not say).
CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class Settings:
    """The adapter's deployment settings (``None``: not given, the default applies)."""

    threshold: float | None = None
    recipe_period: int | None = None

    @property
    def threshold_s(self) -> float:
        return DEFAULT_STALLED_THRESHOLD_S if self.threshold is None else self.threshold

    @property
    def recipe_period_s(self) -> int:
        return DEFAULT_RECIPE_PERIOD_S if self.recipe_period is None else self.recipe_period

    def merged(self, other: Settings) -> Settings:
        """These settings, overridden by what ``other`` gives."""
        return Settings(
            other.threshold if other.threshold is not None else self.threshold,
            other.recipe_period if other.recipe_period is not None else self.recipe_period,
        )


def parse_seconds(name: str, text: str, where: str) -> float:
    """The stalled threshold in seconds from ``text`` (finite and positive)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InvalidArgument(
            f"{where} {name}={text!r}: expected a positive number of seconds "
            "(procrastinate's stalled threshold: get_stalled_jobs' seconds_since_heartbeat; "
            f"default {DEFAULT_STALLED_THRESHOLD_S})"
        )
    return value


def recipe_cron(period: int) -> str | None:
    """The cron line that defers the recipe every ``period`` seconds, or ``None`` when no
    cron line gives that period at regular intervals (procrastinate's periodic tasks are
    cron lines, with an optional 6th column for seconds)."""
    if period < 1:
        return None
    if period < 60 and 60 % period == 0:
        return "* * * * * *" if period == 1 else f"* * * * * */{period}"
    minutes, rest = divmod(period, 60)
    if rest or 60 % minutes:
        return None
    if minutes == 60:
        return "0 * * * *"
    return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"


def parse_period(name: str, text: str, where: str) -> int:
    """The recipe's period in whole seconds from ``text``: one :func:`recipe_cron` gives."""
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if recipe_cron(value) is None:
        raise InvalidArgument(
            f"{where} {name}={text!r}: expected the period, in whole seconds, of a cron line "
            "(a divisor of 60, e.g. 1 for '* * * * * *', or whole minutes dividing an hour, "
            f"e.g. {DOCS_RECIPE_PERIOD_S} for the docs' '*/10 * * * *'): the period of "
            f"procrastinate's stalled-jobs recipe; default {DEFAULT_RECIPE_PERIOD_S}"
        )
    return value


def split_dsn(dsn: str) -> tuple[str, Settings]:
    """``dsn`` without the adapter's parameters, and the settings they named."""
    if "://" not in dsn or "?" not in dsn:
        return dsn, Settings()
    parts = urlsplit(dsn)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    threshold: float | None = None
    period: int | None = None
    kept = []
    for key, value in pairs:
        if key == STALLED_THRESHOLD_PARAM:
            threshold = parse_seconds(key, value, "the DSN's")
        elif key == RECIPE_PERIOD_PARAM:
            period = parse_period(key, value, "the DSN's")
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
