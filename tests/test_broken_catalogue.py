"""``tests/broken/catalogue.py`` lists every deliberately broken backend of ``tests/broken/``,
and nothing else; each is named for its bug; every rule it names exists; and every proof it
names reads it.

- every backend object of a store module (``tests/broken/<store>.py``) is a variant or the
  control of the catalogue, and everything the catalogue lists exists there; a module of
  ``tests/broken/`` is a store's, or private (``_``-named) and holds no backend;
- one bug, one name: a variant's storage class is its name in CamelCase, on every store;
- every rule id of the catalogue is one of :data:`rdq_compliance.rules.RULES`;
- every proving test module (``by``) exists and reads the catalogue (or, for a test that
  only uses a variant, names it by its dotted name).

Each check is shown to fail on a crafted variant or catalogue too.
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Iterable, Mapping
from pathlib import Path

from rdq_memory.plugin import MemoryBackend

from rdq_compliance.provision import Backend
from rdq_compliance.rules import RULES
from rdq_core.memory import MemoryStore
from tests._paths import ROOT
from tests.broken import catalogue

BROKEN = ROOT / "tests" / "broken"


def broken_modules() -> dict[str, types.ModuleType]:
    """Every module of ``tests/broken/`` but the package and the catalogue, by name."""
    names = sorted(p.stem for p in BROKEN.glob("*.py") if p.stem not in ("__init__", "catalogue"))
    return {name: importlib.import_module(f"tests.broken.{name}") for name in names}


def stores_of(modules: Mapping[str, types.ModuleType]) -> dict[str, types.ModuleType]:
    return {name: m for name, m in modules.items() if name in catalogue.STORES}


def module_problems(modules: Mapping[str, types.ModuleType]) -> list[str]:
    """A public module that is no store's; a private one that holds a backend."""
    out = []
    for name, module in sorted(modules.items()):
        if name.startswith("_"):
            hidden = sorted(backends_of(module))
            if hidden:
                out.append(f"tests/broken/{name}.py is private but holds backends {hidden}")
        elif name not in catalogue.STORES:
            out.append(f"tests/broken/{name}.py: not a store of the catalogue {catalogue.STORES}")
    return out


def backends_of(module: types.ModuleType) -> dict[str, Backend]:
    return {n: v for n, v in vars(module).items() if isinstance(v, Backend)}


def exposed(stores: Mapping[str, types.ModuleType]) -> set[str]:
    """Every backend object of the store modules, as ``tests.broken.<store>:<name>``."""
    return {f"tests.broken.{s}:{n}" for s, m in stores.items() for n in backends_of(m)}


def listing_problems(found: set[str], listed: set[str]) -> list[str]:
    return [
        f"{name}: a broken backend that tests/broken/catalogue.py does not list"
        for name in sorted(found - listed)
    ] + [
        f"{name}: listed in tests/broken/catalogue.py, but tests/broken has no such backend"
        for name in sorted(listed - found)
    ]


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def opened_class(backend: Backend) -> type | None:
    """The storage class a variant's backend opens, where the backend says it."""
    for attr in ("store_factory", "cls", "storage"):
        value = getattr(backend, attr, None)
        if isinstance(value, type):
            return value
    return None


def naming_problems(
    stores: Mapping[str, types.ModuleType], variants: Iterable[catalogue.Variant]
) -> list[str]:
    out = []
    for v in variants:
        module = stores.get(v.store)
        backend = getattr(module, v.name, None)
        if module is None or backend is None:
            continue  # listing_problems names it
        cls = getattr(module, camel(v.name), None)
        if not isinstance(cls, type):
            out.append(f"{v.dotted}: tests/broken/{v.store}.py has no class {camel(v.name)}")
            continue
        opened = opened_class(backend)
        if opened is not None and opened is not cls:
            out.append(f"{v.dotted} opens {opened.__name__}, not {camel(v.name)}")
    return out


def rule_problems(listed: Iterable[catalogue.Variant | catalogue.Configuration]) -> list[str]:
    """Every rule a catch names (``within`` included) is one of RULES."""
    out = []
    for item in listed:
        named: set[str] = set()
        for c in item.catches:
            named |= set(c.rules) | set(getattr(c, "within", None) or ())
        unknown = sorted(named - set(RULES))
        out += [f"{item}: rule {r!r} is not in rdq_compliance.rules" for r in unknown]
    return out


def reads_catalogue(root: Path, path: Path, seen: set[Path] | None = None) -> bool:
    """``path`` imports :mod:`tests.broken.catalogue`, itself or through a ``tests.*`` helper
    it imports (``tests.stateful_hunt``, ``tests.chaos._bug_hunt``, ...)."""
    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return False
    seen.add(path)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if "tests.broken.catalogue" in names:
            return True
        for name in names:
            if name.startswith("tests."):
                base = root.joinpath(*name.split("."))
                for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                    if reads_catalogue(root, candidate, seen):
                        return True
    return False


def proof_problems(root: Path, proofs: Iterable[tuple[str, str | None]]) -> list[str]:
    """Each proof exists and reads the catalogue (or names the variant: ``name``)."""
    out = []
    for by, name in sorted(set(proofs), key=str):
        path = root / by
        if not path.is_file():
            out.append(f"{by}: no such test module (named by the catalogue for {name})")
        elif not (reads_catalogue(root, path) or (name is not None and name in path.read_text())):
            out.append(f"{by} does not read tests/broken/catalogue.py (nor name {name})")
    return out


def catalogue_proofs() -> list[tuple[str, str | None]]:
    """(test module, the variant's dotted name) for every catch and control; a
    configuration's proof must read the catalogue (no name stands for it)."""
    out: list[tuple[str, str | None]] = []
    for v in catalogue.variants():
        out += [(c.by, v.dotted) for c in v.catches]
    for cfg in catalogue.configurations():
        out += [(c.by, None) for c in cfg.catches]
    out += [(c.by, c.dotted) for c in catalogue.CONTROLS if c.by is not None]
    return out


# ---- the catalogue keeps them -------------------------------------------------------------------


def test_every_broken_backend_is_listed_and_every_listed_one_exists():
    modules = broken_modules()
    assert module_problems(modules) == []
    stores = stores_of(modules)
    assert set(stores) == set(catalogue.STORES)
    found = exposed(stores)
    assert len(found) > 50, sorted(found)  # sanity: the walk sees the variants
    assert listing_problems(found, catalogue.dotted_names()) == []


def test_each_variant_is_named_for_its_bug_on_every_store():
    stores = stores_of(broken_modules())
    assert naming_problems(stores, catalogue.variants()) == []
    names: dict[str, set[str]] = {}
    for v in catalogue.variants():
        names.setdefault(v.title, set()).add(v.name)
    assert all(len(n) == 1 for n in names.values()), names


def test_every_rule_the_catalogue_names_exists():
    assert rule_problems([*catalogue.variants(), *catalogue.configurations()]) == []


def test_every_proof_reads_the_catalogue():
    proofs = catalogue_proofs()
    assert {by for by, _ in proofs} >= {catalogue.KIT, catalogue.MACHINE, catalogue.STANDARD}
    assert proof_problems(ROOT, proofs) == []


# ---- ... and each check fails where it should -------------------------------------------------


class _Extra(MemoryStore):
    """A crafted variant nobody listed."""


def test_a_crafted_variant_the_catalogue_does_not_list_is_named():
    stores = stores_of(broken_modules())
    crafted = types.ModuleType("tests.broken.memory")
    crafted.__dict__.update(vars(stores["memory"]))
    crafted.extra_bug = MemoryBackend(_Extra, "broken-extra-bug")  # type: ignore[attr-defined]
    found = exposed({**stores, "memory": crafted})
    assert listing_problems(found, catalogue.dotted_names()) == [
        "tests.broken.memory:extra_bug: a broken backend that tests/broken/catalogue.py "
        "does not list"
    ]
    listed = catalogue.dotted_names() | {"tests.broken.redis:gone"}
    assert listing_problems(exposed(stores), listed) == [
        "tests.broken.redis:gone: listed in tests/broken/catalogue.py, but tests/broken has no "
        "such backend"
    ]
    # a module that is no store's, a private one holding a backend
    plain = types.ModuleType("tests.broken._plain")
    assert module_problems({"kafka": crafted, "_helpers": crafted, "_plain": plain}) == [
        "tests/broken/_helpers.py is private but holds backends "
        + str(sorted(backends_of(crafted))),
        f"tests/broken/kafka.py: not a store of the catalogue {catalogue.STORES}",
    ]
    # a variant whose class is not named for its bug
    assert naming_problems(
        {"memory": crafted},
        [catalogue.Variant("memory", "extra_bug", "double-claim", "crafted")],
    ) == ["tests.broken.memory:extra_bug: tests/broken/memory.py has no class ExtraBug"]
    crafted.ExtraBug = type("ExtraBug", (MemoryStore,), {})  # type: ignore[attr-defined]
    assert naming_problems(
        {"memory": crafted},
        [catalogue.Variant("memory", "extra_bug", "double-claim", "crafted")],
    ) == ["tests.broken.memory:extra_bug opens _Extra, not ExtraBug"]


def test_the_other_checks_fail_on_a_crafted_catalogue(tmp_path: Path):
    bad = catalogue.Variant(
        "memory", "limit_ignored", "wrong-claim-batch", "crafted",
        (catalogue.Machine(frozenset({"no-such-rule"}), by="tests/no_such_test.py"),),
    )  # fmt: skip
    assert rule_problems([bad]) == [
        "tests.broken.memory:limit_ignored: rule 'no-such-rule' is not in rdq_compliance.rules"
    ]
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_blind.py").write_text("def test_x():\n    pass\n")
    assert proof_problems(
        tmp_path,
        [("tests/no_such_test.py", bad.dotted), ("tests/test_blind.py", bad.dotted)],
    ) == [
        "tests/no_such_test.py: no such test module (named by the catalogue for "
        "tests.broken.memory:limit_ignored)",
        "tests/test_blind.py does not read tests/broken/catalogue.py (nor name "
        "tests.broken.memory:limit_ignored)",
    ]
