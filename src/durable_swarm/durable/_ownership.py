"""Process identity and run ownership: who may run a durable run, and who takes over a dead one.

Every process that launches DBOS for this library (a plain `DurableSwarm`, a worker, `chat`) is
one DBOS executor with an id of its own and a row in the table `durable_swarm_processes` of the
run database, whose `heartbeat_at` it refreshes every `heartbeat_interval` seconds. A run belongs
to the executor that last started it (DBOS's `executor_id` on the run).

Recovery takes only the runs of processes known to be dead:
* a process silent for longer than `dead_after` seconds (by the database's clock, so machines
  with skewed clocks agree), or marked stopped at a clean shutdown;
* a process on this machine whose pid is gone (checked against the pid's start time, so a reused
  pid is not mistaken for the old process);
* runs left PENDING under an executor id that has no row at all (a process that never registered,
  or whose row was already released): they are swept periodically, so no run stays pending with
  no owner after any outage.
A dead process's row is claimed with a conditional UPDATE (exactly one claimer's update matches),
its PENDING runs go back on their queues through DBOS's recovery, and the row is deleted.

Partitions. A process judges others by their heartbeats only after it has itself been connected
for `dead_after` seconds, so when everyone was cut off at once (the database restarted, the
network split) nobody declares the others dead on reconnecting: each gets the time to beat again.
A process whose own heartbeat is not confirmed (it could not write it, or wrote it too long ago:
it was paused, frozen or cut off) takes no run from any queue until a heartbeat succeeds again.
A database clock that jumps ahead makes every heartbeat look old at once: a process sees the
jump (the database's clock moved further than its own between two of its heartbeats, or since
its last one) and judges nobody by heartbeat for `dead_after`. A claim applies only while the
claimer's own row is still its own and unclaimed, so two processes that judge each other dead at
the same moment never both lose.
If its row was claimed meanwhile (it was taken for dead), its runs now belong to the claimer:
DBOS's ownership token (`owner_xid`) makes every further write of the old execution fail, so it
records nothing more for them; the process registers again and goes on serving new work.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from ..errors import DurableSwarmError, ExecutorIdInUseError
from ._database import checks_connections, create_engine, describe_fault, display_url
from ._tables import upgrade_table

__all__ = [
    "DEAD_AFTER_ENV",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "HEARTBEAT_ENV",
    "ON_TAKEN_ENV",
    "PROCESSES_TABLE",
    "Ownership",
    "ProcessRegistry",
    "ProcessRow",
    "RunKeeper",
    "new_executor_id",
    "on_taken_policy",
    "timing",
]

logger = logging.getLogger("durable_swarm")

PROCESSES_TABLE = "durable_swarm_processes"
DEFAULT_HEARTBEAT_INTERVAL = 5.0
DEAD_AFTER_HEARTBEATS = 6
HEARTBEAT_ENV = "DURABLE_SWARM_HEARTBEAT_INTERVAL"
DEAD_AFTER_ENV = "DURABLE_SWARM_DEAD_AFTER"

_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {PROCESSES_TABLE} (
    executor_id VARCHAR(255) PRIMARY KEY,
    kind VARCHAR(32) NOT NULL,
    queue VARCHAR(255),
    host VARCHAR(255) NOT NULL,
    machine VARCHAR(64) NOT NULL,
    pid INTEGER NOT NULL,
    pid_start VARCHAR(64) NOT NULL,
    incarnation VARCHAR(64) NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    claimed_by VARCHAR(255),
    slots INTEGER
)
"""
# `slots` (how many runs of dead processes the process takes at a time, see
# `ProcessRegistry.fleet_slots`) came in a later release: added to a table made before it.
_ADD_SLOTS = {
    "postgresql": f"ALTER TABLE {PROCESSES_TABLE} ADD COLUMN IF NOT EXISTS slots INTEGER",
    "sqlite": f"ALTER TABLE {PROCESSES_TABLE} ADD COLUMN slots INTEGER",
}


def _seconds(value: float | str | None, name: str, env: str) -> float | None:
    if value is None:
        raw = os.environ.get(env)
        if not raw:
            return None
        value = raw
    try:
        seconds = float(value)
    except ValueError:
        raise DurableSwarmError(
            f"{name} must be a number of seconds, not {value!r} (check {env})."
        ) from None
    if not seconds > 0:
        raise DurableSwarmError(f"{name} must be > 0 seconds, not {value!r}.")
    return seconds


def timing(
    heartbeat_interval: float | None = None, dead_after: float | None = None
) -> tuple[float, float]:
    """`(heartbeat_interval, dead_after)` in seconds: the arguments, else the environment
    (`DURABLE_SWARM_HEARTBEAT_INTERVAL`, `DURABLE_SWARM_DEAD_AFTER`), else 5 s and 6 heartbeats.

    Raises `DurableSwarmError` for a value that is not a positive number, or a `dead_after` not
    longer than the heartbeat interval (live processes would be taken for dead).
    """
    beat = _seconds(heartbeat_interval, "heartbeat_interval", HEARTBEAT_ENV)
    beat = DEFAULT_HEARTBEAT_INTERVAL if beat is None else beat
    dead = _seconds(dead_after, "dead_after", DEAD_AFTER_ENV)
    dead = DEAD_AFTER_HEARTBEATS * beat if dead is None else dead
    if dead <= beat:
        raise DurableSwarmError(
            f"dead_after ({dead} s) must be longer than heartbeat_interval ({beat} s), or live "
            f"processes would be taken for dead (set them with the arguments, or {HEARTBEAT_ENV}"
            f" and {DEAD_AFTER_ENV})."
        )
    return beat, dead


ON_TAKEN_ENV = "DURABLE_SWARM_ON_EXECUTOR_ID_TAKEN"
ON_TAKEN = ("error", "fresh", "wait")


def on_taken_policy(value: str | None) -> str:
    """What a process does when a live process may hold its executor id: the argument, else
    `DURABLE_SWARM_ON_EXECUTOR_ID_TAKEN`, else "error" (see `ProcessRegistry.register`)."""
    policy = value or os.environ.get(ON_TAKEN_ENV) or "error"
    if policy not in ON_TAKEN:
        raise DurableSwarmError(
            f"on_executor_id_taken must be one of {', '.join(ON_TAKEN)}, not {policy!r} (check "
            f"the argument, --on-executor-id-taken, or {ON_TAKEN_ENV})."
        )
    return policy


def _back(count: int) -> str:
    """What a takeover did with a dead process's `count` unfinished runs, in words."""
    if count == 0:
        return "it left no unfinished run"
    if count == 1:
        return "its 1 unfinished run is back on its queue"
    return f"{count} of its unfinished runs are back on their queues"


def new_executor_id(kind: str) -> str:
    """A fresh executor id for this process: `<kind>-<host>-<pid>-<random>`."""
    return f"{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _machine() -> str:
    """This machine and pid namespace: processes with the same value can check each other's
    pids. (Hostname alone is not enough: containers may share one and not see each other.)"""
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    parts = [socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"), namespace]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _pid_start(pid: int) -> str | None:
    """The start time of process `pid` (Linux: clock ticks since boot; "" where it cannot be
    read), or None only if it is known not to exist or to have exited (a zombie).

    `/proc/<pid>/stat` gives the start time (so a reused pid is not taken for the old process).
    Where it cannot be read (another user's process under `hidepid=2` or systemd's
    `ProtectProc=invisible`, or no `/proc`), `kill(pid, 0)` decides: no such process is gone,
    EPERM means alive; a process that cannot be checked is then judged by its heartbeat."""
    stat = _read(f"/proc/{pid}/stat")
    if stat:
        fields = stat.rsplit(")", 1)[-1].split()
        return None if fields[0] in ("Z", "X") else fields[19]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        pass  # cannot tell: its heartbeat decides
    return ""


MACHINE = _machine()


@dataclass(frozen=True)
class ProcessRow:
    """One process's row in `durable_swarm_processes`, as read (a snapshot for conditional
    writes)."""

    executor_id: str
    incarnation: str
    heartbeat_at: int
    claimed_by: str | None
    age_ms: int
    machine: str = ""
    pid: int = 0
    pid_start: str = ""
    host: str = ""

    def exited(self) -> bool:
        """Whether this row's process ran on this machine and has exited."""
        if self.machine != MACHINE:
            return False
        start = _pid_start(self.pid)
        return start is None or (bool(start) and bool(self.pid_start) and start != self.pid_start)

    def why_dead(self) -> str:
        """How the process was found dead, for the log line."""
        if self.heartbeat_at == 0:
            return "stopped"
        if self.exited():
            return f"process {self.pid} exited"
        return f"silent for {self.age_ms / 1000:.1f} s"


class ProcessRegistry:
    """The table of live processes: heartbeats, and claims on the dead ones.

    Every write is a single conditional statement whose row count says whether it applied, so
    concurrent processes on SQLite or PostgreSQL agree without locks held across statements. A
    row is identified by its executor id and the `incarnation` of the process that wrote it, so a
    restarted process with a pinned executor id takes its row over and the old process (if it is
    in fact still alive) notices.
    """

    def __init__(
        self,
        database_url: str,
        executor_id: str,
        queue: str | None = None,
        *,
        dead_after: float,
        kind: str = "worker",
        slots: int | None = None,
    ) -> None:
        self.executor_id = executor_id
        self.queue = queue
        self.kind = kind
        self.slots = slots
        self._with_slots = True  # whether the table has the column (see `ensure_table`)
        self.dead_after_ms = int(dead_after * 1000)
        self.incarnation = uuid.uuid4().hex
        self._written: int | None = None  # the heartbeat this process last wrote (ms)
        self._written_at: float | None = None  # when it read it back (time.monotonic())
        self.jumped = 0.0
        # One connection kept: the ownership thread uses one at a time, but for a takeover's
        # DBOS calls inside a beat, which open a second one for the moment (closed after).
        self._engine = create_engine(database_url, pool_size=1, pre_ping=checks_connections())
        self._held = threading.local()  # a thread's connection inside `one_connection`
        if self._engine.dialect.name == "postgresql":
            self._now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
        else:
            self._now = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    @property
    def engine(self) -> sa.Engine:
        """The registry's own engine on the run database: the ownership thread's, apart from
        the pools that runs and readers use, so a busy process never keeps its heartbeat
        waiting for a connection."""
        return self._engine

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    def database_exists(self) -> bool:
        """False only for a PostgreSQL database not created yet (DBOS creates it at launch);
        one that another process created meanwhile counts as there."""
        try:
            with self._engine.connect():
                return True
        except sa.exc.OperationalError as e:
            first, name = e, self._engine.url.database
            if self._engine.dialect.name != "postgresql" or not name:
                raise
            server = sa.create_engine(self._engine.url.set(database="postgres"))
            try:
                with server.connect() as conn:
                    query = sa.text("SELECT 1 FROM pg_database WHERE datname = :name")
                    missing = conn.execute(query, {"name": name}).first() is None
            except sa.exc.DBAPIError:
                raise first from None  # the server cannot tell: report the first error
            finally:
                server.dispose()
            if missing:
                return False
        # It exists now (another process starting beside this one may just have created it):
        # connect again, and report that error if this fails too.
        with self._engine.connect():
            return True

    @contextlib.contextmanager
    def one_connection(self) -> Iterator[None]:
        """Run the calling thread's statements on one pooled connection until the block ends
        (each still in a transaction of its own): the connection is checked out once instead
        of at every statement. The heartbeat runs each beat so; it holds no transaction open
        between statements."""
        with self._engine.connect() as conn:
            self._held.conn = conn
            try:
                yield
            finally:
                self._held.conn = None

    @contextlib.contextmanager
    def one_transaction(self) -> Iterator[None]:
        """Run the calling thread's statements in one transaction until the block ends (inside
        `one_connection`): committed together when the block ends, all rolled back if it
        raises. The heartbeat writes its beat and looks for dead processes so, one
        transaction per beat."""
        held: sa.Connection | None = getattr(self._held, "conn", None)
        assert held is not None, "one_transaction() runs inside one_connection()"
        written = self._written, self._written_at
        try:
            with held.begin():
                yield
        except BaseException:
            self._written, self._written_at = written  # a beat rolled back was never written
            raise

    @contextlib.contextmanager
    def _begin(self) -> Iterator[sa.Connection]:
        """A transaction on the thread's connection of `one_connection` (the open one of
        `one_transaction` if any), else on a pooled one."""
        held: sa.Connection | None = getattr(self._held, "conn", None)
        if held is None:
            with self._engine.begin() as conn:
                yield conn
        elif held.in_transaction():
            yield held
        else:
            with held.begin():
                yield held

    def _execute(self, sql: str, **params: Any) -> int:
        """Run one statement in a transaction of its own; returns the affected row count."""
        with self._begin() as conn:
            return conn.execute(sa.text(sql), params).rowcount

    def ensure_table(self) -> None:
        """Create the table if it is missing, and add the columns of later releases to one made
        before them (processes starting together may race: retried)."""
        for attempt in range(3):
            try:
                self._execute(_CREATE_TABLE)
                break
            except sa.exc.DBAPIError:
                if attempt == 2:
                    raise
        self._with_slots = self._has_slots() or upgrade_table(
            self._begin,
            self._engine.dialect.name,
            PROCESSES_TABLE,
            _ADD_SLOTS[self._engine.dialect.name],
            done=self._has_slots,
            without="this process runs without saying its recovery slots (a takeover uses its own)",
        )

    def _has_slots(self) -> bool:
        with self._begin() as conn:
            found = conn.execute(sa.text(f"SELECT * FROM {PROCESSES_TABLE} WHERE 1 = 0"))
            return "slots" in list(found.keys())

    def fleet_slots(self) -> int | None:
        """The smallest `slots` of the live processes (not stopped, not claimed, heard from
        within `dead_after`, this one included); None if none of them says."""
        if not self._with_slots:
            return None
        with self._begin() as conn:
            found = conn.execute(
                sa.text(
                    f"SELECT MIN(slots) FROM {PROCESSES_TABLE} WHERE slots IS NOT NULL AND "
                    f"claimed_by IS NULL AND heartbeat_at <> 0 AND heartbeat_at >= {self._now} "
                    "- :dead"
                ),
                {"dead": self.dead_after_ms},
            ).scalar()
        return None if found is None else int(found)

    def _rows(self, where: str, **params: Any) -> list[ProcessRow]:
        query = sa.text(
            f"SELECT executor_id, incarnation, heartbeat_at, claimed_by, "
            f"{self._now} - heartbeat_at AS age_ms, machine, pid, pid_start, host "
            f"FROM {PROCESSES_TABLE} WHERE {where}"
        )
        with self._begin() as conn:
            return [ProcessRow(*row) for row in conn.execute(query, params)]

    def register(self, wait: Callable[[float], bool], on_taken: str = "error") -> None:
        """Write this process's row, taking the executor id over only from a process known to
        be dead: one marked stopped, gone from this machine, or silent for `dead_after`.

        A row of another process that beat within `dead_after` and is not known to have
        exited may be a live process: its heartbeat is watched, and once it beats again
        (it lives), `on_taken` decides: "error" raises `ExecutorIdInUseError`, "wait" waits
        until it stops or dies. ("fresh" raises at once, before that proof: the caller takes
        a fresh id.) A process that stays silent is dead once its silence reaches `dead_after`.

        If another process is recovering this executor id's runs right now (a fresh claim on
        the row), waits until it is done, so this process's own recovery at launch and the
        claimer's never both handle the same run. `wait(seconds)` sleeps and returns True to
        give up (the process is stopping).
        """
        self.ensure_table()
        fields = {
            "queue": self.queue,
            "kind": self.kind,
            "host": socket.gethostname(),
            "machine": MACHINE,
            "pid": os.getpid(),
            "pid_start": _pid_start(os.getpid()) or "",
            "inc": self.incarnation,
            "slots": self.slots,
        }
        # (a table this process could not add the column to: rows without it)
        slots, slots_value, slots_set = (
            (", slots", ", :slots", ", slots = :slots") if self._with_slots else ("", "", "")
        )
        seen: tuple[str, int] | None = None  # a holder's (incarnation, heartbeat) first read
        said = False
        while True:
            found = self._rows("executor_id = :me", me=self.executor_id)
            if not found:
                try:
                    self._execute(
                        f"INSERT INTO {PROCESSES_TABLE} (executor_id, kind, queue, host, machine,"
                        f" pid, pid_start, incarnation, started_at, heartbeat_at{slots}) VALUES "
                        f"(:me, :kind, :queue, :host, :machine, :pid, :pid_start, :inc, "
                        f"{self._now}, {self._now}{slots_value})",
                        me=self.executor_id,
                        **fields,
                    )
                    self._remember_heartbeat()
                    return
                except sa.exc.IntegrityError:
                    continue  # another process with this executor id inserted first: look again
            row = found[0]
            if row.claimed_by is not None and row.age_ms <= self.dead_after_ms:
                if wait(0.2):
                    return
                continue
            if self._may_live(row):
                beat = (row.incarnation, row.heartbeat_at)
                if on_taken == "fresh" or (seen is not None and beat != seen):
                    if on_taken != "wait":
                        raise ExecutorIdInUseError(
                            self.executor_id, host=row.host, pid=row.pid,
                            heartbeat_age=max(0, row.age_ms) / 1000,
                        )  # fmt: skip
                    if not said:
                        logger.warning(
                            "durable-swarm: executor id %r is in use by a live process (host "
                            "%r, pid %s); waiting for it to stop",
                            self.executor_id, row.host, row.pid,
                        )  # fmt: skip
                        said = True
                if seen is None and on_taken != "fresh":
                    logger.warning(
                        "durable-swarm: executor id %r was last used by host %r, pid %s (heard "
                        "from %.1f s ago); starting once it is known dead (silent for %g s) or "
                        "refusing if it beats again",
                        self.executor_id, row.host, row.pid, max(0, row.age_ms) / 1000,
                        self.dead_after_ms / 1000,
                    )  # fmt: skip
                seen = beat
                if wait(0.2):
                    return
                continue
            claimed = "claimed_by IS NULL" if row.claimed_by is None else "claimed_by = :by"
            taken = self._execute(
                f"UPDATE {PROCESSES_TABLE} SET incarnation = :inc, kind = :kind, queue = :queue,"
                f" host = :host, machine = :machine, pid = :pid, pid_start = :pid_start, "
                f"started_at = {self._now}, heartbeat_at = {self._now}, claimed_by = NULL"
                f"{slots_set} "
                f"WHERE executor_id = :me AND incarnation = :old AND heartbeat_at = :hb "
                f"AND {claimed}",
                me=self.executor_id,
                old=row.incarnation,
                hb=row.heartbeat_at,
                by=row.claimed_by,
                **fields,
            )
            if taken == 1:
                self._remember_heartbeat()
                return

    def _may_live(self, row: ProcessRow) -> bool:
        """Whether the process of `row` (another incarnation of this executor id) may be
        alive: not marked stopped, not claimed, heard from within `dead_after`, not known
        to have exited."""
        return (
            row.incarnation != self.incarnation
            and row.claimed_by is None
            and row.heartbeat_at != 0
            and row.age_ms <= self.dead_after_ms
            and not row.exited()
        )

    def _remember_heartbeat(self) -> None:
        found = self._rows("executor_id = :me", me=self.executor_id)
        self._written = found[0].heartbeat_at if found else None
        self._written_at = time.monotonic()

    def beat(self) -> float | None:
        """Refresh this process's heartbeat; returns the seconds between the heartbeat it
        replaced and this one by the database's clock (0 for the first), or None if this
        process's row was claimed or taken over."""
        with self._begin() as conn:
            row = conn.execute(
                sa.text(
                    f"UPDATE {PROCESSES_TABLE} SET heartbeat_at = {self._now} WHERE executor_id "
                    "= :me AND incarnation = :inc AND claimed_by IS NULL RETURNING heartbeat_at"
                ),
                {"me": self.executor_id, "inc": self.incarnation},
            ).first()
        if row is None:
            return None
        before, self._written, self._written_at = self._written, int(row[0]), time.monotonic()
        return 0.0 if before is None else (self._written - before) / 1000

    def look(self) -> list[ProcessRow]:
        """The rows `dead` judges: this process's own, those silent for longer than
        `dead_after`, and those of this machine."""
        return self._rows(
            f"executor_id = :me OR heartbeat_at < {self._now} - :dead OR machine = :machine",
            me=self.executor_id,
            dead=self.dead_after_ms,
            machine=MACHINE,
        )

    def dead(
        self,
        *,
        by_heartbeat: bool = True,
        written_within: float | None = None,
        rows: list[ProcessRow] | None = None,
    ) -> list[ProcessRow]:
        """Other processes known to be dead: silent for longer than `dead_after` (stopped ones
        included; only if `by_heartbeat`), or on this machine with their pid gone; and claims
        whose claimer died before finishing. Judged from `rows`, a `look` made just before
        (the heartbeat makes it in its beat's transaction), else from a `look` made now.

        `written_within`: this process wrote its heartbeat at most that many seconds ago (by its
        own clock, slack included). If the database's clock, in the same query, says that
        heartbeat is older still, the clock jumped ahead since: every heartbeat looks older than
        it is, so nobody is judged by heartbeat (`self.jumped` then holds the jump in seconds,
        else 0; the next `beat` measures from scratch, not across the jump)."""
        if rows is None:
            rows = self.look()
        mine = [row for row in rows if row.executor_id == self.executor_id]
        rows = [row for row in rows if row.executor_id != self.executor_id]
        self.jumped = 0.0
        if written_within is not None and mine and mine[0].heartbeat_at == self._written:
            self.jumped = max(0.0, mine[0].age_ms / 1000 - written_within)
        if self.jumped:
            by_heartbeat = False
            self._written = None  # the next heartbeat, after the jump, is the new reference
        found = []
        for row in rows:
            silent = row.age_ms > self.dead_after_ms
            if row.claimed_by is not None and not silent:
                continue  # a claim in progress (a claim refreshes the heartbeat)
            if row.heartbeat_at == 0 or (silent and by_heartbeat) or row.exited():
                found.append(row)
        return found

    def claim(self, row: ProcessRow) -> bool:
        """Claim a dead process's row; True for exactly one of several claimers.

        The claim and a heartbeat of the claimer's own row are one transaction that applies
        only while that row is still the claimer's and unclaimed: of two processes that judge
        each other dead at the same moment (a database clock that jumped, two pauses), one
        claims the other, never both. (The rows are locked in executor id order, so two such
        claims wait for each other instead of deadlocking.)"""
        me = {"me": self.executor_id, "inc": self.incarnation}
        with self._begin() as conn:
            if self._engine.dialect.name == "postgresql":
                conn.execute(
                    sa.text(
                        f"SELECT executor_id FROM {PROCESSES_TABLE} WHERE executor_id IN "
                        "(:me, :id) ORDER BY executor_id FOR UPDATE"
                    ),
                    {"me": self.executor_id, "id": row.executor_id},
                )
            alive = conn.execute(
                sa.text(
                    f"UPDATE {PROCESSES_TABLE} SET heartbeat_at = {self._now} WHERE "
                    "executor_id = :me AND incarnation = :inc AND claimed_by IS NULL"
                ),
                me,
            ).rowcount
            if alive != 1:
                return False  # taken for dead itself meanwhile: it judges nobody
            done = conn.execute(
                sa.text(
                    f"UPDATE {PROCESSES_TABLE} SET claimed_by = :me, heartbeat_at = {self._now} "
                    "WHERE executor_id = :id AND incarnation = :inc AND heartbeat_at = :hb"
                ),
                {"me": self.executor_id, "id": row.executor_id, "inc": row.incarnation,
                 "hb": row.heartbeat_at},
            ).rowcount  # fmt: skip
            return done == 1

    def adopt(self, executor_id: str) -> ProcessRow | None:
        """Claim an executor id that has no row (its runs were left by a process that never
        registered, or whose row went): a row is made for it, claimed by this process, which
        alone then recovers its runs (a process registering under that id meanwhile waits for
        the claim to end). None if it has a row now."""
        fields = {"id": executor_id, "me": self.executor_id, "inc": uuid.uuid4().hex}
        made = self._execute(
            f"INSERT INTO {PROCESSES_TABLE} (executor_id, kind, queue, host, machine, pid, "
            f"pid_start, incarnation, started_at, heartbeat_at, claimed_by) VALUES (:id, "
            f"'orphan', NULL, '', '', 0, '', :inc, {self._now}, {self._now}, :me) "
            "ON CONFLICT (executor_id) DO NOTHING",
            **fields,
        )
        if made != 1:
            return None
        return ProcessRow(executor_id, fields["inc"], 0, self.executor_id, 0, "", 0, "", "")

    def release(self, row: ProcessRow) -> None:
        """Delete a claimed row once its runs are back on their queues."""
        self._execute(
            f"DELETE FROM {PROCESSES_TABLE} WHERE executor_id = :id AND incarnation = :inc "
            "AND claimed_by = :me",
            id=row.executor_id,
            inc=row.incarnation,
            me=self.executor_id,
        )

    def stop(self) -> None:
        """Mark this process stopped (its heartbeat made stale), so a live process takes over
        its unfinished runs at once."""
        self._execute(
            f"UPDATE {PROCESSES_TABLE} SET heartbeat_at = 0 WHERE executor_id = :me "
            "AND incarnation = :inc AND claimed_by IS NULL",
            me=self.executor_id,
            inc=self.incarnation,
        )

    def others_alive(self) -> bool:
        """Whether another process of this database may be alive (a row not stopped, not
        claimed, heard from within `dead_after`)."""
        rows = self._rows(
            f"executor_id <> :me AND claimed_by IS NULL AND heartbeat_at <> 0 AND heartbeat_at "
            f">= {self._now} - :dead",
            me=self.executor_id,
            dead=self.dead_after_ms,
        )
        return any(not row.exited() for row in rows)

    def executors(self) -> set[str]:
        """The executor ids that have a row (live, stopped or claimed)."""
        with self._begin() as conn:
            query = sa.text(f"SELECT executor_id FROM {PROCESSES_TABLE}")
            return {row[0] for row in conn.execute(query)}

    def now_ms(self) -> int | None:
        """The database's clock now, as this process's last heartbeat read it plus the time
        since by this process's clock (None before the first heartbeat)."""
        if self._written is None or self._written_at is None:
            return None
        return self._written + int((time.monotonic() - self._written_at) * 1000)


class RunKeeper(Protocol):
    """What the ownership thread needs of the runs (`_dbos` implements it over DBOS's public
    API): recover a dead executor's runs, list the PENDING runs of an executor (or of every
    executor), say which runs execute here, and put one that stopped back on its queue."""

    def recover(self, executor_id: str, *, alone: bool = False) -> int:
        """Put the PENDING runs of the dead `executor_id` back on their queues; returns how
        many. `alone`: no other process may be alive to share them."""
        ...

    def pending(self, executor_id: str | None) -> list[tuple[str, str, int]]:
        """`(run id, executor id, updated at in ms by the database's clock)` of the PENDING
        runs of this application version (of `executor_id`; None: of every executor)."""
        ...

    def busy(self) -> list[str]: ...

    def put_back(self, run_id: str) -> bool: ...

    def settle(self) -> None:
        """Called each heartbeat after the takeovers: end what a recovery started once it is
        over (the recovery queue's quick looks)."""
        ...


# How often a process sweeps the parked waits (`Ownership._sweep`), and how soon after its start.
SWEEP_SECONDS = 10.0
# `_heal` looks at this process's own PENDING runs this many times per `dead_after` (a run
# counts as stalled only once its row is `dead_after` old, so looking at every heartbeat only
# costs the database a query more per beat).
HEAL_LOOKS_PER_DEAD_AFTER = 3
FIRST_SWEEP_SECONDS = 2.0

# How often a process looks for runs of executors that have no row at all (`_take_over`).
ORPHANS_SECONDS = 60.0


class Ownership:
    """This process's identity among the processes of one database, kept alive by a thread.

    `register()` writes the row (before DBOS launches, so DBOS's own recovery at launch and a
    claimer's never overlap); `start(runs)` starts the heartbeat thread once DBOS runs, with
    `runs` (a `RunKeeper`) recovering a dead executor's runs and putting back the runs this
    process owns but no longer runs (an execution that ended on a database error: read-only
    file, full disk, locked database, lost connection); `stop()` ends the thread and marks the
    process stopped. `confirmed()` says whether this process's step bodies may begin now (its
    last heartbeat is recent enough that nobody can have taken it for dead: `_dbos.admit`).
    """

    def __init__(
        self,
        database_url: str,
        executor_id: str,
        *,
        kind: str,
        queue: str | None = None,
        heartbeat_interval: float,
        dead_after: float,
        application_version: str,
        say: Callable[[str], None] | None = None,
        on_executor_id_taken: str | None = None,
        slots: int | None = None,
    ) -> None:
        self.executor_id = executor_id
        self.on_taken = on_taken_policy(on_executor_id_taken)
        self._launched = False  # DBOS runs under `executor_id`: it can no longer change
        self.heartbeat_interval = heartbeat_interval
        self.dead_after = dead_after
        self.registry = ProcessRegistry(
            database_url, executor_id, queue, dead_after=dead_after, kind=kind, slots=slots
        )
        self._version = application_version
        self._url = database_url
        self._say = say or (lambda text: logger.warning("durable-swarm: %s", text))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._confirmed_until = 0.0
        self._connected_since: float | None = None
        self._runs: RunKeeper | None = None
        self._stalled: set[tuple[str, int]] = set()
        self._healed_at = 0.0  # when `_watch` last called `_heal` (time.monotonic())
        self._orphans_at = 0.0  # when `_take_over` last looked for runs of executors unknown
        self._failing = False
        self._settle_failed = False
        self._last_beat: float | None = None
        self._stopping = False
        self.lost = 0  # how many times this process found itself taken for dead
        self.sweeps: list[Callable[[], Any]] = []  # see `_sweep`
        self._swept_at = time.monotonic() - SWEEP_SECONDS + FIRST_SWEEP_SECONDS

    def confirmed(self) -> bool:
        """Whether this process's ownership is confirmed (see the class docs)."""
        return not self._stopping and time.monotonic() < self._confirmed_until

    @property
    def is_stopping(self) -> bool:
        """Whether this process stops (`stopping`, `halt` or `stop` was called)."""
        return self._stopping or self._stop.is_set()

    def stopping(self) -> None:
        """The process is stopping: it takes no more queue work and no dead process's runs,
        while its heartbeats go on, so nobody takes its runs while its steps finish (then
        `stop`, or `stop_when`, marks it stopped)."""
        self._stopping = True
        self._confirmed_until = 0.0

    def stop_when(self, idle: Callable[[], bool], poll: float = 0.05) -> None:
        """`stopping`, then `stop` once `idle()` is true (checked every `poll` seconds, in a
        daemon thread): the heartbeats go on until then, so a step still running here is never
        run by another process at the same moment."""
        self.stopping()

        def retire() -> None:
            while not idle():
                time.sleep(poll)
            self.stop()

        threading.Thread(target=retire, name="durable-swarm-retire", daemon=True).start()

    def _confirm(self, since: float) -> None:
        # Others take this process for dead only once its heartbeat (written after `since`) is
        # `dead_after` old by the database's clock; one heartbeat interval of margin covers the
        # time a dequeue takes.
        self._confirmed_until = since + self.dead_after - self.heartbeat_interval
        if self._connected_since is None:
            self._connected_since = since

    def register(
        self, wait: Callable[[float], bool] | None = None, *, fixed_id: bool = False
    ) -> None:
        """Write this process's row (see `ProcessRegistry.register`). With
        `on_executor_id_taken="fresh"`, an executor id that a live process may hold is
        replaced by a fresh one (`<id>-<random>`, in `executor_id`), said on `say`; not once
        DBOS runs under it (`fixed_id`, or after `start`): then it is refused."""
        since = time.monotonic()
        fixed = fixed_id or self._launched
        policy = "error" if fixed and self.on_taken == "fresh" else self.on_taken
        try:
            self.registry.register(wait or self._stop.wait, policy)
        except ExecutorIdInUseError as e:
            if self.on_taken != "fresh" or fixed:
                raise
            fresh = f"{self.executor_id}-{uuid.uuid4().hex[:6]}"
            self._say(
                f"executor id {self.executor_id!r} may be in use by a live process (host "
                f"{e.host!r}, pid {e.pid}, heartbeat {e.heartbeat_age:.1f} s ago); taking the "
                f"fresh id {fresh!r}"
            )
            self.executor_id = self.registry.executor_id = fresh
            self.registry.register(wait or self._stop.wait, "error")
        self._confirm(since)
        self._last_beat = since

    def start(self, runs: RunKeeper) -> None:
        """Start heartbeats and the watch for dead processes (one sweep right away)."""
        self._runs = runs
        self._launched = True
        self._thread = threading.Thread(
            target=self._watch, name="durable-swarm-heartbeat", daemon=True
        )
        self._thread.start()

    def _watch(self) -> None:
        again = False  # the beat failed on a connection that had died: beat again at once
        while not self._stop.is_set():
            since = time.monotonic()
            try:
                with self.registry.one_connection():
                    # The beat and the look for dead processes: one transaction, confirmed
                    # once it is committed.
                    with self.registry.one_transaction():
                        advance = self.registry.beat()
                        rows = None if advance is None else self.registry.look()
                    if advance is not None:
                        self._steady(since, time.monotonic(), advance)
                        self._confirm(since)
                    else:
                        self._taken_for_dead()
                # The rest after the held connection went back to the pool: DBOS's client calls
                # (takeovers, looks at pending runs) then take that one instead of opening a
                # second one, and the process keeps one connection of its own.
                self._take_over(rows)
                if time.monotonic() - self._healed_at >= self._heal_every:
                    self._healed_at = time.monotonic()
                    self._heal()
                self._settle()
                self._sweep()
            except ExecutorIdInUseError as e:
                # Taken for dead, and another live process now holds this executor id (a
                # restart of this one): two processes must never serve under one id.
                self.stopping()
                self._say(f"{e} This process takes no more runs.")
                return
            except Exception as e:  # the database may be unreachable for a while: try again
                if not again and _died_before(e):
                    again = True  # its pool has fresh connections now (no check before use)
                    continue
                again = False
                if not self._failing:
                    self._say(
                        f"heartbeat of {self.executor_id!r} in the run database "
                        f"{display_url(self._url)!r} failed ({describe_fault(e, self._url)}); "
                        "taking no new runs until it succeeds (retried every "
                        f"{self.heartbeat_interval:g} s); runs here wait for the database"
                    )
                self._failing = True
                self._connected_since = None
            else:
                if self._failing:
                    self._say(f"heartbeat of {self.executor_id!r} is back")
                self._failing = False
                again = False
            if self._stop.wait(self.heartbeat_interval):
                return

    @property
    def _heal_every(self) -> float:
        """Seconds between two `_heal` looks: a `dead_after` share, at least one heartbeat."""
        return max(self.heartbeat_interval, self.dead_after / HEAL_LOOKS_PER_DEAD_AFTER)

    def _steady(self, since: float, now: float, advance: float) -> None:
        """Restart the clock of continuous connection when this heartbeat came long after the
        previous one (the statement hung, the process was paused): the others may have been cut
        off just as long, and must get the time to beat again before being judged. Likewise
        when the database's clock moved `advance` seconds between the two heartbeats, more than
        this process's own clock did: the database's clock jumped ahead (see `_jumped`)."""
        last, self._last_beat = self._last_beat, since
        if last is None or now - last > 2 * self.heartbeat_interval + 1.0:
            self._connected_since = now
        elif advance > now - last + self.heartbeat_interval:
            self._jumped(advance - (now - last), now)

    def _jumped(self, seconds: float, now: float) -> None:
        """The database's clock jumped `seconds` ahead: every heartbeat looks that much older,
        and judging them now would take live processes for dead. Wait `dead_after` (they beat
        again meanwhile) before judging anyone by heartbeat."""
        self._connected_since = now
        self._say(
            f"the clock of the run database jumped ahead by about {seconds:.0f} s; "
            f"{self.executor_id!r} judges no process by its heartbeat for {self.dead_after:g} s "
            "(they need the time to beat again)"
        )

    def _taken_for_dead(self) -> None:
        self.lost += 1
        self._confirmed_until = 0.0
        self._connected_since = None
        if self._stopping:
            return  # its runs went to another process: nothing left to hand over or serve
        self._say(
            f"executor {self.executor_id!r} was taken for dead (no heartbeat for over "
            f"{self.dead_after} s: paused, overloaded or cut off from the database); its runs "
            "went to another process, which finishes them. Registering again for new runs."
        )
        self.registry.incarnation = uuid.uuid4().hex
        self.register()

    def _take_over(self, rows: list[ProcessRow] | None = None) -> None:
        """Recover the runs of the processes found dead (judged from `rows`, the registry's
        `look` of this beat, else from a look made now), then, every `ORPHANS_SECONDS`, those
        left under an executor id that has no row."""
        assert self._runs is not None
        if self._stopping:
            return  # a stopping process takes nobody's runs (it would not run them)
        connected = self._connected_since
        # Judge others by their heartbeats only after being connected for `dead_after` (if all
        # were cut off together, the others need that long to beat again).
        settled = connected is not None and time.monotonic() - connected >= self.dead_after
        last = self._last_beat
        within = None if last is None else time.monotonic() - last + self.heartbeat_interval
        dead = self.registry.dead(by_heartbeat=settled, written_within=within, rows=rows)
        if self.registry.jumped:
            self._jumped(self.registry.jumped, time.monotonic())
            settled = False
        for row in dead:
            if self._stop.is_set() or not self.registry.claim(row):
                continue
            count = self._runs.recover(row.executor_id, alone=self._alone())
            self.registry.release(row)
            if count or row.heartbeat_at != 0:  # a clean stop with nothing left: quiet
                self._say(f"process {row.executor_id!r} is gone ({row.why_dead()}); {_back(count)}")
        now = time.monotonic()
        if not settled or now - self._orphans_at < ORPHANS_SECONDS:
            return
        self._orphans_at = now
        # Runs left PENDING under an executor id that has no row at all: no live process will
        # ever finish them. Each is claimed first (a row made for it, as for a dead process),
        # so one process recovers it.
        known = self.registry.executors()
        orphans = {e for _, e, _ in self._runs.pending(None)} - known - {self.executor_id}
        for executor_id in sorted(orphans):
            adopted = self.registry.adopt(executor_id)
            if self._stop.is_set() or adopted is None:
                continue
            count = self._runs.recover(executor_id)
            self.registry.release(adopted)
            if count:
                self._say(
                    f"{count} unfinished {'run' if count == 1 else 'runs'} of executor "
                    f"{executor_id!r}, which has no live process, "
                    f"{'is back on its queue' if count == 1 else 'are back on their queues'}"
                )

    def _alone(self) -> bool:
        """Whether no other process may be alive to share a dead one's runs (on an error: not
        alone, the runs wait for free slots)."""
        try:
            return not self.registry.others_alive()
        except sa.exc.DBAPIError:
            return False

    def _heal(self) -> None:
        """Put back the runs this process owns (PENDING under its executor id) but no longer
        runs, seen so at two looks in a row (`_watch` looks every `_heal_every` s; a run just
        taken from a queue is not running yet for a moment): their execution ended on a
        database error, and nothing else would ever take them up while this process lives."""
        assert self._runs is not None
        if not self.confirmed():
            return
        # A run taken from a queue (or started) a moment ago may wait a long while for its task
        # to start when the process is busy: `busy` counts runs started here too, and only a
        # run whose row is `dead_after` old counts here. A run counts as stalled only if its
        # row did not change between the two looks.
        now = self.registry.now_ms()
        if now is None:
            return
        quiet = now - int(self.dead_after * 1000)
        owned = {
            (run_id, updated)
            for run_id, _, updated in self._runs.pending(self.executor_id)
            if updated <= quiet
        }
        running = set(self._runs.busy())
        stalled = {(run_id, updated) for run_id, updated in owned if run_id not in running}
        again, self._stalled = stalled & self._stalled, stalled
        count = sum(1 for run_id, _ in sorted(again) if self._runs.put_back(run_id))
        self._stalled -= again
        if count:
            self._say(
                f"{count} runs of {self.executor_id!r} had stopped on a database error; they are "
                "back on their queues"
            )

    def _settle(self) -> None:
        """`RunKeeper.settle`; its failure is said (once until it succeeds again) and tried
        again next beat, and does not count as a failed heartbeat."""
        assert self._runs is not None
        try:
            self._runs.settle()
        except Exception as e:
            if not self._settle_failed:
                logger.warning("durable-swarm: the recovery queue's settle failed (%s)", e)
            self._settle_failed = True
        else:
            self._settle_failed = False

    def _sweep(self) -> None:
        """Every `SWEEP_SECONDS`, while this process's ownership is confirmed, run each of
        `sweeps` (the sweep of parked waits: `_parking.sweep`); a sweep that fails is said and
        tried again next time, the heartbeat goes on."""
        now = time.monotonic()
        if not self.confirmed() or now - self._swept_at < SWEEP_SECONDS:
            return
        self._swept_at = now
        for sweep in self.sweeps:
            try:
                sweep()
            except Exception as e:
                logger.warning("durable-swarm: a sweep of %r failed (%s)", self.executor_id, e)

    def halt(self) -> None:
        """End the heartbeat thread (no more takeovers; the row stays as it is) and take no
        more queue work: a run claimed while DBOS shuts down would never start here."""
        self._confirmed_until = 0.0
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def stop(self, *, mark_stopped: bool = True) -> None:
        """`halt`, then mark the process stopped so others take over its unfinished runs at
        once (unless `mark_stopped` is False), and release the connections. Call it once DBOS
        no longer runs anything here."""
        self.halt()
        try:
            if mark_stopped:
                self.registry.stop()
        except sa.exc.DBAPIError as e:
            self._say(f"could not mark {self.executor_id!r} stopped ({e.orig}); it times out")
        finally:
            self.registry.close()


def _died_before(error: BaseException) -> bool:
    """Whether `error` says a statement lost its connection (a pooled one that died while
    idle, as after a database restart): SQLAlchemy then replaced the pool's connections, so one
    more try at once may succeed (and fails again if the database is away)."""
    return isinstance(error, sa.exc.DBAPIError) and bool(error.connection_invalidated)
