"""Retention in the background: the thread that applies a process's policy, and its ledger.

A process that launched DBOS with a `Retention` policy runs one sweeper thread. Every
`interval` seconds it takes the database's sweep lease (a row of `durable_swarm_retention_lease`;
one process of the database sweeps at a time, a lease left by a dead process expires), then
deletes expired runs batch by batch (`durable._retention.expire`), logging each batch on the
`durable_swarm.retention` logger (a worker prints it) and adding what it deleted to the counts
by status in `durable_swarm_retention_deleted` (what `/metrics` and `retention show` read). Each
sweeper also records its policy in `durable_swarm_retention_sweepers`, so `durable-swarm retention
show` and the console can show the policies in force on a database and when each last swept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ._retention import RETENTION_STATUSES, Retention, RetentionReport, expire
from ._tables import engine_for, engine_with, missing_table

__all__ = [
    "DELETED_TABLE",
    "LEASE_TABLE",
    "SWEEPERS_TABLE",
    "RetentionLedger",
    "RetentionStatus",
    "Sweeper",
    "SweeperRecord",
    "current_sweeper",
    "start_sweeper",
    "stop_sweeper",
]

DELETED_TABLE = "durable_swarm_retention_deleted"
SWEEPERS_TABLE = "durable_swarm_retention_sweepers"
LEASE_TABLE = "durable_swarm_retention_lease"
_LEASE = "sweep"

_DDL = {
    DELETED_TABLE: f"""
CREATE TABLE IF NOT EXISTS {DELETED_TABLE} (
    status VARCHAR(32) PRIMARY KEY,
    runs BIGINT NOT NULL
)
""",
    SWEEPERS_TABLE: f"""
CREATE TABLE IF NOT EXISTS {SWEEPERS_TABLE} (
    executor_id TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    seen_at_ms BIGINT NOT NULL,
    swept_at_ms BIGINT,
    last_deleted BIGINT
)
""",
    LEASE_TABLE: f"""
CREATE TABLE IF NOT EXISTS {LEASE_TABLE} (
    name VARCHAR(32) PRIMARY KEY,
    holder TEXT NOT NULL,
    until_ms BIGINT NOT NULL
)
""",
}

logger = logging.getLogger("durable_swarm.retention")


def _ms(moment: float | None = None) -> int:
    return int((time.time() if moment is None else moment) * 1000)


@dataclass(frozen=True)
class SweeperRecord:
    """A process applying a retention policy on the database, as it last said: its executor
    id, its policy (as text), when it last looked in, when it last swept and how many runs
    that sweep deleted."""

    executor_id: str
    policy: str
    seen_at: datetime
    swept_at: datetime | None
    last_deleted: int | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "executor_id": self.executor_id,
            "policy": self.policy,
            "seen_at": self.seen_at.isoformat(),
            "swept_at": self.swept_at.isoformat() if self.swept_at else None,
            "last_deleted": self.last_deleted,
        }


def _time(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


@dataclass(frozen=True)
class RetentionStatus:
    """Retention on a run database: the processes applying a policy there (`sweepers`, most
    recently seen first; several with different policies is a mistake `policies` shows) and
    the runs deleted so far by status (`deleted`, since the database's first sweep)."""

    sweepers: list[SweeperRecord]
    deleted: dict[str, int]

    @property
    def policies(self) -> list[str]:
        """The distinct policies in force (as text), most recently seen first."""
        return list(dict.fromkeys(s.policy for s in self.sweepers))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "policies": self.policies,
            "sweepers": [s.to_json() for s in self.sweepers],
            "deleted": dict(self.deleted),
        }


class RetentionLedger:
    """The retention tables of one run database (see the module docstring)."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url

    def _engine(self, table: str) -> sa.Engine:
        return engine_with(self._url, table, _DDL[table])

    def _read(self, query: str, params: dict[str, Any] | None = None) -> list[Any]:
        try:
            with engine_for(self._url).connect() as conn:
                return list(conn.execute(sa.text(query), params or {}))
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return []  # nothing was ever recorded on this database
            raise

    def status(self) -> RetentionStatus:
        """What `retention show` prints."""
        return RetentionStatus(self.sweepers(), self.deleted())

    # --- the lease --------------------------------------------------------------------------

    def take_lease(self, holder: str, seconds: float) -> bool:
        """Take (or renew) the sweep lease for `seconds`; False while another live holder has
        it."""
        now = _ms()
        params = {"name": _LEASE, "holder": holder, "until": now + int(seconds * 1000), "now": now}
        engine = self._engine(LEASE_TABLE)
        with engine.begin() as conn:
            taken = conn.execute(
                sa.text(
                    f"UPDATE {LEASE_TABLE} SET holder = :holder, until_ms = :until "
                    "WHERE name = :name AND (holder = :holder OR until_ms < :now)"
                ),
                params,
            ).rowcount
        if taken:
            return True
        try:
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        f"INSERT INTO {LEASE_TABLE} (name, holder, until_ms) "
                        "VALUES (:name, :holder, :until)"
                    ),
                    params,
                )
            return True
        except sa.exc.IntegrityError:
            return False  # another process holds it

    def drop_lease(self, holder: str) -> None:
        """Give the lease up if `holder` has it (a process stopping)."""
        with self._engine(LEASE_TABLE).begin() as conn:
            conn.execute(
                sa.text(f"DELETE FROM {LEASE_TABLE} WHERE name = :name AND holder = :holder"),
                {"name": _LEASE, "holder": holder},
            )

    # --- counts -----------------------------------------------------------------------------

    def add_deleted(self, counts: dict[str, int]) -> None:
        """Add runs deleted, by status, to the database's totals."""
        wanted = {s: n for s, n in counts.items() if n}
        if not wanted:
            return
        with self._engine(DELETED_TABLE).begin() as conn:
            for status, n in wanted.items():
                conn.execute(
                    sa.text(
                        f"INSERT INTO {DELETED_TABLE} (status, runs) VALUES (:status, :n) "
                        f"ON CONFLICT (status) DO UPDATE SET runs = {DELETED_TABLE}.runs + :n"
                    ),
                    {"status": status, "n": n},
                )

    def deleted(self) -> dict[str, int]:
        """Runs retention deleted on this database so far, by status (every status named)."""
        counts = dict.fromkeys(RETENTION_STATUSES, 0)
        for status, n in self._read(f"SELECT status, runs FROM {DELETED_TABLE}"):
            counts[status] = int(n)
        return counts

    # --- sweepers ---------------------------------------------------------------------------

    def note_sweeper(self, executor_id: str, policy: Retention, swept: int | None = None) -> None:
        """Record that `executor_id` applies `policy` (and, with `swept`, that it just swept
        and deleted that many runs)."""
        now = _ms()
        params = {"id": executor_id, "policy": policy.to_text(), "now": now, "n": swept}
        with self._engine(SWEEPERS_TABLE).begin() as conn:
            if swept is None:
                conn.execute(
                    sa.text(
                        f"INSERT INTO {SWEEPERS_TABLE} (executor_id, policy, seen_at_ms) "
                        "VALUES (:id, :policy, :now) ON CONFLICT (executor_id) DO UPDATE SET "
                        "policy = :policy, seen_at_ms = :now"
                    ),
                    params,
                )
            else:
                conn.execute(
                    sa.text(
                        f"INSERT INTO {SWEEPERS_TABLE} (executor_id, policy, seen_at_ms, "
                        "swept_at_ms, last_deleted) VALUES (:id, :policy, :now, :now, :n) "
                        "ON CONFLICT (executor_id) DO UPDATE SET policy = :policy, "
                        "seen_at_ms = :now, swept_at_ms = :now, last_deleted = :n"
                    ),
                    params,
                )

    def forget_sweeper(self, executor_id: str) -> None:
        """Remove `executor_id`'s record (it stopped)."""
        with self._engine(SWEEPERS_TABLE).begin() as conn:
            conn.execute(
                sa.text(f"DELETE FROM {SWEEPERS_TABLE} WHERE executor_id = :id"),
                {"id": executor_id},
            )

    def sweepers(self) -> list[SweeperRecord]:
        """The processes that recorded a policy, most recently seen first."""
        rows = self._read(
            f"SELECT executor_id, policy, seen_at_ms, swept_at_ms, last_deleted "
            f"FROM {SWEEPERS_TABLE} ORDER BY seen_at_ms DESC, executor_id"
        )
        return [
            SweeperRecord(
                str(r[0]),
                str(r[1]),
                _time(int(r[2])) or datetime.now(timezone.utc),
                _time(r[3]),
                None if r[4] is None else int(r[4]),
            )
            for r in rows
        ]


class Sweeper:
    """The background thread applying `policy` to `database_url` through `source` (see the
    module docstring). `clock` gives the current time of every sweep (tests move it)."""

    def __init__(
        self,
        source: Any,
        database_url: str,
        policy: Retention,
        executor_id: str,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.source = source
        self.database_url = database_url
        self.policy = policy
        self.executor_id = executor_id
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.ledger = RetentionLedger(database_url)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="durable-swarm-retention")
        self._thread.daemon = True

    def start(self) -> Sweeper:
        """Start the thread (its first sweep is at once); returns self."""
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch in progress, give the lease up and remove this process's
        record."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        for action in (self.ledger.drop_lease, self.ledger.forget_sweeper):
            try:
                action(self.executor_id)
            except Exception as e:  # the database is gone: the lease expires by itself
                logger.debug("retention: could not clean up at stop (%s)", e)

    def sweep_now(self) -> None:
        """Sweep without waiting for the interval (tests, and a policy just changed)."""
        self._wake.set()

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep()
            except Exception as e:  # the database unreachable for a while: try again later
                logger.warning(
                    "retention: the sweep on %s failed (%s: %s); trying again in %g s.",
                    self.executor_id, type(e).__name__, e, self.policy.interval,
                )  # fmt: skip
            self._wake.wait(self.policy.interval)
            self._wake.clear()

    def sweep(self) -> RetentionReport | None:
        """One sweep if this process gets the lease: every expired run, batch by batch (the
        lease renewed at each). None when another process holds the lease."""
        policy = self.policy
        self.ledger.note_sweeper(self.executor_id, policy)
        lease = max(2 * policy.interval, 30.0)
        if not self.ledger.take_lease(self.executor_id, lease):
            return None

        def batch(report: RetentionReport) -> None:
            self.ledger.add_deleted(report.counts)
            counts = ", ".join(f"{n} {s}" for s, n in report.counts.items() if n)
            logger.info(
                "retention: deleted %d finished run%s past their age (%s): %s",
                report.deleted, "" if report.deleted == 1 else "s", counts,
                ", ".join(r.run_id for r in report.runs),
            )  # fmt: skip
            if self._stop.is_set() or not self.ledger.take_lease(self.executor_id, lease):
                raise _Stopped

        try:
            report = expire(
                self.source, self.database_url, policy, now=self.clock(), on_batch=batch
            )
        except _Stopped:
            return None
        if report.kept:
            logger.info(
                "retention: kept %d run%s past their age, still in flight (a sub-agent run, or "
                "resumed): %s",
                len(report.kept), "" if len(report.kept) == 1 else "s", ", ".join(report.kept),
            )  # fmt: skip
        self.ledger.note_sweeper(self.executor_id, policy, swept=report.deleted)
        return report


class _Stopped(Exception):
    """The sweep stops between two batches (the process stops, or lost the lease)."""


_lock = threading.Lock()
_current: Sweeper | None = None


def start_sweeper(source: Any, database_url: str, policy: Retention, executor_id: str) -> Sweeper:
    """The process's sweeper for `policy` on `database_url`, started if need be; a sweeper
    with another policy, database or executor id is stopped first (the last policy given
    wins)."""
    global _current
    with _lock:
        current = _current
        if (
            current is not None
            and current.alive
            and (current.database_url, current.policy, current.executor_id)
            == (database_url, policy, executor_id)
        ):
            return current
        if current is not None:
            current.stop()
            logger.info("retention: the policy is now %s", policy.describe())
        _current = Sweeper(source, database_url, policy, executor_id).start()
        return _current


def stop_sweeper() -> None:
    """Stop the process's sweeper, if any (DBOS stops, the worker shuts down)."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.stop()


def current_sweeper() -> Sweeper | None:
    """The process's running sweeper, if any."""
    return _current
