"""``docs/contract.md`` keeps up with the code: its rules table lists
exactly the rule ids of :data:`rdq_compliance.rules.RULES`, and its SPI section documents
every public method of :class:`rdq_core.spi.Storage` with the code's parameters; it is
the file the package installs (:data:`rdq_compliance.rules.CONTRACT`), and the wheel
holds it."""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from rdq_compliance.rules import CONTRACT, RULES
from rdq_core.spi import Storage

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "contract.md"

#: A documented method: a list item opening with its signature in a code span.
_SIGNATURE = re.compile(r"^- `(?P<name>\w+)\((?P<params>[^)]*)\)(?: -> (?P<returns>[^`]+))?`")


def _section(number: int) -> list[str]:
    """The lines of the doc's ``## <number>. ...`` section, up to the next ``## ``."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
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
