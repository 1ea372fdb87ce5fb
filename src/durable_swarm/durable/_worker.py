"""Workers: processes that serve durable runs from a DBOS queue.

`run_worker("module:app", queue=..., concurrency=...)` imports the app's module (which defines the
agents, tools and model client), launches DBOS listening only to `queue` (plus the queues of
recovered runs: DBOS's internal queue and `_dbos.RECOVERY_QUEUE`), registers the queue with a
per-worker concurrency limit and serves until SIGTERM or SIGINT. The concurrency covers the
runs of dead processes it takes over too. A thin client (`DurableClient`) enqueues runs by agent
name.

A worker is a process like any other that launches DBOS (see `durable._ownership`): its own
executor id, a heartbeat, the takeover of dead processes' runs, and no queue work while its
ownership is not confirmed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import sqlalchemy as sa

from .. import _registry
from ..errors import DatabaseUnavailableError, DurableSwarmError
from ..limits import Limits, check_limits
from . import _dbos, _drain
from ._client import (
    DEFAULT_BUSY_POLL_INTERVAL,
    DEFAULT_CONCURRENCY,
    DEFAULT_QUEUE,
    DEFAULT_SHUTDOWN_GRACE,
)
from ._database import describe_fault, display_url, resolve_database_url
from ._engine import DBOS
from ._imports import is_model_client, load_target
from ._ownership import new_executor_id, on_taken_policy, timing
from ._pace import QueuePace
from ._retention import Retention
from ._sealing import configure as configure_keys
from ._swarm import DurableSwarm
from ._swarms import DEFAULTS
from ._sweeper import start_sweeper
from ._workflow import HOST

__all__ = ["Worker", "run_worker"]


class Worker:
    """A process serving durable runs from one queue (see `run_worker` and the module docs)."""

    def __init__(
        self,
        target: str,
        *,
        queue: str = DEFAULT_QUEUE,
        concurrency: int = DEFAULT_CONCURRENCY,
        database_url: str | None = None,
        executor_id: str | None = None,
        heartbeat_interval: float | None = None,
        dead_after: float | None = None,
        poll_interval: float = 0.5,
        out: TextIO | None = None,
        on_executor_id_taken: str | None = None,
        encryption_key: str | Sequence[str] | None = None,
        retention: Retention | Mapping[str, Any] | str | None = None,
        busy_poll_interval: float = DEFAULT_BUSY_POLL_INTERVAL,
    ) -> None:
        if encryption_key is not None:
            configure_keys(encryption_key)
        if not queue:
            raise DurableSwarmError("A worker needs a queue name (--queue NAME).")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise DurableSwarmError(
                f"Worker concurrency must be a whole number of runs >= 1, not {concurrency!r}."
            )
        for name, value in (
            ("poll_interval", poll_interval),
            ("busy_poll_interval", busy_poll_interval),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise DurableSwarmError(f"{name} must be a number of seconds > 0, not {value!r}.")
        self.target = target
        self.queue = queue
        self.concurrency = concurrency
        self.heartbeat_interval, self.dead_after = timing(heartbeat_interval, dead_after)
        self.poll_interval = poll_interval
        self.busy_poll_interval = busy_poll_interval
        self._pace: QueuePace | None = None
        self.on_executor_id_taken = on_taken_policy(on_executor_id_taken)
        self.retention = Retention.of(retention)
        self._database_url = database_url
        self._executor_id = executor_id
        self.database_url = ""
        self.executor_id = ""
        self._out = out or sys.stdout
        self._stop = threading.Event()
        self._launched = False
        self._closed = False
        self._exit_grace: float | None = None  # see run_worker's shutdown_grace
        self._returned = False  # run_worker has returned
        self._drained = False  # stopped with no step in flight (see `_exit_after`)

    def _say(self, text: str) -> None:
        print(f"durable-swarm worker: {text}", file=self._out, flush=True)

    def _print_run_events(self) -> None:
        """One line per run event (`durable_swarm.runs`) and per retention batch
        (`durable_swarm.retention`) on this worker's output."""
        handler = logging.StreamHandler(self._out)
        handler.setFormatter(logging.Formatter("durable-swarm worker: %(message)s"))
        for name in ("durable_swarm.runs", "durable_swarm.retention"):
            events = logging.getLogger(name)
            events.addHandler(handler)
            events.setLevel(logging.INFO)
            events.propagate = False

    def start(self) -> Worker:
        """Import the target, launch DBOS on the queue and start the heartbeat; returns self."""
        if _dbos.instance() is not None:
            raise DurableSwarmError(
                "DBOS is already set up in this process; a worker sets DBOS up itself. Start "
                "the worker in a process of its own."
            )
        obj = load_target(self.target)
        if _dbos.instance() is not None:
            raise DurableSwarmError(
                f"Importing {self.target!r} set up or launched DBOS; a worker must do that "
                "itself (to listen to its queue only). Do not call DurableSwarm.run/launch or "
                "DBOS.launch at import time (guard them with `if __name__ == '__main__':`)."
            )
        listener_poll = 0.1
        url = self._database_url
        if isinstance(obj, DurableSwarm):
            HOST.default_client = obj.client or HOST.default_client
            url = url or obj.database_url
            self._executor_id = self._executor_id or obj.executor_id
            listener_poll = obj.poll_interval
            self.retention = self.retention or obj.retention
        elif is_model_client(obj):
            HOST.default_client = obj
        self.database_url = resolve_database_url(url)
        self.retention = self.retention or Retention.from_env()
        self.executor_id = self._executor_id or new_executor_id("worker")
        _dbos.ensure_launched(
            self.database_url,
            executor_id=self.executor_id,
            poll_interval=listener_poll,
            queues=[self.queue],
            kind="worker",
            heartbeat_interval=self.heartbeat_interval,
            dead_after=self.dead_after,
            say=self._say,
            on_executor_id_taken=self.on_executor_id_taken,
            slots=self.concurrency,
        )
        self._launched = True
        self.executor_id = _dbos.executor_id()  # a fresh one if the one asked for was taken
        self._print_run_events()
        try:
            self._register_queue()
        except sa.exc.DBAPIError as e:  # the database went away just after the launch
            cause = describe_fault(e, self.database_url)
            raise DatabaseUnavailableError(display_url(self.database_url), cause) from e
        agents = ", ".join(sorted(_registry._agents)) or "none"
        self._say(
            f"serving queue {self.queue!r} on {display_url(self.database_url)} as executor "
            f"{self.executor_id!r}, concurrency {self.concurrency}, polling every "
            f"{self.poll_interval:g} s when idle{self._busy_note()}, heartbeat every "
            f"{self.heartbeat_interval:g} s (dead after {self.dead_after:g} s); agents: {agents}"
        )
        if self.retention is not None:
            self._say(f"retention: {self.retention.describe()}")
            start_sweeper(DBOS, self.database_url, self.retention, self.executor_id)
        return self

    def _register_queue(self) -> None:
        existing = DBOS.retrieve_queue(self.queue)
        if existing is not None and existing.worker_concurrency not in (None, self.concurrency):
            self._say(
                f"queue {self.queue!r} had concurrency {existing.worker_concurrency} per worker; "
                f"it is now {self.concurrency} for every worker of the queue (the limit is "
                "stored with the queue, the last worker to start sets it)"
            )
        registered = DBOS.register_queue(
            self.queue,
            worker_concurrency=self.concurrency,
            polling_interval_sec=self.poll_interval,
            on_conflict="always_update",
        )
        pace = QueuePace(
            registered,
            slots=self.concurrency,
            idle=self.poll_interval,
            busy=self.busy_poll_interval,
            settle_every=self.heartbeat_interval,
            check_every=self.dead_after,
            version=_dbos.APPLICATION_VERSION,
        )
        if pace.active:
            self._pace = pace
            _dbos.watch_load(pace)
            pace.start()

    def _busy_note(self) -> str:
        if self._pace is None:
            return ""
        return f", as often as every {self.busy_poll_interval:g} s while runs wait for its slots"

    def request_stop(self) -> None:
        """Ask `serve` to return (what SIGTERM and SIGINT do)."""
        self._stop.set()

    def serve(self) -> None:
        """Serve until `request_stop`, then shut down cleanly.

        Runs not finished at shutdown stay in the database; a live process of the database takes
        them over within one heartbeat, or this worker resumes them when restarted with the
        same executor id.
        """
        while not self._stop.wait(0.5):
            pass
        self.shutdown()

    def shutdown(self) -> None:
        """Stop serving (safe to call twice): take no more runs, begin no new step, let the
        steps running here finish and be recorded, then stop DBOS and mark this worker
        stopped, so live workers take its unfinished runs over at once.

        Heartbeats go on until then, so no other worker takes a run whose step still runs
        here. When the steps outlast the exit grace (`run_worker`'s `shutdown_grace`), the
        process exits with status 1 without marking itself stopped: its runs are taken over
        once it is gone (at once by a process on this machine, else after `dead_after`)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if not self._launched:
            _dbos.shutdown()
            return
        grace = self._exit_grace
        if grace is not None:
            _exit_after(grace, self)
        pace, self._pace = self._pace, None
        if pace is not None:  # within the grace: a database that is away holds it 1 s at most
            _dbos.watch_load(None)
            pace.stop(timeout=1.0)
        # The steps get the grace less a moment for DBOS's own stop.
        left = _dbos.drain(None if grace is None else max(0.0, grace - min(1.0, grace / 4)))
        if left and grace is not None:
            self._leave(grace, left)
        self._drained = not left  # steps that may not begin may hold threads: `_exit_after`
        _dbos.shutdown()
        self._say(f"executor {self.executor_id!r} stopped")

    def _leave(self, grace: float, steps: list[str]) -> None:
        """Exit at once with status 1: `steps` still run after `grace` seconds, and no other
        process may take their runs while this one lives."""
        try:
            self._say(
                f"shutdown did not finish within {grace:g} s: steps still running here: "
                f"{'; '.join(steps)}. Exiting now with status 1, as a crash would, without "
                "handing these runs over while their steps may run: a live process takes them "
                f"over once this one is gone (a process on this machine at once, others after "
                f"{self.dead_after:g} s), or this worker resumes them when restarted with the "
                f"same --executor-id. Set --shutdown-grace above your longest tool."
            )
        finally:
            os._exit(1)


def _exiting() -> bool:
    """Whether the interpreter is exiting: joining the threads of `concurrent.futures` pools
    (`threading`'s flag for it, set before that join) or the other non-daemon threads."""
    return bool(getattr(threading, "_SHUTTING_DOWN", False)) or not (
        threading.main_thread().is_alive()
    )


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()


def _exit_after(grace: float, worker: Worker) -> None:
    """End the process `grace` seconds from now if it is still stopping then: still in the
    worker's shutdown, or in the interpreter's exit that followed it (which waits for every
    thread of a `concurrent.futures` pool, so for a step that goes on or a write that DBOS
    retries). A program that goes on after `run_worker` returned is left alone (a daemon
    thread: a process that exits in time never runs its end). Called as the worker stops."""
    running = _dbos.running_runs() if _dbos.instance() is not None else []
    deadline = time.monotonic() + grace

    def force() -> None:
        while time.monotonic() < deadline:
            if worker._drained and worker._returned and _exiting() and _drain.parked():
                # Stopped cleanly; only steps that were never to begin hold threads, which
                # the interpreter's exit would wait for in vain.
                _flush()
                os._exit(0)
            time.sleep(0.05)
        # Just returned, the exit may be about to begin: look for a second before giving up.
        for _ in range(20):
            if not worker._returned or _exiting():
                break
            time.sleep(0.05)
        else:
            return  # run_worker returned and the program goes on: not a stop that hangs
        if worker._drained and worker._returned and _drain.parked():
            _flush()
            os._exit(0)
        left = ", ".join(running) or "none"
        try:
            worker._say(
                f"shutdown did not finish within {grace:g} s (runs executing here when it "
                f"began: {left}; a step still running, or the database unreachable: DBOS "
                "retries it for good). Exiting now with status 1, as a crash would: those runs "
                "stay unfinished in the database; a live process takes them over (at once if "
                f"executor {worker.executor_id!r} could mark itself stopped, else once it has "
                f"been silent for {worker.dead_after:g} s), or this worker resumes them when "
                "restarted with the same --executor-id."
            )
        finally:  # even when the output is gone (a closed pipe)
            os._exit(1)

    threading.Thread(target=force, name="durable-swarm-exit", daemon=True).start()


def run_worker(
    target: str,
    *,
    queue: str = DEFAULT_QUEUE,
    concurrency: int = DEFAULT_CONCURRENCY,
    database_url: str | None = None,
    executor_id: str | None = None,
    heartbeat_interval: float | None = None,
    dead_after: float | None = None,
    poll_interval: float = 0.5,
    out: TextIO | None = None,
    shutdown_grace: float | None = DEFAULT_SHUTDOWN_GRACE,
    on_executor_id_taken: str | None = None,
    limits: Limits | None = None,
    encryption_key: str | Sequence[str] | None = None,
    retention: Retention | Mapping[str, Any] | str | None = None,
    busy_poll_interval: float = DEFAULT_BUSY_POLL_INTERVAL,
) -> None:
    """Serve durable runs from `queue` until SIGTERM or SIGINT (`durable-swarm worker`).

    Args:
        target: `module` or `module:attr`. The module is imported (from the working directory
            or the installed packages); it defines the agents, whose names clients start runs
            by. If `attr` names a `DurableSwarm`, its model client, database and executor id
            are the worker's defaults; if it names a model client (an object with
            `chat.completions.create`, e.g. `openai.OpenAI(...)`), runs use it; anything else
            (an Agent, a function) only marks what to import, and runs use `openai.OpenAI()`
            configured from the environment. The module must not launch DBOS when imported.
        queue: the queue to take runs from (clients enqueue on it).
        concurrency: how many runs this worker executes at once (DBOS's per-worker queue
            limit; it is stored with the queue, so the last worker to start sets it for all
            the workers of the queue). A run waiting for a person gives its slot back while
            it waits; once answered, it takes the next free slot before any new run does.
            The runs of dead processes that this worker takes over count against it too, so
            they spread over the live workers.
        database_url: the run database (default: the `DurableSwarm`'s, else resolved like
            `DurableSwarm`'s: `DURABLE_SWARM_DATABASE_URL`, `DBOS_SYSTEM_DATABASE_URL`, then
            `durable_swarm.sqlite`). Workers on several machines need PostgreSQL.
        executor_id: this worker's DBOS executor id; default `worker-<host>-<pid>-<random>`.
            Pin it to have a restarted worker resume its own unfinished runs at once. An id
            is only ever taken over from a dead holder (stopped, gone from this machine, or
            silent for `dead_after`); see `on_executor_id_taken`.
        on_executor_id_taken: what to do when another live process holds `executor_id`
            (it beats again while this one looks): "error" raises `ExecutorIdInUseError`
            naming it (host, pid, last heartbeat), "fresh" takes the id `<id>-<random>`,
            "wait" starts once it has stopped or died. Default
            `DURABLE_SWARM_ON_EXECUTOR_ID_TAKEN`, else "error".
        encryption_key: the keys of encrypted runs (an `id:key` list, the first encrypts),
            instead of `DURABLE_SWARM_ENCRYPTION_KEY`; see `DurableSwarm`.
        heartbeat_interval: seconds between heartbeats (and looks for dead processes);
            default `DURABLE_SWARM_HEARTBEAT_INTERVAL`, else 5.
        dead_after: seconds without a heartbeat after which a process counts as dead and its
            runs are taken over; default `DURABLE_SWARM_DEAD_AFTER`, else 6 heartbeats.
        poll_interval: seconds between looks at the queue for new runs while it is idle.
        busy_poll_interval: the shortest interval between looks while runs wait for slots
            (default 0.05 s). A worker whose slots are all busy sets the queue's polling
            interval (DBOS's, shared by the queue's workers) to a twentieth of how long its
            runs hold a slot, at least this and at most `poll_interval`, and back to
            `poll_interval` once no run waits; so a freed slot waits about 2.5% of a run for
            the next one. Off when not below `poll_interval`.
        out: where status lines go (default stdout).
        shutdown_grace: seconds the process may take to stop once asked to, its exit
            included if it exits then. Stopping, it takes no new run and begins no new step;
            the steps running here finish and are recorded, heartbeats going on meanwhile
            (no other process takes these runs), then it marks itself stopped and live
            workers take its unfinished runs at once. Past the grace (a step still running,
            or the database unreachable, whose calls DBOS retries for good) it prints the
            steps it leaves and exits with status 1 (`os._exit`) without marking itself
            stopped: their runs are taken over once the process is gone, never while a step
            may run. Set it above your longest tool. A program that goes on after this
            function returns is not ended. Only when serving from the main thread; None
            waits for good.
        limits: the model limits (see `ModelLimits`) of the runs of swarms that set none of
            their own, shared with every process on the database: `{"gpt-4o":
            ModelLimits(...)}` or text like `"gpt-4o:rpm=500,concurrent=8"`. Default:
            `DURABLE_SWARM_MODEL_LIMITS`.
        retention: the policy this worker applies in the background (see `Retention`): a
            `Retention`, a dict, or text like "succeeded=30d,failed=90d,cancelled=7d"; default
            the `DurableSwarm`'s, else `DURABLE_SWARM_RETENTION`, else none.

    Raises `DurableSwarmError` for a bad target or setting, and `DatabaseUnavailableError` when
    the database cannot be opened. A worker taken for dead (paused or cut off for longer than
    `dead_after`) is not stopped: its runs went to another process, it records nothing more for
    them, registers again and serves new runs.
    """
    checked = check_limits(limits)
    if checked is not None:
        DEFAULTS.limits = checked
    seconds = isinstance(shutdown_grace, (int, float)) and not isinstance(shutdown_grace, bool)
    if shutdown_grace is not None and not (seconds and shutdown_grace >= 0):
        raise DurableSwarmError(
            f"shutdown_grace must be a number of seconds >= 0 (or None), not {shutdown_grace!r}."
        )
    worker = Worker(
        target,
        queue=queue,
        concurrency=concurrency,
        database_url=database_url,
        executor_id=executor_id,
        heartbeat_interval=heartbeat_interval,
        dead_after=dead_after,
        poll_interval=poll_interval,
        out=out,
        on_executor_id_taken=on_executor_id_taken,
        encryption_key=encryption_key,
        retention=retention,
        busy_poll_interval=busy_poll_interval,
    )
    in_main = threading.current_thread() is threading.main_thread()
    worker._exit_grace = shutdown_grace if in_main else None  # the process is the worker's
    previous: dict[int, Any] = {}

    def stop(signum: int, frame: Any) -> None:
        worker.request_stop()
        for number, handler in previous.items():  # a second signal acts as usual (forces exit)
            signal.signal(number, handler)

    if in_main:
        for wanted in (signal.SIGTERM, signal.SIGINT):
            previous[wanted] = signal.signal(wanted, stop)
    try:
        worker.start()
        worker.serve()
    finally:
        try:
            worker.shutdown()
        finally:
            worker._returned = True
            for number, handler in previous.items():
                signal.signal(number, handler)
