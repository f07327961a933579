"""``server_user`` and ``server_base``: the user a root-refusing server runs as, and the
folder it lives in (rdq_compliance.provision.users)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from rdq_compliance.provision import ProvisionUnavailable, RunAs, server_base, server_user

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (switching users)")


def _some_user() -> RunAs:
    for entry in pwd.getpwall():
        if entry.pw_uid != 0 and entry.pw_name in ("nobody", "mysql", "postgres", "daemon"):
            return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, (entry.pw_gid,), entry.pw_dir)
    pytest.skip("no unprivileged system user to test with")


def test_server_user_is_none_unless_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert server_user("no-such-user-rdq", server="mariadbd", option="mysql_user") is None


@root_only
def test_server_user_missing_names_the_option():
    with pytest.raises(ProvisionUnavailable) as caught:
        server_user("no-such-user-rdq", server="mariadbd", option="mysql_user")
    text = str(caught.value)
    assert "no system user 'no-such-user-rdq'" in text
    assert "mariadbd refuses to run as root" in text
    assert "--rdq-option mysql_user=SOMEUSER" in text


@root_only
def test_server_user_root_is_refused():
    with pytest.raises(ProvisionUnavailable, match="mysql_user 'root' is root"):
        server_user("root", server="mariadbd", option="mysql_user")


@root_only
def test_server_user_resolves_a_real_user():
    user = _some_user()
    got = server_user(user.name, server="mariadbd", option="mysql_user")
    assert got is not None and got.uid == user.uid and got.name == user.name


def test_server_base_without_a_user_is_the_workdir(tmp_path):
    workdir = tmp_path / "w"
    assert server_base(workdir, None, prefix="rdq-t-") == (workdir, False)
    assert workdir.is_dir()


@root_only
def test_server_base_behind_a_closed_folder_is_private(tmp_path):
    user = _some_user()
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    base, private = server_base(closed / "w", user, prefix="rdq-t-")
    try:
        assert private and base.name.startswith("rdq-t-")
        assert not str(base).startswith(str(closed))
        assert base.stat().st_uid == user.uid
    finally:
        base.rmdir()


@root_only
def test_server_base_reachable_workdir_is_given_to_the_user(tmp_path):
    user = _some_user()
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    for folder in (open_parent, *open_parent.parents):
        if folder.stat().st_mode & 0o001 == 0:
            pytest.skip(f"{folder} is not searchable by others here")
    base, private = server_base(open_parent / "w", user, prefix="rdq-t-")
    assert (base, private) == (open_parent / "w", False)
    assert Path(base).stat().st_uid == user.uid
