"""The runner-neutral core of the kit: settings → backend → provisioned server →
namespaces → storage.

Every runner goes through here — the pytest plugin's fixtures, the chaos runner and
``rdq-chaos``, the stateful machine — so a setting means the same thing everywhere
(SQLAlchemy's ``plugin_base`` plays this part under its pytest plugin)::

    from rdq_compliance.session import Session
    from rdq_compliance.settings import resolve

    with Session(resolve(cli_backend="postgres")) as session:   # provisions the server
        with session.namespace() as spec:                         # a fresh namespace
            storage = session.open(spec)
            ...

A :class:`Session` holds the resolved :class:`~rdq_compliance.settings.Settings`, the
:class:`~rdq_compliance.provision.Backend` they name (found through the ``rdq.backends``
entry points, never imported by name) and, once started, the
:class:`~rdq_compliance.provision.Server` provisioned through the backend's ladder in a
private temporary folder. :meth:`Session.namespace` yields a picklable
:class:`~rdq_compliance.provision.StorageSpec`; storage is opened from a spec in one way
only, :func:`open_storage` (which :meth:`Session.open` calls with the backend it already
holds) — in this process, or in a worker process that has nothing but the spec.

Errors, for the caller to present: :class:`~rdq_compliance.registry.UnknownBackend` and
:class:`NoBackendSelected` (usage errors), ``ProvisionUnavailable`` (no rung could serve:
the message names the remedies) and any other ``RdqError`` from :meth:`Session.start`
(a server the user named does not answer: an error, never a skip).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from rdq_compliance import registry
from rdq_compliance.provision import owners
from rdq_compliance.provision.backend import (
    Backend,
    ProvisionRequest,
    Server,
    StorageSpec,
    UnsupportedFault,
)
from rdq_compliance.settings import Settings
from rdq_core.errors import InvalidArgument, RdqError
from rdq_core.model import Capabilities
from rdq_core.spi import Storage

__all__ = ["NoBackendSelected", "Session", "open_storage"]


class NoBackendSelected(InvalidArgument):
    """No backend was named by any settings source."""

    def __init__(self, option: str = "--rdq-backend NAME") -> None:
        installed = ", ".join(sorted(registry.installed())) or "none"
        super().__init__(
            f"no rdq backend selected: pass {option}, set RDQ_BACKEND, or put "
            f"backend = \"NAME\" in [tool.rdq] of pyproject.toml (installed: {installed})"
        )


def open_storage(spec: StorageSpec, backend: Backend | None = None) -> Storage:
    """Open the storage ``spec`` names. ``backend`` is the backend already at hand; without
    it, the backend is found again by ``spec.backend`` (what a worker process does)."""
    chosen = backend if backend is not None else registry.load_backend(spec.backend)
    return chosen.open(spec.dsn, spec.namespace)


class Session:
    """Resolved settings, the backend they name and the server provisioned for it.

    ``backend`` may be given directly (a backend object that is not registered, e.g. a
    variant built in a test); otherwise it is loaded from ``settings.backend``. The name
    written into every :class:`StorageSpec` — what another process looks the backend up
    by — is ``settings.backend`` when set, else the backend's own name.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        backend: Backend | None = None,
        workdir: Path | None = None,
    ) -> None:
        if backend is None:
            if settings.backend is None:
                raise NoBackendSelected()
            backend = registry.load_backend(settings.backend)
        self.settings = settings
        self.backend = backend
        self.name = settings.backend or backend.name
        self._given_workdir = workdir
        self._workdir: Path | None = None
        self._server: Server | None = None
        self._capabilities: Capabilities | None = None
        self._lock = threading.Lock()
        #: what the sweep of a server given by DSN found and did (``None``: no sweep, the
        #: kit started the server itself, so no earlier run's namespace can be on it)
        self.swept: owners.SweepReport | None = None

    # ---- the server -------------------------------------------------------------------

    def start(self) -> Server:
        """Provision the server (once): the DSN given, else local binaries, else a
        container where allowed. Raises ``ProvisionUnavailable`` or another ``RdqError``."""
        with self._lock:
            if self._server is not None:
                return self._server
            if self._given_workdir is not None:
                workdir = self._given_workdir
                workdir.mkdir(parents=True, exist_ok=True)
            else:
                workdir = Path(tempfile.mkdtemp(prefix=f"rdq-{_safe(self.name)}-"))
                self._workdir = workdir
            request = ProvisionRequest(
                workdir=workdir,
                dsn=self.settings.dsn,
                options=dict(self.settings.options),
                allow_docker=self.settings.docker,
            )
            try:
                self._server = self.backend.provision(request)
            except BaseException:
                self._remove_workdir()
                raise
            if self.settings.dsn is not None:
                self.swept = sweep_server(self._server)
            return self._server

    @property
    def server(self) -> Server:
        """The provisioned server (:meth:`start` first)."""
        if self._server is None:
            raise RuntimeError("the session has no server yet: call start() (or use `with`)")
        return self._server

    @property
    def started(self) -> bool:
        """Whether :meth:`start` provisioned the server (and :meth:`close` has not dropped it)."""
        return self._server is not None

    @property
    def origin(self) -> str:
        """How the server was provisioned, for humans (``given DSN ...``, ``local binary ...``)."""
        return self.server.origin

    def close(self) -> None:
        """Stop what the kit started (a given server keeps running); idempotent."""
        with self._lock:
            server, self._server = self._server, None
            try:
                if server is not None:
                    server.close()
            finally:
                self._remove_workdir()

    def _remove_workdir(self) -> None:
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---- namespaces and storage -------------------------------------------------------

    def create_namespace(self) -> StorageSpec:
        """A fresh, empty, isolated namespace on the server, as a picklable spec."""
        server = self.server
        return StorageSpec(self.name, server.dsn, server.create_namespace())

    def drop_namespace(self, spec: StorageSpec) -> None:
        """Remove a namespace and everything in it (idempotent): now, or in the background
        where the server can (``Server.discard_namespace``; closing the session drops it at
        the latest). Nothing may use it any more."""
        self.server.discard_namespace(spec.namespace)

    @contextmanager
    def namespace(self) -> Iterator[StorageSpec]:
        """A fresh namespace for the ``with`` block, dropped afterwards."""
        spec = self.create_namespace()
        try:
            yield spec
        finally:
            self.drop_namespace(spec)

    def open(self, spec: StorageSpec) -> Storage:
        """Open storage on ``spec`` (see :func:`open_storage`)."""
        return open_storage(spec, self.backend)

    def capabilities(self) -> Capabilities:
        """What the backend declares (read once, from storage on a scratch namespace)."""
        if self._capabilities is None:
            with self.namespace() as spec:
                storage = self.open(spec)
                try:
                    self._capabilities = storage.capabilities()
                finally:
                    storage.close()
        return self._capabilities

    def __repr__(self) -> str:
        where = self._server.origin if self._server is not None else "not started"
        return f"<Session {self.name} ({where})>"


def sweep_server(server: Server) -> owners.SweepReport:
    """Drop the namespaces that runs which died left on ``server`` (see
    :mod:`rdq_compliance.provision.owners`); a server that keeps no owner records, or
    cannot list them now, is reported as such and left as it is."""
    try:
        records = server.recorded_namespaces()
    except UnsupportedFault as exc:
        return owners.SweepReport(unsupported=str(exc))
    except RdqError as exc:
        return owners.SweepReport(error=str(exc))
    return owners.sweep(records, server.drop_namespace)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
