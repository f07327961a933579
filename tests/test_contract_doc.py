"""``docs/contract.md`` keeps up with the code: its rules table lists
exactly the rule ids of :data:`rdq_compliance.rules.RULES`; its SPI section documents
every public method of :class:`rdq_core.spi.Storage` with the code's parameters; its bug
classes are exactly the classes of ``tests/broken/catalogue.py``, each caught under the
rules the catalogue's catches name (shown to fail on a crafted table and catalogue); it
is the file the package installs (:data:`rdq_compliance.rules.CONTRACT`), and the wheel
holds it."""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from rdq_compliance.rules import CONTRACT, RULES
from rdq_core.spi import Storage
from tests.broken import catalogue

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "contract.md"

#: A documented method: a list item opening with its signature in a code span.
_SIGNATURE = re.compile(r"^- `(?P<name>\w+)\((?P<params>[^)]*)\)(?: -> (?P<returns>[^`]+))?`")


def _section(number: int, text: str | None = None) -> list[str]:
    """The lines of the doc's (or ``text``'s) ``## <number>. ...`` section, up to the next
    ``## ``."""
    lines = (DOC.read_text(encoding="utf-8") if text is None else text).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(f"## {number}. ")]
    assert len(starts) == 1, f"{DOC}: expected one '## {number}. ' heading, found {len(starts)}"
    body = lines[starts[0] + 1 :]
    end = next((i for i, line in enumerate(body) if line.startswith("## ")), len(body))
    return body[:end]


def _table_first_cells(lines: list[str]) -> list[str]:
    """The first cell of every body row of the markdown tables in ``lines``."""
    cells = []
    for line in lines:
        if not line.startswith("|"):
            continue
        first = line.split("|")[1].strip()
        if first in ("rule", "") or set(first) <= set("-: "):
            continue  # a header or separator row
        cells.append(first)
    return cells


#: The section of the doc that lists the bug classes.
BUG_CLASSES_SECTION = 8


def documented_bug_classes(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(class id, the rule ids of its "caught under" cell) for every body row of the bug
    classes table in ``lines``: ``| `id` | the bug | `rule`, `rule` |``."""
    out = []
    for line in lines:
        cells = line.split("|")
        if not line.startswith("|") or len(cells) < 5:
            continue
        first = cells[1].strip()
        if first == "class" or set(first) <= set("-: "):
            continue  # the header or separator row
        ids = re.findall(r"`([^`]+)`", first)
        out.append((ids[0] if len(ids) == 1 else first, re.findall(r"`([^`]+)`", cells[3])))
    return out


def catalogued_bug_classes(
    classes: Iterable[catalogue.BugClass],
) -> tuple[dict[str, frozenset[str]], list[str]]:
    """Class id -> the rules the catalogue's catches of it name, and what is wrong with the
    keys: a class listed twice, a variant or configuration filed under another class."""
    out: dict[str, frozenset[str]] = {}
    problems = []
    for c in classes:
        if c.key in out:
            problems.append(f"tests/broken/catalogue.py: class {c.key!r} listed twice")
        out[c.key] = c.rules
        for x in (*c.variants, *c.configurations):
            if x.bug_class != c.key:
                problems.append(
                    f"tests/broken/catalogue.py: {x} is filed under class {c.key!r} but names "
                    f"class {x.bug_class!r}"
                )
    return out, problems


def bug_class_problems(
    documented: list[tuple[str, list[str]]], catalogued: Mapping[str, frozenset[str]]
) -> list[str]:
    """Where the doc's bug classes and the catalogue's disagree: a class in one only, a
    class listed twice, a rule id that is not one, rules that differ."""
    where = f"{DOC.name}, section {BUG_CLASSES_SECTION}"
    ids = [c for c, _ in documented]
    problems = [
        f"{where}: class {c!r} listed twice" for c in sorted({c for c in ids if ids.count(c) > 1})
    ]
    problems += [
        f"{where}: class {c!r} is not in the table (tests/broken/catalogue.py has it)"
        for c in sorted(set(catalogued) - set(ids))
    ]
    problems += [
        f"{where}: class {c!r} is not a class of tests/broken/catalogue.py"
        for c in sorted(set(ids) - set(catalogued))
    ]
    for c, rules in documented:
        unknown = sorted(set(rules) - set(RULES))
        if unknown:
            problems.append(f"{where}: class {c!r} names unknown rule ids {unknown}")
        if c not in catalogued:
            continue
        want = catalogued[c]
        if set(rules) != want:
            problems.append(
                f"{where}: class {c!r} is caught under {sorted(set(rules))}, but the "
                f"catalogue's catches of it name {sorted(want)} (missing: "
                f"{sorted(want - set(rules))}, not named: {sorted(set(rules) - want)})"
            )
    return problems


def _split_params(params: str) -> list[str]:
    """``params`` split at the commas outside brackets (``tuple[str, ...]`` stays whole)."""
    out, depth, part = [], 0, ""
    for ch in params:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(part.strip())
            part = ""
        else:
            part += ch
    if part.strip():
        out.append(part.strip())
    return out


def _documented_methods() -> dict[str, tuple[list[tuple[str, str]], str | None]]:
    """Method name -> ([(parameter, annotation)], return annotation), from section 3."""
    out = {}
    for line in _section(3):
        match = _SIGNATURE.match(line)
        if match is None:
            continue
        params = []
        for part in _split_params(match["params"]):
            name, _, rest = part.partition(":")
            params.append((name.strip(), rest.partition("=")[0].strip()))
        out[match["name"]] = (params, match["returns"])
    return out


def _public_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(value)
        for name, value in vars(Storage).items()
        if not name.startswith("_") and callable(value)
    }


def test_the_rules_table_lists_exactly_the_rule_ids_of_the_code() -> None:
    documented: list[str] = []
    for cell in _table_first_cells(_section(4)):
        documented.extend(re.findall(r"`([^`]+)`", cell))
    missing = sorted(set(RULES) - set(documented))
    extra = sorted(set(documented) - set(RULES))
    twice = sorted({r for r in documented if documented.count(r) > 1})
    assert not missing and not extra and not twice, (
        f"{DOC.name}, section 4: rule ids missing from the table (in rdq_compliance.rules): "
        f"{missing}; in the table but not in the code: {extra}; listed twice: {twice}"
    )


def test_the_bug_classes_are_the_catalogues() -> None:
    catalogued, key_problems = catalogued_bug_classes(catalogue.CLASSES)
    assert key_problems == []
    documented = documented_bug_classes(_section(BUG_CLASSES_SECTION))
    assert documented, f"{DOC.name}, section {BUG_CLASSES_SECTION}: no bug class listed"
    assert bug_class_problems(documented, catalogued) == []


def test_a_bug_class_mismatch_fails() -> None:
    """Crafted: a table and a catalogue that disagree in every way the check knows."""
    text = """## 8. Bug classes

| class | the bug | caught under |
|---|---|---|
| `double-claim` | two workers get one task | `one-claim` |
| `lost-task` | a task vanishes | `no-loss`, `no-such-rule` |
| `lost-task` | again | `no-loss` |
| `made-up` | not in the catalogue | `fencing` |

## 9. Next
"""
    documented = documented_bug_classes(_section(8, text))
    assert documented == [
        ("double-claim", ["one-claim"]),
        ("lost-task", ["no-loss", "no-such-rule"]),
        ("lost-task", ["no-loss"]),
        ("made-up", ["fencing"]),
    ]
    crafted = (
        catalogue.BugClass(
            "double-claim", "crafted",
            catalogue._bug("double-claim", "check_then_act_claim", "crafted",
                           memory=catalogue._m("one-claim", "lease-respected")),
        ),
        catalogue.BugClass(
            "lost-task", "crafted",
            catalogue._bug("wrong-claim-batch", "limit_ignored", "crafted",
                           memory=catalogue._m("no-loss")),
        ),
        catalogue.BugClass("lost-task", "crafted again"),
        catalogue.BugClass("stale-heartbeat", "crafted", catalogue._bug(
            "stale-heartbeat", "extend_lease_ignores_token", "crafted",
            memory=catalogue._m("fencing"),
        )),
    )  # fmt: skip
    catalogued, key_problems = catalogued_bug_classes(crafted)
    assert key_problems == [
        "tests/broken/catalogue.py: tests.broken.memory:limit_ignored is filed under class "
        "'lost-task' but names class 'wrong-claim-batch'",
        "tests/broken/catalogue.py: class 'lost-task' listed twice",
    ]
    where = "contract.md, section 8"
    assert bug_class_problems(documented, catalogued) == [
        f"{where}: class 'lost-task' listed twice",
        f"{where}: class 'stale-heartbeat' is not in the table (tests/broken/catalogue.py has it)",
        f"{where}: class 'made-up' is not a class of tests/broken/catalogue.py",
        f"{where}: class 'double-claim' is caught under ['one-claim'], but the catalogue's "
        "catches of it name ['lease-respected', 'one-claim'] (missing: ['lease-respected'], "
        "not named: [])",
        f"{where}: class 'lost-task' names unknown rule ids ['no-such-rule']",
        f"{where}: class 'lost-task' is caught under ['no-loss', 'no-such-rule'], but the "
        "catalogue's catches of it name [] (missing: [], not named: ['no-loss', "
        "'no-such-rule'])",
        f"{where}: class 'lost-task' is caught under ['no-loss'], but the catalogue's catches "
        "of it name [] (missing: [], not named: ['no-loss'])",
    ]


def test_every_spi_method_is_documented() -> None:
    public = _public_methods()
    assert public, "rdq_core.spi.Storage has no public method?"
    documented = _documented_methods()
    missing = sorted(set(public) - set(documented))
    assert not missing, (
        f"{DOC.name}, section 3: public methods of rdq_core.spi.Storage with no "
        f"'- `name(...)`' entry: {missing}"
    )
    text = DOC.read_text(encoding="utf-8")
    assert all(f"`{name}(" in text for name in public)


def test_the_documented_signatures_match_the_code() -> None:
    documented = _documented_methods()
    wrong = []
    for name, sig in _public_methods().items():
        if name not in documented:
            continue  # reported by test_every_spi_method_is_documented
        params, returns = documented[name]
        want = [(p.name, str(p.annotation)) for p in sig.parameters.values() if p.name != "self"]
        if params != want or returns != sig.return_annotation:
            wrong.append(
                f"{name}: documented {params} -> {returns}, code {want} -> {sig.return_annotation}"
            )
    assert not wrong, f"{DOC.name}, section 3: signatures differ from the code:\n" + "\n".join(
        wrong
    )


def test_the_docs_page_is_the_contract_the_package_installs() -> None:
    assert CONTRACT.is_file() and DOC.resolve() == CONTRACT.resolve()


def test_the_wheel_holds_the_contract(tmp_path: Path) -> None:
    """Built as a user's ``pip install`` builds it (from a copy of the checkout: pip
    writes ``build/`` into the tree it builds): the wheel has the contract beside
    ``rules.py``, the same text."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".git", ".venv*", "build", "*.egg-info", "__pycache__", ".*_cache", "chaos-reports",
        "examples", "tests",
    )  # fmt: skip
    shutil.copytree(ROOT, src, ignore=skip, symlinks=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("rdq-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("rdq_compliance/contract.md").decode() == CONTRACT.read_text()
        assert "rdq_compliance/py.typed" in z.namelist()
