"""The one seam to DBOS: the only module of durable-swarm that imports `dbos` or touches it.

Everything else in the package goes through the names here: DBOS's public API, re-exported
(`DBOS`, `DBOSClient`, `Queue`, `SetWorkflowID`, `StepOptions`, `EnqueueOptions`,
`Serializer`, the errors of the public `dbos.error` module), a few helpers over it
(`outside_run`: a DBOS call that is no step of the calling run), and one function for each
thing DBOS (3.4) has no public call for. `tests/test_engine_seam.py` holds every other
module to it; `scripts/dbos_touches.py` counts the private reaches left here, and the test
holds that count down.

The private reaches, what each is for, and what happens on a DBOS release whose internals
differ (`tests/durable/test_engine_contract.py` fails first, naming the change):

* the DBOS instance of this process and whether it is launched (`instance`, `is_launched`):
  DBOS has no public accessor, and an app that launched DBOS itself must be found, not
  replaced. Fallback: a DBOS without the module-level instance reads as "no DBOS here", so the
  library launches its own (an app's DBOS then clashes at launch with DBOS's own error).
* the system database behind the instance, or behind a `DBOSClient` (`system_tables`,
  `system_database_url`): its URL (where an app's DBOS keeps runs, so this library's tables
  go beside them) and its engine and tables, for the listing and metrics of `_listing` and the
  payload rewrite of `_rotation`, which DBOS has no queries for. Fallback: none (the contract
  test names the attribute).
* the name of DBOS's table of runs (`RUNS_TABLE`): the operator command asks whether a
  database is a run database without opening DBOS on it. Fallback: none needed for
  correctness (a renamed table makes the command refuse a real run database, saying so).
* the instance's serializer (`instance_serializer`): to refuse storing runs unencrypted in an
  app's own DBOS when a key is set. Fallback: None, which refuses (the safe side).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib.metadata
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import dbos
import dbos._dbos as dbos_internals
from dbos import (
    DBOS,
    DBOSClient,
    EnqueueOptions,
    Queue,
    Serializer,
    SetWorkflowID,
    StepOptions,
)
from dbos import error as dbos_error

__all__ = [
    "DBOS",
    "DBOS_DIR",
    "RUNS_TABLE",
    "RUNS_TABLE_POSTGRES",
    "DBOSAwaitedWorkflowCancelledError",
    "DBOSBaseException",
    "DBOSClient",
    "DBOSMaxStepRetriesExceeded",
    "DBOSNonExistentWorkflowError",
    "DBOSWorkflowCancelledError",
    "DBOSWorkflowConflictIDError",
    "EnqueueOptions",
    "Queue",
    "Serializer",
    "SetWorkflowID",
    "StepOptions",
    "SystemTables",
    "dbos_version",
    "executor_id",
    "instance",
    "instance_serializer",
    "is_launched",
    "outside_run",
    "outside_run_async",
    "own_queue",
    "run_status",
    "system_database_url",
    "system_tables",
]

# DBOS's public errors (`dbos.error`, the module DBOS exports for them).
DBOSBaseException = dbos_error.DBOSBaseException
DBOSWorkflowCancelledError = dbos_error.DBOSWorkflowCancelledError
DBOSWorkflowConflictIDError = dbos_error.DBOSWorkflowConflictIDError
DBOSAwaitedWorkflowCancelledError = dbos_error.DBOSAwaitedWorkflowCancelledError
DBOSMaxStepRetriesExceeded = dbos_error.DBOSMaxStepRetriesExceeded
DBOSNonExistentWorkflowError = dbos_error.DBOSNonExistentWorkflowError

# Where DBOS's code lives (the installed package's own location): a database error raised in a
# frame under it is DBOS's own call (see `_workflow._from_dbos`).
DBOS_DIR = os.path.dirname(os.path.abspath(dbos.__file__))

# DBOS's table of runs, by name, for a probe that must not open DBOS (DBOSClient would create
# its tables): the operator command's check that a database is a run database. On PostgreSQL
# it is in DBOS's default schema `dbos`.
RUNS_TABLE = "workflow_status"
RUNS_TABLE_POSTGRES = f"dbos.{RUNS_TABLE}"

T = TypeVar("T")


def instance() -> Any:
    """The DBOS instance of this process (configured, launched or not), or None."""
    return getattr(dbos_internals, "_dbos_global_instance", None)


def is_launched() -> bool:
    """Whether DBOS (ours or the app's) is launched in this process."""
    inst = instance()
    return bool(inst is not None and getattr(inst, "_launched", False))


@dataclass(frozen=True)
class SystemTables:
    """DBOS's system tables of one run database, for the SQL DBOS has no public query for (the
    listing of `_listing`, the payload rewrite of `_rotation`): DBOS's own SQLAlchemy engine on
    the database and DBOS's own table definitions (so the PostgreSQL schema a DBOS config chose
    applies). Read through `system_tables`."""

    engine: Any  # sqlalchemy.Engine
    tables: Any  # DBOS's table definitions: `.workflow_status`, `.operation_outputs`, ...

    @property
    def postgres(self) -> bool:
        """Whether the database is PostgreSQL (else SQLite)."""
        return bool(self.engine.dialect.name == "postgresql")


def system_tables(client: DBOSClient | None = None) -> SystemTables:
    """DBOS's system tables behind `client` (default: behind the DBOS instance of this
    process). The private reach: DBOS keeps its system database object as `_sys_db` on both."""
    sys_db = (instance() if client is None else client)._sys_db
    return SystemTables(sys_db.engine, sys_db.tables)


def system_database_url() -> str:
    """The URL (password included) of the system database of the DBOS instance of this
    process: where an app's own DBOS keeps its runs."""
    return str(system_tables().engine.url.render_as_string(hide_password=False))


def instance_serializer() -> Any:
    """The serializer the DBOS of this process stores through (None: none configured)."""
    return getattr(instance(), "_serializer", None)


def executor_id() -> str:
    """This process's DBOS executor id (DBOS's public `DBOS.executor_id`)."""
    return str(DBOS.executor_id)


def outside_run(call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`call(*args, **kwargs)` in an empty context: a DBOS call made from inside a workflow is
    one of its recorded steps (DBOS's documented behaviour for `get_workflow_status`,
    `cancel_workflow`, `resume_workflow`...), the same call made outside any workflow is not.
    A run reads its own status, parks and resumes others this way without changing its log
    (a replay would otherwise meet steps its first execution did not record)."""
    return contextvars.Context().run(call, *args, **kwargs)


async def outside_run_async(call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`outside_run` from async code: in a thread of the event loop's executor."""
    bound = functools.partial(contextvars.Context().run, call, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(None, bound)


def run_status(run_id: str) -> str | None:
    """The DBOS status of `run_id` read now, recorded as no step of any run (see `outside_run`);
    None if there is no such run."""
    status = outside_run(DBOS.get_workflow_status, run_id)
    return None if status is None else str(status.status)


def own_queue(queue_name: str | None) -> bool:
    """Whether `queue_name` is one of DBOS's own queues (DBOS reserves the prefix `_dbos_`;
    None: a run started without a queue)."""
    return queue_name is None or queue_name.startswith("_dbos_")


def dbos_version() -> str:
    """The installed DBOS release ("" if unknown)."""
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return ""
