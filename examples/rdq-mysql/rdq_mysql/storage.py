"""``MySqlStorage``: the storage SPI on one MariaDB/MySQL database (a namespace).

Behaves observably exactly like :class:`rdq_core.memory.MemoryStore`, and is safe across
threads, processes and hosts sharing the database. Needs InnoDB and ``SKIP LOCKED``
(MariaDB 10.6+, MySQL 8.0+).

**Transactions.** Connections are in autocommit mode, ``READ COMMITTED``
(:mod:`rdq_mysql.connection`). Each mutation is either one statement (enqueue, redrive)
or one explicit transaction that first *locks* the rows it acts on and only then reads
the clock and the history:

- the **claim** locks the due rows of the queue (``due_at <= now``: PENDING and due, or
  IN_FLIGHT with an expired lease), oldest due first, at most ``limit``, with ``FOR UPDATE
  SKIP LOCKED`` — rows another claim holds are passed over, never taken twice — then
  reads the server's clock and the histories of the rows that have one, appends a
  LEASE_EXPIRED attempt to each reclaimed row (numbered ``max(attempt_no) + 1`` from the
  attempts table: invariant H, never from ``attempt_count``, which redrive resets),
  stamps IN_FLIGHT, a fresh token per row, ``claimed_at = now``, ``lease_expires_at =
  due_at = now + lease``, and commits;
- a **fenced outcome** (complete / reschedule / dead-letter) and **extend-lease** lock the
  task's row only if it is IN_FLIGHT with this token (a locking read sees the newest
  committed version), else raise ``StaleClaim`` having changed nothing; then append the
  attempt (``claimed_at`` → now) and apply the transition;
- **purge** and **purge-succeeded** lock the selected rows, delete their attempts, then
  them.

A task with ``(attempt_count, redrive_count) = (0, 0)`` has no history (every attempt
appended increments ``attempt_count`` in the same transaction; only redrive resets it,
counting itself), so a claim of fresh tasks reads no history. Reads of tasks with their
histories (``get``, ``dlq_list``) are ONE statement each (a join), i.e. one snapshot.

**Clock.** Every time is the server's: ``UNIX_TIMESTAMP(NOW(6))`` in a UTC session, as
integer microseconds (``NOW(6)`` is the start of the statement, so one statement sees
one instant), read inside the transaction after its locks are held (so a time is
never earlier than one a transaction that committed before it on the same rows used).
Python's clock is never used. The server's clock is trusted to be monotonic.

**Retries.** A transaction that fails with a deadlock or a lock wait timeout is rolled
back and run again, up to :data:`RETRIES` times. A connection found dead before a call
is replaced before anything is sent; a connection lost during a call is replaced and the
call run again once *if* its commit had not been sent (the server rolls back what it
had); a connection lost during the commit (or an autocommit write) is
``BackendUnavailable``: the call may or may not have taken effect.

**Durability** (``Capabilities.durable``) is read from the server on the first
``capabilities()`` call that reaches it: ``innodb_flush_log_at_trx_commit`` 1 (or 3)
writes and flushes the redo log at each commit, 2 writes it (flushing once a second):
either way a commit that returned survives a SIGKILL of the server process (the write is
in the file or the kernel's page cache; crash recovery replays it) — **durable**; 0
writes it once a second — **not durable**. ``innodb_doublewrite`` off: a page write torn
by the kill cannot be repaired — **not durable**.

**Payloads** up to :data:`MAX_PAYLOAD_BYTES` (4 MiB): PyMySQL sends values escaped in
the statement text (at most twice their size), which must fit the server's
``max_allowed_packet`` (16 MiB by default on MariaDB, 64 MiB on MySQL 8).

**Errors.** Every PyMySQL error is mapped (:func:`rdq_mysql.errors.map_error`).

**Storage half.** This module and what it builds on (``dsn``, ``connection``, ``schema``,
``errors``) import only :mod:`rdq_core`, PyMySQL and one another — never
:mod:`rdq_compliance` — so a ``MySqlStorage`` works without the kit installed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

import pymysql

from rdq_core import cursor as cursors
from rdq_core.errors import BackendUnavailable, IdConflict, NotFound, RdqError, StaleClaim
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
from rdq_mysql import schema
from rdq_mysql.connection import ConnectionSource
from rdq_mysql.dsn import mask_dsn, parse_dsn
from rdq_mysql.errors import (
    DUPLICATE_KEY,
    code_of,
    is_lost_connection,
    is_retryable,
    map_error,
)

T = TypeVar("T")

CLOCK_DESCRIPTION = "mysql UNIX_TIMESTAMP(NOW(6)) (the server's clock, integer microseconds)"
#: How many times a transaction that failed retryably is run again.
RETRIES = 5
#: The largest payload accepted (see the module docstring).
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: The message of the LEASE_EXPIRED attempt (as the reference store writes it).
LEASE_EXPIRED_MESSAGE = "lease expired before an outcome"
#: The server's clock as integer microseconds since the epoch (UTC session).
NOW = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)"

TASK_COLUMNS = (
    "id, queue, handler, payload, headers, status, attempt_count, redrive_count, "
    "next_attempt_at, lease_expires_at, created_at"
)
_T_COLUMNS = ", ".join(f"t.{c}" for c in TASK_COLUMNS.split(", "))
ATTEMPT_COLUMNS = (
    "attempt_no, started_at, finished_at, outcome, error_type, error_message, error_detail"
)
_A_COLUMNS = ", ".join(f"a.{c}" for c in ATTEMPT_COLUMNS.split(", "))
_TASK_WIDTH = 11
_INSERT_ATTEMPT = (
    "INSERT INTO attempts (task_id, "
    + ATTEMPT_COLUMNS
    + ") VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)

_TRANSITIONS = {
    "complete": (
        "status = 'SUCCEEDED', next_attempt_at = NULL, due_at = NULL, finished_at = %(now)s"
    ),
    "reschedule": "status = 'PENDING', next_attempt_at = %(due)s, due_at = %(due)s",
    "dead_letter": "status = 'DEAD', next_attempt_at = NULL, due_at = NULL, dead_at = %(now)s",
}


def _b(text: str) -> bytes:
    return text.encode("utf-8")


def _s(value: bytes | None) -> str | None:
    return None if value is None else bytes(value).decode("utf-8")


def _opt_time(us: int | None) -> datetime | None:
    return None if us is None else utc_from_micros(int(us))


def _marks(n: int) -> str:
    return ", ".join(["%s"] * n)


class _Tx:
    """One call's use of a connection: its cursor, and whether a commit is in doubt."""

    def __init__(self, conn: pymysql.Connection) -> None:
        self.conn = conn
        self.cur = conn.cursor()
        self.in_tx = False
        #: a commit (or an autocommit write) was sent: if the connection dies now, the
        #: outcome is unknown and the call must not be run again
        self.committing = False

    def begin(self) -> None:
        self.cur.execute("BEGIN")
        self.in_tx = True

    def commit(self) -> None:
        self.committing = True
        self.cur.execute("COMMIT")
        self.in_tx = False

    def rollback(self) -> None:
        if self.in_tx:
            self.in_tx = False
            self.cur.execute("ROLLBACK")

    def rollback_quietly(self) -> None:
        try:
            self.rollback()
        except Exception:
            pass

    def execute(self, statement: str, args: Any = None) -> int:
        return int(self.cur.execute(statement, args))

    def write(self, statement: str, args: Any = None) -> int:
        """An autocommit write: its own commit."""
        self.committing = True
        return int(self.cur.execute(statement, args))

    def all(self, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
        self.cur.execute(statement, args)
        return list(self.cur.fetchall())

    def one(self, statement: str, args: Any = None) -> tuple[Any, ...] | None:
        self.cur.execute(statement, args)
        return self.cur.fetchone()

    def now(self) -> int:
        row = self.one(f"SELECT {NOW}")
        assert row is not None
        return int(row[0])


class MySqlStorage(Storage):
    """The storage SPI on database ``namespace`` of the MariaDB/MySQL server at ``dsn``.

    Nothing is opened until the first call in a process (a child process opens its own
    connections). The namespace must exist (``Server.create_namespace`` or
    :func:`rdq_mysql.schema.create_namespace`).
    """

    def __init__(self, dsn: str, namespace: str) -> None:
        address = parse_dsn(dsn)
        self.namespace = schema.namespace_name(namespace)
        self._source = ConnectionSource(address, self.namespace)
        self._where = f"mysql {mask_dsn(dsn)!r} namespace {self.namespace!r}"
        #: (durable, how it was decided), once read from the server.
        self._durability: tuple[bool, str] | None = None

    def __repr__(self) -> str:
        return f"MySqlStorage({self._where})"

    # ---- running calls ----

    def _run(self, action: str, fn: Callable[[_Tx], T]) -> T:
        """Run ``fn`` on this thread's connection; retry what may be retried; map every
        driver error (see "Retries" in the module docstring)."""
        lost_once = False
        for attempt in range(RETRIES + 1):
            if self._source.closed:
                raise BackendUnavailable(f"{self._where}: the storage is closed; open a new one")
            conn = self._source.get()
            tx = _Tx(conn)
            try:
                return fn(tx)
            except RdqError:
                tx.rollback_quietly()
                raise
            except (pymysql.err.MySQLError, OSError) as exc:
                if is_lost_connection(exc) or isinstance(exc, OSError):
                    self._source.drop(conn)
                    if not tx.committing and not lost_once:
                        lost_once = True
                        continue
                    raise map_error(exc, action, self._where) from None
                tx.rollback_quietly()
                duplicate_attempt = code_of(exc) == DUPLICATE_KEY and "PRIMARY" in str(exc)
                if attempt < RETRIES and (is_retryable(exc) or duplicate_attempt):
                    continue
                raise map_error(exc, action, self._where) from None
            finally:
                with contextlib.suppress(Exception):  # a dead connection's cursor
                    tx.cur.close()
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- producer ----

    def _enqueue(self, task: NewTask) -> bool:
        args = (
            _b(task.id),
            _b(task.queue),
            _b(task.handler),
            task.payload,
            _b(json.dumps(dict(task.headers), separators=(",", ":"))),
            micros_from_delta(task.delay),
            micros_from_delta(task.delay),
        )
        statement = (
            "INSERT INTO tasks (id, queue, handler, payload, headers, status, attempt_count, "
            "redrive_count, next_attempt_at, due_at, created_at) "
            f"VALUES (%s, %s, %s, %s, %s, 'PENDING', 0, 0, {NOW} + %s, {NOW} + %s, {NOW})"
        )

        def run(tx: _Tx) -> bool:
            for _ in range(RETRIES + 1):
                try:
                    tx.write(statement, args)
                    return True
                except pymysql.err.IntegrityError as exc:
                    if code_of(exc) != DUPLICATE_KEY:
                        raise
                tx.committing = False  # refused: nothing was written
                row = tx.one("SELECT queue FROM tasks WHERE id = %s", (args[0],))
                if row is None:
                    continue  # the conflicting task was purged meanwhile: insert again
                queue = _s(row[0])
                if queue != task.queue:
                    raise IdConflict(
                        f"task id {task.id!r} is already used in queue {queue!r}; "
                        "ids are unique across queues"
                    )
                return False
            raise BackendUnavailable(f"enqueue of {task.id!r}: its id kept vanishing; retry")

        return self._run("enqueue", run)

    # ---- worker ----

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        lease_us = micros_from_delta(lease)
        pick = (
            f"SELECT seq, {TASK_COLUMNS}, claimed_at FROM tasks "
            f"WHERE queue = %s AND due_at <= {NOW} ORDER BY due_at, seq LIMIT %s "
            "FOR UPDATE SKIP LOCKED"
        )

        def run(tx: _Tx) -> list[Claim]:
            tx.begin()
            picked = tx.all(pick, (_b(queue), limit))
            if not picked:
                tx.rollback()
                return []
            now = tx.now()
            expires = now + lease_us
            historic = [r[1] for r in picked if r[6] == "IN_FLIGHT" or r[7] or r[8]]
            history = _histories(tx, historic)
            expired = []
            for r in picked:
                if r[6] == "IN_FLIGHT":
                    attempts = history.setdefault(r[1], [])
                    no = max((a.attempt_no for a in attempts), default=0) + 1
                    attempts.append(
                        Attempt(
                            no,
                            utc_from_micros(int(r[12])),
                            utc_from_micros(now),
                            Outcome.LEASE_EXPIRED,
                            ErrorInfo(LEASE_EXPIRED_ERROR, LEASE_EXPIRED_MESSAGE),
                        )
                    )
                    expired.append(
                        (
                            r[1],
                            no,
                            int(r[12]),
                            now,
                            Outcome.LEASE_EXPIRED.value,
                            _b(LEASE_EXPIRED_ERROR),
                            _b(LEASE_EXPIRED_MESSAGE),
                            None,
                        )
                    )
            if expired:
                tx.cur.executemany(_INSERT_ATTEMPT, expired)
            tokens = [new_token() for _ in picked]
            seqs = [r[0] for r in picked]
            cases = " ".join(["WHEN %s THEN %s"] * len(picked))
            tx.execute(
                "UPDATE tasks SET attempt_count = attempt_count + IF(status = 'IN_FLIGHT', 1, 0), "
                "last_error_type = IF(status = 'IN_FLIGHT', %s, last_error_type), "
                f"status = 'IN_FLIGHT', token = CASE seq {cases} END, claimed_at = %s, "
                "lease_expires_at = %s, due_at = %s, next_attempt_at = NULL "
                f"WHERE seq IN ({_marks(len(seqs))})",
                (
                    _b(LEASE_EXPIRED_ERROR),
                    *[v for pair in zip(seqs, tokens, strict=True) for v in pair],
                    now,
                    expires,
                    expires,
                    *seqs,
                ),
            )
            tx.commit()
            claims = []
            for r, token in zip(picked, tokens, strict=True):
                reclaimed = r[6] == "IN_FLIGHT"
                task = _task(r[1:], history.get(r[1], ()))
                task = Task(
                    id=task.id,
                    queue=task.queue,
                    handler=task.handler,
                    payload=task.payload,
                    headers=task.headers,
                    status=Status.IN_FLIGHT,
                    attempt_count=task.attempt_count + (1 if reclaimed else 0),
                    redrive_count=task.redrive_count,
                    next_attempt_at=None,
                    lease_expires_at=utc_from_micros(expires),
                    created_at=task.created_at,
                    attempts=task.attempts,
                )
                claims.append(
                    Claim(
                        task,
                        token=token,
                        claimed_at=utc_from_micros(now),
                        lease_expires_at=utc_from_micros(expires),
                        reclaimed=reclaimed,
                    )
                )
            return claims

        return self._run("claim_due", run)

    def _lock_claim(self, tx: _Tx, task_id: str, token: str) -> tuple[int, int]:
        """Lock the task's row if ``token`` is its current claim: ``(seq, claimed_at)``;
        else roll back and raise ``StaleClaim``."""
        row = tx.one(
            "SELECT seq, claimed_at FROM tasks "
            "WHERE id = %s AND status = 'IN_FLIGHT' AND token = %s FOR UPDATE",
            (_b(task_id), token),
        )
        if row is None:
            tx.rollback()
            self._raise_stale(tx, task_id, token)
        return int(row[0]), int(row[1])

    def _raise_stale(self, tx: _Tx, task_id: str, token: str) -> NoReturn:
        row = tx.one("SELECT status FROM tasks WHERE id = %s", (_b(task_id),))
        state = "no such task" if row is None else f"status {row[0]}"
        raise StaleClaim(f"task {task_id!r}: token {token[:8]}… is not the current claim ({state})")

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        lease_us = micros_from_delta(lease)

        def run(tx: _Tx) -> datetime:
            tx.begin()
            seq, _ = self._lock_claim(tx, task_id, token)
            expires = tx.now() + lease_us
            tx.execute(
                "UPDATE tasks SET lease_expires_at = %s, due_at = %s WHERE seq = %s",
                (expires, expires, seq),
            )
            tx.commit()
            return utc_from_micros(expires)

        return self._run("extend_lease", run)

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        delay_us: int = 0,
    ) -> None:
        tid = _b(task_id)
        etype = None if error is None else _b(error.type)

        def run(tx: _Tx) -> None:
            tx.begin()
            seq, claimed_at = self._lock_claim(tx, task_id, token)
            row = tx.one(
                f"SELECT {NOW}, COALESCE(MAX(attempt_no), 0) + 1 FROM attempts WHERE task_id = %s",
                (tid,),
            )
            assert row is not None
            now, no = int(row[0]), int(row[1])
            tx.execute(
                _INSERT_ATTEMPT,
                (
                    tid,
                    no,
                    claimed_at,
                    now,
                    outcome.value,
                    etype,
                    None if error is None else _b(error.message),
                    None if error is None or error.detail is None else _b(error.detail),
                ),
            )
            tx.execute(
                "UPDATE tasks SET attempt_count = attempt_count + 1, token = NULL, "
                "claimed_at = NULL, lease_expires_at = NULL, last_error_type = %(etype)s, "
                f"{_TRANSITIONS[action]} WHERE seq = %(seq)s",
                {"etype": etype, "now": now, "due": now + delay_us, "seq": seq},
            )
            tx.commit()

        self._run(action, run)

    def _complete(self, task_id: str, token: str) -> None:
        self._finish("complete", task_id, token, Outcome.SUCCESS, None)

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        self._finish(
            "reschedule",
            task_id,
            token,
            Outcome.RETRYABLE_FAILURE,
            error,
            delay_us=micros_from_delta(delay),
        )

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        self._finish("dead_letter", task_id, token, outcome, error)

    # ---- reading ----

    def _get(self, task_id: str) -> Task:
        def run(tx: _Tx) -> Task:
            found = tx.all(
                f"SELECT {_T_COLUMNS}, {_A_COLUMNS} FROM tasks t "
                "LEFT JOIN attempts a ON a.task_id = t.id WHERE t.id = %s ORDER BY a.attempt_no",
                (_b(task_id),),
            )
            if not found:
                raise NotFound(f"no task with id {task_id!r}")
            return _joined(found)[0][0]

        return self._run("get", run)

    def _stats(self, queue: str) -> QueueStats:
        def run(tx: _Tx) -> QueueStats:
            row = tx.one(
                "SELECT COALESCE(SUM(status = 'PENDING'), 0), "
                f"COALESCE(SUM(status = 'PENDING' AND due_at <= {NOW}), 0), "
                "COALESCE(SUM(status = 'IN_FLIGHT'), 0), COALESCE(SUM(status = 'SUCCEEDED'), 0), "
                "COALESCE(SUM(status = 'DEAD'), 0) FROM tasks WHERE queue = %s",
                (_b(queue),),
            )
            assert row is not None
            pending, due, in_flight, succeeded, dead = (int(n) for n in row)
            return QueueStats(pending, due, in_flight, succeeded, dead)

        return self._run("stats", run)

    def _now(self) -> datetime:
        return self._run("now", lambda tx: utc_from_micros(tx.now()))

    # ---- DLQ ----

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after = None if cursor is None else cursors.decode(queue, cursor)
        selected, args = ("TRUE", []) if filter is None else _selection(filter)
        conditions = [selected]
        if after is not None:
            conditions.append("(dead_at > %s OR (dead_at = %s AND id > %s))")
            args += [after.dead_at_us, after.dead_at_us, _b(after.task_id)]
        statement = (
            f"SELECT {_T_COLUMNS}, {_A_COLUMNS}, t.dead_at FROM ("
            " SELECT * FROM tasks WHERE queue = %s AND status = 'DEAD' AND "
            + " AND ".join(conditions)
            + " ORDER BY dead_at, id LIMIT %s) t"
            " LEFT JOIN attempts a ON a.task_id = t.id ORDER BY t.dead_at, t.id, a.attempt_no"
        )

        def run(tx: _Tx) -> DlqPage:
            found = _joined(tx.all(statement, (_b(queue), *args, limit + 1)))
            page = found[:limit]
            next_cursor = None
            if len(found) > limit:
                last, dead_at = page[-1]
                position = cursors.DlqPosition(dead_at, last.id)
                next_cursor = cursors.encode(queue, position)
            return DlqPage(tuple(t for t, _ in page), next_cursor)

        return self._run("dlq_list", run)

    def _redrive(self, queue: str, selector: Selector) -> int:
        selected, args = _selection(selector)
        statement = (
            "UPDATE tasks SET status = 'PENDING', attempt_count = 0, "
            f"redrive_count = redrive_count + 1, next_attempt_at = {NOW}, due_at = {NOW}, "
            "lease_expires_at = NULL, token = NULL, claimed_at = NULL, dead_at = NULL "
            f"WHERE queue = %s AND status = 'DEAD' AND {selected}"
        )
        return self._run("redrive", lambda tx: tx.write(statement, (_b(queue), *args)))

    def _delete(self, tx: _Tx, where: str, args: Sequence[Any]) -> int:
        """Lock the rows ``where`` selects, delete their attempts and them (in one transaction)."""
        tx.begin()
        rows = tx.all(f"SELECT seq, id FROM tasks WHERE {where} FOR UPDATE", args)
        if not rows:
            tx.rollback()
            return 0
        ids = [r[1] for r in rows]
        seqs = [r[0] for r in rows]
        tx.execute(f"DELETE FROM attempts WHERE task_id IN ({_marks(len(ids))})", ids)
        tx.execute(f"DELETE FROM tasks WHERE seq IN ({_marks(len(seqs))})", seqs)
        tx.commit()
        return len(rows)

    def _purge(self, queue: str, selector: Selector) -> int:
        selected, args = _selection(selector)
        where = f"queue = %s AND status = 'DEAD' AND {selected}"
        return self._run("purge", lambda tx: self._delete(tx, where, (_b(queue), *args)))

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        where = f"queue = %s AND status = 'SUCCEEDED' AND finished_at <= {NOW} - %s"
        args = (_b(queue), micros_from_delta(older_than))
        return self._run("purge_succeeded", lambda tx: self._delete(tx, where, args))

    # ---- lifecycle ----

    def capabilities(self) -> Capabilities:
        """What this storage supports; ``durable`` from the server's settings (read once;
        while they cannot be read, not durable, and asked again next time). Never raises."""
        durable = self._durability
        if durable is None:
            try:
                durable = self._run("capabilities", _read_durability)
            except RdqError as exc:
                return _capabilities(False, f"unknown: the settings could not be read ({exc})")
            self._durability = durable
        return _capabilities(*durable)

    def close(self) -> None:
        """Close this process's connections; idempotent. Later calls raise
        ``BackendUnavailable``."""
        self._source.close()


def _capabilities(durable: bool, durability: str) -> Capabilities:
    return Capabilities(
        multi_process=True,
        max_payload_bytes=MAX_PAYLOAD_BYTES,
        notify=False,
        durable=durable,
        durability=durability,
        clock=CLOCK_DESCRIPTION,
    )


def _read_durability(tx: _Tx) -> tuple[bool, str]:
    row = tx.one("SELECT @@innodb_flush_log_at_trx_commit, @@innodb_doublewrite")
    assert row is not None
    return durability_of(str(row[0]), str(row[1]))


def durability_of(flush_log_at_trx_commit: str, doublewrite: str) -> tuple[bool, str]:
    """Whether commits survive a SIGKILL of the server with these settings, and why."""
    shown = (
        f"innodb_flush_log_at_trx_commit={flush_log_at_trx_commit}, "
        f"innodb_doublewrite={doublewrite}"
    )
    if doublewrite.upper() in ("0", "OFF", "DETECT_ONLY"):
        return False, f"{shown}: a page torn by a kill cannot be repaired"
    if flush_log_at_trx_commit == "0":
        return False, f"{shown}: a commit returns before its redo log is written"
    disk = (
        ""
        if flush_log_at_trx_commit in ("1", "3")
        else " (flushed once a second: an OS crash is not covered)"
    )
    return True, f"{shown}: a commit returns after its redo log is written{disk}"


def _histories(tx: _Tx, ids: Sequence[bytes]) -> dict[bytes, list[Attempt]]:
    """The attempts of each task in ``ids``, oldest first (one query)."""
    out: dict[bytes, list[Attempt]] = {i: [] for i in ids}
    if not ids:
        return out
    found = tx.all(
        f"SELECT task_id, {ATTEMPT_COLUMNS} FROM attempts WHERE task_id IN ({_marks(len(ids))}) "
        "ORDER BY task_id, attempt_no",
        list(ids),
    )
    for r in found:
        out[bytes(r[0])].append(_attempt(r[1:]))
    return out


def _attempt(r: Sequence[Any]) -> Attempt:
    no, started, finished, outcome, etype, emsg, edetail = r
    error = None if etype is None else ErrorInfo(_s(etype) or "", _s(emsg) or "", _s(edetail))
    return Attempt(
        int(no),
        utc_from_micros(int(started)),
        utc_from_micros(int(finished)),
        Outcome(outcome),
        error,
    )


def _task(r: Sequence[Any], attempts: Sequence[Attempt]) -> Task:
    """A Task from the :data:`TASK_COLUMNS` at the start of ``r``."""
    return Task(
        id=_s(r[0]) or "",
        queue=_s(r[1]) or "",
        handler=_s(r[2]) or "",
        payload=bytes(r[3]),
        headers=json.loads(bytes(r[4])),
        status=Status(r[5]),
        attempt_count=int(r[6]),
        redrive_count=int(r[7]),
        next_attempt_at=_opt_time(r[8]),
        lease_expires_at=_opt_time(r[9]),
        created_at=utc_from_micros(int(r[10])),
        attempts=tuple(attempts),
    )


def _joined(found: Sequence[Sequence[Any]]) -> list[tuple[Task, int]]:
    """Tasks from rows of task columns, attempt columns (NULL when none) and optionally a
    trailing ``dead_at``, in row order; each with that trailing value (0 if none)."""
    out: list[tuple[Task, int]] = []
    current: Sequence[Any] | None = None
    attempts: list[Attempt] = []
    width = _TASK_WIDTH + 7

    def flush() -> None:
        if current is not None:
            extra = (
                int(current[width]) if len(current) > width and current[width] is not None else 0
            )
            out.append((_task(current, attempts), extra))

    for r in found:
        if current is None or r[0] != current[0]:
            flush()
            current, attempts = r, []
        if r[_TASK_WIDTH] is not None:
            attempts.append(_attempt(r[_TASK_WIDTH:width]))
    flush()
    return out


def _selection(selector: Selector) -> tuple[str, list[Any]]:
    """A WHERE fragment (to AND with queue and status) selecting what ``selector`` names;
    an empty selector selects nothing, never everything."""
    if isinstance(selector, ByIds):
        if not selector.ids:
            return "FALSE", []
        return f"id IN ({_marks(len(selector.ids))})", [_b(i) for i in selector.ids]
    if selector.is_empty:
        return "FALSE", []
    conditions = ["TRUE"]
    args: list[Any] = []
    if selector.handler is not None:
        conditions.append("handler = %s")
        args.append(_b(selector.handler))
    if selector.error_type is not None:
        conditions.append("last_error_type = %s")
        args.append(_b(selector.error_type))
    return "(" + " AND ".join(conditions) + ")", args
