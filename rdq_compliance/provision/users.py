"""The system user a server runs as, when the kit runs as root.

Some servers refuse to run as root (PostgreSQL and MariaDB/MySQL do); a rung then runs
them as a system user (:func:`server_user`: ``None`` unless we are root, else the
:class:`RunAs` of the named user, or a ``ProvisionUnavailable`` that says what to do;
:func:`resolve_user` for a plain lookup), gives that user the folders the server writes
(:func:`chown_tree`), and checks that it can reach them at all (:func:`traversable_by`:
search permission on every ancestor folder). :func:`server_base` picks the folder a
server lives in: the kit's work folder if that user can reach it, else a private
temporary folder of its own (pytest's ``/tmp/pytest-of-root`` is ``0700``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rdq_compliance.provision.backend import ProvisionUnavailable

__all__ = ["RunAs", "chown_tree", "resolve_user", "server_base", "server_user", "traversable_by"]


@dataclass(frozen=True)
class RunAs:
    """The identity a server process runs under (only meaningful when we are root)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str


def resolve_user(name: str) -> RunAs:
    """Look up a system user; ``LookupError`` if there is none (Unix only)."""
    import pwd  # Unix only; imported here so the module loads elsewhere

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise LookupError(f"no system user named {name!r}") from None
    groups = tuple(os.getgrouplist(name, entry.pw_gid))
    return RunAs(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)


def chown_tree(path: Path, user: RunAs) -> None:
    """Give ``path`` and everything below it to ``user`` (we must be root)."""
    os.chown(path, user.uid, user.gid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for root, dirnames, filenames in os.walk(path):
            for entry in (*dirnames, *filenames):
                os.chown(os.path.join(root, entry), user.uid, user.gid, follow_symlinks=False)


def traversable_by(path: Path, user: RunAs) -> bool:
    """Whether ``user`` can reach ``path`` (search permission on every ancestor)."""
    for folder in [path, *path.parents]:
        try:
            st = folder.stat()
        except OSError:
            return False
        if st.st_uid == user.uid:
            bit = st.st_mode & 0o100
        elif st.st_gid in user.groups or st.st_gid == user.gid:
            bit = st.st_mode & 0o010
        else:
            bit = st.st_mode & 0o001
        if not bit:
            return False
    return True


def server_user(name: str, *, server: str, option: str) -> RunAs | None:
    """The user a server that refuses root runs as: ``None`` (ourselves) unless we are
    root; else the system user ``name``. ``server`` names the server and ``option`` the
    ``--rdq-option`` that picks another user, for the error when there is no such user
    (or it is root itself): ``ProvisionUnavailable`` saying what to do."""
    if os.name != "posix" or os.geteuid() != 0:
        return None
    try:
        user = resolve_user(name)
    except LookupError:
        raise ProvisionUnavailable(
            f"we run as root and {server} refuses to run as root, but there is no system "
            f"user {name!r} to run it as; create one (useradd --system {name}), run the "
            f"tests as an ordinary user, or pass --rdq-option {option}=SOMEUSER"
        ) from None
    if user.uid == 0:
        raise ProvisionUnavailable(
            f"{option} {name!r} is root, and {server} refuses to run as root; "
            f"pass --rdq-option {option}=SOMEUSER"
        )
    return user


def server_base(workdir: Path, user: RunAs | None, *, prefix: str) -> tuple[Path, bool]:
    """The folder a server run as ``user`` lives in, given to ``user``:
    ``(path, created_privately)``.

    ``workdir`` (created if missing) when ``user`` is ``None`` or can reach it; otherwise
    (it sits below a folder ``user`` cannot enter, e.g. pytest's ``0700``
    ``/tmp/pytest-of-root``) a new private temporary folder named ``prefix...``, which
    the caller removes when done (``created_privately`` is then true).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    if user is None:
        return workdir, False
    if traversable_by(workdir.parent, user):  # workdir itself is about to be given away
        os.chown(workdir, user.uid, user.gid)
        return workdir, False
    base = Path(tempfile.mkdtemp(prefix=prefix))
    chown_tree(base, user)
    return base, True
