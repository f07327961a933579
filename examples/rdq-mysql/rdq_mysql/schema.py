"""The tables of one namespace: a database of its own (storage half).

A namespace is a database named ``rdq_`` + hex (or any name from ``[a-z0-9_]``, at most
64 characters). :func:`create_namespace` creates it with its tables, idempotently
(``IF NOT EXISTS``); :func:`drop_namespace` drops it with everything in it.

Times are ``BIGINT`` microseconds since the epoch, from the server's clock
(``UNIX_TIMESTAMP(NOW(6))`` in a UTC session); never the client's. Names, ids and error
texts are binary strings (UTF-8 bytes): comparisons are exact and ordering is code-point
order, as in Python (a ``PAD SPACE`` collation would equate ``'a'`` and ``'a '``).

- ``tasks``: ``seq`` (auto-increment) is the insertion order that breaks ties between
  equally due tasks; ``id`` is UNIQUE across queues. ``due_at`` is the one column the
  claim scans: ``next_attempt_at`` while PENDING, ``lease_expires_at`` while IN_FLIGHT,
  NULL once terminal. ``token`` is the current claim token, ``claimed_at`` its claim time,
  ``dead_at``/``finished_at`` when it went DEAD/SUCCEEDED, ``last_error_type`` the error
  type of the last attempt (for DLQ filters).
- ``attempts``: the history; its primary key is ``(task_id, attempt_no)``, so an attempt
  number can never be used twice for one task (invariant H).
"""

from __future__ import annotations

import re

import pymysql

from rdq_core.errors import InvalidArgument

NAMESPACE_RE = re.compile(r"[a-z_][a-z0-9_]{0,63}")

TABLES = (
    """
    CREATE TABLE IF NOT EXISTS {db}.tasks (
        seq              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        id               VARBINARY(1020) NOT NULL,
        queue            VARBINARY(240) NOT NULL,
        handler          VARBINARY(240) NOT NULL,
        payload          LONGBLOB NOT NULL,
        headers          LONGBLOB NOT NULL,
        status           VARCHAR(16) CHARACTER SET ascii NOT NULL,
        attempt_count    INT NOT NULL DEFAULT 0,
        redrive_count    INT NOT NULL DEFAULT 0,
        next_attempt_at  BIGINT NULL,
        lease_expires_at BIGINT NULL,
        created_at       BIGINT NOT NULL,
        token            CHAR(32) CHARACTER SET ascii NULL,
        claimed_at       BIGINT NULL,
        dead_at          BIGINT NULL,
        finished_at      BIGINT NULL,
        due_at           BIGINT NULL,
        last_error_type  BLOB NULL,
        UNIQUE KEY tasks_id (id),
        KEY tasks_due (queue, due_at, seq),
        KEY tasks_dlq (queue, dead_at, id),
        KEY tasks_finished (queue, finished_at),
        CONSTRAINT tasks_status CHECK
            (status IN ('PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD'))
    ) ENGINE = InnoDB
    """,
    """
    CREATE TABLE IF NOT EXISTS {db}.attempts (
        task_id       VARBINARY(1020) NOT NULL,
        attempt_no    INT NOT NULL,
        started_at    BIGINT NOT NULL,
        finished_at   BIGINT NOT NULL,
        outcome       VARCHAR(20) CHARACTER SET ascii NOT NULL,
        error_type    BLOB NULL,
        error_message MEDIUMBLOB NULL,
        error_detail  MEDIUMBLOB NULL,
        PRIMARY KEY (task_id, attempt_no),
        CONSTRAINT attempts_no CHECK (attempt_no >= 1)
    ) ENGINE = InnoDB
    """,
)


def namespace_name(value: object) -> str:
    """Validate a namespace (database) name: 1 to 64 characters from [a-z0-9_]."""
    if not isinstance(value, str) or not NAMESPACE_RE.fullmatch(value):
        raise InvalidArgument(
            f"invalid mysql namespace {value!r}: use 1 to 64 characters from [a-z0-9_], "
            "not starting with a digit"
        )
    return value


def quoted(name: str) -> str:
    """A validated database name as a quoted identifier."""
    return f"`{namespace_name(name)}`"


#: The one-row table that keeps who made the namespace (the kit's owner record).
OWNER_TABLE = "rdq_owner"
#: The names ``MySqlServer.create_namespace`` gives (``rdq_`` and 32 hex digits).
MADE_NAME_RE = re.compile(r"rdq_[0-9a-f]{32}")


def create_namespace(conn: pymysql.Connection, name: str, owner: str | None = None) -> None:
    """Create database ``name`` and its tables (idempotent), and keep ``owner`` in its
    ``rdq_owner`` table when given. Raw PyMySQL errors propagate."""
    db = quoted(name)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {db} CHARACTER SET utf8mb4")
        for statement in TABLES:
            cur.execute(statement.format(db=db))
        if owner is not None:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {db}.{OWNER_TABLE} (record VARCHAR(1000) NOT NULL)"
            )
            cur.execute(f"INSERT INTO {db}.{OWNER_TABLE} (record) VALUES (%s)", (owner,))


def made_namespaces(conn: pymysql.Connection) -> dict[str, str | None]:
    """Every database named as ``MySqlServer.create_namespace`` names them, with the
    record of its ``rdq_owner`` table (``None`` when it has none)."""
    with conn.cursor() as cur:
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
        names = [str(r[0]) for r in cur.fetchall() if MADE_NAME_RE.fullmatch(str(r[0]))]
        cur.execute(
            "SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_NAME = %s",
            (OWNER_TABLE,),
        )
        owned = {str(r[0]) for r in cur.fetchall()}
        found: dict[str, str | None] = {}
        for name in names:
            record = None
            if name in owned:
                cur.execute(f"SELECT record FROM {quoted(name)}.{OWNER_TABLE} LIMIT 1")
                row = cur.fetchone()
                record = row[0] if row else None
            found[name] = record.decode() if isinstance(record, bytes) else record
        return found


def drop_namespace(conn: pymysql.Connection, name: str) -> None:
    """``DROP DATABASE IF EXISTS``: the namespace and everything in it; idempotent."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quoted(name)}")
