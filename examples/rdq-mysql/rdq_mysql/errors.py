"""Turning PyMySQL errors into SPI errors (storage half).

No PyMySQL exception leaves rdq_mysql: :func:`map_error` turns each into
``InvalidArgument`` (a value the server refuses) or ``BackendUnavailable`` (refused or
lost connection, wrong credentials, a missing namespace, anything unexpected), with a
message that says what was being done, where, and what to do.
"""

from __future__ import annotations

import pymysql

from rdq_core.errors import BackendUnavailable, InvalidArgument, RdqError

#: Server error codes worth re-running a whole (rolled back) transaction for.
DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
RETRYABLE = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})
DUPLICATE_KEY = 1062
#: Access denied: wrong password (1045), no password given (MariaDB: 1698), no right to
#: the database (1044).
ACCESS_DENIED = frozenset({1044, 1045, 1698})
UNKNOWN_DATABASE = 1049
NO_SUCH_TABLE = 1146
CANNOT_CONNECT = 2003
UNKNOWN_HOST = 2005
#: The connection is gone: server gone away, lost during a query, killed (MariaDB 1927),
#: shut down (1053), disconnected for inactivity (MySQL 8: 4031), or PyMySQL's own "(0, '')".
LOST = frozenset({0, 2006, 2013, 1927, 1053, 4031})

_MAYBE = "the call may or may not have taken effect; retry it (a claim token stays valid)"


def code_of(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, if it carries one."""
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def is_retryable(exc: BaseException) -> bool:
    """A deadlock or lock wait timeout: the server rolled back; the transaction may run again."""
    return isinstance(exc, pymysql.err.MySQLError) and code_of(exc) in RETRYABLE


def is_lost_connection(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and code_of(exc) in LOST


def _detail(exc: BaseException) -> str:
    code = code_of(exc)
    args = getattr(exc, "args", ())
    text = str(args[1]) if len(args) > 1 else str(exc)
    text = text.strip().replace("\n", " ") or type(exc).__name__
    return f"{type(exc).__name__}{f' [{code}]' if code is not None else ''}: {text}"


def connect_error(exc: BaseException, where: str, database: str | None) -> RdqError:
    """A clear error for a connection that could not be opened."""
    code = code_of(exc)
    detail = _detail(exc)
    if code in ACCESS_DENIED:
        return BackendUnavailable(
            f"{where} refused the credentials ({detail}); check the user and password in "
            "the DSN (mysql://USER:PASSWORD@HOST:PORT/DATABASE)"
        )
    if code == UNKNOWN_DATABASE:
        return BackendUnavailable(
            f"{where}: database {database!r} does not exist ({detail}); for a namespace, "
            "create it with Server.create_namespace() or rdq_mysql.schema.create_namespace(); "
            "for the DSN's database, create it or name an existing one"
        )
    if code in (CANNOT_CONNECT, UNKNOWN_HOST) or isinstance(exc, OSError):
        return BackendUnavailable(
            f"no MySQL/MariaDB server answers at {where} ({detail}); start one, or fix the "
            "host and port in the DSN"
        )
    return BackendUnavailable(f"could not connect to {where} ({detail})")


def map_error(exc: BaseException, action: str, where: str) -> RdqError:
    """The SPI error for a PyMySQL error raised while doing ``action`` on ``where``."""
    if isinstance(exc, RdqError):
        return exc
    detail = _detail(exc)
    code = code_of(exc)
    if is_retryable(exc):
        return BackendUnavailable(
            f"{action}: {where} kept conflicting with concurrent transactions ({detail}); "
            "nothing was written; retry"
        )
    if code == NO_SUCH_TABLE or code == UNKNOWN_DATABASE:
        return BackendUnavailable(
            f"{action}: the namespace's tables are missing on {where} ({detail}); was the "
            "namespace dropped? create it with Server.create_namespace()"
        )
    if is_lost_connection(exc) or isinstance(exc, OSError):
        return BackendUnavailable(
            f"{action}: lost or could not use the connection to {where} ({detail}); {_MAYBE}"
        )
    if isinstance(exc, pymysql.err.DataError):
        return InvalidArgument(f"{action}: {where} refused a value ({detail}); nothing was written")
    if isinstance(exc, pymysql.err.IntegrityError):
        return BackendUnavailable(
            f"{action}: {where} violated a schema constraint ({detail}); this is a bug in "
            "rdq_mysql or the tables were modified by something else; nothing was written"
        )
    if isinstance(exc, pymysql.err.OperationalError) and (
        code == CANNOT_CONNECT or code in ACCESS_DENIED
    ):
        return connect_error(exc, where, None)
    return BackendUnavailable(f"{action}: {where} failed ({detail}); {_MAYBE}")
