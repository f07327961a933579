"""What a fault family is: :class:`FaultFamily`, and the parts it is made of.

A family (a process kill, a network partition, ...) is one object that owns everything
about its faults, as each of Jepsen's nemesis packages does:

- its TOML table(s) under ``[faults]`` (:attr:`~FaultFamily.tables`), read by
  :meth:`~FaultFamily.parse` into its settings (a frozen dataclass) with the readers of
  :class:`~rdq_compliance.chaos.faults.tables.Table`, and its cross-checks against the
  fleet (:meth:`~FaultFamily.check`);
- its **planning** (:meth:`~FaultFamily.plan`): the :class:`PlannedFault` it adds to the
  seeded schedule, drawn from the :class:`PlanContext`'s random generator, or a note in
  ``PlanContext.skipped`` saying why none (the server does not support it, ...);
- its **set-up** (:meth:`~FaultFamily.setup`, :meth:`~FaultFamily.teardown`): what its
  faults need before the workers start (a network to partition them in, their slots'
  clocks), asked of the launcher where it depends on where the workers run, and kept in
  the :class:`SetupContext` for the planner, the fleet and the nemesis;
- its **application** (:meth:`~FaultFamily.apply`) against the :class:`NemesisContext`
  the nemesis hands it (fleet, server, journal, counters, the pending actions, targeting
  helpers), with hooks into the nemesis loop (:meth:`~FaultFamily.tick`,
  :meth:`~FaultFamily.exited`, :meth:`~FaultFamily.drain`, :meth:`~FaultFamily.settled`);
- its :class:`Kind` of planned fault: its place among faults due at the same instant,
  and whether it talks to the server (then it waits while the server is frozen);
- its **counters** (a dataclass with ``as_dict()``: :meth:`~FaultFamily.new_counts`) and
  the :class:`Row` each display prints of them (the report, the live table, the CLI's
  summary, the pytest summary line);
- the coverage **windows** its faults open (:attr:`~FaultFamily.windows`), and what its
  faults **exercise** (:attr:`~FaultFamily.exercises`): the rules that must see calls,
  and in which fault window, once one of its faults happened;
- its **timeline marks**: which journal events it draws (:attr:`~FaultFamily.marks`,
  :attr:`~FaultFamily.ops`, :meth:`~FaultFamily.draw`), each mark's :class:`Style`, and
  its :class:`Legend` entries.

The families are composed by :class:`~rdq_compliance.chaos.faults.combined.Families`;
the built-in ones are listed in :mod:`rdq_compliance.chaos.faults.registry`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from rdq_compliance.chaos.faults.tables import Table
from rdq_compliance.chaos.faults.windows import Requirement, Window

if TYPE_CHECKING:
    from rdq_compliance.chaos.fleet import Exit, Fleet, WorkerProc
    from rdq_compliance.chaos.journal_observer import LockedJournal
    from rdq_compliance.chaos.launcher import CampaignLauncher, Network
    from rdq_compliance.chaos.libfaketime import Skew
    from rdq_compliance.provision.backend import Server
    from rdq_core.spi import Storage

S = TypeVar("S")
C = TypeVar("C", bound="Counts")


# ---- the schedule ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule: ``at`` seconds into the fault window."""

    at: float
    kind: str  # a Kind's name: kill | pause | server_restart | server_pause | ...
    slot: int | None = None
    point: str | None = None
    duration: float | None = None
    #: How many consecutive worker slots a partition or a loss affects (from ``slot``).
    width: int | None = None

    def describe(self) -> str:
        bits = [f"{self.at:7.3f}s {self.kind}"]
        if self.slot is not None:
            bits.append(f"slot {self.slot}")
        if self.width is not None and self.width > 1:
            bits.append(f"and the next {self.width - 1}")
        if self.point is not None:
            bits.append(f"at {self.point}")
        if self.duration is not None:
            bits.append(f"for {self.duration:.3f}s")
        return " ".join(bits)


@dataclass(frozen=True)
class Kind:
    """A kind of planned fault (``PlannedFault.kind``).

    ``rank`` orders faults planned for the same instant (lower first; the built-in ones
    use 10, 20, ...); ``talks_to_server``: it needs the server to answer, so it is held
    back while the server is frozen.
    """

    name: str
    rank: int
    talks_to_server: bool = False


@dataclass
class PlanContext:
    """What a family plans with: the campaign's window and fleet, what the server
    supports, and the one seeded random generator every family draws from in turn (the
    registry's order), so that a seed gives the same schedule."""

    rng: random.Random
    #: Seconds into the window before which no fault lands (the warmup).
    start: float
    #: The fault window (seconds).
    window: float
    #: Until when tasks are still becoming due (worker faults land before it).
    busy: float
    slots: int
    lease: float
    #: The server's faults (``Server.faults``).
    supported: frozenset[str]
    server_name: str
    #: The backend declares durability (``Capabilities.durable``), and why (``durability``).
    durable: bool
    durability: str
    #: Why worker partitions cannot be made (``None``: the runner built their network).
    no_network: str | None
    #: Notes of the faults asked for but left out, with the reason.
    skipped: list[str] = field(default_factory=list)

    def when(self, end: float) -> float:
        """A moment in ``[start, end]`` (or ``start``), drawn from the generator."""
        return round(self.rng.uniform(self.start, max(self.start, end)), 6)


# ---- applying -------------------------------------------------------------------------------


class Partitioner(Protocol):
    """What the nemesis needs of a network to partition worker slots from the server."""

    def span(self, slots: Sequence[int]) -> list[int]:
        """The slots cutting ``slots`` cuts (a remote fleet cuts whole hosts)."""
        ...

    def partition(self, slots: Sequence[int]) -> None: ...

    def lose(self, slots: Sequence[int]) -> None: ...

    def heal(self, slots: Sequence[int]) -> None: ...


class NemesisContext(Protocol):
    """What the nemesis hands a family to apply its faults with."""

    fleet: Fleet
    server: Server
    storage: Storage
    namespace: str
    queue: str
    lease: float
    journal: LockedJournal
    network: Partitioner | None
    clock: Callable[[], float]
    #: The server is killed (not restarted yet) / frozen (paused) right now.
    server_down: bool
    server_frozen: bool

    def settings(self, family: FaultFamily[S, Any]) -> S: ...

    def counts(self, family: FaultFamily[Any, C]) -> C: ...

    def state(self, family: FaultFamily[Any, Any]) -> Any: ...

    def note(self, text: str) -> None: ...

    def target(self, slot: int | None) -> WorkerProc | None: ...

    def busy_target(self, slot: int | None) -> WorkerProc | None: ...

    def later(self, delay: float, action: Callable[[], bool], what: str) -> None: ...

    #: The drain has begun: pending actions must settle now.
    @property
    def draining(self) -> bool: ...

    def held_claims(self, w: WorkerProc) -> dict[str, str]: ...

    def lease_expiry(self, w: WorkerProc, tokens: Iterable[str]) -> float | None: ...

    def reclaimed(self, held: dict[str, str]) -> bool: ...

    def journal_fault(self, kind: str, w: WorkerProc, **extra: object) -> None: ...

    def spawn_in(self, slot: int) -> None: ...


# ---- counting and printing ------------------------------------------------------------------


class Counts:
    """A family's counters: a dataclass deriving from this, whose ``as_dict`` gives each
    count its key — by default the field's own name and value; a family whose keys or
    values differ from its fields overrides it."""

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class Row(Generic[C]):
    """One count as the displays print it, ordered among every family's rows by ``rank``
    (the built-in ones use 10, 20, ...).

    ``key`` is the count's ``as_dict`` key. With a ``label`` the row is in the report's
    table (the count's value) and the live table (``live(counts)``, default: the value),
    and the CLI's summary says ``said(counts)`` (default: ``"<value> <label>"``); a row
    without a label is in the CLI's summary only if it has ``said``. ``summary``: the
    words of the pytest summary line (``"<value> <words>"``, when the value is not 0).
    """

    rank: int
    key: str
    label: str | None = None
    summary: str | None = None
    live: Callable[[C], str] | None = None
    said: Callable[[C], str] | None = None


# ---- the timeline ---------------------------------------------------------------------------


@dataclass
class Mark:
    """A fault on the timeline: at ``t`` (to ``end`` for one that lasts), on ``target``
    (a worker, several comma-separated, ``server`` or ``harness``)."""

    t: float
    kind: str
    target: str
    label: str
    end: float | None = None
    #: A short text drawn beside the mark (a skewed clock's offset).
    tag: str = ""


#: The shapes the timeline draws a mark as. Under the claim bars: ``band`` (across every
#: lane, from the mark to its end), ``lanes`` (across the target lanes), ``strip`` (a thin
#: strip with the mark's tag along the target lane, while its worker lives). Over them:
#: ``line`` (a cross on the target lane, or every lane), ``rule`` (a dashed line across
#: every lane), ``flag`` (a triangle at the top).
SHAPES = ("band", "lanes", "strip", "line", "rule", "flag")
#: Shapes of marks that last: an open one ends at the end of the history.
SPANS = ("band", "lanes")


@dataclass(frozen=True)
class Style:
    """How the timeline draws the marks of kind ``mark`` (``Mark.kind``): a
    :data:`SHAPES` shape, a colour and an opacity (as the SVG attributes say them)."""

    mark: str
    shape: str
    colour: str
    opacity: str = ""

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"shape {self.shape!r}: expected one of {', '.join(SHAPES)}")


@dataclass(frozen=True)
class Legend:
    """An entry of the timeline's legend: a swatch (CSS) and its label, by ``rank``."""

    rank: int
    label: str
    css: str


@dataclass
class TimelineDraft:
    """The timeline being built from the history, as the families draw on it."""

    marks: list[Mark] = field(default_factory=list)
    #: When each worker process died (its first death seen).
    deaths: dict[str, float] = field(default_factory=dict)
    #: Each family's marks still open (a pause not resumed yet, ...), by family name.
    open: dict[str, dict[str, Mark]] = field(default_factory=dict)

    def opened(self, family: FaultFamily[Any, Any]) -> dict[str, Mark]:
        return self.open.setdefault(family.name, {})


# ---- the family -----------------------------------------------------------------------------


class FaultFamily(Generic[S, C]):
    """A fault family: subclass it, declare its parts, and list one instance in the
    registry (:mod:`rdq_compliance.chaos.faults.registry`). Only :meth:`parse` and
    :meth:`new_counts` are required; every other hook does nothing by default."""

    #: The family's name (its settings and counters are found under it).
    name: ClassVar[str] = ""
    #: The keys of ``[faults]`` it reads (tables such as ``pause``, or plain keys).
    tables: ClassVar[tuple[str, ...]] = ()
    kinds: ClassVar[tuple[Kind, ...]] = ()
    rows: ClassVar[tuple[Row[Any], ...]] = ()
    #: The journal's ``fault`` kinds it draws on the timeline, and other ops it draws.
    marks: ClassVar[tuple[str, ...]] = ()
    ops: ClassVar[tuple[str, ...]] = ()
    #: The coverage windows its faults open, as data read from the journal's ``fault``
    #: events (:mod:`~rdq_compliance.chaos.faults.windows`: a span from an opening kind to
    #: a closing one, per worker or run-wide, an instant, a mark on a worker).
    windows: ClassVar[tuple[Window, ...]] = ()
    #: What its faults exist to exercise: journal ``fault`` kind (one of its
    #: :attr:`marks`) -> the rules that must then see calls, and in which window
    #: (:class:`~rdq_compliance.chaos.coverage.Requirement`); a campaign in which such a
    #: fault happened fails when one is not met.
    exercises: ClassVar[Mapping[str, tuple[Requirement, ...]]] = {}
    #: How each kind of its marks is drawn.
    styles: ClassVar[tuple[Style, ...]] = ()
    legend: ClassVar[tuple[Legend, ...]] = ()

    def __eq__(self, other: object) -> bool:
        """Families are equal by kind (a copied or unpickled scenario equals its original)."""
        return type(self) is type(other) and self.name == getattr(other, "name", None)

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    def __repr__(self) -> str:
        return f"<fault family {self.name!r}>"

    # ---- the scenario ---------------------------------------------------------------------

    def parse(self, faults: Table) -> S:
        """Read the family's keys of the ``[faults]`` table into its settings."""
        raise NotImplementedError

    def defaults(self) -> S:
        """The settings of a scenario that does not mention the family."""
        return self.parse(Table({}, "faults"))

    def check(self, settings: S, *, workers: int) -> None:
        """Raise :class:`~rdq_compliance.chaos.faults.tables.ScenarioError` if the
        settings do not fit a fleet of ``workers`` slots."""

    def in_window(self, settings: S) -> bool:
        """The settings schedule faults in the window (so the warmup must end before it)."""
        return False

    # ---- planning -------------------------------------------------------------------------

    def plan(self, settings: S, ctx: PlanContext) -> list[PlannedFault]:
        """The faults the family adds to the schedule (drawn from ``ctx.rng``), or a note
        in ``ctx.skipped`` saying why none."""
        return []

    # ---- applying -------------------------------------------------------------------------

    def new_state(self) -> Any:
        """The family's own state for one nemesis run (``NemesisContext.state``)."""
        return None

    def apply(self, fault: PlannedFault, ctx: NemesisContext) -> bool:
        """Apply ``fault`` (one of the family's kinds) now: True once done (applied, or
        given up with a note), False to try again at the next tick."""
        raise NotImplementedError(f"the {self.name} family applies no {fault.kind!r}")

    def tick(self, ctx: NemesisContext, now: float) -> None:
        """Called at every tick of the nemesis (after the pending actions due)."""

    def exited(self, ctx: NemesisContext, ex: Exit) -> bool:
        """A worker ended by itself: True if that was this family's fault (journal and
        count it); the nemesis replaces the worker either way."""
        return False

    def drain(self, ctx: NemesisContext) -> None:
        """The drain starts: undo whatever of the family's is still armed."""

    def settled(self, ctx: NemesisContext) -> bool:
        """Nothing of the family's is still under way (the nemesis may finish)."""
        return True

    # ---- counting -------------------------------------------------------------------------

    def new_counts(self) -> C:
        raise NotImplementedError

    def details(self, counts: C) -> list[str]:
        """Lines the CLI prints after its summary of the faults."""
        return []

    # ---- the timeline ---------------------------------------------------------------------

    def draw(self, event: Mapping[str, Any], draft: TimelineDraft) -> None:
        """Add the mark of a journal event the family draws (a ``fault`` of one of its
        :attr:`marks`, or one of its :attr:`ops`) to ``draft``."""

    # ---- setting up and tearing down --------------------------------------------------------

    def setup(self, ctx: SetupContext) -> None:
        """Called before the workers start (and before the faults are planned): set up
        what the family's faults need, and keep it in ``ctx`` for the planner, the fleet
        and the nemesis (or note why not)."""

    def teardown(self, ctx: SetupContext) -> None:
        """Called once the workers stopped (or the campaign failed), after a
        :meth:`setup` that returned: undo what it set up."""


class SetupContext(Protocol):
    """What a family sets up with (:meth:`FaultFamily.setup`, :meth:`FaultFamily.teardown`),
    and where it keeps what it set up: the families' set-up, read by the planner (the
    network, or why none), the fleet (the skewed slots) and the nemesis (the network)."""

    server: Server
    #: The backend's name (as notes name it).
    backend: str
    #: Where the workers run: it answers what depends on that (the network that cuts
    #: slots off the server, where clock skews land).
    launcher: CampaignLauncher
    seed: int
    slots: int
    journal: LockedJournal
    #: The network that partitions worker slots from the server (the nemesis's), or
    #: ``None`` and why there is none (``no_network``; ``None`` once there is one).
    network: Network | None
    no_network: str | None
    #: Each skewed slot's clock, and what hears of each worker started under it.
    skews: dict[int, Skew]
    on_skew: Callable[[str, Skew], None] | None

    def settings(self, family: FaultFamily[S, Any]) -> S: ...

    def counts(self, family: FaultFamily[Any, C]) -> C: ...

    def note(self, text: str) -> None: ...
