"""The repository stands alone: no file of it cites a document a clone does not have, and
every ``contract.md#<anchor>`` it cites is a heading of the contract.

``docs/contract.md`` is the one contract. Code, tests and docs cite its rule ids, its
bug-class ids and its sections (``contract.md#4-rules``), never a file outside the
repository nor an issue number of the project's own tracker, which a clone does not have
either.

What is read: every file ``git ls-files`` lists (code, tests, docs, scenarios, CI scripts,
configuration, ``BENCHMARKS.md`` and the findings alike: a citation misleads wherever it
is), as UTF-8 text; a file that is not valid UTF-8 or holds a NUL byte is binary and
skipped, and a symlink is skipped (the file it points to is listed itself). No file is
exempt, this one included: it spells the forbidden words only in pieces.

What is forbidden (:data:`FORBIDDEN`), each reported with file, line and what it is:

- the outside specification, by name (the word in capitals, so ``StorageSpec`` or a
  module ``spec`` pass) or by its numbered sections (a section sign before a digit);
- the outside notes files, by name (the design notes and the notes on prior art, their
  names in capitals);
- the outside folder of shared project files (its name and a slash, as a path into it:
  after a slash, or before one of its files, ``seed`` or ``hooks``, or alone; a
  "shared/exclusive lock" passes);
- an issue number: the word "issue" (or "issues", any case) then a number, with or
  without a ``#`` or a hyphen between. An upstream project's issue is cited as
  ``owner/repo#N`` or ``library #N`` (``rq#1716``, "procrastinate #1446"), which never
  says "issue" before the number.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "rdq_compliance" / "contract.md"

_OUTSIDE_DOC = "SP" + "EC"
_ISSUE = "iss" + "ues?"

#: (what it is, the pattern that finds it in a line).
FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("the outside specification", re.compile(rf"\b{_OUTSIDE_DOC}\b")),
    ("a numbered section of the outside specification", re.compile("\u00a7" + r"\s*\d")),
    ("the outside design notes", re.compile(r"\b" + "DES" + r"IGN\.md\b")),
    ("the outside notes on prior art", re.compile(r"\b" + "PRIOR" + r"-ART\b")),
    (
        "the outside folder of shared files",
        re.compile(
            "/" + "sha" + r"red/|(?<![\w.-])" + "sha" + r"red/(?=[A-Z]|seed\b|hooks\b|[`'\")\s]|$)"
        ),
    ),
    ("an issue number", re.compile(rf"\b{_ISSUE}[\s-]*#?\d+", re.IGNORECASE)),
)

#: A cited section of the contract: ``contract.md#<anchor>``.
_ANCHOR = re.compile(r"contract\.md#([\w-]+)")


def tracked_texts(root: Path = ROOT) -> Iterator[tuple[str, str]]:
    """(path relative to ``root``, text) of every tracked text file."""
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        path = root / name
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield name, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def citation_problems(files: Iterable[tuple[str, str]]) -> list[str]:
    """``path:line: what (the text)`` for every forbidden citation in ``files``."""
    out = []
    for name, text in files:
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN:
                for found in pattern.finditer(line):
                    out.append(f"{name}:{number}: {what} ({found[0]!r} in {line.strip()[:120]!r})")
    return out


def slug(heading: str) -> str:
    """The anchor the docs site (Python-Markdown's ``toc``) gives a heading."""
    ascii_ = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_).strip().lower())


def anchors(contract: str) -> set[str]:
    """The anchors of the contract's headings."""
    return {slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", contract, re.MULTILINE)}


def anchor_problems(files: Iterable[tuple[str, str]], known: set[str]) -> list[str]:
    """``path:line: ...`` for every ``contract.md#<anchor>`` that is not a heading."""
    out = []
    for name, text in files:
        for number, line in enumerate(text.splitlines(), 1):
            for found in _ANCHOR.finditer(line):
                if found[1] not in known:
                    out.append(f"{name}:{number}: contract.md has no heading #{found[1]}")
    return out


def test_no_file_cites_a_document_outside_the_repository_or_an_issue_number() -> None:
    files = list(tracked_texts())
    assert len(files) > 100, "git ls-files listed almost nothing: not a checkout?"
    problems = citation_problems(files)
    assert problems == [], f"{len(problems)} citation(s) a clone cannot follow:\n" + "\n".join(
        problems
    )


def test_every_cited_contract_section_exists() -> None:
    known = anchors(CONTRACT.read_text(encoding="utf-8"))
    assert {"4-rules", "8-bug-classes", "claims-leases-and-tokens"} <= known, sorted(known)
    assert anchor_problems(tracked_texts(), known) == []


def test_the_checks_fail_on_crafted_text() -> None:
    """Each forbidden kind is named with file and line; legitimate look-alikes pass."""
    section = "\u00a7"
    crafted = [
        (
            "rdq_core/x.py",
            f'"""The storage SPI of {_OUTSIDE_DOC} {section}4."""\n'
            f"# the rule of {section}3 (see {'DES' + 'IGN'}.md and {'PRIOR' + '-ART'}.md)\n",
        ),
        (
            "docs/y.md",
            "Fine: StorageSpec, importlib's spec, rq#1716, procrastinate #1446, a prior-art "
            "search, a shared/exclusive lock, design.md of another project.\n"
            f"Read /work/{'sha' + 'red'}/notes first ({'Iss' + 'ue'} 22, item 3).\n"
            f"Then ``{'sha' + 'red'}/`` and {'sha' + 'red'}/seed/.\n"
            f"Fixed in {'iss' + 'ue'} #7; see {'iss' + 'ues'} 20-22 and {'iss' + 'ue'}-9.\n",
        ),
    ]
    problems = citation_problems(crafted)
    assert [p.split(" (")[0] for p in problems] == [
        "rdq_core/x.py:1: the outside specification",
        "rdq_core/x.py:1: a numbered section of the outside specification",
        "rdq_core/x.py:2: a numbered section of the outside specification",
        "rdq_core/x.py:2: the outside design notes",
        "rdq_core/x.py:2: the outside notes on prior art",
        "docs/y.md:2: the outside folder of shared files",
        "docs/y.md:2: an issue number",
        "docs/y.md:3: the outside folder of shared files",
        "docs/y.md:3: the outside folder of shared files",
        "docs/y.md:4: an issue number",
        "docs/y.md:4: an issue number",
        "docs/y.md:4: an issue number",
    ], "\n".join(problems)
    assert "'" + "Iss" + "ue 22'" in problems[6]

    known = anchors("# T\n## 4. Rules\n### Claims, leases and tokens\n")
    assert known == {"t", "4-rules", "claims-leases-and-tokens"}
    cited = [("a.py", "see contract.md#4-rules\nand ``contract.md#3-the-spi``\n")]
    assert anchor_problems(cited, known) == ["a.py:2: contract.md has no heading #3-the-spi"]
