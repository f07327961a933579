"""One secret-masking function for every output of the kit and of every backend.

:func:`mask_dsn` takes a server address as a user gives it and returns it as reports,
headers, logs and error messages may show it:

- a URL's user-info password (``scheme://user:password@host``) becomes ``***``;
- the values of query keys that carry secrets become ``***`` (the keys that libpq /
  psycopg, redis-py, pymongo and PyMySQL read a secret from: ``password``, ``passwd``,
  ``pwd``, ``sslpassword``, ``sslkey``, ``tlsCertificateKeyFilePassword``,
  ``authMechanismProperties`` -- which may hold an AWS session token -- and any key that
  ends in ``password``, ``secret`` or ``token``);
- a libpq keyword DSN (``host=h password=...``): the same keys' values;
- a DSN that cannot be parsed is masked whole (``<unparsable DSN, N characters>``);
- anything else (a file path, a bare ``host:port``) is shown as it is.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus, urlsplit, urlunsplit

__all__ = ["SECRET_KEYS", "is_secret_key", "mask_dsn"]

#: Query or keyword keys whose value is a secret (compared lower-case).
SECRET_KEYS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "pass",
        "sslpassword",
        "sslkey",
        "tlscertificatekeyfilepassword",
        "sslclientcertificatekeypassword",
        "authmechanismproperties",
        "secret",
        "token",
        "api_key",
        "apikey",
    }
)
_SECRET_SUFFIXES = ("password", "secret", "token")
MASK = "***"

#: One ``key=value`` of a libpq keyword DSN: a bare value or a single-quoted one.
_KEYWORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)\s*")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_secret_key(key: str) -> bool:
    """Whether a query or keyword key carries a secret."""
    k = unquote_plus(key).strip().lower()
    return k in SECRET_KEYS or k.endswith(_SECRET_SUFFIXES)


def _whole(dsn: str) -> str:
    return f"<unparsable DSN, {len(dsn)} characters>"


def _mask_query(query: str) -> str:
    out = []
    for pair in query.split("&"):
        key, eq, _value = pair.partition("=")
        out.append(f"{key}={MASK}" if eq and is_secret_key(key) else pair)
    return "&".join(out)


def _mask_url(dsn: str) -> str:
    try:
        parts = urlsplit(dsn)
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        return _whole(dsn)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostinfo = netloc.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + MASK
        netloc = f"{userinfo}@{hostinfo}"
    query = _mask_query(parts.query) if parts.query else parts.query
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _mask_keywords(dsn: str) -> str:
    out, pos = [], 0
    while pos < len(dsn):
        m = _KEYWORD.match(dsn, pos)
        if m is None or m.end() == pos:
            return _whole(dsn)
        key, value = m.group(1), m.group(2)
        out.append(f"{key}={MASK if is_secret_key(key) else value}")
        pos = m.end()
    return " ".join(out)


def mask_dsn(dsn: str) -> str:
    """``dsn`` as any output may show it: every secret in it replaced by ``***`` (see the
    module docstring); never raises."""
    if not isinstance(dsn, str):
        return _whole(str(dsn))
    text = dsn.strip()
    if _URL.match(text):
        return _mask_url(text)
    if "=" in text:
        return _mask_keywords(text)
    return dsn
