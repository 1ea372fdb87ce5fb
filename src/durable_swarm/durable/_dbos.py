"""Setting up DBOS for durable runs: configuration and one lazy launch per process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._aio import in_event_loop
from ..errors import DatabaseUnavailableError, DurableSwarmError, ExecutorIdInUseError
from . import _drain, _engine
from ._database import checks_connections, describe_fault, display_url, is_postgres, prepare_sqlite
from ._engine import (
    DBOS,
    DBOSClient,
    DBOSNonExistentWorkflowError,
    DBOSWorkflowConflictIDError,
    is_launched,
    outside_run,
    own_queue,
    system_database_url,
)
from ._failures import quiet_tracebacks
from ._log import REPLAY_VERSION, JsonSerializer
from ._ownership import Ownership, ProcessRegistry, new_executor_id, timing
from ._sealing import keyring
from ._sweeper import stop_sweeper
from ._tables import engine_for
from ._waits import IN_RUN, WaitBook

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "APPLICATION_VERSION",
    "RECOVERY_QUEUE",
    "Admission",
    "LoadWatcher",
    "add_sweep",
    "admit",
    "busy_runs",
    "ensure_launched",
    "executor_id",
    "instance",
    "is_launched",
    "launched_url",
    "note_entered",
    "note_left",
    "note_taken",
    "on_loop",
    "ownership",
    "put_back",
    "recover_runs_of",
    "recovery_slots",
    "run_database_url",
    "run_status",
    "running_runs",
    "shutdown",
    "watch_load",
]

# Recovery only picks up runs of the same application version, so it follows the log's
# replay contract (`_log.REPLAY_VERSION`), not the library's or the app's code: upgrading
# either never orphans runs in flight.
APPLICATION_VERSION = f"durable-swarm-log-v{REPLAY_VERSION}"
APP_NAME = "durable_swarm"

logger = logging.getLogger("durable_swarm")

T = TypeVar("T")

# The runs of a dead process that it started without a queue (a `DurableSwarm` process's own
# runs, its sub-agents) go back on this queue, which every process this library launches
# listens to. DBOS's internal queue has no per-process limit: the first process to look would
# take all of them, however many other processes were idle. This queue's per-process limit
# (DBOS's public `worker_concurrency`, one value for the whole fleet: the smallest recovery
# slots of the live processes, `ProcessRegistry.fleet_slots`) makes each process take only that
# many at a time, so a dead process's runs spread over the live ones. The queue is registered
# only while runs wait on it: a takeover that puts runs there registers it (looked at every
# RECOVERY_HURRY_SECONDS, so a process takes its next share as soon as it has free slots), and
# the taker's heartbeat deletes it once it is empty (`_Keeper.hurry`, `_Keeper.settle`). An
# idle fleet then has no thread looking at it (each look was two transactions in every process).
RECOVERY_QUEUE = "durable_swarm_recovered"
RECOVERY_HURRY_SECONDS = 0.5
RECOVERY_SLOTS_ENV = "DURABLE_SWARM_RECOVERY_SLOTS"
DEFAULT_RECOVERY_SLOTS = 100
# This process's recovery slots (`recovery_slots`, written in its row of the process table), and
# whether DURABLE_SWARM_RECOVERY_SLOTS set them (`_strict_slots`: then the fleet's limit, and no
# first share of a takeover goes on DBOS's internal queue, which has no per-process limit).
_own_slots = DEFAULT_RECOVERY_SLOTS
_strict_slots = False


_lock = threading.RLock()
_launched_url: str | None = None
_owned = False
_ownership: Ownership | None = None


# What this process's ownership thread sweeps now and then (`add_sweep`).
_SWEEPS: list[Callable[[Any, sa.Engine], Any]] = []


def add_sweep(sweep: Callable[[Any, sa.Engine], Any]) -> None:
    """Have every process that launches DBOS here call `sweep(client, engine)` every
    `_ownership.SWEEP_SECONDS` while its ownership is confirmed (the parked waits' sweep),
    `client` a `DBOSClient` that fails at once while the database is away, `engine` the
    ownership thread's engine on the run database (`_Keeper`)."""
    if sweep not in _SWEEPS:
        _SWEEPS.append(sweep)


def _sweep_with(sweep: Callable[[Any, sa.Engine], Any]) -> Any:
    return sweep(_KEEPER.client(), _KEEPER.engine())


def recovery_slots(slots: int | None = None) -> tuple[int, bool]:
    """How many runs of dead processes a process runs at once (`RECOVERY_QUEUE`'s per-process
    limit), and whether that was set explicitly: `DURABLE_SWARM_RECOVERY_SLOTS` if set (it is
    then the fleet's), else `slots` (a worker's concurrency), else 100."""
    configured = os.environ.get(RECOVERY_SLOTS_ENV)
    if not configured:
        return (DEFAULT_RECOVERY_SLOTS if slots is None else slots), False
    try:
        value = int(configured)
    except ValueError:
        value = 0
    if value < 1:
        raise DurableSwarmError(
            f"{RECOVERY_SLOTS_ENV}={configured!r} is not a positive integer; set it to how many "
            "runs of dead processes this process may run at once (e.g. 100), or unset it."
        )
    return value, True


def executor_threads() -> int:
    """How many threads DBOS's executor gets, and as many the pool of other sync tools
    (`tool_executor`): `DURABLE_SWARM_EXECUTOR_THREADS` if set, else 4 per CPU core, at least 4
    and at most 20 (DBOS's connection pool size).

    Durable runs are async workflows: they are tasks on an event loop, and DBOS's executor only
    carries their short database calls. A sync tool's step (looked up, run and recorded in one
    thread) does database work too: a quick tool's runs on DBOS's executor itself, any other's
    on a pool as small (`executor_for_tool`); sync model clients, which mostly wait for the
    network, use `_aio.blocking_executor()`. More threads than cores and connections can use
    only fight over the GIL and the connection pool: with 50 runs at once, 64 threads cost ~18%
    more CPU per run than 8. Raise it for sync tools that block for long.
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


_tools: concurrent.futures.ThreadPoolExecutor | None = None
# A sync tool whose last call in this process took at most this long (wall time) is quick.
QUICK_TOOL_SECONDS = 0.005
# Sync tool functions (a method's function) -> whether their last call was quick.
_quick_tools: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def tool_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool for the steps of sync tools (`executor_threads()` threads at most)."""
    global _tools
    with _lock:
        if _tools is None:
            _tools = concurrent.futures.ThreadPoolExecutor(
                executor_threads(), thread_name_prefix="durable-swarm-tool"
            )
        return _tools


def executor_for_tool(function: Any) -> concurrent.futures.Executor | None:
    """Where the step of the sync tool `function` runs.

    A tool whose last call here was quick (`QUICK_TOOL_SECONDS`): None, the event loop's default
    executor, which DBOS sets to its own, as for a bare DBOS sync step. Its database work then
    shares DBOS's threads: on a second pool the same step cost 5-12% more CPU per run (50 runs
    at once, against bare DBOS in one process; the README's Performance section), the event
    loop's thread included. Any other tool (slow last time, or not called yet):
    `tool_executor()`, so a tool that blocks never holds one of DBOS's database threads for long.
    """
    quick = False
    with contextlib.suppress(TypeError):  # neither hashable nor weakly referable: not remembered
        quick = _quick_tools.get(_tool_key(function), False)
    return None if quick else tool_executor()


def note_tool_time(function: Any, seconds: float) -> None:
    """Remember how long a call of the sync tool `function` took (see `executor_for_tool`)."""
    with contextlib.suppress(TypeError):
        _quick_tools[_tool_key(function)] = seconds <= QUICK_TOOL_SECONDS


def _tool_key(function: Any) -> Any:
    """What a tool's timing is remembered under: a method's function (any instance), else itself."""
    return getattr(function, "__func__", function)


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
    if is_postgres(url) and not checks_connections():
        # DBOS's own pool without its check before each use (see `checks_connections`); DBOS
        # retries a call whose connection had died.
        config["db_engine_kwargs"] = {"pool_pre_ping": False}
    return config


def ensure_launched(
    database_url: str,
    *,
    executor_id: str | None = None,
    poll_interval: float = 0.1,
    queues: Sequence[str] | None = None,
    kind: str = "process",
    heartbeat_interval: float | None = None,
    dead_after: float | None = None,
    say: Callable[[str], None] | None = None,
    on_executor_id_taken: str | None = None,
    slots: int | None = None,
) -> None:
    """Launch DBOS on `database_url` unless it already runs in this process.

    An app that configured and launched DBOS itself keeps its own DBOS (durable runs then live in
    the app's database). Launching twice on different databases is refused with a clear error.

    A launch here gives the process its identity (see `durable._ownership`): an executor id
    (`executor_id`, default `<kind>-<host>-<pid>-<random>`) registered in the process table
    before DBOS starts, a heartbeat every `heartbeat_interval` seconds, and the takeover of the
    runs of processes dead for `dead_after` seconds (both default from the environment, then 5 s
    and 6 heartbeats). DBOS recovers this executor id's own pending runs at launch.

    `queues` (a worker) makes this process take queued runs only from those queues (DBOS's
    internal queue, which carries recovered runs, always included); it needs a DBOS that is not
    launched yet. `say` receives the status lines of the ownership thread (default: the log).
    `slots` (a worker's concurrency) is how many runs of dead processes it takes at a time
    from `RECOVERY_QUEUE` (see `recovery_slots`).

    An executor id that another live process holds is refused with `ExecutorIdInUseError`
    (`on_executor_id_taken`: "error", default `DURABLE_SWARM_ON_EXECUTOR_ID_TAKEN`), or
    replaced by a fresh one ("fresh"), or waited for ("wait"); see
    `ProcessRegistry.register`.
    """
    global _launched_url, _owned, _ownership
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
            _check_serializer()
            return
        quiet_tracebacks()
        _drain.reopen()  # a launch after a stop in this process begins steps again
        beat, dead = timing(heartbeat_interval, dead_after)
        ownership: Ownership | None = None
        early = True
        if _engine.instance() is None:
            executor_id = executor_id or new_executor_id(kind)
            _set_recovery_slots(slots)
            ownership = Ownership(
                database_url,
                executor_id,
                kind=kind,
                queue=",".join(queues) if queues else None,
                heartbeat_interval=beat,
                dead_after=dead,
                application_version=APPLICATION_VERSION,
                say=say,
                on_executor_id_taken=on_executor_id_taken,
                slots=_own_slots,
            )
            # Register before launching, so a claim in progress on this executor id finishes
            # before DBOS recovers this executor's runs at launch. A PostgreSQL database that
            # does not exist yet has no rows: DBOS creates it, then the row is written.
            try:
                prepare_sqlite(database_url)
                early = ownership.registry.database_exists()
                if early:
                    ownership.register()
            except ExecutorIdInUseError:
                ownership.registry.close()
                raise
            except Exception as e:
                ownership.registry.close()
                cause = describe_fault(e, database_url)
                raise DatabaseUnavailableError(display_url(database_url), cause) from e
            config = _config(database_url, ownership.executor_id, poll_interval)
            DBOS(config=config)  # type: ignore[arg-type]
            _owned = True
        if queues is not None:
            DBOS.listen_queues([*queues, RECOVERY_QUEUE])
        try:
            _launch_outside_event_loop()
            # From here on the runs' database is `database_url` (the URL as given, which the
            # keeper's engine is bound to below: DBOS's own rendering of it differs).
            _launched_url = database_url
            if ownership is not None:
                if not early:  # DBOS runs under this id now: it cannot change any more
                    ownership.register(fixed_id=True)
                _KEEPER.bind(database_url, ownership.registry)
                _note_recovered_at_launch(ownership.executor_id)
                ownership.sweeps = [functools.partial(_sweep_with, sweep) for sweep in _SWEEPS]
                ownership.start(_KEEPER)
        except Exception as e:
            _launched_url = None
            if _owned:
                DBOS.destroy()
                _owned = False
            if ownership is not None:
                ownership.stop(mark_stopped=False)
            if isinstance(e, ExecutorIdInUseError):
                raise
            cause = describe_fault(e, database_url)
            raise DatabaseUnavailableError(display_url(database_url), cause) from e
        _ownership = ownership
        _check_serializer()
        # The waits table, made on the ownership thread's engine (which sweeps it), so that an
        # idle process holds no connection of the shared engine; readers join it from now on.
        url = run_database_url() or database_url
        WaitBook(url, _KEEPER.engine() if ownership is not None else None).ensure()


def _check_serializer() -> None:
    """With an encryption key set, refuse a DBOS that does not store through this library's
    serializer (an app that configured DBOS itself without it): runs would be stored as that
    serializer writes them, unencrypted."""
    if _owned or keyring() is None:
        return
    if not isinstance(_engine.instance_serializer(), JsonSerializer):
        raise DurableSwarmError(
            "An encryption key is set (DURABLE_SWARM_ENCRYPTION_KEY or encryption_key=...), but "
            "the app configured DBOS without durable-swarm's serializer, so runs would be stored "
            "unencrypted. Add `serializer=durable_swarm.durable.JsonSerializer()` to the app's "
            "DBOS config (docs/guides/encryption.md), or unset the key."
        )


def _set_recovery_slots(slots: int | None) -> None:
    """Set this process's `recovery_slots` (see `_own_slots`)."""
    global _own_slots, _strict_slots
    _own_slots, _strict_slots = recovery_slots(slots)


def launched_url() -> str | None:
    """The database of the DBOS this library launched in this process (None if it did not)."""
    return _launched_url


def instance() -> Any:
    """The DBOS instance of this process (configured, launched or not), or None."""
    return _engine.instance()


def run_database_url() -> str | None:
    """The database durable runs live in: the one this library launched DBOS on, else the
    system database of the DBOS the app launched itself (None: DBOS is not launched here).
    Sessions, notices and model limits are kept there, beside the runs."""
    if _launched_url is not None:
        return _launched_url
    if not is_launched():
        return None
    return system_database_url()


def executor_id() -> str:
    """This process's DBOS executor id."""
    return _engine.executor_id()


def put_back(run_id: str, *, execution: bool = False, source: Any = None) -> bool | None:
    """Put `run_id`, PENDING under this process's executor id but no longer run by any
    execution here (it stopped on a database error; `execution`: the caller is the one
    execution of it here, which ends next without recording anything), back on its queue for
    any process to take (a run started without a queue: on `RECOVERY_QUEUE`, opened for it).
    True if it did; False if it is not this process's to put back; None
    while this process's ownership is not confirmed (try again: someone may be taking its runs
    over). Never while another execution here runs it (a second execution beside a first would
    run its next step twice). `source`: a `DBOSClient` (default: DBOS, outside any run)."""
    own = _ownership
    if own is None:
        return False
    if not own.confirmed():
        return None
    with _taken_lock:
        executions = _executions.get(run_id, 0)
    if executions > (1 if execution else 0) or (not execution and run_id in busy_runs()):
        return False
    if source is None:
        status = outside_run(DBOS.get_workflow_status, run_id)
    else:
        found = source.list_workflows(workflow_ids=[run_id], load_input=False, load_output=False)
        status = found[0] if found else None
    if status is None or status.status != "PENDING" or status.executor_id != own.executor_id:
        return False
    queue = (None if own_queue(status.queue_name) else status.queue_name) or RECOVERY_QUEUE
    recovery = queue == RECOVERY_QUEUE  # registered only while runs wait on it: open it
    if recovery:
        _hurry_from(source)
    try:
        if source is None:
            outside_run(DBOS.resume_workflow, run_id, queue_name=queue)
        else:
            source.resume_workflow(run_id, queue_name=queue)
    except DBOSNonExistentWorkflowError:
        return False
    if recovery:  # again once it waits there: a settle elsewhere may have deleted it meanwhile
        _hurry_from(source)
    return True


def _hurry_from(source: Any) -> None:
    """`_KEEPER.hurry` from `put_back`: through `source` (the ownership thread's client), or,
    from a run's own thread, through this process's DBOS (its pool, not the heartbeat's) with
    the fleet's recovery slots as the ownership thread last read them."""
    if source is not None:
        _KEEPER.hurry(source)
    else:
        outside_run(_KEEPER.hurry, DBOS, _KEEPER.known_limit())


# Executions of runs in this process now, by run id (a run DBOS runs twice here for a moment,
# a stale execution beside a new one, counts twice): what the ownership thread never puts back.
_executions: dict[str, int] = {}


def running_runs() -> list[str]:
    """The ids of the runs executing in this process now."""
    with _taken_lock:
        return list(_executions)


# Runs this process started (sub-agent runs), by id, with when (time.monotonic()), until their
# workflow function begins here (`note_entered`): a task of a busy event loop may take a while
# to begin.
_taken: dict[str, tuple[float, str | None]] = {}
_taken_lock = threading.Lock()
_last_entered = 0.0  # when a run last began here (time.monotonic())
# A started run that never begins here (its start failed, e.g. on a database error) stops
# counting as busy once it was started this long ago (or 10 x `dead_after`, if larger) and no
# run has begun here for `dead_after`: a process still starting runs keeps them all.
TAKEN_GRACE_SECONDS = 300.0


def _note_recovered_at_launch(executor_id: str) -> None:
    """The runs PENDING under `executor_id` when this process launched (a restart with a fixed
    executor id): DBOS's own recovery at launch runs them here, and its executions may take a
    while to begin on a busy machine. They count as taken (`note_taken`) until they begin, so
    the ownership thread never puts one back on a queue as stalled beside the execution DBOS is
    about to start (that would run its next step twice). On a database error they are not
    noted, as before."""
    try:
        pending = _KEEPER.pending(executor_id)
    except Exception as e:
        logger.warning("could not list the runs recovered at launch (%s)", e)
        return
    note_taken([run_id for run_id, _, _ in pending])


def note_taken(run_ids: Sequence[str]) -> None:
    """Record that this process started `run_ids` (they have not begun yet); see
    `busy_runs`."""
    now = time.monotonic()
    with _taken_lock:
        for run_id in run_ids:
            _taken[run_id] = (now, None)


class Execution:
    """One execution of a run in this process: its run, the ownership epoch it began in (or
    was last confirmed in, see `admit`), and when it began (`time.monotonic()`)."""

    __slots__ = ("began", "epoch", "run_id")

    def __init__(self, run_id: str, epoch: int) -> None:
        self.run_id = run_id
        self.epoch = epoch
        self.began = time.monotonic()


# The execution whose task (or step thread) runs the calling code, set as it begins.
_execution: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "durable_swarm_execution", default=None
)
# The newest execution of each run in this process.
_newest: dict[str, Execution] = {}


def note_entered(run_id: str) -> None:
    """Record that an execution of `run_id` began in this process (`note_left` when it ends):
    it is now the run's newest here, and knows the ownership epoch it began in (`admit`)."""
    global _last_entered
    own = _ownership
    execution = Execution(run_id, own.lost if own is not None else 0)
    _execution.set(execution)  # in the workflow's task: its steps' contexts copy it
    IN_RUN.set(True)
    with _taken_lock:
        _taken.pop(run_id, None)
        _executions[run_id] = _executions.get(run_id, 0) + 1
        _newest[run_id] = execution
        _last_entered = time.monotonic()
        running = len(_executions)
    watcher = _load_watcher
    if watcher is not None:
        watcher.entered(running)


class LoadWatcher(Protocol):
    """What `watch_load` tells (a worker's `QueuePace`); each call must return at once: it runs
    in the run's own task or thread."""

    def entered(self, running: int) -> None:
        """An execution began here; `running` runs execute here now."""

    def left(self, seconds: float) -> None:
        """An execution that began here ended (finished, failed, parked) after `seconds`."""


_load_watcher: LoadWatcher | None = None


def watch_load(watcher: LoadWatcher | None) -> None:
    """Have `watcher` told as each execution of a run begins and ends in this process; None
    stops it."""
    global _load_watcher
    _load_watcher = watcher


def note_left(run_id: str) -> None:
    """An execution of `run_id` ended in this process (finished, failed, parked, handed
    over)."""
    execution = _execution.get(None)
    with _taken_lock:
        left = _executions.get(run_id, 0) - 1
        if left > 0:
            _executions[run_id] = left
        else:
            _executions.pop(run_id, None)
        if execution is not None and _newest.get(run_id) is execution:
            del _newest[run_id]
    watcher = _load_watcher
    if watcher is not None and execution is not None and execution.run_id == run_id:
        watcher.left(time.monotonic() - execution.began)


def busy_runs() -> list[str]:
    """`running_runs()`, plus the runs this process took or started that have not begun yet:
    what the ownership thread must never hand back as stalled (a second execution of a run
    beside the first, in one process, would run its next step twice). See
    `TAKEN_GRACE_SECONDS` for when a taken run that never began stops counting."""
    own = _ownership
    dead_after = own.dead_after if own is not None else 0.0
    grace = max(TAKEN_GRACE_SECONDS, 10 * dead_after)
    now = time.monotonic()
    with _taken_lock:
        if now - _last_entered > dead_after:
            for run_id in [r for r, (since, _) in _taken.items() if now - since > grace]:
                del _taken[run_id]
        starting = list(_taken)
    return running_runs() + starting


def run_status(run_id: str) -> str | None:
    """The DBOS status of `run_id` read now, outside any workflow step (so a workflow may call
    it any number of times without changing its recorded steps)."""
    return _engine.run_status(run_id)


def ownership() -> Ownership | None:
    """This process's identity among the processes of its database (None before a launch
    here, or when the app launched DBOS itself)."""
    return _ownership


# Runs put back on their queues per statement by `recover_runs_of`.
RECOVERY_BATCH = 500


def recover_runs_of(
    executor_id: str, source: Any = None, *, alone: bool = False, limit: int | None = None
) -> int:
    """Put the PENDING runs of the dead executor `executor_id` (of this application version)
    back on their queues; returns how many. The caller holds the claim on that executor
    (`ProcessRegistry.claim`): it alone recovers its runs, and the executor id cannot come back
    to life meanwhile (a restart waits for the claim to end). DBOS's public `list_workflows`
    and `resume_workflows` (in batches; `source`: a `DBOSClient`, default the ownership
    thread's, which fails at once when the database is away instead of waiting for it); a run
    that came from a worker's queue goes back on it; of the others, the first `limit` (the
    fleet's recovery slots, default this process's) on DBOS's internal queue and the rest on
    `RECOVERY_QUEUE` (registered with that limit until it is empty); all of
    them on the internal queue if the caller is `alone` (no other process may be alive to share
    them: the one process takes them all at once, as DBOS's own recovery does). Only while
    this process's ownership is confirmed: one that was paused since it listed the runs
    recovers nothing (the executor may have come back and taken them up again)."""
    client = source or _KEEPER.client()
    found = client.list_workflows(
        status="PENDING",
        executor_id=executor_id,
        app_version=APPLICATION_VERSION,
        load_input=False,
        load_output=False,
    )
    by_queue: dict[str | None, list[str]] = {}
    for run in found:
        queue = RECOVERY_QUEUE if own_queue(run.queue_name) else str(run.queue_name)
        by_queue.setdefault(queue, []).append(run.workflow_id)
    # The first share goes on DBOS's internal queue, which every process looks at every second
    # (whoever looks first takes it, at once); the rest waits on the recovery queue, hurried
    # meanwhile, for the processes' free slots.
    held = by_queue.pop(RECOVERY_QUEUE, [])
    limit = _own_slots if limit is None else limit
    share = 0 if _strict_slots else len(held) if alone else limit
    if held[:share]:
        by_queue[None] = held[:share]
    rest = held[share:]
    if rest:
        by_queue[RECOVERY_QUEUE] = rest
        _KEEPER.hurry(client, limit)
    count = 0
    for target, run_ids in sorted(by_queue.items(), key=lambda item: item[0] or ""):
        for start in range(0, len(run_ids), RECOVERY_BATCH):
            own = _ownership
            if own is not None and not own.confirmed():
                return count
            batch = run_ids[start : start + RECOVERY_BATCH]
            client.resume_workflows(batch, queue_name=target)
            count += len(batch)
    if rest:  # again once they wait there: a settle elsewhere may have deleted it meanwhile
        _KEEPER.hurry(client, limit)
    return count


def _open_recovery_queue(client: DBOSClient, limit: int) -> None:
    """Register `RECOVERY_QUEUE` (DBOS's public queue registry; every process's queue
    manager starts a thread on it within a second) looked at every `RECOVERY_HURRY_SECONDS`,
    each process taking at most `limit` of its runs at a time; one registered already keeps the
    smaller limit (the fleet's is the smallest of its processes', and two takers may open it at
    once), or takes `limit` when it is strict (DURABLE_SWARM_RECOVERY_SLOTS)."""
    queue = client.retrieve_queue(RECOVERY_QUEUE)
    if queue is None:
        queue = client.register_queue(
            RECOVERY_QUEUE,
            worker_concurrency=limit,
            polling_interval_sec=RECOVERY_HURRY_SECONDS,
            on_conflict="never_update",  # opened by another taker just now: theirs stands
        )
    if queue.polling_interval_sec != RECOVERY_HURRY_SECONDS:
        queue.set_polling_interval_sec(RECOVERY_HURRY_SECONDS)
    current = queue.worker_concurrency
    if current is None or current > limit or (_strict_slots and current != limit):
        queue.set_worker_concurrency(limit)


def _close_recovery_queue(client: DBOSClient) -> None:
    """Delete `RECOVERY_QUEUE`'s registration (its runs stay as they are; the queue threads of
    every process end at their next look)."""
    client.delete_queue(RECOVERY_QUEUE)


def _recovery_queued(client: DBOSClient, executor_id: str | None = None) -> bool:
    """Whether a run of this application version waits on `RECOVERY_QUEUE` to be taken, or is
    PENDING on it under `executor_id` (this process) without running here: DBOS's own recovery
    at launch puts such a run back on its queue a moment later."""
    found = client.list_workflows(
        queue_name=RECOVERY_QUEUE,
        status="ENQUEUED",
        app_version=APPLICATION_VERSION,
        limit=1,
        load_input=False,
        load_output=False,
    )
    if found or executor_id is None:
        return bool(found)
    # One more than the runs running here: if every one listed runs here, none is left over.
    running = set(busy_runs())
    pending = client.list_workflows(
        queue_name=RECOVERY_QUEUE,
        status="PENDING",
        executor_id=executor_id,
        app_version=APPLICATION_VERSION,
        limit=len(running) + 1,
        load_input=False,
        load_output=False,
    )
    return any(run.workflow_id not in running for run in pending)


class _Keeper:
    """The runs as the ownership thread sees them (`_ownership.RunKeeper`), through DBOS's
    public API: a `DBOSClient` on the run database made with `retry_connection_errors=False`
    (on the process registry's engine, see `bind`), so that a call made while the database is
    away fails at once instead of waiting, with DBOS's backoff, for it to come back; the
    heartbeat thread that makes it must go on beating (a stalled heartbeat gets a process taken
    for dead)."""

    def __init__(self) -> None:
        self._client: DBOSClient | None = None
        self._url: str | None = None
        self._engine: sa.Engine | None = None  # the client's, see `bind`
        self._bound: tuple[str, ProcessRegistry] | None = None
        self._limit: int | None = None  # `limit` as last read
        self._lock = threading.Lock()
        # Whether `RECOVERY_QUEUE` may be registered (see `hurry`); True at first, so a process
        # that starts deletes a registration a dead taker left. `_hurries` counts the hurries,
        # so a settle clears only what it saw.
        self._hurrying = True
        self._hurries = 0
        self._hurry_lock = threading.Lock()

    def bind(self, url: str, registry: ProcessRegistry) -> None:
        """Make the client on `url` use `registry`'s engine, the ownership thread's own, so
        that the heartbeat, the takeovers and the sweeps of one process share one pool and,
        idle, one connection; the fleet's recovery slots are read from `registry`."""
        with self._lock:
            self._bound = (url, registry)
            self._limit = None
        self.watch()  # a new launch looks at the queue again (a relaunch in this process too)

    def engine(self) -> sa.Engine:
        """The engine of the client: the bound registry's (`bind`), else the shared one."""
        url = run_database_url()
        assert url is not None, "DBOS is not launched in this process"
        bound = self._bound
        return bound[1].engine if bound is not None and bound[0] == url else engine_for(url)

    def limit(self) -> int:
        """How many runs of dead processes each process takes at a time: the strict limit
        (DURABLE_SWARM_RECOVERY_SLOTS), else the smallest recovery slots of the live
        processes, this one's included (read on the ownership thread's engine)."""
        bound = self._bound
        if _strict_slots or bound is None:
            return _own_slots
        fleet = bound[1].fleet_slots()
        self._limit = _own_slots if fleet is None else min(fleet, _own_slots)
        return self._limit

    def known_limit(self) -> int:
        """`limit` as last read (this process's own slots before the first read), without a
        query: for a run's thread, which stays off the ownership thread's engine."""
        return _own_slots if _strict_slots or self._limit is None else self._limit

    def client(self) -> DBOSClient:
        url = run_database_url()
        assert url is not None, "DBOS is not launched in this process"
        with self._lock:
            engine = self.engine()
            if self._client is None or self._url != url or self._engine is not engine:
                self._client = DBOSClient(
                    system_database_url=url,
                    system_database_engine=engine,
                    application_name=APP_NAME,
                    retry_connection_errors=False,
                    lazy=True,
                )
                self._url, self._engine = url, engine
            return self._client

    def recover(self, executor_id: str, *, alone: bool = False) -> int:
        self.watch()  # the dead process may have been a taker that opened the queue
        return recover_runs_of(executor_id, self.client(), alone=alone, limit=self.limit())

    def watch(self) -> None:
        """Have this process's `settle` look at `RECOVERY_QUEUE` until it is empty."""
        with self._hurry_lock:
            self._hurrying = True
            self._hurries += 1

    def hurry(self, client: DBOSClient, limit: int | None = None) -> None:
        """Runs go on `RECOVERY_QUEUE`: it is registered (`_open_recovery_queue`, each process
        taking at most `limit`, default `limit()`, at a time) until `settle` finds it empty.
        Called before the runs are queued (a `settle` elsewhere that finds the queue empty just
        before sees them at its second look) and after (one that deleted it in between is
        undone)."""
        self.watch()
        try:
            _open_recovery_queue(client, self.limit() if limit is None else limit)
        except Exception as e:  # the runs still wait there: the next settle registers it
            logger.warning("could not register the queue %r (%s)", RECOVERY_QUEUE, e)

    def settle(self) -> None:
        """Each heartbeat, after a takeover or a `hurry` here: while runs wait on
        `RECOVERY_QUEUE` it stays registered (again, if a settle elsewhere deleted it); once
        none does, its registration is deleted. Look, delete, look again: runs another process
        queued (and registered it for) in between are seen by the second look, which registers
        it again; any queued after it register it after this delete."""
        with self._hurry_lock:
            if not self._hurrying:
                return
            seen = self._hurries
        client = self.client()
        bound = self._bound
        mine = bound[1].executor_id if bound is not None else None
        if not _recovery_queued(client, mine):
            _close_recovery_queue(client)
            if not _recovery_queued(client, mine):
                with self._hurry_lock:
                    if self._hurries == seen:
                        self._hurrying = False
                return
        # runs wait: registered (again, if a settle elsewhere or the one above deleted it)
        _open_recovery_queue(client, self.limit())

    def pending(self, executor_id: str | None) -> list[tuple[str, str, int]]:
        found = self.client().list_workflows(
            status="PENDING",
            executor_id=executor_id,
            app_version=APPLICATION_VERSION,
            load_input=False,
            load_output=False,
        )
        return [
            (run.workflow_id, str(run.executor_id), int(run.updated_at or run.created_at or 0))
            for run in found
        ]

    def busy(self) -> list[str]:
        return busy_runs()

    def put_back(self, run_id: str) -> bool:
        return bool(put_back(run_id, source=self.client()))


_KEEPER = _Keeper()


# --- admission of a step's body: ownership ---------------------------------------------------


class Admission:
    """`admit`'s verdict on a step body that is about to begin."""

    GO = "go"  # begin it
    STOPPING = "stopping"  # the process stops: it never begins here (see `_drain`)
    LOST = "lost"  # the run is no longer this execution's (taken over): record nothing more


# How often a step body that waits for this process's ownership looks again.
ADMIT_POLL_SECONDS = 0.05


def admit(run_id: str) -> str:
    """May a step body of `run_id` begin now in this process? (Blocking; see `Admission`.)

    Only while this process's ownership is confirmed (its last heartbeat is recent enough that
    nobody can have taken it for dead): a process paused, frozen or cut off waits here until a
    heartbeat succeeds again. Only for the newest execution of the run here (DBOS may run a
    second one beside a stale one for a moment: the stale one records nothing more, `LOST`).
    If the process was taken for dead since this execution began (its ownership epoch moved),
    its runs were taken over: the body begins only if the run is still PENDING under this
    executor (it was taken after the takeover), else `LOST`. This is what keeps a step from
    running in two executions at the same moment after a pause, where DBOS's own fencing only
    refuses the stale execution's checkpoints. A process that did not launch DBOS itself (an
    app's own) has no ownership and admits every body."""
    own = _ownership
    if own is None:
        return Admission.GO
    execution = _execution.get(None)
    if execution is not None and execution.run_id != run_id:
        execution = None  # a step of another run's context (not one of ours)
    if _admitted_now(run_id):
        return Admission.GO
    while not own.confirmed():
        if own.is_stopping:
            return Admission.STOPPING
        time.sleep(ADMIT_POLL_SECONDS)
    with _taken_lock:
        newest = execution is None or _newest.get(run_id) is execution
    if not newest:
        return Admission.LOST
    if execution is None or own.lost == execution.epoch:
        return Admission.GO
    status = outside_run(DBOS.get_workflow_status, run_id)
    if status is None or status.status != "PENDING" or status.executor_id != own.executor_id:
        return Admission.LOST
    execution.epoch = own.lost  # still this execution's: taken after the takeover
    return Admission.GO


def _admitted_now(run_id: str) -> bool | None:
    """`admit`'s answer when it needs no waiting and no database (True: go), else None."""
    own = _ownership
    if own is None:
        return True
    execution = _execution.get(None)
    if execution is None or execution.run_id != run_id:
        return True if own.confirmed() else None
    with _taken_lock:
        newest = _newest.get(run_id) is execution
    return True if own.confirmed() and own.lost == execution.epoch and newest else None


def _admitted(run_id: str) -> bool:
    """`admit` for `_drain`'s gate: True to begin the body, False to never begin it here (the
    process stops); a run taken over meanwhile ends its execution here without recording
    anything (DBOS's `DBOSWorkflowConflictIDError`: this execution no longer owns the run)."""
    verdict = admit(run_id)
    if verdict == Admission.LOST:
        raise DBOSWorkflowConflictIDError(run_id)
    return verdict == Admission.GO


_drain.use_gate(_admitted_now, _admitted)


# --- the library's own event loop ----------------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _library_loop() -> asyncio.AbstractEventLoop:
    """The event loop of this library's thread (started at first use): runs started from sync
    code are tasks there, so none holds a thread for its whole life (waits included)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="durable-swarm-loop", daemon=True
            ).start()
            _loop = loop
        return _loop


def _stop_library_loop() -> None:
    """Stop this library's event loop (DBOS was destroyed: the runs on it are gone with it);
    the next `on_loop` starts a new one."""
    global _loop
    with _loop_lock:
        loop, _loop = _loop, None
    if loop is not None and not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)


def on_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on this library's event loop and wait for it (from synchronous code)."""
    return asyncio.run_coroutine_threadsafe(coroutine, _library_loop()).result()


def _launch_outside_event_loop() -> None:
    """`DBOS.launch()`, never tied to the caller's event loop.

    Launched inside a running loop, DBOS would run every workflow started from sync code (and
    every recovered one) on that loop, which breaks once it closes (`asyncio.run` returns, a test
    ends). Launching from a plain thread keeps them on DBOS's own background loop.
    """
    _outside_event_loop(DBOS.launch)


def _outside_event_loop(call: Callable[[], Any]) -> None:
    """`call()` here, or in a thread of its own when this thread runs an event loop (DBOS
    refuses its sync calls there, and they would block the loop)."""
    if not in_event_loop():
        call()
        return
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run, name="durable-swarm-launch")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def drain(timeout: float | None) -> list[str]:
    """Begin stopping: take no more runs, begin no new step, and wait up to `timeout` seconds
    (None: for good) for the steps running here to finish and be recorded (see `_drain`).
    Returns the steps still in flight (empty: none; `shutdown` may then hand every run over).
    Heartbeats go on meanwhile, so no other process takes this one's runs."""
    own = _ownership
    if own is not None:
        own.stopping()
    _drain.close()
    _drain.wait_idle(timeout)
    return _drain.in_flight()


def shutdown() -> None:
    """Stop the DBOS instance this library launched (tests, or switching databases). The
    process is marked stopped, so other processes take over its unfinished runs at once; if a
    step is still running here, only once it is over (its heartbeats go on until then), so no
    step ever runs in two processes at the same moment."""
    global _launched_url, _owned, _ownership
    with _lock:
        ownership, _ownership = _ownership, None
        if ownership is not None:
            ownership.stopping()
        stop_sweeper()  # it reads through this DBOS
        if _owned and _engine.instance() is not None:
            DBOS.destroy(workflow_completion_timeout_sec=0)
        if ownership is not None:
            if _drain.in_flight():
                ownership.stop_when(lambda: not _drain.in_flight())
            else:
                ownership.stop()
        _owned = False
        _launched_url = None
        _stop_library_loop()  # its default executor was the destroyed DBOS's
        with _taken_lock:
            _taken.clear()
