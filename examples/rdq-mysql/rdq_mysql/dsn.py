"""``mysql://`` addresses: parsing, checking and masking (storage half).

A DSN is ``mysql://USER[:PASSWORD]@HOST[:PORT][/DATABASE][?connect_timeout=S]``
(``mariadb://`` is accepted as a synonym). Anything else is refused with an
``InvalidArgument`` that says what was wrong and shows the expected form, before any
connection is tried. The password is never shown: :func:`mask_dsn` replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, unquote, urlsplit

from rdq_core.errors import InvalidArgument
from rdq_core.masking import mask_dsn as _mask

SCHEMES = ("mysql", "mariadb")
DEFAULT_PORT = 3306
#: Seconds to wait for a TCP connection, unless the DSN says ``?connect_timeout=``.
CONNECT_TIMEOUT_S = 5.0
FORM = "mysql://USER[:PASSWORD]@HOST[:PORT][/DATABASE]"
_KNOWN_PARAMS = ("connect_timeout",)


@dataclass(frozen=True)
class Address:
    """Where a server is and who we are on it (from a DSN)."""

    host: str
    port: int
    user: str
    password: str
    database: str | None
    connect_timeout: float = CONNECT_TIMEOUT_S

    def with_database(self, database: str | None) -> Address:
        return replace(self, database=database)

    @property
    def where(self) -> str:
        """``mysql://user@host:port`` (never the password)."""
        return f"mysql://{self.user}@{self.host}:{self.port}"


def mask_dsn(dsn: str) -> str:
    """``dsn`` with every secret in it replaced by ``***``: the kit's one masker,
    :func:`rdq_core.masking.mask_dsn`."""
    return _mask(dsn)


def parse_dsn(dsn: object) -> Address:
    """The :class:`Address` of a ``mysql://`` DSN; ``InvalidArgument`` naming the problem."""
    if not isinstance(dsn, str) or not dsn:
        raise InvalidArgument(f"a mysql DSN must be a non-empty str like {FORM}, got {dsn!r}")
    shown = mask_dsn(dsn)
    try:
        parts = urlsplit(dsn)
        port = parts.port
    except ValueError as exc:
        raise InvalidArgument(f"mysql DSN {shown!r} does not parse ({exc}); use {FORM}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidArgument(
            f"mysql DSN {shown!r} has scheme {parts.scheme or '(none)'!r}; the mysql backend "
            f"takes {FORM} (e.g. mysql://root@127.0.0.1:3306/test)"
        )
    if not parts.hostname:
        raise InvalidArgument(f"mysql DSN {shown!r} names no host; use {FORM}")
    if not parts.username:
        raise InvalidArgument(f"mysql DSN {shown!r} names no user; use {FORM}")
    database = unquote(parts.path.lstrip("/")) or None
    if database is not None and "/" in database:
        raise InvalidArgument(f"mysql DSN {shown!r}: the database name {database!r} has a '/'")
    timeout = CONNECT_TIMEOUT_S
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _KNOWN_PARAMS:
            raise InvalidArgument(
                f"mysql DSN {shown!r}: unknown parameter {key!r}; known: "
                + ", ".join(_KNOWN_PARAMS)
            )
        try:
            timeout = float(value)
        except ValueError:
            timeout = -1.0
        if timeout <= 0:
            raise InvalidArgument(
                f"mysql DSN {shown!r}: connect_timeout={value!r} is not a positive number"
            )
    return Address(
        host=parts.hostname,
        port=port or DEFAULT_PORT,
        user=unquote(parts.username),
        password=unquote(parts.password or ""),
        database=database,
        connect_timeout=timeout,
    )


def make_dsn(host: str, port: int, user: str, database: str, password: str = "") -> str:
    """A DSN for these parts (what the local and container rungs hand out)."""
    from urllib.parse import quote

    auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    return f"mysql://{auth}@{host}:{port}/{quote(database, safe='')}"
