"""rdq_compliance.provision.binaries: finding server binaries on PATH and in the usual
install folders (newest version first, several from one folder)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rdq_compliance.provision.binaries import (
    BinaryNotFound,
    find_binaries,
    find_binary,
    search_dirs,
)


def _fake_binary(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_search_dirs_expand_globs_newest_version_first(tmp_path: Path) -> None:
    for version in ("9.6", "10", "15", "13"):
        (tmp_path / "pg" / version / "bin").mkdir(parents=True)
    found = search_dirs([tmp_path / "pg" / "*" / "bin", tmp_path / "missing"], use_path=False)
    assert [p.parent.name for p in found] == ["15", "13", "10", "9.6"]


def test_find_binary_looks_on_path_first_then_the_given_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path = _fake_binary(tmp_path / "path", "rdq-fake-server")
    elsewhere = _fake_binary(tmp_path / "opt", "rdq-fake-server")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_binary("rdq-fake-server", [tmp_path / "opt"]) == on_path
    assert find_binary("rdq-fake-server", [tmp_path / "opt"], use_path=False) == elsewhere


def test_a_missing_binary_names_itself_and_every_folder_searched(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(BinaryNotFound) as info:
        find_binary("rdq-no-such-server", [tmp_path / "a"], use_path=False)
    assert "rdq-no-such-server not found" in str(info.value)
    assert str(tmp_path / "a") in str(info.value)
    with pytest.raises(BinaryNotFound, match="empty search list"):
        find_binary("rdq-no-such-server", [], use_path=False)


def test_find_binaries_takes_them_from_one_folder(tmp_path: Path) -> None:
    _fake_binary(tmp_path / "old", "initdb")
    _fake_binary(tmp_path / "new", "initdb")
    _fake_binary(tmp_path / "new", "postgres")
    found = find_binaries(
        ["initdb", "postgres"], [tmp_path / "old", tmp_path / "new"], use_path=False
    )
    assert found == {
        "initdb": tmp_path / "new" / "initdb",
        "postgres": tmp_path / "new" / "postgres",
    }
    with pytest.raises(BinaryNotFound, match="postgres not found"):
        find_binaries(["initdb", "postgres"], [tmp_path / "old"], use_path=False)
