"""The directions of flow of DESIGN.md, checked on the source (and once at run time).

* ``rdq_core`` imports nothing but itself and the standard library;
* a backend's storage half imports only ``rdq_core``, its driver and its own storage
  modules — never ``rdq_compliance`` nor its plugin half — and importing it loads no kit
  code at all;
* ``rdq_compliance.provision``'s modules import their siblings directly (never through
  the package ``__init__``), and nothing imports the watchdog script, which is stdlib only;
* no two modules of a backend import each other, directly or round a longer circle.

Imports are read with :mod:`ast`, including those inside functions (a lazy import is
still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}

POSTGRES = ROOT / "backends" / "postgres" / "rdq_postgres"
SQLITE = ROOT / "backends" / "sqlite" / "rdq_sqlite"
PROVISION = ROOT / "rdq_compliance" / "provision"
POSTGRES_STORAGE = {"storage", "connection", "queries", "schema", "rows", "errors"}
SQLITE_STORAGE = {"storage", "connection", "schema"}


def imports_of(path: Path, package: str) -> set[str]:
    """Every module ``path`` imports (dotted; ``from p import m`` counts as ``p.m`` when
    ``p.m`` is a module of ``package``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            assert node.module is not None
            out.add(node.module)
            if node.module == package:
                folder = path.parent
                for alias in node.names:
                    if (folder / f"{alias.name}.py").exists():
                        out.add(f"{package}.{alias.name}")
    return out


def roots(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_rdq_core_imports_only_itself_and_the_standard_library() -> None:
    for path in sorted((ROOT / "rdq_core").glob("*.py")):
        foreign = roots(imports_of(path, "rdq_core")) - STDLIB - {"rdq_core"}
        assert not foreign, f"{path.name} imports {sorted(foreign)}"


@pytest.mark.parametrize(
    ("folder", "package", "storage", "drivers"),
    [
        (POSTGRES, "rdq_postgres", POSTGRES_STORAGE, {"psycopg", "psycopg_pool"}),
        (SQLITE, "rdq_sqlite", SQLITE_STORAGE, set()),
    ],
    ids=["postgres", "sqlite"],
)
def test_the_storage_half_imports_only_the_core_its_driver_and_itself(
    folder: Path, package: str, storage: set[str], drivers: set[str]
) -> None:
    for name in sorted(storage):
        found = imports_of(folder / f"{name}.py", package)
        foreign = roots(found) - STDLIB - drivers - {"rdq_core", package}
        assert not foreign, f"{package}.{name} imports {sorted(foreign)}"
        own = {m for m in found if m.startswith(f"{package}.")}
        outside = {m for m in own if m.split(".")[1] not in storage}
        assert not outside, f"{package}.{name} imports the plugin half: {sorted(outside)}"


def test_importing_a_storage_half_loads_no_kit_code() -> None:
    pytest.importorskip("psycopg")
    script = (
        "import sys, rdq_core, rdq_core.memory, rdq_postgres.storage, rdq_sqlite.storage\n"
        "print(sorted(m for m in sys.modules if m.startswith('rdq_compliance')\n"
        "    or m in ('rdq_postgres.plugin', 'rdq_postgres.server', 'rdq_sqlite.plugin')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("folder", "package"),
    [(POSTGRES, "rdq_postgres"), (SQLITE, "rdq_sqlite")],
    ids=["postgres", "sqlite"],
)
def test_no_two_modules_of_a_backend_import_each_other(folder: Path, package: str) -> None:
    graph = {
        path.stem: {
            m.split(".")[1]
            for m in imports_of(path, package)
            if m.startswith(f"{package}.") and m.count(".") == 1
        }
        for path in folder.glob("*.py")
        if path.stem != "__init__"  # imports nothing at run time (lazy __getattr__)
    }

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            cycle = [*trail[trail.index(node) :], node]
            pytest.fail(f"import circle in {package}: {' -> '.join(cycle)}")
        for successor in sorted(graph.get(node, ())):
            visit(successor, [*trail, node])

    for module in sorted(graph):
        visit(module, [])


def test_the_postgres_rungs_build_on_the_server_never_on_the_plugin() -> None:
    for rung in ("local", "container"):
        found = imports_of(POSTGRES / f"{rung}.py", "rdq_postgres")
        assert "rdq_postgres.server" in found
        assert "rdq_postgres.plugin" not in found


def test_provision_modules_import_their_siblings_directly() -> None:
    for path in sorted(PROVISION.glob("*.py")):
        if path.name == "__init__.py":
            continue
        found = imports_of(path, "rdq_compliance.provision")
        assert "rdq_compliance.provision" not in found, (
            f"{path.name} imports through the package __init__ (an import cycle)"
        )
        kit = {m for m in found if m.startswith("rdq_compliance.")}
        assert all(m.startswith("rdq_compliance.provision.") for m in kit), (
            f"{path.name} imports the kit beyond provision: {sorted(kit)}"
        )


def test_the_watchdog_is_stdlib_only_and_never_imported() -> None:
    foreign = roots(imports_of(PROVISION / "_watchdog.py", "")) - STDLIB
    assert not foreign, f"the watchdog imports {sorted(foreign)}"
    for folder in (ROOT / "rdq_compliance", ROOT / "rdq_core", ROOT / "backends"):
        for path in folder.rglob("*.py"):
            found = imports_of(path, "")
            assert not any(m.endswith("_watchdog") for m in found), f"{path} imports it"
