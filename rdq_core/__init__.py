"""rdq's reference core: the model, the storage SPI and its errors, the retry policy,
the worker loop and the in-memory reference store (the executable spec)."""

from rdq_core.errors import (
    BackendUnavailable,
    IdConflict,
    InvalidArgument,
    NotFound,
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
from rdq_core.retry import PermanentError, RetryableError, RetryPolicy
from rdq_core.spi import Storage
from rdq_core.worker import LeaseLost, TaskContext, Worker, WorkerObserver

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
    "LeaseLost",
    "NewTask",
    "NotFound",
    "Outcome",
    "PermanentError",
    "QueueStats",
    "RdqError",
    "RetryPolicy",
    "RetryableError",
    "Selector",
    "StaleClaim",
    "StaleCursor",
    "Status",
    "Storage",
    "Task",
    "TaskContext",
    "Worker",
    "WorkerObserver",
]
