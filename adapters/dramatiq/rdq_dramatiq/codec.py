"""rdq tasks as dramatiq messages and back (storage half: mapping only, no I/O).

- **ids.** rdq's task id is the message's ``message_id`` (producer-chosen: a plain field
  of ``dramatiq.Message``, kept by every copy dramatiq makes: retries, promotions). A
  delivery is identified in dramatiq by the worker that fetched it (its ``broker_id``,
  whose ack set holds it) and the ``redis_message_id`` dramatiq minted when it enqueued
  that copy (the member of the queue list, the hash and the ack sets). The claim token
  is those two, digested to rdq's 32 hex digits: the same worker fetching the same
  message id again holds the same token, as it holds the same ack-set member in
  dramatiq.
- **payload and headers.** Messages are JSON (``dramatiq/encoder.py``): the payload rides
  base64-encoded as the message's one positional argument, the headers as the message
  option ``rdq_headers`` (options are "arbitrary options passed to the broker and
  middleware", ``message.py``).
- **what dramatiq keeps of a task.** ``created_at`` is ``message_timestamp`` ("when the
  message was first enqueued", kept by every copy); ``attempt_count`` is the
  ``retries`` option the Retries middleware counts (failures retried); there is no
  attempt history (``attempts`` is empty: dramatiq keeps only the last ``traceback``),
  no redrive count, no SUCCEEDED record (an ack deletes the message).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from datetime import datetime, timedelta

from dramatiq import Message

from rdq_core.model import NewTask, Status, Task, trusted_task, utc_from_micros

__all__ = [
    "HEADERS_OPTION",
    "delay_ms",
    "message_of",
    "task_of",
    "token_of",
    "utc_ms",
]

HEADERS_OPTION = "rdq_headers"


def message_of(task: NewTask) -> Message:
    """The dramatiq message of a new task (``queue_name`` = rdq queue, ``actor_name`` =
    rdq handler, ``message_id`` = rdq task id)."""
    return Message(
        queue_name=task.queue,
        actor_name=task.handler,
        args=(base64.b64encode(bytes(task.payload)).decode("ascii"),),
        kwargs={},
        options={HEADERS_OPTION: dict(task.headers)},
        message_id=task.id,
    )


def delay_ms(delay: timedelta) -> int | None:
    """``RedisBroker.enqueue``'s ``delay`` (ms, rounded up so a task is never due before
    ``now + delay``) for an rdq delay; ``None`` (no delay: straight to the queue) for 0."""
    us = (delay.days * 86_400 + delay.seconds) * 1_000_000 + delay.microseconds
    if us == 0:
        return None
    return -((-us) // 1000)


def token_of(broker_id: str, redis_message_id: str) -> str:
    """The claim token of a delivery: (worker, redis message id) as 32 hex digits."""
    return hashlib.blake2b(f"{broker_id}:{redis_message_id}".encode(), digest_size=16).hexdigest()


def utc_ms(ms: int | float) -> datetime:
    """A UTC datetime from dramatiq's milliseconds since the epoch."""
    return utc_from_micros(int(ms) * 1000)


def payload_of(message: Message) -> bytes:
    if not message.args:
        return b""
    try:
        return base64.b64decode(message.args[0], validate=True)
    except (IndexError, TypeError, ValueError, binascii.Error):
        # A message some other producer wrote: its arguments as JSON.
        return json.dumps(list(message.args)).encode()


def task_of(
    message: Message,
    queue: str,
    status: Status,
    *,
    next_attempt_at: datetime | None = None,
    lease_expires_at: datetime | None = None,
) -> Task:
    """The rdq view of one stored message."""
    headers = message.options.get(HEADERS_OPTION) or {}
    if not isinstance(headers, dict):
        headers = {}
    retries = message.options.get("retries", 0)
    return trusted_task(
        id=message.message_id,
        queue=queue,
        handler=message.actor_name,
        payload=payload_of(message),
        headers={str(k): str(v) for k, v in headers.items()},
        status=status,
        attempt_count=retries if isinstance(retries, int) else 0,
        redrive_count=0,
        next_attempt_at=next_attempt_at,
        lease_expires_at=lease_expires_at,
        created_at=utc_ms(message.message_timestamp),
        attempts=(),
    )
