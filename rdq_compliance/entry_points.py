"""Plugins found by name through an entry-point group, or at ``module.path:attribute``:
the lookup the backend registry (``rdq.backends``) and the deployed systems
(``rdq.systems``) share, with one error that names what is installed and how to install
what is missing. The only module of the kit that imports a module by its name."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points

__all__ = ["by_name", "load_named", "load_path"]


def by_name(group: str) -> dict[str, EntryPoint]:
    """The entry points registered in ``group`` in this environment, by name."""
    return {ep.name: ep for ep in entry_points(group=group)}


def load_named(
    name: str,
    *,
    group: str,
    kind: str,
    found: Mapping[str, EntryPoint],
    error: Callable[[str], Exception],
    import_hint: str = "",
) -> tuple[object, str]:
    """``(the object, where it came from)`` that the entry point ``name`` of ``group``
    names. Raises ``error(message)`` when no entry point has that name (the message lists
    the installed ones) or when it cannot be imported (``import_hint`` says how to fix it).
    ``kind`` is what the group holds, in words: ``"backend"``, ``"deployed system"``."""
    if name not in found:
        names = ", ".join(sorted(found)) or "none"
        raise error(
            f"no rdq {kind} named {name!r}; installed {kind}s: {names}. Install the "
            f"{kind}'s package (it registers itself under the {group!r} entry point)"
            + (" or pass module.path:attribute." if kind == "backend" else ".")
        )
    try:
        obj = found[name].load()
    except ImportError as exc:
        raise error(
            f"{kind} {name!r} is registered but cannot be imported ({exc})"
            + (f"; {import_hint}" if import_hint else "")
        ) from None
    return obj, f"entry point {found[name].value}"


def load_path(path: str, *, kind: str, error: Callable[[str], Exception]) -> tuple[object, str]:
    """``(the object, path)`` at ``module.path:attribute`` (a plugin tried before it is
    packaged); ``error(message)`` when the module or the attribute is missing."""
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr), path
    except (ImportError, AttributeError) as exc:
        raise error(f"cannot load a {kind} from {path!r}: {exc}") from None
