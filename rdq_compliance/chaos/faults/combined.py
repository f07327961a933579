"""The fault families composed (as Jepsen's ``nemesis/combined``): :class:`Families`,
and the parsed ``[faults]`` table, :class:`Faults`.

:class:`Families` is an ordered set of :class:`~rdq_compliance.chaos.faults.family.FaultFamily`.
The order is the order their tables are read, their faults drawn from the seed and their
counters listed (so a seed gives the same schedule); the order of faults due at the same
instant is each :class:`~rdq_compliance.chaos.faults.family.Kind`'s ``rank``, and the
displays order rows and legend entries by their own ``rank``, and coverage its windows by
theirs. The families must not clash: each name, table, kind, journal kind drawn, coverage
window, setting and count belongs to one; and a window reads, and a requirement names,
only what the families compose (journal kinds they draw, windows they open).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rdq_compliance.chaos.faults.family import FaultFamily, Kind, Legend, Row, SetupContext, Style
from rdq_compliance.chaos.faults.tables import ScenarioError, Table
from rdq_compliance.chaos.faults.windows import Requirement, Window, ordered

S = TypeVar("S")

#: The ``[faults]`` key that belongs to no family: no fault before this many seconds.
WARMUP = "warmup"
#: The counters the nemesis keeps itself (not a family's).
LOOP_COUNTS = ("unexpected_exits", "spawned", "notes")


class Families:
    """The fault families a campaign composes, in order (see the module docstring)."""

    def __init__(self, *families: FaultFamily[Any, Any]) -> None:
        self._families = tuple(families)
        self._kinds: dict[str, tuple[FaultFamily[Any, Any], Kind]] = {}
        self._marks: dict[str, FaultFamily[Any, Any]] = {}
        self._ops: dict[str, FaultFamily[Any, Any]] = {}
        self.styles: dict[str, Style] = {}
        owners: dict[tuple[str, str], str] = {("setting", WARMUP): "the [faults] table"}
        owners.update({("count", name): "the nemesis" for name in LOOP_COUNTS})

        def claim(what: str, name: str, family: FaultFamily[Any, Any]) -> None:
            other = owners.setdefault((what, name), family.name)
            if other != family.name:
                raise ValueError(
                    f"fault families clash: the {what} {name!r} of {family.name!r} is "
                    f"already {other!r}'s; rename one"
                )

        names: set[str] = set()
        for family in self._families:
            if not family.name or family.name in names:
                why = "needs a name" if not family.name else f"is named {family.name!r} twice"
                raise ValueError(f"fault families clash: {type(family).__name__} {why}")
            names.add(family.name)
            for table in family.tables:
                claim("key of [faults]", table, family)
            for kind in family.kinds:
                claim("fault kind", kind.name, family)
                self._kinds[kind.name] = (family, kind)
            for mark in family.marks:
                claim("journal fault kind", mark, family)
                self._marks[mark] = family
            for op in family.ops:
                claim("journal op", op, family)
                self._ops[op] = family
            for style in family.styles:
                claim("timeline mark", style.mark, family)
                self.styles[style.mark] = style
            for window in family.windows:
                for name in window.names:
                    claim("coverage window", name, family)
            for f in dataclasses.fields(family.defaults()):
                claim("setting", f.name, family)
            for f in dataclasses.fields(family.new_counts()):
                claim("count", f.name, family)
        self._check_coverage()

    def _check_coverage(self) -> None:
        """Each window opens and closes on journal fault kinds a family draws; each
        requirement names a window a family opens (or ``calm``, or ``all``)."""
        names = {"calm", "all"}
        for family in self._families:
            for window in family.windows:
                names.update(window.names)
                unknown = sorted(set(window.kinds) - set(self._marks))
                if unknown:
                    raise ValueError(
                        f"fault family {family.name!r}: the window {window.names[0]!r} reads "
                        f"fault kinds no family draws: {unknown}"
                    )
        for family in self._families:
            for kind, required in family.exercises.items():
                for r in required:
                    if r.window not in names:
                        raise ValueError(
                            f"fault family {family.name!r}: {kind!r} requires {r.rule!r} in "
                            f"unknown fault window {r.window!r}: one of {sorted(names)}"
                        )

    def __iter__(self) -> Iterator[FaultFamily[Any, Any]]:
        return iter(self._families)

    def __len__(self) -> int:
        return len(self._families)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Families) and self._families == other._families

    def __hash__(self) -> int:
        return hash(self._families)

    def __repr__(self) -> str:
        return f"Families({', '.join(f.name for f in self._families)})"

    def plus(self, *more: FaultFamily[Any, Any]) -> Families:
        """These families and ``more`` after them."""
        return Families(*self._families, *more)

    # ---- the scenario -----------------------------------------------------------------------

    def parse(self, faults: Table) -> Faults:
        """The ``[faults]`` table: each family's keys in turn, then ``warmup``."""
        settings = {family.name: family.parse(faults) for family in self._families}
        warmup = faults.number(WARMUP, 1.0, low=0)
        faults.done((*(t for f in self._families for t in f.tables), WARMUP))
        return Faults(self, settings, warmup)

    def defaults(self) -> Faults:
        """The faults of a scenario without a ``[faults]`` table: none."""
        return self.parse(Table({}, "faults"))

    def check(self, faults: Faults, *, workers: int, duration: float) -> None:
        """Each family's cross-checks against the fleet, then: the warmup ends before the
        window does if any fault is scheduled in it."""
        for family in self._families:
            family.check(faults.of(family), workers=workers)
        if faults.warmup >= duration and any(
            family.in_window(faults.of(family)) for family in self._families
        ):
            raise ScenarioError(
                f"faults.warmup ({faults.warmup}s) must be shorter than duration ({duration}s)"
            )

    # ---- the schedule and the nemesis -------------------------------------------------------

    def kind(self, name: str) -> tuple[FaultFamily[Any, Any], Kind]:
        """The family that plans and applies faults of kind ``name``, and the kind."""
        try:
            return self._kinds[name]
        except KeyError:
            raise ValueError(f"unknown fault kind {name!r}") from None

    # ---- setting up and tearing down ---------------------------------------------------------

    def setup(self, ctx: SetupContext) -> None:
        """Each family's :meth:`~FaultFamily.setup`, in order. If one raises, those set up
        already are torn down (in reverse order) and the error is raised."""
        done: list[FaultFamily[Any, Any]] = []
        try:
            for family in self._families:
                family.setup(ctx)
                done.append(family)
        except BaseException:
            _teardown(done, ctx, raise_first=False)
            raise

    def teardown(self, ctx: SetupContext) -> None:
        """Each family's :meth:`~FaultFamily.teardown`, in reverse order; every one runs
        even if an earlier one raised, and the first error is raised after."""
        _teardown(list(self._families), ctx, raise_first=True)

    # ---- the displays -----------------------------------------------------------------------

    def windows(self) -> list[Window]:
        """Every family's coverage windows, by rank."""
        return ordered(w for f in self._families for w in f.windows)

    def requirements(self, kinds: Iterable[str]) -> list[Requirement]:
        """What the faults of journal ``kinds`` that happened must have exercised."""
        out: list[Requirement] = []
        for kind in kinds:
            family = self._marks.get(kind)
            if family is not None:
                out.extend(r for r in family.exercises.get(kind, ()) if r not in out)
        return out

    def rows(self) -> list[tuple[FaultFamily[Any, Any], Row[Any]]]:
        """Every family's counter rows, by rank."""
        rows = [(family, row) for family in self._families for row in family.rows]
        return sorted(rows, key=lambda fr: fr[1].rank)

    def legend(self) -> list[Legend]:
        """Every family's legend entries, by rank."""
        return sorted((e for f in self._families for e in f.legend), key=lambda e: e.rank)

    def drawer(self, event: Mapping[str, Any]) -> FaultFamily[Any, Any] | None:
        """The family that draws a journal event on the timeline, if one does."""
        op = event.get("op")
        if op == "fault":
            return self._marks.get(str(event.get("kind")))
        return self._ops.get(str(op))


def _teardown(
    families: list[FaultFamily[Any, Any]], ctx: SetupContext, *, raise_first: bool
) -> None:
    """Tear ``families`` down in reverse order, each one whatever the others did."""
    first: BaseException | None = None
    for family in reversed(families):
        try:
            family.teardown(ctx)
        except BaseException as exc:
            first = first or exc
    if first is not None and raise_first:
        raise first


@dataclass(frozen=True)
class Faults:
    """What the nemesis injects during the fault window: each family's settings (by
    family name; :meth:`of`), and the ``warmup``.

    A setting reads as an attribute too (``faults.pauses``, ``faults.partition_workers``);
    :meth:`replace` changes some by name (``faults.replace(partitions=0)``)."""

    families: Families
    settings: Mapping[str, Any]
    #: No fault before this many seconds into the window (workers start up).
    warmup: float = 1.0

    def of(self, family: FaultFamily[S, Any]) -> S:
        """``family``'s settings."""
        settings: S = self.settings[family.name]
        return settings

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("settings")
        if settings is not None and not name.startswith("_"):
            for value in settings.values():
                if hasattr(value, name):
                    return getattr(value, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def replace(self, **changes: Any) -> Faults:
        """These faults with some settings changed (by name: ``partitions=0``)."""
        warmup = changes.pop(WARMUP, self.warmup)
        settings = dict(self.settings)
        for name, value in changes.items():
            owner = next(
                (
                    family
                    for family, s in settings.items()
                    if name in {f.name for f in dataclasses.fields(s)}
                ),
                None,
            )
            if owner is None:
                raise TypeError(f"no fault family has a setting {name!r}")
            settings[owner] = dataclasses.replace(settings[owner], **{name: value})
        return Faults(self.families, settings, warmup)
