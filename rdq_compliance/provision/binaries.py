"""Finding a server's binaries: on ``PATH`` or in the usual install folders a rung names.

A folder may be a glob pattern (``/usr/lib/postgresql/*/bin``), whose matches are searched
newest version first. :func:`find_binaries` takes several binaries from *one* folder, so
that ``initdb`` and ``postgres`` (say) are of the same installed version. A miss raises
:class:`BinaryNotFound`, whose message names what is missing and every folder searched.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["BinaryNotFound", "find_binaries", "find_binary", "search_dirs"]


class BinaryNotFound(LookupError):
    """A server binary is not on ``PATH`` nor in the folders searched."""

    def __init__(self, names: Sequence[str], searched: Sequence[Path], detail: str = "") -> None:
        self.names = tuple(names)
        self.searched = tuple(searched)
        where = ", ".join(str(d) for d in searched) if searched else "no folder (empty search list)"
        what = " and ".join(names)
        message = f"{what} not found; searched: {where}"
        if detail:
            message = f"{message} ({detail})"
        super().__init__(message)


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def search_dirs(dirs: Iterable[str | Path] = (), *, use_path: bool = True) -> list[Path]:
    """The folders to search, in order: ``PATH`` (if ``use_path``), then ``dirs``.

    A folder may be a glob pattern (``/usr/lib/postgresql/*/bin``); its matches come
    newest version first (by the numbers in the path). Missing folders are kept out,
    duplicates are dropped.
    """
    out: list[Path] = []
    seen: set[str] = set()

    def add(path: Path) -> None:
        key = os.path.realpath(path)
        if key not in seen and path.is_dir():
            seen.add(key)
            out.append(path)

    if use_path:
        for entry in os.environ.get("PATH", "").split(os.pathsep):
            if entry:
                add(Path(entry))
    for pattern in dirs:
        text = str(pattern)
        if glob.has_magic(text):
            for match in sorted(glob.glob(text), key=_version_key, reverse=True):
                add(Path(match))
        else:
            add(Path(text))
    return out


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(name: str, dirs: Iterable[str | Path] = (), *, use_path: bool = True) -> Path:
    """The first executable ``name`` on ``PATH`` (if ``use_path``) or in ``dirs``.

    Raises :class:`BinaryNotFound` listing every folder searched.
    """
    folders = search_dirs(dirs, use_path=use_path)
    for folder in folders:
        candidate = folder / name
        if _executable(candidate):
            return candidate
    raise BinaryNotFound([name], folders)


def find_binaries(
    names: Sequence[str], dirs: Iterable[str | Path] = (), *, use_path: bool = True
) -> dict[str, Path]:
    """Several binaries that must come from the *same* folder (one installed version).

    Returns ``{name: path}`` from the first folder holding all of them; otherwise raises
    :class:`BinaryNotFound` naming the missing ones and every folder searched.
    """
    folders = search_dirs(dirs, use_path=use_path)
    found: dict[str, Path] = {}
    for folder in folders:
        paths = {name: folder / name for name in names}
        if all(_executable(p) for p in paths.values()):
            return paths
        for name, path in paths.items():
            if _executable(path):
                found.setdefault(name, path)
    missing = [n for n in names if n not in found]
    detail = ""
    if not missing:
        detail = "found " + ", ".join(f"{n} in {p.parent}" for n, p in found.items())
        detail += ", but never all in one folder"
        missing = list(names)
    raise BinaryNotFound(missing, folders, detail)
