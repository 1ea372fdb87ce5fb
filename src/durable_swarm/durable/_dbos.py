"""Setting up DBOS for durable runs: configuration and one lazy launch per process."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import dbos._dbos as dbos_internals
from dbos import DBOS

from ..errors import DatabaseUnavailableError, DurableSwarmError
from ._database import display_url
from ._serializer import SCHEMA_VERSION, JsonSerializer

__all__ = ["APPLICATION_VERSION", "ensure_launched", "shutdown"]

# Recovery only picks up runs of the same application version, so it follows the log format
# (not the library's or the app's code): upgrading either never orphans runs in flight.
APPLICATION_VERSION = f"durable-swarm-log-v{SCHEMA_VERSION}"
APP_NAME = "durable_swarm"

T = TypeVar("T")

_lock = threading.RLock()
_launched_url: str | None = None
_owned = False


def _instance() -> Any:
    return getattr(dbos_internals, "_dbos_global_instance", None)


def is_launched() -> bool:
    """Whether DBOS (ours or the app's) is launched in this process."""
    inst = _instance()
    return bool(inst is not None and getattr(inst, "_launched", False))


def executor_threads() -> int:
    """How many threads DBOS's executor gets: `DURABLE_SWARM_EXECUTOR_THREADS` if set, else 4 per
    CPU core, at least 4 and at most 20 (DBOS's connection pool size).

    Durable runs are async workflows: they are tasks on an event loop, and DBOS's executor only
    carries their short database calls (sync tools and sync model clients have their own pool,
    `_aio.blocking_executor()`). More threads than cores and connections can use only fight
    over the GIL and the pool: 64 threads cost ~18% more CPU per run than 8 with 50 runs at once.
    """
    configured = os.environ.get("DURABLE_SWARM_EXECUTOR_THREADS")
    if configured:
        try:
            threads = int(configured)
        except ValueError:
            threads = 0
        if threads < 1:
            raise DurableSwarmError(
                f"DURABLE_SWARM_EXECUTOR_THREADS={configured!r} is not a positive integer; "
                "set it to the number of DBOS executor threads (e.g. 8), or unset it."
            )
        return threads
    return max(4, min(20, 4 * (os.cpu_count() or 1)))


def _config(url: str, executor_id: str | None, poll_interval: float) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": APP_NAME,
        "system_database_url": url,
        "application_version": APPLICATION_VERSION,
        "serializer": JsonSerializer(),
        "log_level": os.environ.get("DURABLE_SWARM_LOG_LEVEL", "WARNING"),
        "max_executor_threads": executor_threads(),
        "notification_listener_polling_interval_sec": poll_interval,
    }
    if executor_id:
        config["executor_id"] = executor_id
    return config


def ensure_launched(
    database_url: str,
    *,
    executor_id: str | None = None,
    poll_interval: float = 0.1,
    queues: Sequence[str] | None = None,
) -> None:
    """Launch DBOS on `database_url` unless it already runs in this process.

    An app that configured and launched DBOS itself keeps its own DBOS (durable runs then live in
    the app's database). Launching twice on different databases is refused with a clear error.
    Pending runs of this database are recovered at launch (by DBOS).

    `queues` (a worker) makes this process take queued runs only from those queues (DBOS's
    internal queue, which carries recovered runs, always included); it needs a DBOS that is not
    launched yet.
    """
    global _launched_url, _owned
    with _lock:
        if is_launched():
            if queues is not None:
                raise DurableSwarmError(
                    f"DBOS is already launched in this process, so it cannot be limited to the "
                    f"queues {list(queues)!r}. Start the worker before anything launches DBOS "
                    "(no DurableSwarm.run/launch at import time of the worker's module)."
                )
            if _owned and _launched_url != database_url:
                running, wanted = display_url(_launched_url or ""), display_url(database_url)
                raise DurableSwarmError(
                    f"DBOS already runs on {running!r} in this process; a DurableSwarm on "
                    f"{wanted!r} cannot start beside it. Use one database per process, or "
                    "call durable_swarm.durable.shutdown() first."
                )
            return
        if _instance() is None:
            config = _config(database_url, executor_id, poll_interval)
            DBOS(config=config)  # type: ignore[arg-type]
            _owned = True
        if queues is not None:
            DBOS.listen_queues(list(queues))
        try:
            _launch_outside_event_loop()
        except Exception as e:
            if _owned:
                DBOS.destroy()
                _owned = False
            cause = f"{type(e).__name__}: {e}"
            raise DatabaseUnavailableError(display_url(database_url), cause) from e
        _launched_url = database_url


def _launch_outside_event_loop() -> None:
    """`DBOS.launch()`, never tied to the caller's event loop.

    Launched inside a running loop, DBOS would run every workflow started from sync code (and
    every recovered one) on that loop, which breaks once it closes (`asyncio.run` returns, a test
    ends). Launching from a plain thread keeps them on DBOS's own background loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        DBOS.launch()
        return
    errors: list[BaseException] = []

    def launch() -> None:
        try:
            DBOS.launch()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=launch, name="durable-swarm-launch")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def on_dbos_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on DBOS's own event loop and wait for it (from synchronous code).

    A sync `DBOS.start_workflow` of an async workflow keeps one of DBOS's executor threads busy
    for the whole run, waits included; started from DBOS's loop, the run is a task there and
    holds no thread. (DBOS exposes no public call for this: it is its background loop.)
    """
    result: T = _instance()._background_event_loop.submit_coroutine(coroutine)
    return result


def shutdown() -> None:
    """Stop the DBOS instance this library launched (tests, or switching databases)."""
    global _launched_url, _owned
    with _lock:
        if _owned and _instance() is not None:
            DBOS.destroy(workflow_completion_timeout_sec=0)
        _owned = False
        _launched_url = None
