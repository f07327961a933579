"""The errors of the storage SPI (``contract.md#errors``).

Every backend raises exactly these; a driver's own exception never escapes a
backend call. Each message says what was wrong and, where it helps, what to do.
"""

from __future__ import annotations


class RdqError(Exception):
    """Base of every error the SPI raises.

    ``rule`` optionally names the kit's rule (an id of ``rdq_compliance.rules``) that the
    error itself shows broken: a backend that can tell the failure is a contract bug, not
    bad luck (say a Redis script refused for touching a key it did not declare: rule
    ``cluster-keys``), says so, and the kit reports the failure under that rule. ``None``
    (the default) for every ordinary error.
    """

    rule: str | None = None

    def __init__(self, *args: object, rule: str | None = None) -> None:
        super().__init__(*args)
        if rule is not None:
            self.rule = rule

    def __reduce__(self) -> tuple[object, ...]:
        # Keeps ``rule`` across pickling (worker processes report errors to the kit).
        return (_rebuild, (type(self), self.args, self.rule))


def _rebuild(cls: type[RdqError], args: tuple[object, ...], rule: str | None) -> RdqError:
    return cls(*args, rule=rule)


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
