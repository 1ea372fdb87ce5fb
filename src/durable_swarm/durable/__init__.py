"""Durable runs on DBOS: `DurableSwarm`, run handles and run records."""

from ._dbos import resolve_database_url, shutdown
from ._runs import RunInfo, StepRecord
from ._serializer import SCHEMA_VERSION, JsonSerializer, RunError
from ._swarm import DurableSwarm, RunHandle

__all__ = [
    "SCHEMA_VERSION",
    "DurableSwarm",
    "JsonSerializer",
    "RunError",
    "RunHandle",
    "RunInfo",
    "StepRecord",
    "resolve_database_url",
    "shutdown",
]
