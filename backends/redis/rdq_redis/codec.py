"""Encoding and decoding what the scripts store (storage half; see
:mod:`rdq_redis.scripts` for the formats).

Headers are encoded here and stored opaque by the scripts: ``k NUL v NUL k NUL v …``
(header names and values never contain NUL: validation refuses it). Payloads are stored
as they are: a Redis string holds any bytes.

Decoding builds the model's values with its trusted constructors
(:func:`rdq_core.model.trusted_task` and the others): what is decoded here was written by
rdq_redis's own scripts from validated input, and each field is decoded to its exact type
(a record that does not decode is :class:`CorruptRecord`, never a half-built value).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone

from rdq_core.model import (
    Attempt,
    Claim,
    ErrorInfo,
    Outcome,
    Status,
    Task,
    trusted_attempt,
    trusted_claim,
    trusted_error,
    trusted_task,
)

SEP = b"\0"
STATUS = {b"P": Status.PENDING, b"I": Status.IN_FLIGHT, b"S": Status.SUCCEEDED, b"D": Status.DEAD}
OUTCOME = {
    b"S": Outcome.SUCCESS,
    b"R": Outcome.RETRYABLE_FAILURE,
    b"P": Outcome.PERMANENT_FAILURE,
    b"L": Outcome.LEASE_EXPIRED,
}
OUTCOME_CODE = {v: k.decode() for k, v in OUTCOME.items()}

# Positions of the task meta fields (0-based).
QUEUE, HANDLER, STATE, COUNT, REDRIVES, NEXT, LEASE, CREATED = range(8)
TOKEN, CLAIMED, SEQ, NONCE, DEAD, FINISHED, LAST_ERROR = range(8, 15)
META_FIELDS = 15


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def utc_from_micros(us: int) -> datetime:
    """``rdq_core.model.utc_from_micros`` (the same exact value), without building the
    epoch on every call: a claim decodes at least three times."""
    return _EPOCH + timedelta(0, 0, us)


def _at(raw: bytes) -> datetime:
    return _EPOCH + timedelta(0, 0, int(raw))  # positional: faster than microseconds=


class CorruptRecord(ValueError):
    """Stored data that does not decode (written by something other than rdq_redis)."""


def encode_headers(headers: Mapping[str, str]) -> bytes:
    if not headers:
        return b""
    return SEP.join(part.encode() for kv in headers.items() for part in kv)


def decode_headers(raw: bytes) -> dict[str, str]:
    if not raw:
        return {}
    parts = raw.split(SEP)
    if len(parts) % 2:
        raise CorruptRecord(f"headers record has an odd number of parts: {raw[:80]!r}")
    return {parts[i].decode(): parts[i + 1].decode() for i in range(0, len(parts), 2)}


def error_args(error: ErrorInfo | None) -> list[str]:
    """The four script arguments of an attempt's error: flag, type, message, detail."""
    if error is None:
        return ["0", "", "", ""]
    if error.detail is None:
        return ["1", error.type, error.message, ""]
    return ["2", error.type, error.message, error.detail]


def decode_history(raw: bytes) -> tuple[Attempt, ...]:
    attempts = []
    i, n = 0, len(raw)
    while i < n:
        try:
            size = int(raw[i : i + 8], 16)
        except ValueError:
            head = raw[i : i + 40]
            raise CorruptRecord(f"history record at {i} has no length: {head!r}") from None
        fields = raw[i + 8 : i + 8 + size].split(SEP)
        i += 8 + size
        if len(fields) != 8:
            raise CorruptRecord(f"history record has {len(fields)} fields, not 8")
        no, started, finished, outcome, flag, etype, emsg, detail = fields
        error = None
        if flag != b"0":
            text = detail.decode() if flag == b"2" else None
            error = trusted_error(etype.decode(), emsg.decode(), text)
        attempts.append(
            trusted_attempt(
                int(no),
                utc_from_micros(int(started)),
                utc_from_micros(int(finished)),
                OUTCOME[outcome],
                error,
            )
        )
    return tuple(attempts)


def split_meta(raw: bytes) -> list[bytes]:
    fields = raw.split(SEP)
    if len(fields) != META_FIELDS:
        raise CorruptRecord(f"task record has {len(fields)} fields, not {META_FIELDS}")
    return fields


def _time(raw: bytes) -> object:
    return utc_from_micros(int(raw)) if raw else None


def decode_task(
    task_id: str, meta: bytes | list[bytes], payload: bytes, headers: bytes, history: bytes
) -> Task:
    f = split_meta(meta) if isinstance(meta, bytes) else meta
    return trusted_task(
        task_id,
        f[QUEUE].decode(),
        f[HANDLER].decode(),
        bytes(payload),
        decode_headers(headers),
        STATUS[f[STATE]],
        int(f[COUNT]),
        int(f[REDRIVES]),
        _time(f[NEXT]),  # type: ignore[arg-type]
        _time(f[LEASE]),  # type: ignore[arg-type]
        utc_from_micros(int(f[CREATED])),
        decode_history(history),
    )


def decode_row(row: Sequence[bytes]) -> Task:
    """A task from ``{id, meta, payload, headers, history, ...}`` (claim, DLQ listing)."""
    return decode_task(row[0].decode(), row[1], row[2], row[3], row[4])


def decode_claim(row: Sequence[bytes | int]) -> Claim:
    """A claim from one entry of the claim script's reply."""
    return decode_claims([row])[0]


def decode_claims(rows: Sequence[Sequence[bytes | int]]) -> list[Claim]:
    """The claims of one claim script's reply. Its tasks share one claim time and one
    lease expiry: each distinct time is converted once."""
    if len(rows) == 1:
        return [_claim(rows[0], _at)]
    times: dict[bytes, datetime] = {}

    def at(raw: bytes) -> datetime:
        got = times.get(raw)
        if got is None:
            got = times[raw] = utc_from_micros(int(raw))
        return got

    return [_claim(row, at) for row in rows]


def _claim(row: Sequence[bytes | int], at: Callable[[bytes], datetime]) -> Claim:
    task_id, meta, payload, headers, history, reclaimed = row
    f = meta.split(SEP)  # type: ignore[union-attr]
    if len(f) != META_FIELDS:
        raise CorruptRecord(f"task record has {len(f)} fields, not {META_FIELDS}")
    lease = at(f[LEASE])
    due = f[NEXT]
    task = trusted_task(
        task_id.decode(),  # type: ignore[union-attr]
        f[QUEUE].decode(),
        f[HANDLER].decode(),
        bytes(payload),  # type: ignore[arg-type]
        decode_headers(headers) if headers else {},  # type: ignore[arg-type]
        STATUS[f[STATE]],
        int(f[COUNT]),
        int(f[REDRIVES]),
        at(due) if due else None,
        lease,
        at(f[CREATED]),
        decode_history(history) if history else (),  # type: ignore[arg-type]
    )
    return trusted_claim(task, f[TOKEN].decode(), at(f[CLAIMED]), lease, bool(reclaimed))
