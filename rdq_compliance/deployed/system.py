"""What a deployed system declares: a queue library run as its users run it.

A deployed system is one queue library's own workers, started as its docs say, fed with
its own client. It declares, as data and one small protocol (:class:`DeployedSystem`):

- how to start one worker (:class:`WorkerLaunch`: argv, env, cwd) and the processes a
  worker is made of (:class:`Part`: ``"main"``, ``"child"``, ...), so the nemesis can
  freeze a whole worker or kill one part;
- how to enqueue a job (:meth:`DeployedSystem.enqueue` of a :class:`JobSpec`: delay,
  retries, and what the probe handler does when it runs it, :data:`Behaviour`);
- how to read each job's final state, in the library's own words mapped to the neutral
  :data:`NeutralState` (:class:`JobState`);
- its promises (:class:`Promise`): each quoted from the library's docs at the pinned
  version, with a link, and what it implies for the verdicts of
  :mod:`rdq_compliance.deployed.verdicts`;
- two settings profiles (:class:`Profile`): ``defaults`` (nothing shortened) and ``fast``
  (each changed setting listed with its default and the docs line that allows it);
- optionally, the library's known-upstream issues
  (:class:`~rdq_compliance.known_upstream.KnownUpstream` by the deployed rules and a
  pattern, checked by :mod:`rdq_compliance.deployed.upstream`): a finding one of them
  covers is reported as confirmed upstream, not as a new finding.

Systems are found through the ``rdq.systems`` entry points (:func:`load_system`). Nothing
here names a library.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Literal, Protocol, get_args, runtime_checkable

from rdq_compliance.deployed.faults import FAULT_KINDS, FaultKind
from rdq_compliance.entry_points import by_name, load_named, load_path
from rdq_core.errors import RdqError

__all__ = [
    "BEHAVIOURS",
    "CAUSES",
    "GROUP",
    "Behaviour",
    "Cause",
    "Delivery",
    "DeployedSystem",
    "JobSpec",
    "JobState",
    "NeutralState",
    "Part",
    "Profile",
    "Promise",
    "Role",
    "Setting",
    "UnknownSystem",
    "WorkerLaunch",
    "declaration_problems",
    "installed",
    "link_problem",
    "load_system",
    "takes_dsn",
]

GROUP = "rdq.systems"

#: A job's state in neutral words: ``finished`` (succeeded), ``failed-for-good`` (failed,
#: no retry left), ``held`` (parked until someone acts), ``waiting`` (queued, delayed or
#: scheduled for a retry), ``running`` (handed to a worker), ``unknown`` (the library has
#: no record of it, or words the mapping does not know).
NeutralState = Literal["finished", "failed-for-good", "held", "waiting", "running", "unknown"]

#: What the probe handler does with a job: return after working ``seconds`` (``succeed``),
#: raise (``fail``), ask the library for a retry (``retry``), sleep ``seconds`` past the
#: library's stall threshold while it heartbeats (``sleep``, then return), ask the library
#: to hold the job (``hold``).
Behaviour = Literal["succeed", "fail", "retry", "sleep", "hold"]
BEHAVIOURS: tuple[str, ...] = get_args(Behaviour)

Delivery = Literal["at-least-once", "at-most-once"]

#: What puts a verdict within a system's documented model (:attr:`Promise.tolerates`): a
#: fault kind (:data:`rdq_compliance.deployed.faults.FaultKind`), or ``over-limit`` (an
#: execution that ran past the time limit its job or profile declares).
Cause = Literal[FaultKind, "over-limit"]
CAUSES: tuple[str, ...] = (*FAULT_KINDS, "over-limit")


class UnknownSystem(RdqError, LookupError):
    """No deployed system answers to the name given."""


#: Where a part's processes are in a worker's process tree: ``leader`` is the process
#: the harness started (pid = process group); ``descendants`` every process under it.
Role = Literal["leader", "descendants"]


@dataclass(frozen=True)
class Part:
    """One process of a worker, by the name the nemesis targets (``main``, ``child``),
    how many of it a worker runs, and where it is in the worker's process tree."""

    name: str
    count: int = 1
    what: str = ""  # in words: what this process does
    role: Role = "leader"


@dataclass(frozen=True)
class WorkerLaunch:
    """How to start one worker: the command, the environment added to the harness's (the
    probe's ``RDQ_PROBE_PATH`` and ``RDQ_PROBE_WORKER`` among it), the working folder."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """A job to enqueue: its id for the probe (the system says what id the library gives
    it, :meth:`DeployedSystem.enqueue`), a delay before it is due, the retries asked (``None``:
    the library's default) and the handler's behaviour (``seconds`` for ``succeed`` and
    ``sleep``; a library without a retry count per job gets none, see
    :class:`DeployedSystem`)."""

    key: str
    behaviour: Behaviour = "succeed"
    seconds: float = 0.0
    delay: float = 0.0
    retries: int | None = None


@dataclass(frozen=True)
class JobState:
    """A job's final state: the library's own words and their neutral meaning, and, when
    the library records it, the ``attempt`` (as it numbers them for the handler, the
    probe's ``attempt``) whose outcome it kept as that state."""

    state: NeutralState
    words: str
    attempt: int | None = None


@dataclass(frozen=True)
class Setting:
    """One setting of a profile: its value, the library's default, and (when they
    differ) the docs line that allows the value."""

    name: str
    value: str
    default: str
    allowed_by: str = ""  # the docs line (quoted) and its link

    @property
    def changed(self) -> bool:
        return self.value != self.default


@dataclass(frozen=True)
class Profile:
    """A settings profile: the settings, and what they make of the time bounds the
    verdicts use: ``recovery_after`` (seconds until a dead worker's jobs are handed out
    again; ``None``: never by the library itself) and ``execution_limit`` (seconds an
    execution may run before the library may give its job away or stop it; ``None``: no
    limit)."""

    name: str
    settings: tuple[Setting, ...] = ()
    recovery_after: float | None = None
    execution_limit: float | None = None

    def problems(self) -> list[str]:
        """What is wrong with the profile: ``defaults`` changes a setting, or a changed
        setting does not cite the docs line that allows it."""
        out = []
        for s in self.settings:
            if self.name == "defaults" and s.changed:
                out.append(f"profile 'defaults' changes {s.name} ({s.default} -> {s.value})")
            if s.changed and not s.allowed_by.strip():
                out.append(f"profile {self.name!r} changes {s.name} citing no docs line")
        return out


@dataclass(frozen=True)
class Promise:
    """One thing the library promises, in its own words.

    ``quote`` is the docs' text, ``link`` the page at the pinned version. What it implies:
    ``delivery`` (``at-least-once``/``at-most-once``, when it speaks of it); ``recovery``
    (how a dead worker's jobs come back, in words; the profile says after how long);
    ``forbids``: the verdict rule ids a break of this promise shows (a verdict under
    one is a **finding** citing it); ``tolerates``: rule id -> the causes under which
    that verdict is within the documented model (a **gap** citing it)."""

    id: str
    quote: str
    link: str
    delivery: Delivery | None = None
    recovery: str | None = None
    forbids: frozenset[str] = frozenset()
    tolerates: Mapping[str, frozenset[Cause]] = field(default_factory=dict)


@runtime_checkable
class DeployedSystem(Protocol):
    """A queue library as deployed: what the kit needs to run, feed and read it.

    Three optional class attributes, read with ``getattr``, say what the harness cannot
    ask of every library, or what its tracker already knows:

    - ``retries_per_job = False``: the library takes no retry count per job (a budget set
      once for every job); its jobs then ask for none (``JobSpec.retries`` ``None``);
    - ``connections_in_namespace = False``: its workers' connections do not carry the kit's
      namespace (a library's own client names them its own way), so the server's
      ``cut_connections(namespace)`` would find none of them; the connection cut is then
      listed as not run;
    - ``known_upstream``: :class:`~rdq_compliance.known_upstream.KnownUpstream` entries,
      each naming a public issue of the library and covering, by deployed rule ids
      (``rules``) and a regular expression searched in the verdict's message
      (``pattern``), the findings that issue already reports
      (:mod:`rdq_compliance.deployed.upstream`).

    The plan says what the first two changed (:mod:`rdq_compliance.deployed.plan`)."""

    #: The library's name and pinned version (``"somequeue==1.2.3"``).
    name: str
    #: The kit backend (``rdq.backends`` entry point) whose server the workers and the
    #: client use; the harness provisions it through that backend's ladder (a DSN, local
    #: binaries, a container) and runs the server faults through it.
    server: str
    #: What the probe handler can be told to do on this library (:data:`Behaviour`).
    behaviours: frozenset[str]
    #: The processes one worker is made of.
    parts: tuple[Part, ...]
    promises: tuple[Promise, ...]
    #: ``defaults`` and ``fast``, by name.
    profiles: Mapping[str, Profile]

    def bind(self, dsn: str, namespace: str, workdir: str, profile: str) -> None:
        """Get ready to run on the server at ``dsn``: the kit ``namespace`` made for this
        campaign (a schema, a key prefix; a system that cannot live in one says so in its
        promises and needs a private server), a private ``workdir``, the ``profile``.
        Installs what the library's docs say to install (a schema). Called once, before
        any other call but the declarations."""
        ...

    def close(self) -> None:
        """Release the client's connections (the workers are the harness's business)."""
        ...

    def worker(
        self, name: str, profile: str, probe_path: str, dsn: str | None = None
    ) -> WorkerLaunch:
        """How to start worker ``name`` under ``profile``, its probe journaling to
        ``probe_path`` (a path on the host the worker runs on), connecting to the server
        at ``dsn`` (the server as that worker reaches it: through a relay, from another
        host; ``None``: the DSN given to :meth:`bind`). A system whose ``worker`` takes no
        ``dsn`` runs only where its workers reach the server at the bound DSN
        (:func:`takes_dsn`)."""
        ...

    def enqueue(self, jobs: Sequence[JobSpec]) -> Mapping[str, str]:
        """Enqueue with the library's own client; ``JobSpec.key`` -> the job id the library
        acknowledged (the one the probe journals). A job missing from the answer was not
        acknowledged."""
        ...

    def final_states(self, job_ids: Sequence[str]) -> Mapping[str, JobState]:
        """Each job's state as the library reports it, mapped to neutral words."""
        ...


#: A page of this repository's docs as a promise's link: ``docs/<page>.md#<anchor>`` (the
#: kit's own control system quotes its contract).
_REPO_DOC = re.compile(r"docs/(?:[\w-]+/)*[\w-]+\.md(?:#[\w-]+)?")


def link_problem(link: str) -> str | None:
    """Why ``link`` is not a promise's link (an http(s) address, or a page of this
    repository's docs, ``docs/contract.md#2-the-model``); ``None`` when it is one."""
    if link.startswith(("http://", "https://")) or _REPO_DOC.fullmatch(link):
        return None
    return f"{link!r} is neither an http(s) link nor a page of the repository's docs"


def declaration_problems(system: DeployedSystem, rules: Sequence[str]) -> list[str]:
    """What is missing from or wrong in ``system``'s declaration, given the verdict
    ``rules`` the checker decides: the two profiles, each promise's quote and link, a
    rule id no promise forbids, an unknown rule id or cause."""
    out: list[str] = []
    for name in ("defaults", "fast"):
        profile = system.profiles.get(name)
        if profile is None:
            out.append(f"{system.name}: no {name!r} profile")
        else:
            out += [f"{system.name}: {p}" for p in profile.problems()]
    if not system.parts:
        out.append(f"{system.name}: a worker is made of no named part")
    if not getattr(system, "server", ""):
        out.append(f"{system.name}: names no kit backend whose server it runs on")
    behaviours = set(getattr(system, "behaviours", ()))
    unknown = sorted(behaviours - set(BEHAVIOURS))
    if unknown:
        out.append(
            f"{system.name}: unknown handler behaviours {unknown} (known: {list(BEHAVIOURS)})"
        )
    if "succeed" not in behaviours:
        out.append(f"{system.name}: its handler cannot even succeed ('succeed' not in behaviours)")
    ids = [p.id for p in system.promises]
    out += [
        f"{system.name}: promise {i!r} declared twice" for i in sorted(set(ids)) if ids.count(i) > 1
    ]
    forbidden: set[str] = set()
    for p in system.promises:
        if not p.quote.strip() or link_problem(p.link) is not None:
            out.append(f"{system.name}: promise {p.id!r} lacks the library's words or a link")
        named = set(p.forbids) | set(p.tolerates)
        out += [
            f"{system.name}: promise {p.id!r} names unknown rule {r!r}"
            for r in sorted(named - set(rules))
        ]
        for rule, causes in p.tolerates.items():
            bad = sorted(set(causes) - set(CAUSES))
            if bad:
                out.append(
                    f"{system.name}: promise {p.id!r} tolerates {rule!r} under unknown causes {bad}"
                )
        forbidden |= set(p.forbids)
    out += [f"{system.name}: no promise forbids {r!r}" for r in rules if r not in forbidden]
    return out


def takes_dsn(system: DeployedSystem) -> bool:
    """Whether ``system.worker`` takes the ``dsn`` a worker reaches the server with."""
    try:
        parameters = inspect.signature(system.worker).parameters
    except (TypeError, ValueError):
        return False
    return "dsn" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def installed() -> dict[str, EntryPoint]:
    """The deployed systems registered in this environment, by name."""
    return by_name(GROUP)


def load_system(
    name: str, *, found: Callable[[], Mapping[str, EntryPoint]] = installed
) -> DeployedSystem:
    """The system registered as ``name`` under the ``rdq.systems`` entry points, or at
    ``module.path:attribute`` (a system tried before it is packaged): an instance, or a
    class or function that makes one when called with no argument."""
    if ":" in name:
        obj, origin = load_path(name, kind="deployed system", error=UnknownSystem)
    else:
        obj, origin = load_named(
            name, group=GROUP, kind="deployed system", found=found(), error=UnknownSystem
        )
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, DeployedSystem)):
        obj = obj()
    if not isinstance(obj, DeployedSystem):
        raise UnknownSystem(
            f"{origin} gives a {type(obj).__name__}, not a deployed system "
            "(rdq_compliance.deployed.system.DeployedSystem)"
        )
    return obj
