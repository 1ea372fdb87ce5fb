"""Durable runs on DBOS: `DurableSwarm`, run handles and run records; workers and thin clients.

The names below are imported when first used (PEP 562): a thin client (`DurableClient`) does
not load the worker or what runs a run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attribute_loader

if TYPE_CHECKING:
    from ._client import DEFAULT_CONCURRENCY, DEFAULT_QUEUE, ClientRunHandle, DurableClient
    from ._database import resolve_database_url
    from ._dbos import shutdown
    from ._listing import PendingApproval
    from ._log import SCHEMA_VERSION, JsonSerializer, RunError
    from ._ownership import PROCESSES_TABLE
    from ._retention import ExpiredRun, Retention, RetentionReport
    from ._runs import RunInfo, StepRecord
    from ._swarm import DurableSwarm, RunHandle
    from ._sweeper import RetentionStatus, SweeperRecord
    from ._worker import Worker, run_worker

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_QUEUE",
    "PROCESSES_TABLE",
    "SCHEMA_VERSION",
    "ClientRunHandle",
    "DurableClient",
    "DurableSwarm",
    "ExpiredRun",
    "JsonSerializer",
    "PendingApproval",
    "Retention",
    "RetentionReport",
    "RetentionStatus",
    "RunError",
    "RunHandle",
    "RunInfo",
    "StepRecord",
    "SweeperRecord",
    "Worker",
    "resolve_database_url",
    "run_worker",
    "shutdown",
]

__getattr__ = attribute_loader(
    __name__,
    {
        "._client": ("DEFAULT_CONCURRENCY", "DEFAULT_QUEUE", "ClientRunHandle", "DurableClient"),
        "._database": ("resolve_database_url",),
        "._dbos": ("shutdown",),
        "._listing": ("PendingApproval",),
        "._log": ("SCHEMA_VERSION", "JsonSerializer", "RunError"),
        "._ownership": ("PROCESSES_TABLE",),
        "._retention": ("ExpiredRun", "Retention", "RetentionReport"),
        "._runs": ("RunInfo", "StepRecord"),
        "._swarm": ("DurableSwarm", "RunHandle"),
        "._sweeper": ("RetentionStatus", "SweeperRecord"),
        "._worker": ("Worker", "run_worker"),
    },
)
