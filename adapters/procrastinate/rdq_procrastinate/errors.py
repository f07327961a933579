"""procrastinate's and psycopg's exceptions turned into SPI errors (storage half).

procrastinate wraps every psycopg error of a query in
``procrastinate.exceptions.ConnectorException`` (the psycopg error is its ``__cause__``),
a unique violation in ``exceptions.UniqueViolation`` (a ``ConnectorException`` too), and
turns a queueing-lock collision at defer time into ``exceptions.AlreadyEnqueued``.

- **The library's refusal** of an outcome: its SQL functions ``RAISE`` (SQLSTATE P0001,
  ``psycopg.errors.RaiseException``) when the job is not in a status they accept
  (``procrastinate_finish_job_v1``: "Job was not found or not in "doing" or "todo"
  status"; ``procrastinate_retry_job_v2``: "... has an invalid status to retry"): that is
  :class:`StaleClaim` (:func:`refused`), and nothing was changed;
- a lost or refused connection, a pool timeout, anything unexpected:
  :class:`BackendUnavailable` (the call may or may not have taken effect);
- a value PostgreSQL refuses (a name longer than procrastinate's ``varchar(128)``, text
  jsonb cannot hold): :class:`InvalidArgument`.
"""

from __future__ import annotations

import psycopg
from procrastinate import exceptions as pe
from psycopg import errors as pg_errors

from rdq_core.errors import BackendUnavailable, InvalidArgument, RdqError, StaleClaim

__all__ = ["is_refusal", "map_error", "refused"]

_MAYBE = "the call may or may not have taken effect; retry it with the same token"


def _cause(exc: BaseException) -> BaseException:
    """The psycopg error under a procrastinate ``ConnectorException`` (else ``exc``)."""
    cause = exc.__cause__
    return cause if isinstance(exc, pe.ConnectorException) and cause is not None else exc


def _detail(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    sqlstate = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__}{f' [{sqlstate}]' if sqlstate else ''}: {text}"


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is one of procrastinate's SQL functions refusing the job's status."""
    return isinstance(_cause(exc), pg_errors.RaiseException)


def refused(exc: BaseException, action: str) -> StaleClaim:
    """The :class:`StaleClaim` of a refusal by procrastinate (``exc``) of ``action``."""
    return StaleClaim(f"{action}: procrastinate refused it ({_detail(_cause(exc))})")


def map_error(exc: BaseException, action: str, where: str) -> RdqError:
    """The SPI error for ``exc``, raised while doing ``action`` on ``where``."""
    if isinstance(exc, RdqError):
        return exc
    cause = _cause(exc)
    detail = _detail(cause)
    if isinstance(cause, (pg_errors.ProgramLimitExceeded, psycopg.DataError)):
        return InvalidArgument(
            f"{action}: {where} refused a value ({detail}); procrastinate keeps queue and "
            "task names in varchar(128) and arguments in jsonb; nothing was written"
        )
    if isinstance(cause, (pg_errors.UndefinedTable, pg_errors.UndefinedFunction)):
        return BackendUnavailable(
            f"{action}: procrastinate's tables or functions are missing on {where} "
            f"({detail}); was the namespace dropped, or its schema never applied?"
        )
    if isinstance(exc, pe.ProcrastinateException) and cause is exc:
        return BackendUnavailable(f"{action}: procrastinate failed on {where} ({detail})")
    return BackendUnavailable(f"{action}: {where} failed ({detail}); {_MAYBE}")
