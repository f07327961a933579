"""The errors of the storage SPI (SPEC §4).

Every backend raises exactly these; a driver's own exception never escapes a
backend call. Each message says what was wrong and, where it helps, what to do.
"""

from __future__ import annotations


class RdqError(Exception):
    """Base of every error the SPI raises."""


class StaleClaim(RdqError):
    """The claim token is not the task's current one, or the task is not IN_FLIGHT.

    Raised by complete / reschedule / dead_letter / extend_lease; nothing was changed.
    """


class NotFound(RdqError, LookupError):
    """No task with that id exists (in that queue)."""


class IdConflict(RdqError):
    """The task id is already used by a task in another queue."""


class StaleCursor(RdqError):
    """A DLQ page cursor that is malformed or belongs to another queue."""


class InvalidArgument(RdqError, ValueError):
    """Bad input, rejected before storage is touched."""


class BackendUnavailable(RdqError):
    """The storage could not be reached (connection lost, server down).

    The operation may or may not have taken effect; callers retry with the same token.
    """
