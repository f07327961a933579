"""Turning psycopg errors into SPI errors, and masking passwords in DSNs.

No psycopg (or psycopg_pool) exception leaves rdq_postgres: :func:`map_error` turns each
into ``InvalidArgument`` (a value PostgreSQL refuses: bad text, out of range, too large)
or ``BackendUnavailable`` (connection lost or refused, pool timeout, server shutting
down, anything unexpected), with a message that says what was being done, where, and —
for a lost connection — that the call may or may not have taken effect.
"""

from __future__ import annotations

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors

from rdq_core.errors import BackendUnavailable, InvalidArgument, RdqError
from rdq_core.masking import mask_dsn as _mask
from rdq_postgres.schema import ATTEMPT_NO_CONSTRAINT

_MAYBE = "the call may or may not have taken effect; retry it (a claim token stays valid)"


def mask_dsn(dsn: str) -> str:
    """``dsn`` with every secret in it replaced by ``***``: the kit's one masker,
    :func:`rdq_core.masking.mask_dsn`."""
    return _mask(dsn)


def is_retryable(exc: BaseException) -> bool:
    """Whether re-running the whole (atomic, rolled back) statement may succeed.

    Serialization failures and deadlocks, and a duplicate attempt number: a claim's
    statement snapshot may predate an attempt another transaction committed on a row the
    claim then locked (its newest version is what the claim sees); a fresh statement reads
    the new ``MAX(attempt_no)``.
    """
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)):
        return True
    if isinstance(exc, pg_errors.UniqueViolation):
        return exc.diag.constraint_name == ATTEMPT_NO_CONSTRAINT
    return False


def _detail(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ") or type(exc).__name__
    sqlstate = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__}{f' [{sqlstate}]' if sqlstate else ''}: {text}"


def map_error(exc: BaseException, action: str, where: str) -> RdqError:
    """The SPI error for ``exc``, raised while doing ``action`` on ``where``."""
    detail = _detail(exc)
    if isinstance(exc, RdqError):
        return exc
    if isinstance(exc, psycopg_pool.PoolClosed):
        return BackendUnavailable(f"{action}: the connection pool of {where} is closed ({detail})")
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return BackendUnavailable(
            f"{action}: no connection to {where} became available in time ({detail}): the "
            f"server is down or unreachable, or every pooled connection is busy; {_MAYBE}"
        )
    if is_retryable(exc):
        return BackendUnavailable(
            f"{action}: {where} kept conflicting with concurrent transactions ({detail}); "
            "nothing was written; retry"
        )
    if isinstance(exc, pg_errors.ProgramLimitExceeded):
        return InvalidArgument(f"{action}: {where} refused a value as too large ({detail})")
    if isinstance(exc, psycopg.DataError):
        return InvalidArgument(f"{action}: {where} refused a value ({detail}); nothing was written")
    if isinstance(exc, (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName)):
        return BackendUnavailable(
            f"{action}: the namespace's tables are missing on {where} ({detail}); was the "
            "namespace dropped?"
        )
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return BackendUnavailable(
            f"{action}: lost or could not use the connection to {where} ({detail}); {_MAYBE}"
        )
    if isinstance(exc, psycopg.IntegrityError):
        return BackendUnavailable(
            f"{action}: {where} violated a schema constraint ({detail}); this is a bug in "
            "rdq_postgres or the tables were modified by something else; nothing was written"
        )
    return BackendUnavailable(f"{action}: {where} failed ({detail}); {_MAYBE}")
