"""Reading a scenario's TOML tables: :class:`Table` and its typed readers, shared by the
scenario (workers, workload, limits) and every fault family (its ``[faults.*]`` tables).

Every key is checked: an unknown key, a wrong type or an out-of-range value is a
:class:`ScenarioError` that names the key (``faults.pause.factor``) and says what is
accepted. Durations are seconds (a number) or a string with a unit: ``"500ms"``,
``"1.5s"``, ``"2m"``; offsets are signed durations (``"-4.5s"``).
"""

from __future__ import annotations

import re
from typing import Any


class ScenarioError(ValueError):
    """A scenario file is missing, malformed, or holds a bad value (the key is named)."""


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION_RE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)\s*")
DURATION_HELP = 'a number of seconds or a string like "500ms", "1.5s", "2m"'
_OFFSET_RE = re.compile(r"\s*([+-]?)\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)\s*")
OFFSET_HELP = 'a signed number of seconds or a string like "-4.5s", "+500ms", "0s"'


def show(value: object) -> str:
    """A value as an error message shows it: its type and its repr."""
    return f"{type(value).__name__} {value!r}"


def check_seed(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ScenarioError(f"{key}: expected an integer in [0, 2**63), got {show(value)}")
    return value


def parse_duration(value: object, key: str) -> float:
    """Seconds from a number or a ``"1.5s"``-style string; > 0."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.fullmatch(value)
        if m:
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds is None or not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ScenarioError(
            f"{key}: expected a positive duration ({DURATION_HELP}), got {show(value)}"
        )
    return seconds


def parse_offset(value: object, key: str) -> float:
    """Signed seconds from a number or a ``"-4.5s"``-style string (zero allowed)."""
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        m = _OFFSET_RE.fullmatch(value)
        if m:
            seconds = float(m.group(2)) * _UNITS[m.group(3)] * (-1 if m.group(1) == "-" else 1)
    if seconds is None or seconds != seconds or abs(seconds) > 86_400:
        raise ScenarioError(
            f"{key}: expected an offset ({OFFSET_HELP}; at most a day), got {show(value)}"
        )
    return seconds


class Table:
    """A TOML table being read: every key taken is remembered; leftovers are errors
    (:meth:`done`). The readers take a key, check its value and name the key if it is
    wrong; a missing key gives the default."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(f"{where or 'the file'}: expected a table, got {show(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self.taken: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str, default: Any = None) -> Any:
        self.taken.add(name)
        return self.data.get(name, default)

    def has(self, name: str) -> bool:
        return name in self.data

    def table(self, name: str) -> Table:
        self.taken.add(name)
        return Table(self.data.get(name, {}), self.key(name))

    def done(self, accepted: tuple[str, ...] | None = None) -> None:
        """Every key read: an unknown one is an error listing ``accepted`` (default:
        the keys read)."""
        unknown = sorted(set(self.data) - self.taken)
        if unknown:
            names = accepted or tuple(sorted(self.taken))
            raise ScenarioError(
                f"unknown key{'s' if len(unknown) > 1 else ''} "
                + ", ".join(repr(self.key(k)) for k in unknown)
                + f"; accepted here: {', '.join(names)}"
            )

    # ---- the readers ------------------------------------------------------------------------

    def flag(self, name: str, default: bool) -> bool:
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise ScenarioError(f"{self.key(name)}: must be true or false, got {value!r}")
        return value

    def integer(self, name: str, default: int, *, low: int, high: int | None = None) -> int:
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{self.key(name)}: expected an integer, got {show(value)}")
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"between {low} and {high}"
            raise ScenarioError(f"{self.key(name)}: expected an integer {bound}, got {value}")
        return value

    def count(self, high: int) -> int:
        """``count``: how many faults of the table's kind (0 to ``high``; default 0)."""
        return self.integer("count", 0, low=0, high=high)

    def number(
        self,
        name: str,
        default: float,
        *,
        low: float,
        high: float | None = None,
        open_low: bool = False,
        open_high: bool = False,
    ) -> float:
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"{self.key(name)}: expected a number, got {show(value)}")
        value = float(value)
        bad = value < low or (open_low and value == low)
        if high is not None:
            bad = bad or value > high or (open_high and value == high)
        if bad:
            lo = "(" if open_low else "["
            hi = ")" if open_high else "]"
            span = f"{lo}{low}, {high}{hi}" if high is not None else f"{lo}{low}, ∞)"
            raise ScenarioError(f"{self.key(name)}: expected a number in {span}, got {value}")
        return value

    def number_range(
        self, name: str, default: tuple[float, float], *, low: float, integer: bool = False
    ) -> tuple[float, float]:
        """One number (min = max) or ``[min, max]``, each >= ``low``."""
        value = self.get(name, None)
        if value is None:
            return default
        items = value if isinstance(value, list) else [value, value]
        what = "integers" if integer else "numbers"
        ok_type = (int,) if integer else (int, float)
        if (
            len(items) != 2
            or any(isinstance(x, bool) or not isinstance(x, ok_type) for x in items)
            or items[0] > items[1]
            or items[0] < low
        ):
            raise ScenarioError(
                f"{self.key(name)}: expected one of {what} or [min, max] of {what}, "
                f">= {low}, min <= max; got {show(value)}"
            )
        return (items[0], items[1])

    def lease_factor(self, default: tuple[float, float], what: str) -> tuple[float, float]:
        """``factor``: the fault lasts ``lease * factor``, drawn from this range; it must
        outlast the lease, so every factor is > 1 (``what``: "a pause", ...)."""
        factor = self.number_range("factor", default, low=1.0)
        if factor[0] <= 1.0:
            raise ScenarioError(
                f"{self.key('factor')}: {what} must outlast the lease: factor(s) > 1, got {factor}"
            )
        return (float(factor[0]), float(factor[1]))

    def duration(self, name: str, default: float | None) -> float | None:
        value = self.get(name, None)
        if value is None:
            return default
        return parse_duration(value, self.key(name))

    def duration_range(self, name: str, default: tuple[float, float]) -> tuple[float, float]:
        """One duration (min = max) or ``[min, max]``."""
        value = self.get(name, None)
        if value is None:
            return default
        if not isinstance(value, list):
            one = parse_duration(value, self.key(name))
            return (one, one)
        if len(value) != 2:
            raise ScenarioError(
                f"{self.key(name)}: expected [min, max] (two durations), got {show(value)}"
            )
        lo = parse_duration(value[0], f"{self.key(name)}[0]")
        hi = parse_duration(value[1], f"{self.key(name)}[1]")
        if lo > hi:
            raise ScenarioError(f"{self.key(name)}: min {lo}s is greater than max {hi}s")
        return (lo, hi)

    def offset_range(self, name: str, default: tuple[float, float]) -> tuple[float, float]:
        """One signed offset (min = max) or ``[min, max]``."""
        value = self.get(name, None)
        if value is None:
            return default
        if not isinstance(value, list):
            one = parse_offset(value, self.key(name))
            return (one, one)
        if len(value) != 2:
            raise ScenarioError(
                f"{self.key(name)}: expected [min, max] (two offsets), got {show(value)}"
            )
        lo = parse_offset(value[0], f"{self.key(name)}[0]")
        hi = parse_offset(value[1], f"{self.key(name)}[1]")
        if lo > hi:
            raise ScenarioError(f"{self.key(name)}: min {lo}s is greater than max {hi}s")
        return (lo, hi)
