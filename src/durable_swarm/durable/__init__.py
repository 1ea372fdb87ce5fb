"""Durable runs on DBOS: `DurableSwarm`, run handles and run records; workers and thin clients."""

from ._client import DEFAULT_QUEUE, ClientRunHandle, DurableClient
from ._database import resolve_database_url
from ._dbos import shutdown
from ._listing import PendingApproval
from ._ownership import PROCESSES_TABLE
from ._runs import RunInfo, StepRecord
from ._serializer import SCHEMA_VERSION, JsonSerializer, RunError
from ._swarm import DurableSwarm, RunHandle
from ._worker import DEFAULT_CONCURRENCY, Worker, run_worker

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_QUEUE",
    "PROCESSES_TABLE",
    "SCHEMA_VERSION",
    "ClientRunHandle",
    "DurableClient",
    "DurableSwarm",
    "JsonSerializer",
    "PendingApproval",
    "RunError",
    "RunHandle",
    "RunInfo",
    "StepRecord",
    "Worker",
    "resolve_database_url",
    "run_worker",
    "shutdown",
]
