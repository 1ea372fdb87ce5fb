"""Runs waiting for a person: one watcher per process, whatever the number of waiting runs.

A run waiting for input or an approval sits in a DBOS step (`watch:input`, `watch:approval`) whose
body returns once a DBOS message for the run is in the database; the run then takes it with
`DBOS.recv` (so the message is consumed and recorded exactly as before). `DBOS.recv` alone would
cost a database query per waiting run every poll interval on SQLite (and one per minute on
PostgreSQL): idle waits that grow with their number. Here one thread per process watches for new
messages for all of them:
- on SQLite, by the rowid of DBOS's `notifications` table (one indexed range query per poll
  interval, however many runs wait; SQLite commits one writer at a time, so rowids appear in
  commit order);
- on PostgreSQL, by listening on the channel DBOS's trigger notifies for every message (no
  polling at all).
Every `SWEEP_SECONDS`, and after the listener reconnects, it also checks every waiting run
directly (batched), so a message it missed (a dropped connection, a deleted row whose rowid came
back) still wakes its run, and a waiting run that was cancelled gives its task up. A run
cancelled through the library, from any process, is also sent a message on `CANCEL_TOPIC`
(never read by the run): the watcher of the process that holds the run (or one of its
sub-agents) sees it as any other message and ends those waits at once.

The watcher thread runs only while some run waits; a process with no waiting run makes no query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from ._engine import DBOSWorkflowCancelledError, notification_poll_interval

__all__ = [
    "CANCEL_TOPIC",
    "SWEEP_SECONDS",
    "WaitWatcher",
    "nudge_watchers",
    "stop_watchers",
    "watcher_for",
]

logger = logging.getLogger("durable_swarm")

SWEEP_SECONDS = 30.0
BATCH = 500  # run ids per IN (...) list
CHANNEL = "dbos_notifications_channel"  # what DBOS's trigger on `notifications` notifies
# The topic of the notice sent to a run when it is cancelled (see the module docstring).
CANCEL_TOPIC = "durable_swarm.cancelled"

Key = tuple[str, str]  # (run id, topic)


class WaitWatcher:
    """Wakes the runs of this process that wait for a DBOS message (see the module docstring).

    `sys_db` is DBOS's system database object (its engine and table definitions); `poll_interval`
    is how often SQLite is read for new messages (DBOS's own notification poll interval).
    """

    def __init__(self, sys_db: Any, poll_interval: float) -> None:
        self._engine: sa.Engine = sys_db.engine
        self._notifications = sys_db.tables.notifications
        self._status = sys_db.tables.workflow_status
        self._postgres = self._engine.dialect.name == "postgresql"
        self._poll = max(0.01, poll_interval)
        self._lock = threading.Lock()
        self._waiters: dict[Key, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
        self._wake = threading.Event()  # a waiter arrived: the thread starts or stops sleeping
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._nudged = False  # sweep at the next look (a run was cancelled in this process)

    # --- the waiting side (the event loop of a run) -------------------------------------------

    async def wait(self, run_id: str, topic: str) -> None:
        """Return once a message on `topic` for `run_id` is in the database, not consumed yet.

        Raises `DBOSWorkflowCancelledError` when the run is found cancelled while it waits.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        key = (run_id, topic)
        with self._lock:
            self._waiters.setdefault(key, []).append((loop, future))
            self._ensure_thread()
        try:
            # A message sent before this run registered is found by looking once, now. If the
            # database does not answer, the watcher's sweep looks again (a failed look must not
            # become this step's recorded outcome).
            try:
                if await asyncio.to_thread(self._pending, [key]):
                    return
            except Exception as e:
                logger.warning("Run %s: first look for its answer failed (%s).", run_id, e)
                self.nudge()
            await future
        finally:
            with self._lock:
                entries = self._waiters.get(key, [])
                entries[:] = [(lp, f) for lp, f in entries if f is not future]
                if not entries:
                    self._waiters.pop(key, None)

    def waiting(self) -> int:
        """How many waits this watcher holds now."""
        with self._lock:
            return sum(len(entries) for entries in self._waiters.values())

    def nudge(self) -> None:
        """Check every waiting run at the next look, not at the next sweep (a cancellation)."""
        self._nudged = True

    def stop(self) -> None:
        """Stop the thread (DBOS is shutting down); waits still held are left to their tasks."""
        self._stopped = True
        self._wake.set()

    # --- the watching side (one thread) ---------------------------------------------------------

    def _ensure_thread(self) -> None:
        self._wake.set()
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name="durable-swarm-waits", daemon=True
            )
            self._thread.start()

    def _keys(self) -> list[Key]:
        with self._lock:
            return list(self._waiters)

    def _any_waiting(self) -> bool:
        # A dict's truth is read atomically; no copy of thousands of keys at every look.
        return bool(self._waiters)

    def _resolve(self, keys: Iterable[Key], error: BaseException | None = None) -> None:
        with self._lock:
            entries = [entry for key in keys for entry in self._waiters.get(key, [])]
        for loop, future in entries:
            # A closed event loop (RuntimeError) has nothing waiting on it any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, error)

    def _run(self) -> None:
        while not self._stopped:
            if not self._any_waiting():
                self._wake.clear()
                if not self._any_waiting():  # nothing waits: sleep until a waiter arrives
                    self._wake.wait(SWEEP_SECONDS)
                continue
            try:
                if self._postgres:
                    self._listen()
                else:
                    self._poll_rowids()
            except Exception as e:  # the database is away: sweep once it answers again
                if self._stopped:
                    return
                logger.warning("Watching for answers to waiting runs failed (%s); retrying.", e)
                time.sleep(1.0)

    def _poll_rowids(self) -> None:
        """SQLite: read the messages added since the last look, by rowid, on a connection of
        its own (a plain sqlite3 cursor: this runs every poll interval, and SQLAlchemy's pool
        checkout and statement building cost more than SQLite's answer)."""
        table = self._notifications.name
        raw = self._engine.raw_connection()
        raw.detach()  # not one of DBOS's pooled connections: it is closed here, never returned
        try:
            cursor = raw.dbapi_connection.cursor()  # type: ignore[union-attr]
            seen: int = cursor.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
            newer = f"SELECT rowid, destination_uuid, topic FROM {table} WHERE rowid > ?"
            self._sweep()
            swept = time.monotonic()
            while not self._stopped and self._any_waiting():
                time.sleep(self._poll)
                rows = cursor.execute(newer, (seen,)).fetchall()
                if rows:
                    seen = max(seen, max(int(r[0]) for r in rows))
                    self._wake_found({(r[1], r[2]) for r in rows})
                if self._nudged or time.monotonic() - swept >= SWEEP_SECONDS:
                    self._sweep()
                    swept = time.monotonic()
        finally:
            raw.close()

    def _listen(self) -> None:
        """PostgreSQL: LISTEN on DBOS's notifications channel on a connection of its own."""
        raw = self._engine.raw_connection()
        raw.detach()
        conn: Any = raw.dbapi_connection
        try:
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}")
            self._sweep()  # what was sent before listening
            swept = time.monotonic()
            while not self._stopped and self._any_waiting():
                # Each message as it comes; at least once a second, a look at the sweep's clock.
                found: set[Key] = set()
                for notify in conn.notifies(timeout=1.0, stop_after=1):  # the whole packet
                    run_id, _, topic = (notify.payload or "").rpartition("::")
                    found.add((run_id, topic))
                if found:
                    self._wake_found(found)
                if self._nudged or time.monotonic() - swept >= SWEEP_SECONDS:
                    self._sweep()
                    swept = time.monotonic()
        finally:
            raw.close()

    def _wake_found(self, found: set[Key]) -> None:
        """Wake the waits among `found` whose message is still there (a run consumes its own);
        end the waits of runs sent a cancellation notice, and of their sub-agents, if they
        are cancelled."""
        with self._lock:
            keys = [key for key in found if key in self._waiters]
        if keys:
            self._resolve(self._pending(keys))
        roots = {run_id for run_id, topic in found if topic == CANCEL_TOPIC}
        if roots:
            keys = self._keys()
            tree = {k[0] for k in keys if any(_within(k[0], root) for root in roots)}
            self._give_up(keys, tree)

    def _sweep(self) -> None:
        """Check every waiting run directly: a pending message wakes it, a cancellation ends it."""
        self._nudged = False
        keys = self._keys()
        if not keys:
            return
        self._resolve(self._pending(keys))
        self._give_up(keys, {run_id for run_id, _ in keys})

    def _give_up(self, keys: list[Key], run_ids: set[str]) -> None:
        """End the waits among `keys` of those of `run_ids` that are cancelled, or deleted."""
        if not run_ids:
            return
        for run_id in self._ended(run_ids):
            error = DBOSWorkflowCancelledError(f"Run {run_id} was cancelled while it waited")
            self._resolve([k for k in keys if k[0] == run_id], error)

    def _pending(self, keys: list[Key]) -> list[Key]:
        """Those of `keys` with an unconsumed message in the database."""
        n, wanted, found = self._notifications, set(keys), list[Key]()
        run_ids = sorted({run_id for run_id, _ in keys})
        with self._engine.connect() as conn:
            for i in range(0, len(run_ids), BATCH):
                rows = conn.execute(
                    sa.select(n.c.destination_uuid, n.c.topic)
                    .where(
                        n.c.destination_uuid.in_(run_ids[i : i + BATCH]),
                        n.c.consumed == sa.false(),
                    )
                    .distinct()
                ).all()
                found.extend(key for r in rows if (key := (r[0], r[1])) in wanted)
        return found

    def _ended(self, run_ids: set[str]) -> list[str]:
        """Those of `run_ids` that are cancelled, or no longer in the database (deleted: a
        forced delete cancels a live run first). One summary row per batch of ids; their
        statuses are read only when some are cancelled or missing."""
        ws, ids, found = self._status, sorted(run_ids), list[str]()
        uuid, cancelled = ws.c.workflow_uuid, ws.c.status == "CANCELLED"
        summary = sa.select(sa.func.count(), sa.func.sum(sa.case((cancelled, 1), else_=0)))
        with self._engine.connect() as conn:
            for i in range(0, len(ids), BATCH):
                batch = ids[i : i + BATCH]
                present, stopped = conn.execute(summary.where(uuid.in_(batch))).one()
                if int(present) == len(batch) and not stopped:
                    continue
                rows = conn.execute(sa.select(uuid, ws.c.status).where(uuid.in_(batch))).all()
                status = {row[0]: row[1] for row in rows}
                found.extend(r for r in batch if status.get(r, "CANCELLED") == "CANCELLED")
        return found


def _within(run_id: str, root: str) -> bool:
    """Whether `run_id` is `root` or one of its sub-agent runs (`<root>-sub<N>`, nested)."""
    return run_id == root or run_id.startswith(f"{root}-sub")


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if not future.done():
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


_watchers: dict[int, WaitWatcher] = {}
_watchers_lock = threading.Lock()


def watcher_for(sys_db: Any) -> WaitWatcher:
    """The watcher of the launched DBOS's system database `sys_db` (one per launch)."""
    with _watchers_lock:
        watcher = _watchers.get(id(sys_db))
        if watcher is None:
            for old in _watchers.values():
                old.stop()
            _watchers.clear()
            poll = notification_poll_interval(sys_db)
            watcher = _watchers[id(sys_db)] = WaitWatcher(sys_db, poll)
        return watcher


def stop_watchers() -> None:
    """Stop every watcher (DBOS is shutting down in this process)."""
    with _watchers_lock:
        for watcher in _watchers.values():
            watcher.stop()
        _watchers.clear()


def nudge_watchers() -> None:
    """Make this process's watcher check its waiting runs now (one was just cancelled here)."""
    with _watchers_lock:
        for watcher in _watchers.values():
            watcher.nudge()
