"""Workers: processes that serve durable runs from a DBOS queue, and finish those of dead workers.

`run_worker("module:app", queue=..., concurrency=...)` imports the app's module (which defines the
agents, tools and model client), launches DBOS listening only to `queue` (plus DBOS's internal
queue, which carries recovered runs), registers the queue with a per-worker concurrency limit and
serves until SIGTERM or SIGINT. A thin client (`DurableClient`) enqueues runs by agent name.

Dead workers. DBOS recovers, at launch, only the pending runs of its own executor id. A worker
that dies for good (its machine is gone, or it restarts under a new executor id) would leave its
runs pending forever, so every worker keeps a row in the table `durable_swarm_workers` (same
database) and refreshes its `heartbeat_at` every `heartbeat_interval` seconds. Every worker also
looks, as often, for rows whose heartbeat is older than `dead_after`; it claims such a row with a
conditional UPDATE (only one worker's update matches, so two live workers never both take the
same dead worker), puts the dead executor's PENDING runs back on their queue through DBOS's
recovery, and deletes the row. Runs still ENQUEUED need nothing: any worker of the queue dequeues
them. Times are the database's clock, so workers on machines with skewed clocks agree.

A worker that finds its own row claimed (it was silent for longer than `dead_after`: paused, cut
off from the database) has lost its runs to another worker: it stops rather than run them twice.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import sqlalchemy as sa
from dbos import DBOS

from .. import _registry
from ..errors import DatabaseUnavailableError, DurableSwarmError
from . import _dbos
from ._client import DEFAULT_QUEUE
from ._database import create_engine, display_url, resolve_database_url
from ._swarm import DurableSwarm
from ._workflow import HOST

__all__ = [
    "DEFAULT_CONCURRENCY",
    "WORKERS_TABLE",
    "Worker",
    "WorkerRegistry",
    "load_target",
    "recover_runs_of",
    "run_worker",
]

DEFAULT_CONCURRENCY = 10
WORKERS_TABLE = "durable_swarm_workers"

_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {WORKERS_TABLE} (
    executor_id VARCHAR(255) PRIMARY KEY,
    queue VARCHAR(255) NOT NULL,
    host VARCHAR(255) NOT NULL,
    pid INTEGER NOT NULL,
    incarnation VARCHAR(64) NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    claimed_by VARCHAR(255)
)
"""


@dataclass(frozen=True)
class WorkerRow:
    """One worker's row in `durable_swarm_workers`, as read (a snapshot for conditional writes)."""

    executor_id: str
    incarnation: str
    heartbeat_at: int
    claimed_by: str | None
    age_ms: int


class WorkerRegistry:
    """The table of live workers: heartbeats, and claims on the dead ones.

    Every write is a single conditional statement whose row count says whether it applied, so
    concurrent workers on SQLite or PostgreSQL agree without locks held across statements. A row
    is identified by its executor id and the `incarnation` of the process that wrote it, so a
    restarted worker with a pinned executor id takes its row over and the old process (if it is
    in fact still alive) notices.
    """

    def __init__(
        self,
        database_url: str,
        executor_id: str,
        queue: str,
        *,
        dead_after: float,
    ) -> None:
        self.executor_id = executor_id
        self.queue = queue
        self.dead_after_ms = int(dead_after * 1000)
        self.incarnation = uuid.uuid4().hex
        self._engine = create_engine(database_url, pool_size=2)
        if self._engine.dialect.name == "postgresql":
            self._now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
        else:
            self._now = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    def database_exists(self) -> bool:
        """False only for a PostgreSQL database not created yet (DBOS creates it at launch)."""
        try:
            with self._engine.connect():
                return True
        except sa.exc.OperationalError:
            name = self._engine.url.database
            if self._engine.dialect.name != "postgresql" or not name:
                raise
            server = sa.create_engine(self._engine.url.set(database="postgres"))
            try:
                with server.connect() as conn:
                    query = sa.text("SELECT 1 FROM pg_database WHERE datname = :name")
                    missing = conn.execute(query, {"name": name}).first() is None
            except sa.exc.DBAPIError:
                missing = False  # the server cannot tell: report the first error
            finally:
                server.dispose()
            if not missing:
                raise
            return False

    def _execute(self, sql: str, **params: Any) -> int:
        """Run one statement in a transaction of its own; returns the affected row count."""
        with self._engine.begin() as conn:
            return conn.execute(sa.text(sql), params).rowcount

    def ensure_table(self) -> None:
        """Create the table if it is missing (workers starting together may race: retried)."""
        for attempt in range(3):
            try:
                self._execute(_CREATE_TABLE)
                return
            except sa.exc.DBAPIError:
                if attempt == 2:
                    raise

    def _read(self, where: str, **params: Any) -> list[WorkerRow]:
        query = sa.text(
            f"SELECT executor_id, incarnation, heartbeat_at, claimed_by, "
            f"{self._now} - heartbeat_at AS age_ms FROM {WORKERS_TABLE} WHERE {where}"
        )
        with self._engine.begin() as conn:
            return [WorkerRow(*row) for row in conn.execute(query, params)]

    def register(self, wait: Callable[[float], bool]) -> None:
        """Write this worker's row (taking over a stale one of the same executor id).

        If another worker is recovering this executor id's runs right now (a fresh claim on
        the row), waits until it is done, so this process's own recovery at launch and the
        claimer's never both handle the same run. `wait(seconds)` sleeps and returns True to
        give up (the worker is stopping).
        """
        self.ensure_table()
        while True:
            found = self._read("executor_id = :me", me=self.executor_id)
            if not found:
                try:
                    self._execute(
                        f"INSERT INTO {WORKERS_TABLE} (executor_id, queue, host, pid, "
                        f"incarnation, started_at, heartbeat_at) VALUES (:me, :queue, :host, "
                        f":pid, :inc, {self._now}, {self._now})",
                        me=self.executor_id,
                        queue=self.queue,
                        host=socket.gethostname(),
                        pid=os.getpid(),
                        inc=self.incarnation,
                    )
                    return
                except sa.exc.IntegrityError:
                    continue  # another process with this executor id inserted first: look again
            row = found[0]
            if row.claimed_by is not None and row.age_ms <= self.dead_after_ms:
                if wait(0.2):
                    return
                continue
            claimed = "claimed_by IS NULL" if row.claimed_by is None else "claimed_by = :by"
            taken = self._execute(
                f"UPDATE {WORKERS_TABLE} SET incarnation = :inc, queue = :queue, host = :host, "
                f"pid = :pid, started_at = {self._now}, heartbeat_at = {self._now}, "
                f"claimed_by = NULL WHERE executor_id = :me AND incarnation = :old "
                f"AND heartbeat_at = :hb AND {claimed}",
                inc=self.incarnation,
                queue=self.queue,
                host=socket.gethostname(),
                pid=os.getpid(),
                me=self.executor_id,
                old=row.incarnation,
                hb=row.heartbeat_at,
                by=row.claimed_by,
            )
            if taken == 1:
                return

    def beat(self) -> bool:
        """Refresh this worker's heartbeat; False if its row was claimed or taken over."""
        done = self._execute(
            f"UPDATE {WORKERS_TABLE} SET heartbeat_at = {self._now} WHERE executor_id = :me "
            "AND incarnation = :inc AND claimed_by IS NULL",
            me=self.executor_id,
            inc=self.incarnation,
        )
        return done == 1

    def dead(self) -> list[WorkerRow]:
        """Other workers silent for longer than `dead_after` (stopped ones included), and
        claims whose claimer died before finishing."""
        return self._read(
            f"executor_id <> :me AND heartbeat_at < {self._now} - :dead",
            me=self.executor_id,
            dead=self.dead_after_ms,
        )

    def claim(self, row: WorkerRow) -> bool:
        """Claim a dead worker's row; True for exactly one of several claimers."""
        done = self._execute(
            f"UPDATE {WORKERS_TABLE} SET claimed_by = :me, heartbeat_at = {self._now} "
            "WHERE executor_id = :id AND incarnation = :inc AND heartbeat_at = :hb",
            me=self.executor_id,
            id=row.executor_id,
            inc=row.incarnation,
            hb=row.heartbeat_at,
        )
        return done == 1

    def release(self, row: WorkerRow) -> None:
        """Delete a claimed row once its runs are back on their queues."""
        self._execute(
            f"DELETE FROM {WORKERS_TABLE} WHERE executor_id = :id AND incarnation = :inc "
            "AND claimed_by = :me",
            id=row.executor_id,
            inc=row.incarnation,
            me=self.executor_id,
        )

    def stop(self) -> None:
        """Mark this worker stopped (its heartbeat made stale), so a live worker takes over its
        unfinished runs at once."""
        self._execute(
            f"UPDATE {WORKERS_TABLE} SET heartbeat_at = 0 WHERE executor_id = :me "
            "AND incarnation = :inc AND claimed_by IS NULL",
            me=self.executor_id,
            inc=self.incarnation,
        )


def recover_runs_of(executor_id: str) -> int:
    """Put the PENDING runs of the (dead) executor `executor_id` back on their queues; returns
    how many. Needs DBOS launched in this process."""
    # DBOS (3.4) recovers only its own executor's runs at launch and has no public call for
    # another executor's. This private one is what launch uses: it re-enqueues each PENDING run
    # of the current application version on its own queue (DBOS's internal queue for runs started
    # without one), only if the run still carries `executor_id`, so a run a live worker has
    # dequeued since is left alone and calling it twice is harmless.
    return len(DBOS._recover_pending_workflows([executor_id]))


def load_target(target: str) -> Any:
    """Import `module` or `module:attr` (the working directory is importable) and return the
    module or the attribute (dotted paths allowed)."""
    module_name, _, attr = target.partition(":")
    if not module_name or (":" in target and not attr):
        raise DurableSwarmError(
            f"Worker target {target!r} is not `module:attribute` (e.g. `myapp.agents:swarm`)."
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise  # a module the app imports is missing: the traceback says which
        raise DurableSwarmError(
            f"Cannot import module {module_name!r} for the worker ({e}). Run the worker from "
            "the directory that holds it, or install the package that provides it."
        ) from e
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise DurableSwarmError(
                f"Module {module_name!r} has no attribute {attr!r}; the worker target names a "
                "DurableSwarm, a model client, an Agent, or any object the module defines."
            ) from e
    return obj


def _is_model_client(obj: Any) -> bool:
    chat = getattr(obj, "chat", None)
    return callable(getattr(getattr(chat, "completions", None), "create", None))


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
        heartbeat_interval: float = 5.0,
        dead_after: float | None = None,
        poll_interval: float = 0.5,
        out: TextIO | None = None,
    ) -> None:
        if not queue:
            raise DurableSwarmError("A worker needs a queue name (--queue NAME).")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise DurableSwarmError(
                f"Worker concurrency must be a whole number of runs >= 1, not {concurrency!r}."
            )
        if heartbeat_interval <= 0 or poll_interval <= 0:
            raise DurableSwarmError("heartbeat_interval and poll_interval must be > 0 seconds.")
        self.target = target
        self.queue = queue
        self.concurrency = concurrency
        self.heartbeat_interval = heartbeat_interval
        self.dead_after = 6 * heartbeat_interval if dead_after is None else dead_after
        if self.dead_after <= heartbeat_interval:
            raise DurableSwarmError(
                f"dead_after ({self.dead_after} s) must be longer than heartbeat_interval "
                f"({heartbeat_interval} s), or live workers would be taken for dead."
            )
        self.poll_interval = poll_interval
        self._database_url = database_url
        self._executor_id = executor_id
        self.database_url = ""
        self.executor_id = ""
        self._out = out or sys.stdout
        self._stop = threading.Event()
        self._lost: str | None = None
        self._monitor: threading.Thread | None = None
        self._registry: WorkerRegistry | None = None
        self._closed = False

    def _say(self, text: str) -> None:
        print(f"durable-swarm worker: {text}", file=self._out, flush=True)

    def start(self) -> Worker:
        """Import the target, launch DBOS on the queue and start the heartbeat; returns self."""
        if _dbos._instance() is not None:
            raise DurableSwarmError(
                "DBOS is already set up in this process; a worker sets DBOS up itself. Start "
                "the worker in a process of its own."
            )
        obj = load_target(self.target)
        if _dbos._instance() is not None:
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
        elif _is_model_client(obj):
            HOST.default_client = obj
        self.database_url = resolve_database_url(url)
        self.executor_id = self._executor_id or (
            f"worker-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
        )
        registry = WorkerRegistry(
            self.database_url, self.executor_id, self.queue, dead_after=self.dead_after
        )
        self._registry = registry
        try:
            # Register before launching, so a claim in progress on this executor id finishes
            # before DBOS recovers this executor's runs at launch. A PostgreSQL database that
            # does not exist yet has no rows: DBOS creates it, then the row is written.
            early = registry.database_exists()
            if early:
                registry.register(self._stop.wait)
        except sa.exc.DBAPIError as e:
            registry.close()
            raise DatabaseUnavailableError(display_url(self.database_url), str(e.orig)) from e
        _dbos.ensure_launched(
            self.database_url,
            executor_id=self.executor_id,
            poll_interval=listener_poll,
            queues=[self.queue],
        )
        if not early:
            registry.register(self._stop.wait)
        if self._stop.is_set():
            return self  # stopped while waiting to register: `serve` shuts down at once
        self._register_queue()
        agents = ", ".join(sorted(_registry._agents)) or "none"
        self._say(
            f"serving queue {self.queue!r} on {display_url(self.database_url)} as executor "
            f"{self.executor_id!r}, concurrency {self.concurrency}; agents: {agents}"
        )
        self._monitor = threading.Thread(
            target=self._watch, name="durable-swarm-heartbeat", daemon=True
        )
        self._monitor.start()
        return self

    def _register_queue(self) -> None:
        existing = DBOS.retrieve_queue(self.queue)
        if existing is not None and existing.worker_concurrency not in (None, self.concurrency):
            self._say(
                f"queue {self.queue!r} had concurrency {existing.worker_concurrency} per worker; "
                f"it is now {self.concurrency} for every worker of the queue (the limit is "
                "stored with the queue, the last worker to start sets it)"
            )
        DBOS.register_queue(
            self.queue,
            worker_concurrency=self.concurrency,
            polling_interval_sec=self.poll_interval,
            on_conflict="always_update",
        )

    def _watch(self) -> None:
        """Heartbeat, and take over the runs of dead workers, every `heartbeat_interval`."""
        registry = self._registry
        assert registry is not None
        while True:
            try:
                if not registry.beat():
                    self._lost = (
                        f"worker {self.executor_id!r} was taken for dead (no heartbeat for over "
                        f"{self.dead_after} s) and its runs were handed to another worker; it "
                        "stopped so they do not run twice. Restart it (check the database "
                        "connection and that the machine is not overloaded)."
                    )
                    self._stop.set()
                    return
                self._take_over(registry)
            except Exception as e:  # the database may be briefly unreachable: try again later
                self._say(f"heartbeat failed ({type(e).__name__}: {e}); retrying")
            if self._stop.wait(self.heartbeat_interval):
                return

    def _take_over(self, registry: WorkerRegistry) -> None:
        for row in registry.dead():
            if self._stop.is_set() or not registry.claim(row):
                continue
            count = recover_runs_of(row.executor_id)
            registry.release(row)
            self._say(
                f"worker {row.executor_id!r} is gone (silent for {row.age_ms / 1000:.1f} s); "
                f"{count} of its unfinished runs are back on their queues"
            )

    def request_stop(self) -> None:
        """Ask `serve` to return (what SIGTERM and SIGINT do)."""
        self._stop.set()

    def serve(self) -> None:
        """Serve until `request_stop` (or a lost heartbeat), then shut down cleanly.

        Runs not finished at shutdown stay in the database; a live worker of the database takes
        them over within one heartbeat, or this worker resumes them when restarted with the
        same executor id.
        """
        while not self._stop.wait(0.5):
            pass
        self.shutdown()
        if self._lost:
            raise DurableSwarmError(self._lost)

    def shutdown(self) -> None:
        """Stop the heartbeat and DBOS, and mark this worker stopped (safe to call twice)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join()
        _dbos.shutdown()
        registry, self._registry = self._registry, None
        if registry is None:
            return
        try:
            if not self._lost:
                registry.stop()
        except sa.exc.DBAPIError as e:
            self._say(f"could not mark the worker stopped ({e.orig}); it will time out instead")
        finally:
            registry.close()
        if self._monitor is not None:
            self._say(f"executor {self.executor_id!r} stopped")


def run_worker(
    target: str,
    *,
    queue: str = DEFAULT_QUEUE,
    concurrency: int = DEFAULT_CONCURRENCY,
    database_url: str | None = None,
    executor_id: str | None = None,
    heartbeat_interval: float = 5.0,
    dead_after: float | None = None,
    poll_interval: float = 0.5,
    out: TextIO | None = None,
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
            the workers of the queue). A run waiting for a person holds its slot.
        database_url: the run database (default: the `DurableSwarm`'s, else resolved like
            `DurableSwarm`'s: `DURABLE_SWARM_DATABASE_URL`, `DBOS_SYSTEM_DATABASE_URL`, then
            `durable_swarm.sqlite`). Workers on several machines need PostgreSQL.
        executor_id: this worker's DBOS executor id; default `worker-<host>-<pid>-<random>`.
            Pin it to have a restarted worker resume its own unfinished runs at once.
        heartbeat_interval: seconds between heartbeats (and looks for dead workers).
        dead_after: seconds without a heartbeat after which a worker counts as dead and its
            runs are taken over (default 6 heartbeats).
        poll_interval: seconds between looks at the queue for new runs.
        out: where status lines go (default stdout).

    Raises `DurableSwarmError` for a bad target or setting, `DatabaseUnavailableError` when the
    database cannot be opened, and `DurableSwarmError` after stopping if this worker was taken
    for dead (its runs went to another worker).
    """
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
    )
    in_main = threading.current_thread() is threading.main_thread()
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
        worker.shutdown()
        for number, handler in previous.items():
            signal.signal(number, handler)
