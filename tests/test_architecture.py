"""The house rules of the code's layout: small modules with one job, each package
depending only on what it must. This test states them here and reads them from the
source (every ``import`` statement, at module level or inside a function,
``TYPE_CHECKING`` blocks included):

- ``rdq_core`` imports nothing outside itself and the standard library;
- a backend's storage half (its ``Storage`` class and everything that module needs) is
  usable without the kit: it never imports ``rdq_compliance``;
- an adapter's storage half (``adapters/<library>/rdq_<library>``: a queue library someone
  else wrote, behind the SPI) is that library, its drivers and ``rdq_core``: it imports
  no other package of this project, so whatever the kit finds is about the library;
- nothing in ``rdq_core`` or ``rdq_compliance`` imports a specific backend (backends are
  found through the ``rdq.backends`` entry points);
- no two modules import each other, directly or round a longer circle;
- nothing is looked up by ``importlib`` but a backend named ``module:attribute`` (the
  registry); the checker in particular is imported;
- the reaper scripts (:data:`REAPER_SCRIPTS`: the watchdog of managed processes, the
  reapers of kit containers and of network namespaces) are stdlib-only and never
  imported;
- nothing edits ``sys.path`` (the kit's tests are a package tree imported by dotted
  names; spawned processes get ``PYTHONPATH``); no benchmark imports the kit's tests
  (they run them, or the kit's commands, in a subprocess), and every broken variant a
  benchmark names (``tests.broken.<store>:<bug>``) is in ``tests/broken/catalogue.py``.

Each rule is shown to fail on a crafted tree too, so none of them can pass vacuously.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KIT = ("rdq_core", "rdq_compliance")
#: The scripts a ``ReaperPipe`` starts as ``python -I -S`` (no site-packages): a
#: third-party import would fail at once, and importing one would run it in the kit.
REAPER_SCRIPTS = (
    "rdq_compliance.provision._watchdog",
    "rdq_compliance.provision._container_reaper",
    "rdq_compliance.provision._netns_reaper",
)


def package_roots(root: Path) -> dict[str, Path]:
    """Every top-level ``rdq_*`` package of the checkout -> its folder."""
    out = {p.name: p for p in root.glob("rdq_*") if (p / "__init__.py").is_file()}
    for p in [*root.glob("backends/*/rdq_*"), *root.glob("adapters/*/rdq_*")]:
        if (p / "__init__.py").is_file():
            out[p.name] = p
    return out


def adapter_packages(root: Path) -> set[str]:
    """The packages under ``adapters/`` (an adapter to a queue library someone else wrote)."""
    return {p.name for p in root.glob("adapters/*/rdq_*") if (p / "__init__.py").is_file()}


def modules_of(roots: Mapping[str, Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the given packages."""
    out: dict[str, Path] = {}
    for name, folder in roots.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [name, *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path, known: Iterable[str]) -> set[str]:
    """The modules ``module`` imports: project modules by their dotted name, others by
    their top-level name."""
    known = set(known)
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    resolved = set()
    for name in out:
        if name in known:
            resolved.add(name)
        elif name.split(".")[0] in {k.split(".")[0] for k in known}:
            # a name inside a project module (``from pkg.mod import Class``): the module
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                resolved.add(name)
        else:
            resolved.add(name.split(".")[0])
    resolved.discard(module)
    return resolved


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = modules_of(package_roots(root))
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def closure(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w in graph and w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def storage_modules(root: Path) -> dict[str, str]:
    """Backend package -> the module defining its ``Storage`` subclass."""
    out = {}
    for name, folder in package_roots(root).items():
        if name in KIT:
            continue
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and any(
                    (isinstance(b, ast.Name) and b.id == "Storage")
                    or (isinstance(b, ast.Attribute) and b.attr == "Storage")
                    for b in node.bases
                ):
                    rel = path.relative_to(folder).with_suffix("")
                    out[name] = ".".join([name, *rel.parts])
    return out


# ---- the rules, as functions returning what breaks them -------------------------------------


def adapter_problems(root: Path, graph: Mapping[str, set[str]]) -> list[str]:
    """An adapter's storage half is the library's own functions and the core, nothing of
    this project's other stores: its closure imports no other ``rdq_*`` package but
    ``rdq_core`` (a finding must be about the library, not about a built-in backend's
    code it borrowed)."""
    adapters = adapter_packages(root)
    out = []
    for package, module in sorted(storage_modules(root).items()):
        if package not in adapters:
            continue
        for m in sorted(closure(graph, module)):
            other = sorted(
                i
                for i in graph[m]
                if i.startswith("rdq_") and i.split(".")[0] not in (package, "rdq_core")
            )
            if other:
                out.append(f"{package}: storage module {module} needs {m}, which imports {other}")
    return out


def core_problems(graph: Mapping[str, set[str]]) -> list[str]:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return [
        f"{m} imports {i}"
        for m, deps in sorted(graph.items())
        if m.split(".")[0] == "rdq_core"
        for i in sorted(deps)
        if i.split(".")[0] != "rdq_core" and i.split(".")[0] not in stdlib
    ]


def storage_problems(root: Path, graph: Mapping[str, set[str]]) -> list[str]:
    out = []
    for package, module in sorted(storage_modules(root).items()):
        for m in sorted(closure(graph, module)):
            kit = sorted(i for i in graph[m] if i.split(".")[0] == "rdq_compliance")
            if kit:
                out.append(f"{package}: storage module {module} needs {m}, which imports {kit}")
    return out


def backend_knowledge_problems(graph: Mapping[str, set[str]]) -> list[str]:
    return [
        f"{m} imports the backend {i}"
        for m, deps in sorted(graph.items())
        if m.split(".")[0] in KIT
        for i in sorted(deps)
        if i.split(".")[0].startswith("rdq_") and i.split(".")[0] not in KIT
    ]


def reaper_problems(graph: Mapping[str, set[str]], scripts: Iterable[str]) -> list[str]:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    out = []
    for script in scripts:
        if script not in graph:
            out.append(f"{script} is missing")
            continue
        out += [
            f"{script} imports {i}" for i in sorted(graph[script]) if i.split(".")[0] not in stdlib
        ]
        out += [f"{m} imports {script}" for m, deps in sorted(graph.items()) if script in deps]
    return out


def lookup_problems(root: Path) -> list[str]:
    out = []
    for module, path in sorted(modules_of(package_roots(root)).items()):
        if module == "rdq_compliance.entry_points":
            continue
        text = path.read_text()
        if "import_module" in text or "__import__(" in text:
            out.append(f"{module} looks a module up by name (importlib)")
    return out


# ---- the checkout keeps them ---------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


def test_the_graph_is_read(graph):
    """Sanity: the walk sees the kit, the core and every built-in backend with its edges."""
    for module in ("rdq_core.spi", "rdq_compliance.plugin", "rdq_compliance.session"):
        assert module in graph
    assert "rdq_core.spi" in graph["rdq_compliance.session"]
    assert set(storage_modules(ROOT)) >= {"rdq_sqlite", "rdq_postgres"}


def test_rdq_core_imports_only_itself_and_the_standard_library(graph):
    assert core_problems(graph) == []


def test_storage_halves_are_usable_without_the_kit(graph):
    assert storage_problems(ROOT, graph) == []


def test_an_adapters_storage_half_is_the_library_and_the_core(graph):
    assert adapter_problems(ROOT, graph) == []


def test_the_kit_knows_no_specific_backend(graph):
    assert backend_knowledge_problems(graph) == []


def test_no_two_modules_import_each_other(graph):
    found = cycles(graph)
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_nothing_is_looked_up_by_name_but_a_backend():
    assert lookup_problems(ROOT) == []


def test_importing_a_storage_half_loads_no_kit_code(graph):
    """At run time too: importing every storage module (and the reference store) leaves
    no module of the kit or of a plugin half in ``sys.modules`` (a driver's own
    ``*.server`` modules, such as pymongo's, are not plugin halves)."""
    modules = ["rdq_core.memory", *sorted(storage_modules(ROOT).values())]
    script = (
        f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.startswith('rdq_compliance')"
        " or (m.startswith('rdq_') and m.endswith(('.plugin', '.server')))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("script", REAPER_SCRIPTS)
def test_the_reaper_scripts_are_stdlib_only_and_never_imported(graph, script):
    assert reaper_problems(graph, [script]) == []


# ---- ... and each rule fails where it should ------------------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_each_rule_fails_on_a_crafted_tree(tmp_path):
    root = _tree(
        tmp_path,
        {
            "rdq_core/__init__.py": "",
            "rdq_core/spi.py": "import psycopg\nclass Storage: ...\n",
            "rdq_compliance/__init__.py": "",
            "rdq_compliance/a.py": "from rdq_compliance import b\nimport rdq_pg.storage\n",
            "rdq_compliance/b.py": (
                "def f():\n    from rdq_compliance.a import x\n"
                "import importlib\nimportlib.import_module('rdq_compliance.c')\n"
            ),
            "backends/pg/rdq_pg/__init__.py": "",
            "backends/pg/rdq_pg/storage.py": (
                "from rdq_core.spi import Storage\nfrom rdq_pg.helpers import h\n"
                "class PgStorage(Storage): ...\n"
            ),
            "backends/pg/rdq_pg/helpers.py": "from rdq_compliance.provision import x\n",
            "adapters/lib/rdq_lib/__init__.py": "",
            "adapters/lib/rdq_lib/storage.py": (
                "from rdq_core.spi import Storage\nfrom rdq_pg import helpers\n"
                "class LibStorage(Storage): ...\n"
            ),
        },
    )
    g = import_graph(root)
    assert core_problems(g) == ["rdq_core.spi imports psycopg"]
    assert storage_problems(root, g) == [
        "rdq_lib: storage module rdq_lib.storage needs rdq_pg.helpers, which imports "
        "['rdq_compliance']",
        "rdq_pg: storage module rdq_pg.storage needs rdq_pg.helpers, which imports "
        "['rdq_compliance']",
    ]
    assert adapter_problems(root, g) == [
        "rdq_lib: storage module rdq_lib.storage needs rdq_lib.storage, which imports "
        "['rdq_pg.helpers']",
        "rdq_lib: storage module rdq_lib.storage needs rdq_pg.helpers, which imports "
        "['rdq_compliance']",
    ]
    assert backend_knowledge_problems(g) == ["rdq_compliance.a imports the backend rdq_pg.storage"]
    assert cycles(g) == [["rdq_compliance.a", "rdq_compliance.b"]]
    assert lookup_problems(root) == ["rdq_compliance.b looks a module up by name (importlib)"]


# ---- the kit's own tests and benchmarks: dotted names, no sys.path surgery -------------------

#: Folders of the checkout that are not its code.
_NOT_CODE = {".git", ".venv", ".v", "build", "dist", "node_modules", "__pycache__"}
_DOTTED_VARIANT = re.compile(r"\btests\.broken\.(\w+):(\w+)")


def python_files(root: Path) -> list[Path]:
    return sorted(
        p for p in root.rglob("*.py") if not _NOT_CODE & set(p.relative_to(root).parts[:-1])
    )


def sys_path_problems(root: Path) -> list[str]:
    """Code that edits ``sys.path`` (``sys.path.insert/append/extend``, or assigns to it):
    modules are found by their dotted names and ``PYTHONPATH`` / pytest's ``pythonpath``."""
    out = []
    for path in python_files(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            target = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("insert", "append", "extend"):
                    target = node.func.value
            elif isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t for t in targets if ast.unparse(t).startswith("sys.path")), None)
            if target is not None and ast.unparse(target).startswith("sys.path"):
                rel = path.relative_to(root)
                out.append(f"{rel}:{node.lineno} edits sys.path")
    return out


def benchmark_import_problems(root: Path) -> list[str]:
    """A benchmark that imports the kit's tests: it runs them (pytest) or the kit's
    commands in a subprocess instead."""
    out = []
    for path in sorted((root / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            out += [
                f"benchmarks/{path.name}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] == "tests"
            ]
    return out


def benchmark_variant_problems(root: Path, listed: set[str]) -> list[str]:
    """A variant a benchmark names (``tests.broken.<store>:<bug>``) that the catalogue of
    ``tests/broken/`` does not list."""
    out = []
    for path in sorted((root / "benchmarks").glob("*.py")):
        for found in _DOTTED_VARIANT.finditer(path.read_text()):
            if found[0] not in listed:
                out.append(f"benchmarks/{path.name} names {found[0]}, not in the catalogue")
    return out


def test_nothing_edits_sys_path():
    assert sys_path_problems(ROOT) == []


def test_no_benchmark_imports_the_kits_tests():
    assert benchmark_import_problems(ROOT) == []


def test_every_variant_a_benchmark_names_is_in_the_catalogue():
    from tests.broken import catalogue

    texts = [p.read_text() for p in (ROOT / "benchmarks").glob("*.py")]
    named = {m[0] for text in texts for m in _DOTTED_VARIANT.finditer(text)}
    assert named, "no benchmark names a broken variant: the check would be vacuous"
    assert benchmark_variant_problems(ROOT, catalogue.dotted_names()) == []


def test_the_tests_and_benchmarks_rules_fail_on_a_crafted_tree(tmp_path):
    root = _tree(
        tmp_path,
        {
            "benchmarks/bugs.py": (
                "import sys\nimport tests.broken.memory\nfrom tests.chaos import _bug_hunt\n"
                "sys.path.insert(0, 'tests')\nNAME = 'tests.broken.memory:no_such_bug'\n"
                "KNOWN = 'tests.broken.memory:limit_ignored'\n"
            ),
            "tests/conftest.py": "import sys\nsys.path = ['x', *sys.path]\n",
            "tests/helper.py": "import sys\nsys.path.append('y')\npytester.syspathinsert()\n",
            ".venv/lib/site.py": "import sys\nsys.path.insert(0, 'ignored')\n",
        },
    )
    assert sys_path_problems(root) == [
        "benchmarks/bugs.py:4 edits sys.path",
        "tests/conftest.py:2 edits sys.path",
        "tests/helper.py:2 edits sys.path",
    ]
    assert benchmark_import_problems(root) == [
        "benchmarks/bugs.py:2 imports tests.broken.memory",
        "benchmarks/bugs.py:3 imports tests.chaos",
    ]
    assert benchmark_variant_problems(root, {"tests.broken.memory:limit_ignored"}) == [
        "benchmarks/bugs.py names tests.broken.memory:no_such_bug, not in the catalogue"
    ]


def test_the_reaper_rule_fails_on_a_crafted_tree(tmp_path):
    root = _tree(
        tmp_path,
        {
            "rdq_compliance/__init__.py": "",
            "rdq_compliance/provision/__init__.py": "",
            "rdq_compliance/provision/_watchdog.py": "import json\nimport os\n",
            "rdq_compliance/provision/_netns_reaper.py": "import json\nimport psutil\n",
            "rdq_compliance/provision/netns.py": (
                "def f():\n    from rdq_compliance.provision import _netns_reaper\n"
            ),
        },
    )
    assert reaper_problems(import_graph(root), REAPER_SCRIPTS) == [
        "rdq_compliance.provision._container_reaper is missing",
        "rdq_compliance.provision._netns_reaper imports psutil",
        "rdq_compliance.provision.netns imports rdq_compliance.provision._netns_reaper",
    ]
