"""Finds backends: through the ``rdq.backends`` entry points, or an import path.

Nothing in the kit imports a backend by name; built-in backends and a third
party's are found the same way. ``module.path:attribute`` also works, so a backend
can be tried before it is packaged.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from rdq_compliance.provision.backend import Backend
from rdq_core.errors import RdqError

GROUP = "rdq.backends"


class UnknownBackend(RdqError, LookupError):
    """No backend answers to the name given."""


def installed() -> dict[str, EntryPoint]:
    """The backends registered in this environment, by name."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


@cache
def load_backend(name: str) -> Backend:
    """The :class:`Backend` registered as ``name`` (or at ``module:attribute``)."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise UnknownBackend(f"cannot load backend from {name!r}: {exc}") from None
        origin = name
    else:
        eps = installed()
        if name not in eps:
            names = ", ".join(sorted(eps)) or "none"
            raise UnknownBackend(
                f"no rdq backend named {name!r}; installed backends: {names}. "
                f"Install the backend's package (it registers itself under the "
                f"{GROUP!r} entry point) or pass module.path:attribute."
            )
        try:
            obj = eps[name].load()
        except ImportError as exc:
            raise UnknownBackend(
                f"backend {name!r} is registered but its driver is not installed ({exc}); "
                f"install it, e.g. pip install 'rdq[{name}]'"
            ) from None
        origin = f"entry point {eps[name].value}"
    if isinstance(obj, type) and issubclass(obj, Backend):
        obj = obj()
    if not isinstance(obj, Backend):
        raise UnknownBackend(
            f"{origin} is a {type(obj).__name__}, not an rdq_compliance.provision.Backend instance"
        )
    return obj
