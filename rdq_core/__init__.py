"""rdq's reference core: the model, the storage SPI and its errors, the retry policy,
the worker loop and the in-memory reference store (the executable spec)."""

from rdq_core.errors import (
    BackendUnavailable,
    IdConflict,
    InvalidArgument,
    NotFound,
    ProvisionUnavailable,
    RdqError,
    StaleClaim,
    StaleCursor,
)
from rdq_core.model import (
    Attempt,
    ByIds,
    Capabilities,
    Claim,
    DlqFilter,
    DlqPage,
    ErrorInfo,
    NewTask,
    Outcome,
    QueueStats,
    Selector,
    Status,
    Task,
)
from rdq_core.spi import Storage

__all__ = [
    "Attempt",
    "BackendUnavailable",
    "ByIds",
    "Capabilities",
    "Claim",
    "DlqFilter",
    "DlqPage",
    "ErrorInfo",
    "IdConflict",
    "InvalidArgument",
    "NewTask",
    "NotFound",
    "Outcome",
    "ProvisionUnavailable",
    "QueueStats",
    "RdqError",
    "Selector",
    "StaleClaim",
    "StaleCursor",
    "Status",
    "Storage",
    "Task",
]
