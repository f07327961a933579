"""The database schema, as versioned migrations applied idempotently.

Each migration runs once per database file, inside one ``BEGIN IMMEDIATE`` transaction
together with its row in the ledger ``rdq_migrations(version, applied_at)``. DDL is
transactional in SQLite, so a migration is applied entirely or not at all, and two
processes opening the same fresh file at once serialise on the write lock: the second
finds the ledger filled in and applies nothing.

Times are INTEGER microseconds since the epoch (UTC). ``tasks.due_at`` is the one column
the claim scans: ``next_attempt_at`` while PENDING, ``lease_expires_at`` while IN_FLIGHT,
NULL once terminal; the partial index ``(queue, due_at)`` (with the rowid ``seq`` as its
implicit last column) makes a claim one index range scan in ``(due_at, seq)`` order.

``seq INTEGER PRIMARY KEY`` is the insertion order used to break ties between equally due
tasks; it is an explicit rowid alias because VACUUM may renumber implicit rowids. The
task id is ``UNIQUE NOT NULL`` (ids are unique across queues).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from rdq_core.errors import InvalidArgument


@dataclass(frozen=True)
class Migration:
    """One schema step: a version number, what it does, and its statements."""

    version: int
    description: str
    statements: tuple[str, ...]


LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS rdq_migrations (
    version    INTEGER PRIMARY KEY,
    applied_at INTEGER NOT NULL
)
"""

_V1 = Migration(
    1,
    "tasks, attempts, the storage clock floor",
    (
        """
        CREATE TABLE tasks (
            seq              INTEGER PRIMARY KEY,
            id               TEXT    NOT NULL UNIQUE,
            queue            TEXT    NOT NULL,
            handler          TEXT    NOT NULL,
            payload          BLOB    NOT NULL,
            headers          TEXT    NOT NULL,
            status           TEXT    NOT NULL
                CHECK (status IN ('PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD')),
            attempt_count    INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
            redrive_count    INTEGER NOT NULL DEFAULT 0 CHECK (redrive_count >= 0),
            next_attempt_at  INTEGER,
            lease_expires_at INTEGER,
            created_at       INTEGER NOT NULL,
            token            TEXT,
            claimed_at       INTEGER,
            dead_at          INTEGER,
            finished_at      INTEGER,
            due_at           INTEGER,
            last_error_type  TEXT,
            CHECK (status <> 'PENDING' OR (
                next_attempt_at IS NOT NULL AND due_at IS NOT NULL AND due_at = next_attempt_at
                AND lease_expires_at IS NULL AND token IS NULL)),
            CHECK (status <> 'IN_FLIGHT' OR (
                lease_expires_at IS NOT NULL AND due_at IS NOT NULL AND due_at = lease_expires_at
                AND next_attempt_at IS NULL AND token IS NOT NULL AND claimed_at IS NOT NULL)),
            CHECK (status NOT IN ('SUCCEEDED', 'DEAD') OR (
                due_at IS NULL AND next_attempt_at IS NULL AND lease_expires_at IS NULL
                AND token IS NULL)),
            CHECK ((status = 'DEAD') = (dead_at IS NOT NULL))
        )
        """,
        "CREATE INDEX tasks_due ON tasks (queue, due_at) WHERE due_at IS NOT NULL",
        "CREATE INDEX tasks_dlq ON tasks (queue, dead_at, id) WHERE status = 'DEAD'",
        "CREATE INDEX tasks_succeeded ON tasks (queue, finished_at) WHERE status = 'SUCCEEDED'",
        "CREATE INDEX tasks_status ON tasks (queue, status)",
        """
        CREATE TABLE attempts (
            task_id       TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
            attempt_no    INTEGER NOT NULL CHECK (attempt_no >= 1),
            started_at    INTEGER NOT NULL,
            finished_at   INTEGER NOT NULL,
            outcome       TEXT    NOT NULL CHECK (outcome IN
                ('SUCCESS', 'RETRYABLE_FAILURE', 'PERMANENT_FAILURE', 'LEASE_EXPIRED')),
            error_type    TEXT,
            error_message TEXT,
            error_detail  TEXT,
            UNIQUE (task_id, attempt_no)
        )
        """,
        """
        CREATE TABLE rdq_clock (
            id      INTEGER PRIMARY KEY CHECK (id = 1),
            last_us INTEGER NOT NULL
        )
        """,
        "INSERT INTO rdq_clock (id, last_us) VALUES (1, 0)",
    ),
)

#: Every migration, in order. Append new ones; never edit an applied one.
MIGRATIONS: tuple[Migration, ...] = (_V1,)
LATEST_VERSION = MIGRATIONS[-1].version


def applied_versions(conn: sqlite3.Connection) -> list[int]:
    """Versions recorded in the ledger, ascending (empty for a fresh file)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rdq_migrations'"
    ).fetchone()
    if exists is None:
        return []
    return [v for (v,) in conn.execute("SELECT version FROM rdq_migrations ORDER BY version")]


def _check_not_newer(versions: list[int]) -> None:
    if versions and versions[-1] > LATEST_VERSION:
        raise InvalidArgument(
            f"database schema version {versions[-1]} is newer than this rdq_sqlite knows "
            f"({LATEST_VERSION}); upgrade rdq"
        )


def migrate(conn: sqlite3.Connection, now_us: int) -> list[int]:
    """Apply the missing migrations; returns the versions applied (empty if up to date).

    ``conn`` must be in autocommit mode (``isolation_level=None``) and not inside a
    transaction. Raises raw ``sqlite3.Error`` (the caller maps it) or ``InvalidArgument``
    for a database written by a newer rdq.
    """
    versions = applied_versions(conn)
    _check_not_newer(versions)
    if versions and versions[-1] == LATEST_VERSION and len(versions) == len(MIGRATIONS):
        return []  # fast path: no write lock taken
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(LEDGER_DDL)
        versions = applied_versions(conn)  # re-read under the write lock
        _check_not_newer(versions)
        done: list[int] = []
        for migration in MIGRATIONS:
            if migration.version in versions:
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO rdq_migrations (version, applied_at) VALUES (?, ?)",
                (migration.version, now_us),
            )
            done.append(migration.version)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        raise
    return done
