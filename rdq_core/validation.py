"""Input validation shared by every backend: bad input never reaches storage.

Each check raises :class:`~rdq_core.errors.InvalidArgument` with a message that
says what was wrong and what is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta

from rdq_core.errors import InvalidArgument
from rdq_core.model import ByIds, DlqFilter, ErrorInfo, NewTask, Outcome

NAME_RE = re.compile(r"[a-z0-9._-]{1,240}")
TOKEN_RE = re.compile(r"[0-9a-f]{32}")
MAX_ID_LENGTH = 255
MAX_CLAIM_LIMIT = 1000
#: The kit's own ceiling for one payload; a backend may declare a lower one.
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_PAGE_SIZE = 1000
MAX_LEASE = timedelta(days=1)
MAX_DELAY = timedelta(days=3650)
MAX_ERROR_TEXT = 64 * 1024
MAX_SELECTOR_IDS = 10_000
RESERVED_HEADER_PREFIX = "rdq."


def _name(kind: str, value: object) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise InvalidArgument(
            f"invalid {kind} name {value!r}: use 1 to 240 characters from [a-z0-9._-]"
        )
    return value


def queue_name(value: object) -> str:
    return _name("queue", value)


def handler_name(value: object) -> str:
    return _name("handler", value)


def task_id(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"task id must be a str, got {type(value).__name__}")
    if not value or len(value) > MAX_ID_LENGTH:
        raise InvalidArgument(
            f"task id must be 1 to {MAX_ID_LENGTH} characters, got {len(value)}"
        )
    if not value.isprintable():
        raise InvalidArgument(
            f"task id {value!r} contains control characters (NUL, newline, ...): "
            "use printable characters only"
        )
    return value


def token(value: object) -> str:
    if not isinstance(value, str) or not TOKEN_RE.fullmatch(value):
        raise InvalidArgument(
            f"malformed claim token {value!r}: pass the token of a Claim returned by claim_due"
        )
    return value


def _text(kind: str, value: object, *, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{kind} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidArgument(f"{kind} {value[:40]!r} contains a NUL character")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise InvalidArgument(f"{kind} is longer than {limit} bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{kind} is not encodable as UTF-8: {exc}") from None
    return value


def headers(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"headers must be a str->str mapping, got {type(value).__name__}")
    out: dict[str, str] = {}
    size = 0
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise InvalidArgument(
                f"headers must map str to str; {k!r}: {v!r} is {type(k).__name__}: "
                f"{type(v).__name__}"
            )
        if not k:
            raise InvalidArgument("header names must not be empty")
        if k.startswith(RESERVED_HEADER_PREFIX):
            raise InvalidArgument(
                f"header {k!r}: keys starting {RESERVED_HEADER_PREFIX!r} are reserved for rdq"
            )
        _text("header name", k, limit=MAX_HEADER_BYTES)
        _text(f"header {k!r}", v, limit=MAX_HEADER_BYTES)
        size += len(k.encode()) + len(v.encode())
        out[k] = v
    if size > MAX_HEADER_BYTES:
        raise InvalidArgument(f"headers total {size} bytes; at most {MAX_HEADER_BYTES} allowed")
    return out


def payload(value: object, *, limit: int | None) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgument(
            f"payload must be bytes, got {type(value).__name__}; encode text yourself"
        )
    data = bytes(value)
    ceiling = MAX_PAYLOAD_BYTES if limit is None else min(limit, MAX_PAYLOAD_BYTES)
    if len(data) > ceiling:
        raise InvalidArgument(
            f"payload is {len(data)} bytes; this backend accepts at most {ceiling} bytes"
        )
    return data


def new_task(value: object, *, payload_limit: int | None) -> NewTask:
    if not isinstance(value, NewTask):
        raise InvalidArgument(f"enqueue takes a NewTask, got {type(value).__name__}")
    task_id(value.id)
    queue_name(value.queue)
    handler_name(value.handler)
    data = payload(value.payload, limit=payload_limit)
    hdrs = headers(value.headers)
    delay("delay", value.delay, allow_negative=True)
    if data is not value.payload or hdrs != dict(value.headers):
        return NewTask(value.id, value.queue, value.handler, data, hdrs, value.delay)
    return value


def limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"limit must be an int, got {type(value).__name__}")
    if not 1 <= value <= MAX_CLAIM_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_CLAIM_LIMIT}, got {value}")
    return value


def page_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"page size must be an int, got {type(value).__name__}")
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise InvalidArgument(f"page size must be between 1 and {MAX_PAGE_SIZE}, got {value}")
    return value


def lease(value: object) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidArgument(f"lease must be a timedelta, got {type(value).__name__}")
    if value <= timedelta(0) or value > MAX_LEASE:
        raise InvalidArgument(f"lease must be positive and at most {MAX_LEASE}, got {value}")
    return value


def delay(kind: str, value: object, *, allow_negative: bool) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidArgument(f"{kind} must be a timedelta, got {type(value).__name__}")
    low = -MAX_DELAY if allow_negative else timedelta(0)
    if not low <= value <= MAX_DELAY:
        raise InvalidArgument(f"{kind} must be between {low} and {MAX_DELAY}, got {value}")
    return value


def older_than(value: object) -> timedelta:
    return delay("older_than", value, allow_negative=False)


def error_info(value: object) -> ErrorInfo | None:
    if value is None:
        return None
    if not isinstance(value, ErrorInfo):
        raise InvalidArgument(f"error must be an ErrorInfo or None, got {type(value).__name__}")
    _text("error type", value.type, limit=1024)
    _text("error message", value.message, limit=MAX_ERROR_TEXT)
    if value.detail is not None:
        _text("error detail", value.detail, limit=MAX_ERROR_TEXT)
    return value


def failure_outcome(value: object) -> Outcome:
    if value not in (Outcome.RETRYABLE_FAILURE, Outcome.PERMANENT_FAILURE):
        raise InvalidArgument(
            f"dead_letter outcome must be RETRYABLE_FAILURE or PERMANENT_FAILURE, got {value!r}"
        )
    return Outcome(value)


def selector(value: object) -> ByIds | DlqFilter:
    """A ``ByIds``, a ``DlqFilter``, or a plain list/tuple of ids (``contract.md#conventions``)."""
    if isinstance(value, (list, tuple)):
        value = ByIds(value)
    if isinstance(value, ByIds):
        if len(value.ids) > MAX_SELECTOR_IDS:
            raise InvalidArgument(f"at most {MAX_SELECTOR_IDS} ids per selector")
        for i in value.ids:
            task_id(i)
        return value
    if isinstance(value, DlqFilter):
        return dlq_filter(value)
    raise InvalidArgument(
        f"selector must be a list of ids, ByIds([...]) or DlqFilter(...), "
        f"got {type(value).__name__}"
    )


def dlq_filter(value: object) -> DlqFilter:
    if not isinstance(value, DlqFilter):
        raise InvalidArgument(f"filter must be a DlqFilter, got {type(value).__name__}")
    if value.handler is not None:
        handler_name(value.handler)
    if value.error_type is not None:
        _text("error type", value.error_type, limit=1024)
    return value
