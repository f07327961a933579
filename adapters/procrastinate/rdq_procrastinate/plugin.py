"""The ``procrastinate`` backend plugin (entry point ``rdq.backends: procrastinate``).

:class:`ProcrastinateBackend` is the postgres backend's ladder (a server given by DSN,
local binaries, a container: :class:`rdq_postgres.plugin.PostgresBackend`), each rung's
server wrapped in a :class:`~rdq_compliance.provision.wrapped.WrappedServer` whose
``prepare`` applies procrastinate's own schema in every namespace
(:func:`rdq_procrastinate.schema.apply_schema`: ``SchemaManager.apply_schema()`` on a
session whose ``search_path`` is the namespace's schema). A namespace is a schema the
postgres server creates; its rdq tables stay there, unused. Storage is
:class:`rdq_procrastinate.storage.ProcrastinateStorage`.

**Settings.** ``--rdq-option procrastinate_stalled_threshold=SECONDS`` (the stalled
threshold, ``Capabilities.fixed_lease``; default 2 s, procrastinate's own 30 s) and
``--rdq-option procrastinate_recipe_period=SECONDS`` (the period of the stalled-jobs
recipe, whole seconds a cron line gives; default 1 s, ``* * * * * *``, procrastinate's
docs 600 s, ``*/10 * * * *``), or the same names in the query of ``--rdq-dsn``. The
server hands them to every storage, in every process, in its DSN's query
(:mod:`rdq_procrastinate.dsn`).

**Import rule.** This is the plugin half: it imports :mod:`rdq_compliance.provision`, the
postgres backend's plugin by its public name, and the storage half; the storage half
imports none of them.
"""

from __future__ import annotations

from types import MappingProxyType

import procrastinate
from rdq_postgres.plugin import PostgresBackend

from rdq_compliance.provision.backend import ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions, option
from rdq_compliance.provision.wrapped import WrappedServer
from rdq_procrastinate.dsn import (
    DEFAULT_RECIPE_PERIOD_S,
    DEFAULT_STALLED_THRESHOLD_S,
    DOCS_RECIPE_PERIOD_S,
    RECIPE_PERIOD_PARAM,
    STALLED_THRESHOLD_PARAM,
    Settings,
    parse_period,
    split_dsn,
    with_settings,
)
from rdq_procrastinate.ledger import EXPECTED_FAILURES
from rdq_procrastinate.schema import apply_schema
from rdq_procrastinate.storage import ProcrastinateStorage

__all__ = ["ProcrastinateBackend", "backend"]

VERSION = f"procrastinate {procrastinate.__version__}"

STALLED_THRESHOLD = option(
    STALLED_THRESHOLD_PARAM,
    float,
    None,
    "seconds without a worker heartbeat after which procrastinate's stalled-jobs recipe "
    "retries its jobs (get_stalled_jobs' seconds_since_heartbeat); default "
    f"{DEFAULT_STALLED_THRESHOLD_S} (procrastinate's: 30)",
    positive=True,
)
RECIPE_PERIOD = option(
    RECIPE_PERIOD_PARAM,
    int,
    None,
    "seconds between two runs of the stalled-jobs recipe, a periodic task elected by "
    "procrastinate's defer_periodic_job (a period a cron line gives: a divisor of 60, or "
    f"whole minutes dividing an hour); default {DEFAULT_RECIPE_PERIOD_S} (procrastinate's "
    f"docs: {DOCS_RECIPE_PERIOD_S})",
    positive=True,
)
OPTIONS = RungOptions("procrastinate", [STALLED_THRESHOLD, RECIPE_PERIOD])


class ProcrastinateServer(WrappedServer):
    """A postgres server whose namespaces get procrastinate's schema; its DSN carries the
    adapter's settings that were given (every storage of every process reads them)."""

    def __init__(self, inner: Server, settings: Settings) -> None:
        super().__init__(inner, apply_schema, version=VERSION)
        self.settings = settings

    @property  # type: ignore[override]
    def dsn(self) -> str:
        return with_settings(self.inner.dsn, self.settings)

    def dsn_via(self, host: str, port: int) -> str:
        return with_settings(self.inner.dsn_via(host, port), self.settings)


class ProcrastinateBackend(PostgresBackend):
    """``--rdq-backend=procrastinate``: procrastinate 3.10.0 on PostgreSQL, one schema per
    namespace."""

    name = "procrastinate"

    def options(self) -> tuple[RungOptions, ...]:
        """The postgres rungs' options and the adapter's own."""
        return (*super().options(), OPTIONS)

    expected_failures = MappingProxyType(dict(EXPECTED_FAILURES))

    def _wrap(self, inner: Server, request: ProvisionRequest, given: Settings) -> Server:
        values = OPTIONS.parse(request.options)
        period = values[RECIPE_PERIOD]
        if period is not None:
            period = parse_period(RECIPE_PERIOD_PARAM, str(period), "--rdq-option")
        options = Settings(values[STALLED_THRESHOLD], period)
        return ProcrastinateServer(inner, given.merged(options))

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        base, given = split_dsn(dsn)
        return self._wrap(super().server_from_dsn(base, request), request, given)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        return self._wrap(super().start_local_server(request), request, Settings())

    def start_container(self, request: ProvisionRequest) -> Server:
        return self._wrap(super().start_container(request), request, Settings())

    def open(self, dsn: str, namespace: str) -> ProcrastinateStorage:
        return ProcrastinateStorage(dsn, namespace)


backend = ProcrastinateBackend()
