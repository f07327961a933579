"""Finds backends: through the ``rdq.backends`` entry points, or an import path.

Nothing in the kit imports a backend by name; built-in backends and a third
party's are found the same way. ``module.path:attribute`` also works, so a backend
can be tried before it is packaged.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint

from rdq_compliance.entry_points import by_name, load_named, load_path
from rdq_compliance.provision.backend import Backend
from rdq_core.errors import RdqError

GROUP = "rdq.backends"


class UnknownBackend(RdqError, LookupError):
    """No backend answers to the name given."""


def installed() -> dict[str, EntryPoint]:
    """The backends registered in this environment, by name."""
    return by_name(GROUP)


@cache
def load_backend(name: str) -> Backend:
    """The :class:`Backend` registered as ``name`` (or at ``module:attribute``)."""
    if ":" in name:
        obj, origin = load_path(name, kind="backend", error=UnknownBackend)
    else:
        obj, origin = load_named(
            name,
            group=GROUP,
            kind="backend",
            found=installed(),
            error=UnknownBackend,
            import_hint=f"its driver is missing: install it, e.g. pip install 'rdq[{name}]'",
        )
    if isinstance(obj, type) and issubclass(obj, Backend):
        obj = obj()
    if not isinstance(obj, Backend):
        raise UnknownBackend(
            f"{origin} is a {type(obj).__name__}, not an rdq_compliance.provision.Backend instance"
        )
    return obj
