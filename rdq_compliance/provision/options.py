"""Rung options: the ``--rdq-option KEY=VALUE`` settings a provisioning rung reads.

Options reach a backend as one flat mapping of strings (``ProvisionRequest.options``,
merged from ``[tool.rdq.<backend>]``, ``RDQ_OPTION_<KEY>`` and ``--rdq-option``), shared by
all its rungs. A rung declares the options it reads, once, as data, and parses them with
this one parser, so every backend spells types, defaults and errors the same way::

    PG_START_TIMEOUT = option(
        "pg_start_timeout", float, 60.0, "seconds to wait for the server", positive=True
    )
    LOCAL_OPTIONS = RungOptions("postgres local binaries", [PG_BIN_DIR, PG_START_TIMEOUT])

    values = LOCAL_OPTIONS.parse(request.options)  # every option checked up front
    timeout = values[PG_START_TIMEOUT]  # a float

**Types** (:data:`OPTION_TYPES`): ``str``, ``int`` (a whole number), ``float``, ``bool``
(``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``) and :class:`Paths` (folders
separated by ``os.pathsep``). ``positive=True`` asks a number to be finite and above zero.
An option absent from the mapping takes its default (``None`` means "not given", which a
rung may treat differently from any value). A value given **empty** means the default for
a ``str`` option, no folders for a :class:`Paths` option, and is an error for a number or
a flag. Keys the rung does not declare are left alone: they belong to other rungs.

**Errors.** A bad value raises :class:`~rdq_core.errors.InvalidArgument` naming the option
as the user would write it, what is expected, what the option means and its default:
``--rdq-option pg_start_timeout='soon': expected a positive number (seconds to wait for
the server; default 60)``. A bad *declaration* (an unsupported type, a default that is
not of the option's type) is a ``TypeError`` when the module declaring it is imported.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, overload

from rdq_core.errors import InvalidArgument

__all__ = ["OPTION_TYPES", "Option", "OptionValues", "Paths", "RungOptions", "option"]

T = TypeVar("T")

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class Paths(tuple[str, ...]):
    """Folders given as one ``os.pathsep``-separated string (blank entries dropped)."""

    @classmethod
    def parse(cls, text: str) -> Paths:
        return cls(part for part in text.split(os.pathsep) if part.strip())


#: The types an option may have.
OPTION_TYPES: tuple[type, ...] = (str, int, float, bool, Paths)


@dataclass(frozen=True)
class Option(Generic[T]):
    """One declared option; build it with :func:`option`, read it with :meth:`read`."""

    name: str
    type: type
    default: T
    help: str
    positive: bool = False

    def expected(self) -> str:
        """What a value must look like, in words (for error messages and docs)."""
        if self.type is bool:
            return "true or false (1/0, yes/no, on/off)"
        if self.type is int:
            return "a positive whole number" if self.positive else "a whole number"
        if self.type is float:
            return "a positive number" if self.positive else "a number"
        if self.type is Paths:
            return f"folders separated by {os.pathsep!r}"
        return "a string"

    def show_default(self) -> str:
        return _show(self.default)

    def read(self, options: Mapping[str, object]) -> T:
        """This option's value in ``options`` (the default when absent); a bad value is
        an ``InvalidArgument`` naming the option and what is expected."""
        if self.name not in options:
            return self.default
        return self.parse(options[self.name])

    def parse(self, value: object) -> T:
        """Convert one given value (normally a string) to the option's type."""
        text = value if isinstance(value, str) else str(value)
        if self.type is Paths:
            return cast(T, Paths.parse(text))
        stripped = text.strip()
        if self.type is str:
            return self.default if not stripped else cast(T, text)
        if self.type is bool:
            word = stripped.lower()
            if word in _TRUE:
                return cast(T, True)
            if word in _FALSE:
                return cast(T, False)
            raise self._bad(text)
        try:
            number: float = int(stripped) if self.type is int else float(stripped)
        except ValueError:
            raise self._bad(text) from None
        if self.positive and not (math.isfinite(number) and number > 0):
            raise self._bad(text)
        return cast(T, number)

    def _bad(self, text: str) -> InvalidArgument:
        return InvalidArgument(
            f"--rdq-option {self.name}={text!r}: expected {self.expected()} "
            f"({self.help}; default {self.show_default()})"
        )


@overload
def option(
    name: str, type: type[T], default: T, help: str, *, positive: bool = False
) -> Option[T]: ...
@overload
def option(
    name: str, type: type[T], default: None, help: str, *, positive: bool = False
) -> Option[T | None]: ...
def option(
    name: str, type: type[Any], default: Any, help: str, *, positive: bool = False
) -> Option[Any]:
    """Declare an option: its ``--rdq-option`` key, type, default and one-line meaning.

    ``type`` is one of :data:`OPTION_TYPES`; ``default`` is of that type, or ``None`` for
    "not given". ``positive=True`` (numbers only) rejects zero, negatives and non-finite
    values. A declaration that breaks these rules is a ``TypeError``.
    """
    if not _NAME_RE.fullmatch(name):
        raise TypeError(f"option name {name!r}: use lower-case letters, digits and '_'")
    if type not in OPTION_TYPES:
        known = ", ".join(t.__name__ for t in OPTION_TYPES)
        raise TypeError(f"option {name!r}: unsupported type {_type_name(type)}; use {known}")
    if default is not None:
        if type is float and isinstance(default, int) and not isinstance(default, bool):
            default = float(default)
        if type is Paths and isinstance(default, (tuple, list)):
            default = Paths(default)
        if not isinstance(default, type) or (type is int and isinstance(default, bool)):
            raise TypeError(
                f"option {name!r}: default {default!r} is {_type_name(default.__class__)}, "
                f"not {type.__name__}"
            )
    if positive and type not in (int, float):
        raise TypeError(f"option {name!r}: positive=True needs an int or float option")
    if positive and default is not None and not default > 0:
        raise TypeError(f"option {name!r}: default {default!r} is not positive")
    return Option(name, type, default, help, positive)


class OptionValues:
    """The parsed options of one rung: ``values[OPTION]`` is that option's typed value."""

    def __init__(self, values: Mapping[str, object], given: Iterable[str]) -> None:
        self._values = dict(values)
        self._given = frozenset(given)

    def __getitem__(self, option: Option[T]) -> T:
        try:
            return cast(T, self._values[option.name])
        except KeyError:
            raise KeyError(f"option {option.name!r} is not declared by this rung") from None

    def given(self, option: Option[Any]) -> bool:
        """Whether the user set the option (else it holds its default)."""
        return option.name in self._given

    def as_dict(self) -> dict[str, object]:
        return dict(self._values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"OptionValues({shown})"


class RungOptions:
    """The options one rung reads, declared together; :meth:`parse` checks them all."""

    def __init__(self, rung: str, options: Iterable[Option[Any]]) -> None:
        self.rung = rung
        self.options: tuple[Option[Any], ...] = tuple(options)
        names = [o.name for o in self.options]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TypeError(f"{rung}: options declared twice: {', '.join(duplicates)}")

    def __iter__(self) -> Iterator[Option[Any]]:
        return iter(self.options)

    def parse(self, options: Mapping[str, object]) -> OptionValues:
        """Every declared option's value (defaults for the absent ones); the first bad
        value raises ``InvalidArgument``. Undeclared keys are ignored."""
        values = {o.name: o.read(options) for o in self.options}
        return OptionValues(values, (o.name for o in self.options if o.name in options))

    def describe(self) -> str:
        """One line per option: key, what it expects, default, meaning (for docs, help)."""
        width = max((len(o.name) for o in self.options), default=0)
        lines = [f"{self.rung} options (--rdq-option KEY=VALUE):"]
        for o in self.options:
            lines.append(
                f"  {o.name:<{width}}  {o.help} ({o.expected()}; default {o.show_default()})"
            )
        return "\n".join(lines)


def _show(value: object) -> str:
    if value is None:
        return "not set"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Paths):
        return repr(os.pathsep.join(value))
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _type_name(kind: object) -> str:
    return getattr(kind, "__name__", repr(kind))
