"""The ``dramatiq`` backend plugin (entry point ``rdq.backends: dramatiq``): the *plugin
half*, which may import :mod:`rdq_compliance.provision` and the ``redis`` backend's plugin;
the storage half (:mod:`rdq_dramatiq.storage` and its modules) never imports either.

:class:`DramatiqBackend` climbs the ``redis`` backend's provisioning ladder (a DSN, a
local ``redis-server``, a container) and wraps each rung's server in a
:class:`~rdq_compliance.provision.wrapped.WrappedServer`: the namespaces, faults and
address are the redis server's, and a namespace's key prefix ``rdq:{<namespace>`` is
the ``RedisBroker``'s ``namespace`` (so the kit's namespace drop removes dramatiq's keys).
dramatiq needs nothing prepared in a namespace: its keys appear on first use.

The adapter's deployment settings are ``--rdq-option`` values (or DSN query parameters,
:mod:`rdq_dramatiq.settings`), carried in the server's DSN so that every worker process
opened from a ``StorageSpec`` deploys the same ones:

=================================  ==========================================================
``dramatiq_heartbeat_timeout``     ms a broker may be silent before its messages are
                                   requeued: the fixed lease (default 2000; dramatiq 60000)
``dramatiq_maintenance_chance``    maintenance runs per million commands (default 1000000:
                                   every fetch; dramatiq 1000)
``dramatiq_delay_prefetch``        delayed messages a worker holds (default 1000)
=================================  ==========================================================

The expected-failure ledger (:data:`EXPECTED_FAILURES`) names the gaps: what dramatiq
documents as its design or plainly has not (no attempt history, no record of success, no
per-claim lease, ...), each with the docs or code that say so, pinned to v2.2.1. What
breaks dramatiq's own promises or loses or duplicates work is a finding instead
(``findings/dramatiq/``), never an entry here.
"""

from __future__ import annotations

from types import MappingProxyType

import redis
from rdq_redis.plugin import RedisBackend

from rdq_compliance.provision.backend import ProvisionRequest, Server
from rdq_compliance.provision.options import RungOptions, option
from rdq_compliance.provision.wrapped import WrappedServer
from rdq_dramatiq import settings as dsettings
from rdq_dramatiq.ledger import EXPECTED_FAILURES
from rdq_dramatiq.storage import DRAMATIQ_VERSION, DramatiqStorage

__all__ = ["OPTIONS", "DramatiqBackend", "DramatiqServer", "backend"]

HEARTBEAT_TIMEOUT = option(
    dsettings.HEARTBEAT_TIMEOUT,
    int,
    dsettings.DEFAULT_HEARTBEAT_TIMEOUT_MS,
    "RedisBroker heartbeat_timeout in ms: the adapter's fixed lease (dramatiq's default 60000)",
    positive=True,
)
MAINTENANCE_CHANCE = option(
    dsettings.MAINTENANCE_CHANCE,
    int,
    dsettings.DEFAULT_MAINTENANCE_CHANCE,
    "RedisBroker maintenance_chance: maintenance runs per million commands (dramatiq's "
    "default 1000)",
)
DELAY_PREFETCH = option(
    dsettings.DELAY_PREFETCH,
    int,
    dsettings.DEFAULT_DELAY_PREFETCH,
    "delayed messages one worker process holds for promotion (dramatiq: 1000 x threads)",
    positive=True,
)
#: Read by every rung (the redis rungs ignore keys they do not declare).
OPTIONS = RungOptions("dramatiq adapter", [HEARTBEAT_TIMEOUT, MAINTENANCE_CHANCE, DELAY_PREFETCH])


def _params(request: ProvisionRequest) -> dict[str, str]:
    """The ``dramatiq_*`` options given, as DSN query parameters (checked up front)."""
    values = OPTIONS.parse(request.options)
    out = {}
    for opt in OPTIONS:
        if opt.name in request.options:
            out[opt.name] = str(values[opt])
    if out:  # a bad value fails here, before any server is started
        dsettings.parse_dsn(dsettings.with_params("redis://localhost:6379/0", out))
    return out


def _prepare(dsn: str, namespace: str) -> None:
    """Nothing to install: dramatiq's keys appear on first use. The server must answer."""
    settings = dsettings.parse_dsn(dsn)
    client = redis.Redis.from_url(settings.url)
    try:
        client.ping()
    finally:
        client.close()


class DramatiqServer(WrappedServer):
    """A redis rung's server whose DSN also carries the adapter's deployment settings."""

    def __init__(self, inner: Server, params: dict[str, str]) -> None:
        super().__init__(inner, _prepare, version=f"dramatiq {DRAMATIQ_VERSION}")
        self._params = dict(params)

    @property  # type: ignore[override]
    def dsn(self) -> str:
        return dsettings.with_params(self.inner.dsn, self._params)

    def dsn_via(self, host: str, port: int) -> str:
        return dsettings.with_params(self.inner.dsn_via(host, port), self._params)


class DramatiqBackend(RedisBackend):
    """``--rdq-backend=dramatiq``: dramatiq's RedisBroker, one key prefix per namespace."""

    name = "dramatiq"

    def options(self) -> tuple[RungOptions, ...]:
        """The redis rungs' options and the adapter's own."""
        return (*super().options(), OPTIONS)
    expected_failures = MappingProxyType(dict(EXPECTED_FAILURES))

    def server_from_dsn(self, dsn: str, request: ProvisionRequest) -> Server:
        clean, given = dsettings.split_dsn(dsn)
        params = {**_params(request), **given}
        dsettings.parse_dsn(dsettings.with_params(clean, params))  # refuse bad values now
        return DramatiqServer(super().server_from_dsn(clean, request), params)

    def start_local_server(self, request: ProvisionRequest) -> Server:
        return DramatiqServer(super().start_local_server(request), _params(request))

    def start_container(self, request: ProvisionRequest) -> Server:
        return DramatiqServer(super().start_container(request), _params(request))

    def open(self, dsn: str, namespace: str) -> DramatiqStorage:
        return DramatiqStorage(dsn, namespace)


backend = DramatiqBackend()
