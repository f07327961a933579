"""Opening SQLite connections the one safe way, and turning sqlite3 errors into SPI errors.

Every connection rdq_sqlite opens is configured the same way:

- ``isolation_level=None``: the driver never opens transactions behind our back; the
  storage issues ``BEGIN IMMEDIATE`` / ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` itself;
- ``journal_mode=WAL``: readers never block the writer nor each other, and several
  processes may share the file;
- ``synchronous=NORMAL``: with WAL, a committed transaction survives the death of the
  process (SIGKILL included) because it is in the WAL file the OS already holds; only
  a power loss or OS crash may roll back the last transactions (never corrupt);
- a busy timeout (30 s by default): a writer waits for the write lock instead of
  failing at once; past the timeout the caller gets ``BackendUnavailable``;
- ``foreign_keys=ON``.

No sqlite3 exception leaves this package: :func:`map_error` turns each into
``BackendUnavailable`` (locked, I/O, cannot open, corrupt, ...) or ``InvalidArgument``
(a value SQLite refuses), with a message that names the database file.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from rdq_core.errors import BackendUnavailable, InvalidArgument, RdqError

#: Seconds a connection waits for another one's write lock before giving up.
BUSY_TIMEOUT_S = 30.0


def database_uri(path: Path, *, create: bool) -> str:
    """A ``file:`` URI for ``path``; without ``create`` a missing file is an error."""
    mode = "rwc" if create else "rw"
    return f"file:{quote(str(path.absolute()))}?mode={mode}"


def connect(
    path: Path, *, create: bool, busy_timeout: float = BUSY_TIMEOUT_S
) -> sqlite3.Connection:
    """Open and configure one connection (raises raw ``sqlite3.Error``; callers map it)."""
    conn = sqlite3.connect(
        database_uri(path, create=create),
        uri=True,
        timeout=busy_timeout,
        isolation_level=None,
        check_same_thread=False,  # only close() may touch it from another thread
    )
    try:
        _enable_wal(conn, busy_timeout)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        if not _has_json(conn):
            raise BackendUnavailable(
                f"SQLite {sqlite3.sqlite_version} lacks the JSON functions rdq_sqlite needs "
                "(json_each); use a Python linked against SQLite >= 3.38"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    # Switching a fresh file to WAL needs an exclusive lock; SQLite may answer BUSY
    # without calling the busy handler (two processes opening one new file), so retry.
    deadline = time.monotonic() + busy_timeout
    delay = 0.002
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            continue
        mode = str(row[0]).lower() if row else "?"
        if mode != "wal":
            raise BackendUnavailable(
                f"SQLite refused WAL journal mode (got {mode!r}); rdq_sqlite needs WAL, "
                "which does not work on network file systems"
            )
        return


def _has_json(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT value FROM json_each('[]')").fetchall()
    except sqlite3.OperationalError:
        return False
    return True


def _code_name(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", "") or "")


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether the error is a lock conflict (retrying later may succeed)."""
    name = _code_name(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return True
    text = str(exc).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def map_error(
    exc: sqlite3.Error, path: Path, action: str, busy_timeout: float = BUSY_TIMEOUT_S
) -> RdqError:
    """The SPI error for a sqlite3 error raised while doing ``action`` on ``path``."""
    name = _code_name(exc)
    text = str(exc)
    where = f"SQLite database {str(path)!r}"
    detail = f"{name or type(exc).__name__}: {text}"
    if isinstance(exc, sqlite3.DataError) or name.startswith("SQLITE_TOOBIG"):
        return InvalidArgument(f"{action}: {where} refused a value ({detail})")
    if is_busy(exc):
        return BackendUnavailable(
            f"{action}: {where} is locked by another connection and stayed locked past the "
            f"busy timeout of {busy_timeout:g} s ({detail}); retry later"
        )
    low = text.lower()
    if name.startswith("SQLITE_CANTOPEN") or "unable to open" in low:
        return BackendUnavailable(
            f"{action}: cannot open {where} ({detail}): check that the file exists and that "
            "its directory is writable (WAL needs to create the -wal and -shm files beside it)"
        )
    if name.startswith("SQLITE_READONLY") or "readonly" in low or "read-only" in low:
        return BackendUnavailable(
            f"{action}: {where} is read-only ({detail}): rdq_sqlite needs write access to the "
            "file and its directory"
        )
    if (
        name.startswith(("SQLITE_IOERR", "SQLITE_FULL"))
        or "disk i/o" in low
        or "disk is full" in low
    ):
        return BackendUnavailable(f"{action}: I/O error on {where} ({detail})")
    if name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")) or "not a database" in low:
        return BackendUnavailable(
            f"{action}: {where} is not an SQLite database or is corrupted ({detail})"
        )
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in low:
        return BackendUnavailable(f"{action}: the connection to {where} was closed ({detail})")
    if isinstance(exc, sqlite3.IntegrityError):
        return BackendUnavailable(
            f"{action}: {where} violated a schema constraint ({detail}); this is a bug in "
            "rdq_sqlite or the database was modified by something else"
        )
    return BackendUnavailable(f"{action}: {where} failed ({detail})")
