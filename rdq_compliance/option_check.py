"""Every backend option a user gives is checked before any test or campaign runs.

Options reach a backend as one flat mapping (``--rdq-option KEY=VALUE``,
``RDQ_OPTION_<KEY>``, ``[tool.rdq.<backend>]``) and each rung reads the keys it declares,
ignoring the rest, so a misspelt key (``redis_clustr=3``, ``pg_bin_dr=/x``) would be
ignored too, and the kit would run on a single server as if nothing had been asked.
:func:`check_options` compares the given keys with what the backends declare
(:meth:`~rdq_compliance.provision.backend.Backend.options`):

- a key the selected backend declares is used;
- a key that only another installed backend declares is *unused*: named in the run's
  header, not an error (one ``[tool.rdq]`` may serve several backends);
- a key no installed backend declares is an :class:`UnknownOption`, a usage error that
  names where the key came from and the closest known keys;
- when the selected backend does not declare its options (``None``), keys no other
  backend declares cannot be judged: they are named in the header as not checked.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rdq_compliance import registry
from rdq_compliance.provision.backend import Backend
from rdq_compliance.settings import Settings
from rdq_core.errors import InvalidArgument

__all__ = ["OptionReport", "UnknownOption", "check_options", "declared_keys"]


class UnknownOption(InvalidArgument):
    """An option key that no installed backend declares."""


@dataclass(frozen=True)
class OptionReport:
    """What became of the given option keys (each list sorted)."""

    used: list[str] = field(default_factory=list)
    #: key -> the installed backends that declare it (not the selected one)
    unused: dict[str, list[str]] = field(default_factory=dict)
    #: keys the selected backend may read but does not declare (it declares nothing)
    unchecked: list[str] = field(default_factory=list)

    def header_lines(self) -> list[str]:
        """The lines the run's header shows (none when every key was used)."""
        lines = []
        if self.unused:
            parts = [f"{k} (an option of {', '.join(b)})" for k, b in self.unused.items()]
            lines.append("options not used by this backend: " + "; ".join(parts))
        if self.unchecked:
            lines.append(
                "options not checked (the backend does not declare its options): "
                + ", ".join(self.unchecked)
            )
        return lines


def declared_keys(backend: Backend) -> set[str] | None:
    """The option keys ``backend`` declares, or ``None`` when it does not say."""
    rungs = backend.options()
    if rungs is None:
        return None
    return {o.name for rung in rungs for o in rung}


def _installed_backends(skip: str | None) -> Iterable[tuple[str, Backend]]:
    """Every installed backend that loads (one whose driver is missing is left out)."""
    for name in sorted(registry.installed()):
        if name == skip:
            continue
        try:
            yield name, registry.load_backend(name)
        except registry.UnknownBackend:
            continue


def check_options(
    settings: Settings,
    backend: Backend,
    *,
    others: Callable[[str | None], Iterable[tuple[str, Backend]]] = _installed_backends,
) -> OptionReport:
    """Judge ``settings.options`` against ``backend`` (the selected one) and the other
    installed backends; raise :class:`UnknownOption` for keys none declares."""
    given = sorted(settings.options)
    if not given:
        return OptionReport()
    mine = declared_keys(backend)
    by_other: dict[str, list[str]] = {}
    for name, other in others(settings.backend):
        for key in declared_keys(other) or ():
            by_other.setdefault(key, []).append(name)
    used = [k for k in given if mine is not None and k in mine]
    unused = {k: by_other[k] for k in given if k not in used and k in by_other}
    rest = [k for k in given if k not in used and k not in unused]
    if mine is None:
        return OptionReport(used, unused, rest)
    if rest:
        raise UnknownOption(_unknown_message(rest, settings, backend.name, mine, by_other))
    return OptionReport(used, unused, [])


def _unknown_message(
    keys: Sequence[str],
    settings: Settings,
    name: str,
    mine: set[str],
    by_other: Mapping[str, list[str]],
) -> str:
    known = sorted(mine | set(by_other))
    named, hints = [], []
    for key in keys:
        named.append(f"{key!r} (from {settings.option_sources.get(key, 'the settings')})")
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        if close:
            hints.append(f"{key} -> {' or '.join(close)}" if len(keys) > 1 else " or ".join(close))
    one = len(keys) == 1
    it = "it" if one else "them"
    hint = f" Did you mean {'; '.join(hints)}?" if hints else ""
    own = ", ".join(sorted(mine)) or "none"
    return (
        f"unknown option{'' if one else 's'} {', '.join(named)}: no installed backend "
        f"declares {it}, so nothing would read {it}.{hint} The {name} backend's options: "
        f"{own}. Correct the key or remove it."
    )
