"""The system user a server runs as, when the kit runs as root.

Some servers refuse to run as root (PostgreSQL does); a rung then runs them as a system
user (:func:`resolve_user` → :class:`RunAs`), gives that user the folders the server
writes (:func:`chown_tree`), and checks that it can reach them at all
(:func:`traversable_by`: search permission on every ancestor folder).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunAs", "chown_tree", "resolve_user", "traversable_by"]


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
