"""Durable runs on DBOS: `DurableSwarm`, run handles and run records; workers and thin clients."""

from ._client import DEFAULT_QUEUE, ClientRunHandle, DurableClient
from ._database import resolve_database_url
from ._dbos import shutdown
from ._listing import PendingApproval
from ._runs import RunInfo, StepRecord
from ._serializer import SCHEMA_VERSION, JsonSerializer, RunError
from ._swarm import DurableSwarm, RunHandle
from ._worker import DEFAULT_CONCURRENCY, WORKERS_TABLE, Worker, run_worker

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_QUEUE",
    "SCHEMA_VERSION",
    "WORKERS_TABLE",
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
