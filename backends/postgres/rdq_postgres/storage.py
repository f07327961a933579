"""``PostgresStorage``: the storage SPI on one PostgreSQL schema (a namespace).

Behaves observably exactly like :class:`rdq_core.memory.MemoryStore`, and is safe across
threads, processes and hosts sharing the schema.

**Transactions.** Connections are in autocommit mode. Every mutation is ONE statement —
enqueue (``INSERT … ON CONFLICT (id) DO NOTHING``), the fenced outcomes (lock the row if
the token is current, append the attempt, apply the transition: see
:mod:`rdq_postgres.queries`), extend-lease, redrive, purge, purge-succeeded — so it is
atomic by itself. The claim is one statement too, run in a READ COMMITTED transaction
with the query that reads the claimed tasks' histories (the claimed rows stay locked
until that commit, so the histories returned are exactly the claimed state); that query
is skipped for tasks whose ``(attempt_count, redrive_count)`` is ``(0, 0)``, which have
none. Reads of tasks with their histories (``get``, ``dlq_list``) are one statement each
(histories aggregated into arrays), i.e. one snapshot.

**The claim's fast path.** Most claims take fresh tasks (never attempted, never
redriven), which have no history: the *fresh claim* (``Queries.claim_fresh``) takes them
in one autocommit statement — one round trip instead of four (BEGIN, claim, history,
COMMIT) — and declines, changing nothing, as soon as one picked task is not fresh; the
full claim then runs. After a decline the storage goes straight to the full claim until
a full claim takes only fresh tasks again, so a queue of retried tasks does not pay for
two statements per poll.

**Statements** are rendered to bytes once (``Queries.compiled``) and run on the
connection's own reusable cursor (``connection.cursor_of``); psycopg prepares each on its
fifth run on a connection.

**Retries.** A statement that fails with a serialization failure, a deadlock, or a
duplicate attempt number (a claim whose snapshot predates an attempt committed on a row it
then locked) rolled back entirely and is run again, up to :data:`RETRIES` times.

**Clock.** Every time is the server's ``now()`` (the start of the statement's
transaction); Python's clock is never used. The server's clock is trusted to be monotonic.

**Durability** (``Capabilities.durable``: acknowledged writes survive a kill and restart
of the server process) is read from the server on the first ``capabilities()`` call that
reaches it (:func:`durability_of` on ``synchronous_commit``, ``full_page_writes`` and
``fsync`` as this storage's sessions see them), then kept:

- a commit with ``synchronous_commit`` ``on``, ``remote_apply``, ``remote_write`` or
  ``local`` returns only after its WAL record was written — with ``fsync=on`` also flushed
  — so when the server *process* dies (the ``kill_server`` fault SIGKILLs every process of
  it) the record is in the file or at least the kernel's page cache, and the next start
  replays it: **durable**, even with ``fsync=off``, which only skips the flush to the
  disk (only an operating-system crash or power cut could then lose commits: not what
  the capability promises);
- ``synchronous_commit=off`` returns before the WAL is written (the WAL writer writes it
  within three times ``wal_writer_delay``): a SIGKILL loses the last commits: **not durable**;
- ``full_page_writes=off``: a SIGKILL can stop an 8 kB page write between its 4 kB
  halves (Linux ends a write at a page boundary when the writer is killed) and nothing
  in the WAL can repair the torn page: **not durable**.

**Errors.** Every psycopg error is mapped (:func:`rdq_postgres.errors.map_error`): a lost
or refused connection or a pool timeout is ``BackendUnavailable``, a value PostgreSQL
refuses is ``InvalidArgument``.

**Storage half.** This module and what it builds on (``connection``, ``queries``,
``schema``, ``rows``, ``errors``) import only :mod:`rdq_core`, psycopg/psycopg_pool and
one another — never :mod:`rdq_compliance` nor the plugin half (``plugin``, ``server``,
``local``, ``container``, ``options``, ``stock``) — so a ``PostgresStorage`` works without
the kit installed or imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from rdq_core import cursor as cursors
from rdq_core.errors import BackendUnavailable, IdConflict, NotFound, RdqError, StaleClaim
from rdq_core.model import (
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
    Task,
    micros_from_utc,
    trusted_claim,
    utc_from_micros,
)
from rdq_core.spi import Storage
from rdq_postgres import rows
from rdq_postgres.connection import POOL_TIMEOUT_S, ConnectionSource, cursor_of
from rdq_postgres.errors import is_retryable, map_error
from rdq_postgres.queries import Compiled, Queries, claim_params

T = TypeVar("T")

CLOCK_DESCRIPTION = "postgres now() (the server's clock at the start of each transaction)"
#: How many times a statement that failed retryably is run again.
RETRIES = 4


class PostgresStorage(Storage):
    """The storage SPI on schema ``schema`` of the PostgreSQL server at ``dsn``.

    Nothing is opened until the first call in a process (a child process opens its own
    pool). The schema must exist (``create_namespace``); missing migrations are applied.
    """

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        application_name: str | None = None,
        timeout: float = POOL_TIMEOUT_S,
    ) -> None:
        self._source = ConnectionSource(
            dsn,
            schema,
            min_size=min_size,
            max_size=max_size,
            application_name=application_name,
            timeout=timeout,
        )
        self._q = Queries(self._source.schema)
        #: Try the fresh claim first (see the module docstring); a hint, shared by threads.
        self._fresh_first = True
        #: (durable, how it was decided), once read from the server.
        self._durability: tuple[bool, str] | None = None

    def __repr__(self) -> str:
        return f"PostgresStorage({self._source.where})"

    @property
    def schema(self) -> str:
        return self._source.schema

    @property
    def application_name(self) -> str:
        return self._source.application_name

    # ---- running statements ----

    def _sql(self, conn: psycopg.Connection) -> Compiled:
        return self._q.compiled(conn)

    def _run(self, action: str, fn: Callable[[psycopg.Connection], T]) -> T:
        """Run ``fn`` on a borrowed connection (pooled; or direct while the pool recovers
        from dead connections, see :mod:`rdq_postgres.connection`); map every driver error."""
        source = self._source
        for attempt in range(RETRIES + 1):
            try:
                conn, pooled = source.borrow()
                try:
                    return fn(conn)
                finally:
                    source.give_back(conn, pooled)
            except RdqError:
                raise
            except psycopg.Error as exc:
                if attempt < RETRIES and is_retryable(exc):
                    continue
                raise map_error(exc, action, self._source.where) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- producer ----

    def _enqueue(self, task: NewTask) -> bool:
        params = {
            "id": task.id,
            "queue": task.queue,
            "handler": task.handler,
            "payload": task.payload,
            "headers": Jsonb(dict(task.headers)),
            "delay": task.delay,
        }

        def run(conn: psycopg.Connection) -> bool:
            q = self._sql(conn)
            for _ in range(RETRIES + 1):
                if cursor_of(conn).execute(q.enqueue, params).fetchone() is not None:
                    return True
                row = cursor_of(conn).execute(q.queue_of, (task.id,)).fetchone()
                if row is None:
                    continue  # the conflicting task was purged meanwhile: insert again
                if row[0] != task.queue:
                    raise IdConflict(
                        f"task id {task.id!r} is already used in queue {row[0]!r}; "
                        "ids are unique across queues"
                    )
                return False
            raise BackendUnavailable(f"enqueue of {task.id!r}: its id kept vanishing; retry")

        return self._run("enqueue", run)

    # ---- worker ----

    def _claim_due(self, queue: str, limit: int, lease: timedelta) -> list[Claim]:
        params = claim_params(queue, limit, lease)
        if self._fresh_first:
            fresh = self._run("claim_due", lambda conn: self._claim_fresh(conn, params))
            if fresh is not None:
                return fresh
            self._fresh_first = False  # declined: a task with a history is due
        claims, all_fresh = self._run("claim_due", lambda conn: self._claim_full(conn, params))
        self._fresh_first = all_fresh
        return claims

    def _claim_fresh(self, conn: psycopg.Connection, params: dict[str, Any]) -> list[Claim] | None:
        """The fresh claim (autocommit, one statement); ``None`` if it declined."""
        statement = self._sql(conn).claim_fresh
        claimed = cursor_of(conn).execute(statement, params, binary=True).fetchall()
        if claimed and claimed[0][0] is None:
            return None
        claimed.sort(key=_claim_order)
        return [_claim(r, ()) for r in claimed]

    def _claim_full(
        self, conn: psycopg.Connection, params: dict[str, Any]
    ) -> tuple[list[Claim], bool]:
        """The full claim and the histories of what it took, in one transaction; and
        whether every task it took was fresh (had no history)."""
        q = self._sql(conn)
        with conn.transaction():
            claimed = cursor_of(conn).execute(q.claim, params, binary=True).fetchall()
            # (attempt_count, redrive_count) of the claimed row: (0, 0) has no history
            historic = [r[0] for r in claimed if r[6] or r[7]]
            history = rows.histories(conn, q.history, historic) if historic else {}
        claimed.sort(key=_claim_order)
        return [_claim(r, history.get(r[0], ())) for r in claimed], not historic

    def _raise_stale(self, conn: psycopg.Connection, task_id: str, token: str) -> NoReturn:
        row = cursor_of(conn).execute(self._sql(conn).status_of, (task_id,)).fetchone()
        state = "no such task" if row is None else f"status {row[0]}"
        raise StaleClaim(f"task {task_id!r}: token {token[:8]}… is not the current claim ({state})")

    def _extend_lease(self, task_id: str, token: str, lease: timedelta) -> datetime:
        params = {"id": task_id, "token": token, "lease": lease}

        def run(conn: psycopg.Connection) -> datetime:
            row = cursor_of(conn).execute(self._sql(conn).extend, params).fetchone()
            if row is None:
                self._raise_stale(conn, task_id, token)
            return rows.utc(row[0])

        return self._run("extend_lease", run)

    def _finish(
        self,
        action: str,
        task_id: str,
        token: str,
        outcome: Outcome,
        error: ErrorInfo | None,
        **extra: Any,
    ) -> None:
        params = {
            "id": task_id,
            "token": token,
            "outcome": outcome.value,
            "error_type": None if error is None else error.type,
            "error_message": None if error is None else error.message,
            "error_detail": None if error is None else error.detail,
            **extra,
        }

        def run(conn: psycopg.Connection) -> None:
            statement = self._sql(conn).finish[action]
            if cursor_of(conn).execute(statement, params).fetchone() is None:
                self._raise_stale(conn, task_id, token)

        self._run(action, run)

    def _complete(self, task_id: str, token: str) -> None:
        self._finish("complete", task_id, token, Outcome.SUCCESS, None)

    def _reschedule(
        self, task_id: str, token: str, delay: timedelta, error: ErrorInfo | None
    ) -> None:
        self._finish("reschedule", task_id, token, Outcome.RETRYABLE_FAILURE, error, delay=delay)

    def _dead_letter(
        self, task_id: str, token: str, error: ErrorInfo | None, outcome: Outcome
    ) -> None:
        self._finish("dead_letter", task_id, token, outcome, error)

    # ---- reading ----

    def _get(self, task_id: str) -> Task:
        def run(conn: psycopg.Connection) -> Task:
            statement = self._sql(conn).task
            row = cursor_of(conn).execute(statement, (task_id,), binary=True).fetchone()
            if row is None:
                raise NotFound(f"no task with id {task_id!r}")
            return rows.with_history(row)

        return self._run("get", run)

    def _stats(self, queue: str) -> QueueStats:
        def run(conn: psycopg.Connection) -> QueueStats:
            row = cursor_of(conn).execute(self._sql(conn).stats, {"queue": queue}).fetchone()
            assert row is not None
            pending, due, in_flight, succeeded, dead = (int(n) for n in row)
            return QueueStats(pending, due, in_flight, succeeded, dead)

        return self._run("stats", run)

    def _now(self) -> datetime:
        def run(conn: psycopg.Connection) -> datetime:
            row = cursor_of(conn).execute("SELECT now()").fetchone()
            assert row is not None
            return rows.utc(row[0])

        return self._run("now", run)

    # ---- DLQ ----

    def _dlq_list(
        self, queue: str, filter: DlqFilter | None, cursor: str | None, limit: int
    ) -> DlqPage:
        after = None if cursor is None else cursors.decode(queue, cursor)
        selected, params = (sql.SQL("TRUE"), {}) if filter is None else _selection(filter)
        conditions: list[sql.Composable] = [selected]
        params.update({"queue": queue, "limit": limit + 1})
        if after is not None:
            conditions.append(sql.SQL("(dead_at, id) > (%(after_at)s, %(after_id)s)"))
            params.update(after_at=utc_from_micros(after.dead_at_us), after_id=after.task_id)
        statement = self._q.dlq_page(sql.SQL(" AND ").join(conditions))

        def run(conn: psycopg.Connection) -> DlqPage:
            found = cursor_of(conn).execute(statement, params, binary=True).fetchall()
            page = found[:limit]
            next_cursor = None
            if len(found) > limit:
                last = page[-1]
                position = cursors.DlqPosition(micros_from_utc(rows.utc(last[-1])), last[0])
                next_cursor = cursors.encode(queue, position)
            return DlqPage(tuple(rows.with_history(r) for r in page), next_cursor)

        return self._run("dlq_list", run)

    def _redrive(self, queue: str, selector: Selector) -> int:
        selected, params = _selection(selector)
        statement = self._q.redrive(selected)
        return self._run(
            "redrive",
            lambda conn: cursor_of(conn).execute(statement, {**params, "queue": queue}).rowcount,
        )

    def _purge(self, queue: str, selector: Selector) -> int:
        selected, params = _selection(selector)
        statement = self._q.purge(selected)
        return self._run(
            "purge",
            lambda conn: cursor_of(conn).execute(statement, {**params, "queue": queue}).rowcount,
        )

    def _purge_succeeded(self, queue: str, older_than: timedelta) -> int:
        params = {"queue": queue, "older_than": older_than}
        return self._run(
            "purge_succeeded",
            lambda conn: cursor_of(conn).execute(self._sql(conn).purge_succeeded, params).rowcount,
        )

    # ---- lifecycle ----

    def capabilities(self) -> Capabilities:
        """What this storage supports; ``durable`` from the server's settings (read once,
        see the module docstring; while they cannot be read — the server does not answer,
        the namespace does not exist — not durable, and asked again next time). Never
        raises."""
        durable = self._durability
        if durable is None:
            try:
                durable = self._run("capabilities", _read_durability)
            except RdqError as exc:  # down, or the namespace is not there (yet)
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
        max_payload_bytes=None,
        notify=False,
        durable=durable,
        durability=durability,
        clock=CLOCK_DESCRIPTION,
    )


_DURABILITY_SETTINGS = (
    "SELECT current_setting('synchronous_commit'), current_setting('full_page_writes'), "
    "current_setting('fsync')"
)


def _read_durability(conn: psycopg.Connection) -> tuple[bool, str]:
    row = cursor_of(conn).execute(_DURABILITY_SETTINGS).fetchone()
    assert row is not None
    return durability_of(str(row[0]), str(row[1]), str(row[2]))


def durability_of(synchronous_commit: str, full_page_writes: str, fsync: str) -> tuple[bool, str]:
    """Whether commits survive a SIGKILL of the server with these settings, and why
    (see the module docstring)."""
    shown = (
        f"synchronous_commit={synchronous_commit}, full_page_writes={full_page_writes}, "
        f"fsync={fsync}"
    )
    if synchronous_commit == "off":
        return False, f"{shown}: a commit returns before its WAL is written"
    if full_page_writes == "off":
        return False, f"{shown}: a page torn by a kill cannot be repaired from the WAL"
    disk = "" if fsync == "on" else " (not flushed to the disk: an OS crash is not covered)"
    return True, f"{shown}: a commit returns after its WAL is written{disk}"


def _claim_order(row: rows.Row) -> tuple[Any, Any]:
    """Claims in due order: the due time before the claim, then insertion order."""
    return row[-2], row[-1]


def _claim(row: rows.Row, history: Sequence[Attempt]) -> Claim:
    """A Claim from a row of ``Queries.claim`` / ``claim_fresh`` and the task's history."""
    task = rows.task(row, history)
    return trusted_claim(task, row[11], rows.utc(row[12]), task.lease_expires_at, bool(row[13]))


def _selection(selector: Selector) -> tuple[sql.Composable, dict[str, Any]]:
    """A WHERE fragment (to AND with queue and status) selecting what ``selector`` names;
    an empty selector selects nothing, never everything."""
    if isinstance(selector, ByIds):
        if not selector.ids:
            return sql.SQL("FALSE"), {}
        return sql.SQL("id = ANY(%(ids)s)"), {"ids": list(selector.ids)}
    if selector.is_empty:
        return sql.SQL("FALSE"), {}
    conditions: list[sql.Composable] = [sql.SQL("TRUE")]
    params: dict[str, Any] = {}
    if selector.handler is not None:
        conditions.append(sql.SQL("handler = %(handler)s"))
        params["handler"] = selector.handler
    if selector.error_type is not None:
        conditions.append(sql.SQL("last_error_type = %(error_type)s"))
        params["error_type"] = selector.error_type
    return sql.SQL(" AND ").join(conditions), params
