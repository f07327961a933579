"""The chaos harness's modules import each other in one direction only (DESIGN: "no two
modules import each other; a checker is imported, never looked up"), read from their
source, so an import under ``TYPE_CHECKING`` or inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import rdq_compliance.chaos as chaos
import rdq_compliance.chaos.checker as checker

CHAOS = Path(chaos.__file__).resolve().parent
PACKAGE = "rdq_compliance.chaos"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(CHAOS.rglob("*.py")):
        parts = path.relative_to(CHAOS).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PACKAGE, *parts))] = path
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n in known)
    return found


def test_no_import_cycle_in_the_chaos_harness() -> None:
    modules = _modules()
    graph = {m: _imports(p, set(modules)) - {m} for m, p in modules.items()}
    state: dict[str, int] = {}  # 1: on the current import path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, [*path, dep])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_checker_modules_import_their_siblings_not_the_package() -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.startswith(checker.__name__ + "."):
            assert checker.__name__ not in _imports(path, set(modules)), name


def test_each_rule_family_states_its_rules() -> None:
    """Every rule module's docstring names the rules it decides; together, in order,
    they are the checker's RULES."""
    from rdq_compliance.chaos.checker import exclusion, final_state_rules, history, outcomes

    ids: list[str] = []
    for family in (exclusion, history, outcomes, final_state_rules):
        for rule in family.RULE_IDS:
            assert f"``{rule}``" in (family.__doc__ or ""), (family.__name__, rule)
        ids.extend(family.RULE_IDS)
    assert ids == list(checker.RULES)
