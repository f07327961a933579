"""``SqliteStorage``: the storage SPI on one SQLite database file.

Behaves observably exactly like :class:`rdq_core.memory.MemoryStore`, and is safe across
threads and processes sharing the file.

**Locking.** Every mutation is one ``BEGIN IMMEDIATE`` transaction: it takes the
database's single write lock up front, so all reads it makes (the due rows of a claim,
the token of a fenced call, the next attempt number) and all its writes happen with no
other writer in between, in any process. A writer waits up to the busy timeout for the
lock. Multi-statement reads (``get``, ``stats``, ``dlq_list``) run in a deferred ``BEGIN``
transaction, i.e. on one consistent WAL snapshot.

**Connections.** One connection per thread per process (``threading.local``), opened on
first use; a connection inherited through ``fork`` is never used nor closed by the child
(it gets its own). ``close()`` closes every connection this object opened in this
process; using the object afterwards raises ``BackendUnavailable``.

**Clock.** SQLite has no server, so the storage clock is the host's UTC clock, read
*inside* the write transaction (after ``BEGIN IMMEDIATE``), and made monotonic per
database across processes by the one-row table ``rdq_clock``, which holds the last time
issued: a transaction's ``now = max(host clock, rdq_clock.last_us, this object's
floor)``, stored back. Like the reference store, the clock never goes back but may stand
still (two transactions may share a microsecond; ties are broken by insertion order in
claims and by id in the DLQ). A read (``now()``, ``stats``) uses ``max(host clock,
rdq_clock.last_us, floor)`` without writing. Because writes are serialised by the write
lock, a time issued by one transaction is never earlier than one issued by a transaction
that committed before it, whichever process ran it.

**Durability.** WAL with ``synchronous=NORMAL``: ``COMMIT`` returns after the
transaction's frames were written to the WAL file (``synchronous=NORMAL`` only leaves out
the flush to the disk, done at checkpoints), so a committed transaction survives the
SIGKILL of any process; only an OS crash or power loss may lose the last commits. The
storage declares ``durable`` (which promises exactly the first: see
:class:`rdq_core.model.Capabilities`).

**Storage half.** This module, ``connection`` and ``schema`` import only :mod:`rdq_core`
and the standard library — never :mod:`rdq_compliance` nor :mod:`rdq_sqlite.plugin` — so
a ``SqliteStorage`` works without the kit installed or imported.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from rdq_core import cursor as cursors
from rdq_core.errors import BackendUnavailable, IdConflict, InvalidArgument, NotFound, StaleClaim
from rdq_core.model import (
    LEASE_EXPIRED_ERROR,
    Attempt,
    ByIds,
    Capabilities,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Status,
    Task,
    micros_from_delta,
    utc_from_micros,
)
from rdq_core.spi import Storage
from rdq_core.tokens import new_token
from rdq_sqlite import schema
from rdq_sqlite.connection import BUSY_TIMEOUT_S, connect, is_busy, map_error

T = TypeVar("T")

#: Reads the host clock as integer microseconds since the epoch (UTC).
MicrosClock = Callable[[], int]

CLOCK_DESCRIPTION = (
    "host UTC clock read inside the write transaction, monotonic per database "
    "(floor kept in the rdq_clock table)"
)
DURABILITY = (
    "SQLite WAL, synchronous=NORMAL: COMMIT returns after the WAL frames are written; a "
    "killed process loses no committed transaction"
)

#: Connections inherited through fork: kept referenced so the child never closes them
#: (closing would touch the parent's locks and WAL).
_INHERITED: list[sqlite3.Connection] = []

_TASK_COLUMNS = (
    "id, queue, handler, payload, headers, status, attempt_count, redrive_count, "
    "next_attempt_at, lease_expires_at, created_at"
)
_ATTEMPT_COLUMNS = (
    "task_id, attempt_no, started_at, finished_at, outcome, error_type, error_message, error_detail"
)
_LEASE_EXPIRED_MESSAGE = "lease expired before an outcome"


def host_micros() -> int:
    """The host's UTC clock in integer microseconds since the epoch."""
    return time.time_ns() // 1000


def _json_list(values: Iterable[object]) -> str:
    return json.dumps(list(values), ensure_ascii=False)


def _opt_time(us: int | None) -> datetime | None:
    return None if us is None else utc_from_micros(us)


class SqliteStorage(Storage):
    """The storage SPI on the SQLite database file ``path``.

    ``create`` makes the file (with the schema) if it does not exist; otherwise a missing
    file is an ``InvalidArgument``. Missing migrations are applied on open. ``clock``
    replaces the host clock (integer µs), for deterministic tests.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        busy_timeout: float = BUSY_TIMEOUT_S,
        clock: MicrosClock | None = None,
    ) -> None:
        self._path = Path(path).absolute()
        self._create = create
        self._busy_timeout = busy_timeout
        self._clock: MicrosClock = clock if clock is not None else host_micros
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[tuple[int, sqlite3.Connection]] = []
        self._closed = False
        self._migrated = False
        self._floor_us = 0
        if self._path.is_dir():
            raise InvalidArgument(
                f"{str(self._path)!r} is a directory, not an SQLite database file"
            )
        if not create and not self._path.exists():
            raise InvalidArgument(
                f"no SQLite database at {str(self._path)!r}; create it first "
                "(SqliteStorage(path, create=True) or Server.create_namespace())"
            )
        self._conn()  # open eagerly: a bad file fails here, with a clear error

    def __repr__(self) -> str:
        return f"SqliteStorage({str(self._path)!r})"

    @property
    def path(self) -> Path:
        return self._path

    # ---- connections ----

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise BackendUnavailable(f"{self!r} is closed; open a new storage")
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            if self._local.pid == pid:
                return conn
            _INHERITED.append(conn)  # inherited through fork: never use nor close it
            self._local.conn = None
        conn = self._open()
        with self._lock:
            if self._closed:
                conn.close()
                raise BackendUnavailable(f"{self!r} is closed; open a new storage")
            self._opened.append((pid, conn))
        self._local.conn = conn
        self._local.pid = pid
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            conn = connect(self._path, create=self._create, busy_timeout=self._busy_timeout)
        except sqlite3.Error as exc:
            raise map_error(exc, self._path, "open", self._busy_timeout) from exc
        if not self._migrated:
            try:
                schema.migrate(conn, self._clock())
            except sqlite3.Error as exc:
                conn.close()
                raise map_error(exc, self._path, "migrate", self._busy_timeout) from exc
            except BaseException:
                conn.close()
                raise
            self._migrated = True
        return conn

    def _discard(self, conn: sqlite3.Connection) -> None:
        """Forget and close a connection whose state is no longer trusted."""
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._opened = [(p, c) for p, c in self._opened if c is not conn]
        try:
            conn.close()
        except sqlite3.Error:
            pass

    def _failed(self, conn: sqlite3.Connection, action: str, exc: sqlite3.Error) -> Exception:
        if not is_busy(exc) or conn.in_transaction:
            self._discard(conn)
        return map_error(exc, self._path, action, self._busy_timeout)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    # ---- transactions ----

    def _write(self, action: str, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """Run ``fn(conn, now_us)`` in one ``BEGIN IMMEDIATE`` transaction."""
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._failed(conn, action, exc) from exc
        try:
            result = fn(conn, self._tick(conn))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise self._failed(conn, action, exc) from exc
        except BaseException:
            self._rollback(conn)
            raise
        return result

    def _read(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one deferred (read-only, snapshot) transaction."""
        conn = self._conn()
        try:
            conn.execute("BEGIN")
            result = fn(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise self._failed(conn, action, exc) from exc
        except BaseException:
            self._rollback(conn)
            raise
        return result

    # ---- clock ----

    def _stored_floor(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT last_us FROM rdq_clock WHERE id = 1").fetchone()
        if row is None:
            raise BackendUnavailable(f"{self!r}: the rdq_clock row is missing (damaged schema)")
        return int(row[0])

    def _advance(self, candidate: int) -> int:
        with self._lock:
            now = max(candidate, self._floor_us)
            self._floor_us = now
            return now

    def _tick(self, conn: sqlite3.Connection) -> int:
        """The transaction's time; called under the write lock, stored as the new floor."""
        last = self._stored_floor(conn)
        now = self._advance(max(self._clock(), last))
        if now != last:
            conn.execute("UPDATE rdq_clock SET last_us = ? WHERE id = 1", (now,))
        return now

    def _read_now(self, conn: sqlite3.Connection) -> int:
        return self._advance(max(self._clock(), self._stored_floor(conn)))

    def _now(self) -> datetime:
        return utc_from_micros(self._read("now", self._read_now))

    # ---- rows to model ----

    @staticmethod
    def _attempts(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[Attempt]]:
        out: dict[str, list[Attempt]] = {i: [] for i in ids}
        if not ids:
            return out
        rows = conn.execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts "
            "WHERE task_id IN (SELECT value FROM json_each(?)) ORDER BY task_id, attempt_no",
            (_json_list(ids),),
        )
        for task_id, no, started, finished, outcome, etype, emsg, edetail in rows:
            error = None if etype is None else ErrorInfo(etype, emsg or "", edetail)
            out[task_id].append(
                Attempt(
                    no, utc_from_micros(started), utc_from_micros(finished), Outcome(outcome), error
                )
            )
        return out

    @classmethod
    def _tasks(cls, conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[Task]:
        history = cls._attempts(conn, [r[0] for r in rows])
        return [
            Task(
                id=r[0],
                queue=r[1],
                handler=r[2],
                payload=bytes(r[3]),
                headers=json.loads(r[4]),
                status=Status(r[5]),
                attempt_count=r[6],
                redrive_count=r[7],
                next_attempt_at=_opt_time(r[8]),
                lease_expires_at=_opt_time(r[9]),
                created_at=utc_from_micros(r[10]),
                attempts=tuple(history[r[0]]),
            )
            for r in rows
        ]

    @staticmethod
    def _append_attempt(
        conn: sqlite3.Connection,
        task_id: str,
        started_us: int,
        finished_us: int,
        outcome: Outcome,
        error: ErrorInfo | None,
    ) -> None:
        """Append an attempt numbered from persisted history (invariant H), never from
        ``attempt_count``."""
        conn.execute(
            f"INSERT INTO attempts ({_ATTEMPT_COLUMNS}) "
            "SELECT ?, COALESCE(MAX(attempt_no), 0) + 1, ?, ?, ?, ?, ?, ? "
            "FROM attempts WHERE task_id = ?",
            (
                task_id,
                started_us,
                finished_us,
                outcome.value,
                None if error is None else error.type,
                None if error is None else error.message,
                None if error is None else error.detail,
                task_id,
            ),
        )

    # ---- producer ----

    def _enqueue(self, task: NewTask) -> bool:
        def run(conn: sqlite3.Connection, now: int) -> bool:
            due = now + micros_from_delta(task.delay)
            cur = conn.execute(
                "INSERT INTO tasks (id, queue, handler, payload, headers, status, attempt_count,"
                " redrive_count, next_attempt_at, created_at, due_at)"
                " VALUES (?, ?, ?, ?, ?, 'PENDING', 0, 0, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                (
                    task.id,
                    task.queue,
                    task.handler,
                    task.payload,
                    json.dumps(dict(task.headers)),
                    due,
                    now,
                    due,
                ),
            )
            if cur.rowcount == 1:
                return True
            row = conn.execute("SELECT queue FROM tasks WHERE id = ?", (task.id,)).fetchone()
            if row is not None and row[0] != task.queue:
                raise IdConflict(
                    f"task id {task.id!r} is already used in queue {row[0]!r}; "
                    "ids are unique across queues"
                )
            return False

        return self._write("enqueue", run)

    # ---- worker ----

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        lease_us = micros_from_delta(lease)

        def run(conn: sqlite3.Connection, now: int) -> list[Claim]:
            due = conn.execute(
                "SELECT seq, id, status, claimed_at FROM tasks"
                " WHERE queue = ? AND due_at IS NOT NULL AND due_at <= ?"
                " AND status IN ('PENDING', 'IN_FLIGHT')"
                " ORDER BY due_at, seq LIMIT ?",
                (queue, now, limit),
            ).fetchall()
            if not due:
                return []
            expires = now + lease_us
            tokens: dict[str, tuple[str, bool]] = {}
            for seq, task_id, status, claimed_at in due:
                reclaimed = status == Status.IN_FLIGHT.value
                if reclaimed:
                    self._append_attempt(
                        conn,
                        task_id,
                        claimed_at,
                        now,
                        Outcome.LEASE_EXPIRED,
                        ErrorInfo(LEASE_EXPIRED_ERROR, _LEASE_EXPIRED_MESSAGE),
                    )
                token = new_token()
                tokens[task_id] = (token, reclaimed)
                conn.execute(
                    "UPDATE tasks SET status = 'IN_FLIGHT', token = :token, claimed_at = :now,"
                    " lease_expires_at = :expires, due_at = :expires, next_attempt_at = NULL,"
                    " attempt_count = attempt_count + :reclaimed,"
                    " last_error_type = CASE WHEN :reclaimed THEN :lease_error"
                    " ELSE last_error_type END"
                    " WHERE seq = :seq",
                    {
                        "token": token,
                        "now": now,
                        "expires": expires,
                        "reclaimed": int(reclaimed),
                        "lease_error": LEASE_EXPIRED_ERROR,
                        "seq": seq,
                    },
                )
            rows = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks"
                " WHERE seq IN (SELECT value FROM json_each(?)) ORDER BY due_at, seq",
                (_json_list(r[0] for r in due),),
            ).fetchall()
            by_id = {t.id: t for t in self._tasks(conn, rows)}
            claimed_at, lease_end = utc_from_micros(now), utc_from_micros(expires)
            return [
                Claim(by_id[task_id], tokens[task_id][0], claimed_at, lease_end, tokens[task_id][1])
                for _seq, task_id, _status, _claimed in due
            ]

        return self._write("claim_due", run)

    @staticmethod
    def _fence(conn: sqlite3.Connection, task_id: str, token: str) -> int:
        """The ``claimed_at`` of the current claim, or ``StaleClaim``."""
        row = conn.execute(
            "SELECT claimed_at FROM tasks WHERE id = ? AND status = 'IN_FLIGHT' AND token = ?",
            (task_id, token),
        ).fetchone()
        if row is None:
            _raise_stale(conn, task_id, token)
        return int(row[0])

    def _fenced_update(
        self,
        conn: sqlite3.Connection,
        task_id: str,
        token: str,
        assignments: str,
        params: Sequence[object],
    ) -> None:
        cur = conn.execute(
            f"UPDATE tasks SET {assignments} WHERE id = ? AND status = 'IN_FLIGHT' AND token = ?",
            (*params, task_id, token),
        )
        if cur.rowcount != 1:  # cannot happen under the write lock after _fence
            _raise_stale(conn, task_id, token)

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        def run(conn: sqlite3.Connection, now: int) -> datetime:
            self._fence(conn, task_id, token)
            expires = now + micros_from_delta(lease)
            self._fenced_update(
                conn, task_id, token, "lease_expires_at = ?, due_at = ?", (expires, expires)
            )
            return utc_from_micros(expires)

        return self._write("extend_lease", run)

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        assignments: Callable[[int], tuple[str, Sequence[object]]],
    ) -> None:
        """Fence, append the attempt (claimed_at → now), then apply the transition."""

        def run(conn: sqlite3.Connection, now: int) -> None:
            claimed_at = self._fence(conn, task_id, token)
            sets, params = assignments(now)
            self._fenced_update(
                conn,
                task_id,
                token,
                "attempt_count = attempt_count + 1, token = NULL, claimed_at = NULL,"
                " lease_expires_at = NULL, last_error_type = ?, " + sets,
                (None if error is None else error.type, *params),
            )
            self._append_attempt(conn, task_id, claimed_at, now, outcome, error)

        self._write(action, run)

    def _complete(self, task_id: str, token: str) -> None:
        self._finish(
            "complete",
            task_id,
            token,
            Outcome.SUCCESS,
            None,
            lambda now: (
                "status = 'SUCCEEDED', next_attempt_at = NULL, due_at = NULL, finished_at = ?",
                (now,),
            ),
        )

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        delay_us = micros_from_delta(delay)
        self._finish(
            "reschedule",
            task_id,
            token,
            Outcome.RETRYABLE_FAILURE,
            error,
            lambda now: (
                "status = 'PENDING', next_attempt_at = ?, due_at = ?",
                (now + delay_us, now + delay_us),
            ),
        )

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        self._finish(
            "dead_letter",
            task_id,
            token,
            outcome,
            error,
            lambda now: (
                "status = 'DEAD', next_attempt_at = NULL, due_at = NULL, dead_at = ?",
                (now,),
            ),
        )

    # ---- reading ----

    def _get(self, task_id: str) -> Task:
        def run(conn: sqlite3.Connection) -> Task:
            row = conn.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,)
            ).fetchone()
            if row is None:
                raise NotFound(f"no task with id {task_id!r}")
            return self._tasks(conn, [row])[0]

        return self._read("get", run)

    def _stats(self, queue: str) -> QueueStats:
        def run(conn: sqlite3.Connection) -> QueueStats:
            now = self._read_now(conn)
            counts = {s.value: 0 for s in Status}
            due = 0
            for status, count, due_count in conn.execute(
                "SELECT status, COUNT(*), SUM(CASE WHEN due_at <= ? THEN 1 ELSE 0 END)"
                " FROM tasks WHERE queue = ? GROUP BY status",
                (now, queue),
            ):
                counts[status] = count
                if status == Status.PENDING.value:
                    due = int(due_count or 0)
            return QueueStats(
                pending=counts[Status.PENDING.value],
                due=due,
                in_flight=counts[Status.IN_FLIGHT.value],
                succeeded=counts[Status.SUCCEEDED.value],
                dead=counts[Status.DEAD.value],
            )

        return self._read("stats", run)

    # ---- DLQ ----

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after = None if cursor is None else cursors.decode(queue, cursor)
        where, params = ("1", []) if filter is None else _selector_sql(filter)

        def run(conn: sqlite3.Connection) -> DlqPage:
            sql = (
                f"SELECT {_TASK_COLUMNS}, dead_at FROM tasks"
                f" WHERE queue = ? AND status = 'DEAD' AND ({where})"
            )
            args: list[object] = [queue, *params]
            if after is not None:
                sql += " AND (dead_at, id) > (?, ?)"
                args += [after.dead_at_us, after.task_id]
            sql += " ORDER BY dead_at, id LIMIT ?"
            args.append(limit + 1)
            rows = conn.execute(sql, args).fetchall()
            page = rows[:limit]
            next_cursor = None
            if len(rows) > limit:
                last = page[-1]
                next_cursor = cursors.encode(queue, cursors.DlqPosition(last[-1], last[0]))
            return DlqPage(tuple(self._tasks(conn, [r[:-1] for r in page])), next_cursor)

        return self._read("dlq_list", run)

    def _redrive(self, queue: str, selector: Selector) -> int:
        where, params = _selector_sql(selector)

        def run(conn: sqlite3.Connection, now: int) -> int:
            cur = conn.execute(
                "UPDATE tasks SET status = 'PENDING', attempt_count = 0,"
                " redrive_count = redrive_count + 1, next_attempt_at = ?, due_at = ?,"
                " lease_expires_at = NULL, token = NULL, claimed_at = NULL, dead_at = NULL"
                f" WHERE queue = ? AND status = 'DEAD' AND ({where})",
                (now, now, queue, *params),
            )
            return cur.rowcount

        return self._write("redrive", run)

    def _purge(self, queue: str, selector: Selector) -> int:
        where, params = _selector_sql(selector)
        return self._delete("purge", f"status = 'DEAD' AND ({where})", queue, params)

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        older_us = micros_from_delta(older_than)
        return self._delete(
            "purge_succeeded",
            "status = 'SUCCEEDED' AND finished_at <= ?",
            queue,
            [],
            cutoff_from_now=older_us,
        )

    def _delete(
        self,
        action: str,
        where: str,
        queue: str,
        params: Sequence[object],
        *,
        cutoff_from_now: int | None = None,
    ) -> int:
        """Delete the queue's tasks matching ``where`` and their history; returns how many."""

        def run(conn: sqlite3.Connection, now: int) -> int:
            args = [queue, *params]
            if cutoff_from_now is not None:
                args.append(now - cutoff_from_now)
            conn.execute(
                "DELETE FROM attempts WHERE task_id IN"
                f" (SELECT id FROM tasks WHERE queue = ? AND {where})",
                args,
            )
            return conn.execute(f"DELETE FROM tasks WHERE queue = ? AND {where}", args).rowcount

        return self._write(action, run)

    # ---- lifecycle ----

    def capabilities(self) -> Capabilities:
        return Capabilities(
            multi_process=True,
            max_payload_bytes=None,
            notify=False,
            durable=True,
            durability=DURABILITY,
            clock=CLOCK_DESCRIPTION,
        )

    def close(self) -> None:
        """Close every connection this object opened in this process; idempotent."""
        pid = os.getpid()
        with self._lock:
            self._closed = True
            mine = [c for p, c in self._opened if p == pid]
            _INHERITED.extend(c for p, c in self._opened if p != pid)
            self._opened.clear()
        for conn in mine:
            try:
                conn.close()
            except sqlite3.Error:
                pass


def _raise_stale(conn: sqlite3.Connection, task_id: str, token: str) -> NoReturn:
    row = conn.execute("SELECT status FROM tasks WHERE id = ?", (task_id,)).fetchone()
    state = "no such task" if row is None else f"status {row[0]}"
    raise StaleClaim(f"task {task_id!r}: token {token[:8]}… is not the current claim ({state})")


def _selector_sql(selector: Selector) -> tuple[str, list[object]]:
    """A WHERE fragment (to AND with queue and status) selecting what ``selector`` names."""
    if isinstance(selector, ByIds):
        if not selector.ids:
            return "0", []
        return "id IN (SELECT value FROM json_each(?))", [_json_list(selector.ids)]
    if not isinstance(selector, DlqFilter):
        raise InvalidArgument(f"unsupported selector {selector!r}")
    if selector.is_empty:
        return "0", []  # an empty filter selects nothing, never everything
    conds: list[str] = []
    params: list[object] = []
    if selector.handler is not None:
        conds.append("handler = ?")
        params.append(selector.handler)
    if selector.error_type is not None:
        conds.append("last_error_type = ?")
        params.append(selector.error_type)
    return (" AND ".join(conds) or "1"), params
