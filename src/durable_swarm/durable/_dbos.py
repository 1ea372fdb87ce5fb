"""Setting up DBOS for durable runs: configuration and one lazy launch per process."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from .._aio import in_event_loop
from ..errors import DatabaseUnavailableError, DurableSwarmError, ExecutorIdInUseError
from . import _drain, _engine
from ._database import describe_fault, display_url, prepare_sqlite
from ._engine import (
    DBOS,
    execution_token,
    gate_queues,
    is_launched,
    on_dbos_loop,
    system_database,
)
from ._failures import quiet_tracebacks
from ._log import REPLAY_VERSION, JsonSerializer
from ._ownership import Ownership, new_executor_id, timing
from ._sealing import keyring
from ._sweeper import stop_sweeper
from ._waits import stop_watchers
from ._wakeup import Wakeups

__all__ = [
    "APPLICATION_VERSION",
    "RECOVERY_QUEUE",
    "busy_runs",
    "ensure_launched",
    "execution_token",
    "executor_id",
    "hand_back",
    "is_launched",
    "launched_url",
    "note_entered",
    "note_taken",
    "on_dbos_loop",
    "ownership",
    "recover_runs_of",
    "recovery_slots",
    "run_database_url",
    "run_status",
    "running_runs",
    "shutdown",
    "slot_given_back",
    "starting_on",
    "system_database",
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
# listens to. DBOS's internal queue, where DBOS's own recovery puts them, has no per-process
# limit: the first process to look took all of them, however many other processes were idle.
# Here each process takes only its free slots (`recovery_slots`, counted by `gate_queues`), so
# a dead process's runs spread over the live ones. Registered in the database at each launch
# with a per-process limit DBOS applies as a ceiling; its queue thread looks every
# RECOVERY_POLL_SECONDS. Runs land on it only at a takeover or a hand-back, so it is looked at
# seldom (each look is a few transactions, in every process of the fleet, idle or not); the
# process that puts runs there wakes its own queue thread at once (`recover_runs_of`), the
# others take their share at their next look.
RECOVERY_QUEUE = "durable_swarm_recovered"
RECOVERY_QUEUE_LIMIT = 100_000
RECOVERY_POLL_SECONDS = 5.0
RECOVERY_SLOTS_ENV = "DURABLE_SWARM_RECOVERY_SLOTS"
DEFAULT_RECOVERY_SLOTS = 100

# This process's DBOS instance, or None (kept here for the callers that read it from this module).
_instance = _engine.instance

_lock = threading.RLock()
_launched_url: str | None = None
_owned = False
_ownership: Ownership | None = None


def recovery_slots(slots: int | None = None) -> int:
    """How many runs this process runs at once from the queues its slots cover: `slots` (a
    worker's concurrency) if given, else `DURABLE_SWARM_RECOVERY_SLOTS`, else 100 (a process
    without a queue of its own takes at most that many of a dead process's runs at a time)."""
    if slots is not None:
        return slots
    configured = os.environ.get(RECOVERY_SLOTS_ENV)
    if not configured:
        return DEFAULT_RECOVERY_SLOTS
    try:
        value = int(configured)
    except ValueError:
        value = 0
    if value < 1:
        raise DurableSwarmError(
            f"{RECOVERY_SLOTS_ENV}={configured!r} is not a positive integer; set it to how many "
            "runs of dead processes this process may run at once (e.g. 100), or unset it."
        )
    return value


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
    `slots` (a worker's concurrency; default `recovery_slots()`) bounds how many runs this
    process runs at once from `queues` and `RECOVERY_QUEUE` together.

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
        wakeups: Wakeups | None = None
        early = True
        if _engine.instance() is None:
            executor_id = executor_id or new_executor_id(kind)
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
            wakeups = _engine.install_wakeups(DBOS(config=config))  # type: ignore[arg-type]
            if wakeups is not None:
                wakeups.starting = starting_on
            _owned = True
        if queues is not None:
            DBOS.listen_queues([*queues, RECOVERY_QUEUE])
        try:
            if _owned:
                with _engine.batched_launch_recovery():
                    _launch_outside_event_loop()
            else:
                _launch_outside_event_loop()
            if ownership is not None:
                if not early:  # DBOS runs under this id now: it cannot change any more
                    ownership.register(fixed_id=True)
                _register_recovery_queue()
                shared = [*(queues or ()), RECOVERY_QUEUE]
                gate_queues(
                    _engine.instance(),
                    ownership,
                    note_taken,
                    hand_back,
                    starting_on,
                    slots=(recovery_slots(slots), shared, RECOVERY_QUEUE, RECOVERY_QUEUE_LIMIT),
                )
                ownership.start(recover_runs_of, busy_runs, hand_back)
            if wakeups is not None:
                wakeups.open()  # the gate is in place: queue threads may look at once
        except Exception as e:
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
        _launched_url = database_url
        _check_serializer()


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


def _register_recovery_queue() -> None:
    """Register `RECOVERY_QUEUE` (DBOS's public queue registry); until it is, and if it cannot
    be, recovered runs go to DBOS's internal queue as DBOS's own recovery puts them."""
    try:
        _outside_event_loop(
            lambda: DBOS.register_queue(
                RECOVERY_QUEUE,
                worker_concurrency=RECOVERY_QUEUE_LIMIT,
                polling_interval_sec=RECOVERY_POLL_SECONDS,
                on_conflict="always_update",
            )
        )
    except Exception as e:  # a run still goes back on DBOS's internal queue: nothing is lost
        logger.warning(
            "could not register the queue %r for recovered runs (%s); runs of dead processes "
            "go to DBOS's internal queue, where the first process to look takes them all",
            RECOVERY_QUEUE,
            e,
        )
        return
    _engine.use_recovery_queue(RECOVERY_QUEUE)


def recovery_queue() -> str:
    """The queue a run started without one goes back on when it is recovered here."""
    return _engine.recovery_queue()


def launched_url() -> str | None:
    """The database of the DBOS this library launched in this process (None if it did not)."""
    return _launched_url


def run_database_url() -> str | None:
    """The database durable runs live in: the one this library launched DBOS on, else the
    system database of the DBOS the app launched itself (None: DBOS is not launched here).
    Sessions, notices and model limits are kept there, beside the runs."""
    if _launched_url is not None:
        return _launched_url
    if not is_launched():
        return None
    return str(system_database().engine.url.render_as_string(hide_password=False))


def executor_id() -> str:
    """This process's DBOS executor id."""
    return _engine.executor_id()


def hand_back(run_id: str, token: str | None = None) -> bool:
    """Put `run_id`, which this process owns, back on its queue for any process to take (the
    caller then stops its execution without recording anything). False if it is not ours.

    Fenced by the execution's ownership token: only while the run is PENDING under this
    executor *and* still owned by the execution holding `token` (that of the calling
    execution, `execution_token`; None: the token the run holds now, for a run no execution
    here runs). A stale execution, whose run was taken over and started again meanwhile
    (even under this same executor id), moves nothing."""
    wakeups = _engine.wakeups_of()
    if wakeups is not None and run_id in running_runs():
        wakeups.hold(run_id)  # its slot freeing must not make this process take it back
    handed = False
    try:
        handed = _engine.reenqueue_run(run_id, token)
    finally:
        if not handed and wakeups is not None:
            wakeups.release_hold(run_id)
    return handed


@contextlib.asynccontextmanager
async def slot_given_back(run_id: str, joins: str | None = None) -> AsyncIterator[None]:
    """While the block runs (`run_id` waits for a person, or for its sub-agent run `joins`
    started here to end) and no other execution of its tree runs (see
    `_wakeup.Wakeups.parked`), the run holds no slot of its queue's per-worker concurrency in
    this process, and the slot goes to the next run; when the block ends, the run takes a slot
    back if it gave one, waiting for one if the worker is full. Without the library's wake-ups
    (another DBOS version), the run keeps its slot."""
    wakeups = _engine.wakeups_of()
    if wakeups is None:
        yield
        return
    async with wakeups.parked(run_id, joins):
        yield


def running_runs() -> list[str]:
    """The ids of the runs executing in this process now."""
    return _engine.active_run_ids()


# Runs this process took from a queue or started, by id, with when (time.monotonic()), until
# their workflow function begins here (`note_entered`). Between the two, DBOS's active set does
# not list them yet: the queue thread starts the runs it took one after the other, and each
# becomes a task of a busy event loop (10,000 recovered at once took minutes here).
# A run taken from a queue also counts against that queue's concurrency here until it begins
# (see `starting_on`).
_taken: dict[str, tuple[float, str | None]] = {}
_taken_lock = threading.Lock()
_last_entered = 0.0  # when a run last began here (time.monotonic())
# A taken run that never begins here (its start failed, e.g. on a database error) stops
# counting as busy once it was taken this long ago (or 10 x `dead_after`, if larger) and no run
# has begun here for `dead_after`: a process still starting runs it took keeps them all.
TAKEN_GRACE_SECONDS = 300.0
# How long a run taken from a queue counts against that queue's concurrency here if it does not
# begin (see `starting_on`); a run begins within milliseconds unless the process is overloaded.
STARTING_SECONDS = 30.0


def note_taken(run_ids: Sequence[str], queue: str | None = None) -> None:
    """Record that this process took `run_ids` from `queue` (or started them, without a
    queue); see `busy_runs` and `starting_on`."""
    now = time.monotonic()
    with _taken_lock:
        for run_id in run_ids:
            _taken[run_id] = (now, queue)


def starting_on(queue: str) -> int:
    """How many runs this process took from `queue` in the last `STARTING_SECONDS` that have
    not begun yet. DBOS counts a run against its queue's per-worker concurrency only once the
    run begins; a look at the queue in between (a wake-up right after a claim) would take more
    runs than the limit allows, so the ownership gate adds these to DBOS's count. A taken run
    may also never begin here (cancelled just after the claim, its status unreadable): it stops
    counting after `STARTING_SECONDS`, so it cannot hold a slot for good."""
    since = time.monotonic() - STARTING_SECONDS
    with _taken_lock:
        return sum(1 for at, taken_from in _taken.values() if taken_from == queue and at > since)


def note_entered(run_id: str) -> None:
    """Record that `run_id`'s workflow function began in this process (DBOS now lists it)."""
    global _last_entered
    with _taken_lock:
        _taken.pop(run_id, None)
        _last_entered = time.monotonic()


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


def recover_runs_of(executor_id: str) -> int:
    """Put the PENDING runs of the (dead) executor `executor_id` back on their queues; returns
    how many. Needs DBOS launched in this process."""
    count = _engine.recover_runs_of(executor_id)
    _wake_recovery_queue(count)
    return count


def _wake_recovery_queue(count: int) -> None:
    """After `count` runs went back on their queues here: look at `RECOVERY_QUEUE` now rather
    than at its next poll (`RECOVERY_POLL_SECONDS`), so this process takes its share at once."""
    wakeups = _engine.wakeups_of()
    if count and wakeups is not None:
        wakeups.wake(RECOVERY_QUEUE)


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
        stop_watchers()
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
        _engine.use_recovery_queue(None)
        with _taken_lock:
            _taken.clear()
