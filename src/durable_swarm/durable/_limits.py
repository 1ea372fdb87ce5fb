"""Model limits shared by every process on the run database (`durable_swarm.limits`).

Two small tables of this library's own, beside DBOS's:
- `durable_swarm_model_limits`: one row per limit key (a model name, a base URL or "*"): the
  moment until which the key is paused (a provider's 429 said to wait), why, and the limits the
  last process to use the key had (for the CLI, the console and /metrics);
- `durable_swarm_model_calls`: one row per call of a limited model: waiting for its turn
  (`admitted_at` NULL, `wait_until` set), in flight (`admitted_at` set, `ended_at` NULL), or
  over. The admitted rows of the last window are the sliding window the per-minute limits are
  counted over; the rows in flight are the calls at once.

A call is admitted in one transaction that locks its key's row first (an UPDATE as the first
statement: a row lock on PostgreSQL, the database's write lock on SQLite), so two processes
never admit past a limit together; the clock is the database's on PostgreSQL (processes on
several machines agree), this machine's on SQLite. Admission happens inside the model call's
DBOS step, before its request: the decision reads a clock, so it is never made by the
deterministic workflow, and nothing about the wait is recorded (the step records only its
answer). A call refused waits for the moment the tables say it may go (or, for a limit on calls
at once, `CONCURRENT_POLL` seconds), then tries again; one whose turn is further away than
`PARK_SECONDS` parks its run instead (`durable._waits`: it holds no worker slot, and is
resumed once its turn may have come). A process that dies while its call waits or runs
leaves a row behind: the step's re-execution (same run and step) ends it, and rows nobody
refreshed for `STALE_SECONDS` stop counting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from ..limits import ModelLimits, retry_after
from . import _dbos
from ._engine import DBOSWorkflowCancelledError
from ._tables import engine_for, engine_with, missing_table

__all__ = [
    "CALLS_TABLE",
    "LIMITS_TABLE",
    "LimitedCall",
    "Limiter",
    "limiter_for",
    "rate_limited_seconds",
]

logger = logging.getLogger("durable_swarm")

LIMITS_TABLE = "durable_swarm_model_limits"
CALLS_TABLE = "durable_swarm_model_calls"
CONCURRENT_POLL = 0.25  # seconds between looks of a call waiting for one of its key's calls to end
MAX_LOOK = 5.0  # a waiting call looks at least this often (its cancellation, its row's freshness)
# A call whose turn is further away than this parks its run instead of waiting in its worker.
PARK_SECONDS = 2.0
FRESH_SECONDS = 2 * MAX_LOOK + 5  # a waiting row older than this: its process stopped waiting
STALE_SECONDS = 600.0  # a row nobody refreshed for this long stops counting (its process died)
MAX_PAUSES = 100  # 429s one model call may wait out before it fails
DEFAULT_PAUSE = 1.0  # a 429 that says nothing of when to try again: 1 s, 2 s, 4 s... up to 60 s

_CREATE_LIMITS = f"""
CREATE TABLE IF NOT EXISTS {LIMITS_TABLE} (
    limit_key TEXT PRIMARY KEY,
    paused_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    pause_reason TEXT,
    limits TEXT,
    version BIGINT NOT NULL DEFAULT 0
)
"""
_CREATE_CALLS = f"""
CREATE TABLE IF NOT EXISTS {CALLS_TABLE} (
    lease_id TEXT PRIMARY KEY,
    limit_key TEXT NOT NULL,
    run_id TEXT NOT NULL,
    call TEXT NOT NULL,
    agent TEXT,
    tokens BIGINT NOT NULL DEFAULT 0,
    admitted_at DOUBLE PRECISION,
    ended_at DOUBLE PRECISION,
    wait_until DOUBLE PRECISION,
    seen_at DOUBLE PRECISION NOT NULL
)
"""
_WAITING = "admitted_at IS NULL"
_INDEX = f"CREATE INDEX IF NOT EXISTS {CALLS_TABLE}_key ON {CALLS_TABLE} (limit_key, admitted_at)"


def _now(conn: sa.Connection) -> float:
    """The clock admissions are made by: the database's on PostgreSQL, this machine's on
    SQLite (one machine)."""
    if conn.dialect.name == "postgresql":
        return float(conn.execute(sa.text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).one()[0])
    return time.time()


def wait_seconds(
    limits: ModelLimits,
    now: float,
    paused_until: float,
    window: list[tuple[float | None, int]],
    in_flight: int,
    tokens: int,
) -> float:
    """How long a call of `tokens` must wait before it may go (0: now), given its key's pause,
    the calls that count in its window (`(ended_at, tokens)`, those that ended first first,
    None for a call still in flight) and how many calls are in flight.

    A call counts in the window from its admission until `window_seconds` after it *ended*:
    the provider counts a request when it arrives, which is at some moment between the two, so
    a new request (which arrives after now) can never meet more than the limit in any window
    of the provider's, however long requests take on the way."""
    waits = [paused_until - now]
    span = limits.window_seconds
    releases = [None if ended is None else ended + span for ended, _ in window]
    requests = limits.requests_per_window
    if requests is not None and len(window) >= requests:
        waits.append(_until(releases[len(window) - requests], now))
    allowed = limits.tokens_per_window
    if allowed is not None and window:
        used, need = sum(t for _, t in window), min(tokens, allowed)  # a big call goes alone
        freed = 0
        for release, (_, counted) in zip([now, *releases], [(None, 0), *window], strict=True):
            freed += counted
            if used - freed + need <= allowed:
                waits.append(_until(release, now))
                break
    if limits.concurrent is not None and in_flight >= limits.concurrent:
        waits.append(CONCURRENT_POLL)
    return max(0.0, *waits)


def _until(release: float | None, now: float) -> float:
    """Seconds until `release` (None: a call still in flight must end first: a short look)."""
    return CONCURRENT_POLL if release is None else release - now


@dataclass
class LimitedCall:
    """One model call that counts against the limits of `key`."""

    key: str
    limits: ModelLimits
    run_id: str
    call: str  # "<run id>:<step>": the same in every execution of the step
    agent: str
    tokens: int  # estimated before the call


class Limiter:
    """The shared limit tables of one run database (see the module docstring)."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url

    def _engine(self) -> sa.Engine:
        engine_with(self._url, LIMITS_TABLE, _CREATE_LIMITS)
        index = {"sqlite": _INDEX, "postgresql": _INDEX}
        return engine_with(self._url, CALLS_TABLE, _CREATE_CALLS, index)

    @staticmethod
    def _lock_key(conn: sa.Connection, key: str, limits: ModelLimits | None) -> None:
        """Lock `key`'s row for this transaction (made if missing): the first statement is a
        write, so SQLite takes its write lock at once and PostgreSQL locks the row."""
        update = sa.text(
            f"UPDATE {LIMITS_TABLE} SET version = version + 1"
            + (", limits = :limits" if limits is not None else "")
            + " WHERE limit_key = :key"
        )
        params = {"key": key, "limits": json.dumps(limits.to_json()) if limits else None}
        if conn.execute(update, params).rowcount:
            return
        conn.execute(
            sa.text(
                f"INSERT INTO {LIMITS_TABLE} (limit_key, paused_until, limits, version) "
                "VALUES (:key, 0, :limits, 0) ON CONFLICT (limit_key) DO NOTHING"
            ),
            params,
        )
        conn.execute(update, params)

    def try_admit(self, call: LimitedCall, lease_id: str) -> float | None:
        """Admit `call` as `lease_id` now (None), or say how many seconds it must wait (its row
        then says it waits, until when)."""
        with self._engine().begin() as conn:
            self._lock_key(conn, call.key, call.limits)
            now = _now(conn)
            paused = conn.execute(
                sa.text(f"SELECT paused_until FROM {LIMITS_TABLE} WHERE limit_key = :key"),
                {"key": call.key},
            ).scalar_one()
            # An earlier execution of this step (its process died, or gave the run up) is over.
            conn.execute(
                sa.text(
                    f"UPDATE {CALLS_TABLE} SET ended_at = :now WHERE call = :call AND "
                    "lease_id <> :lease AND admitted_at IS NOT NULL AND ended_at IS NULL"
                ),
                {"now": now, "call": call.call, "lease": lease_id},
            )
            # ... and rows nobody touched for long enough are of no use any more.
            conn.execute(
                sa.text(
                    f"DELETE FROM {CALLS_TABLE} WHERE (call = :call AND lease_id <> :lease AND "
                    "admitted_at IS NULL) OR (limit_key = :key AND seen_at < :old)"
                ),
                {
                    "call": call.call, "lease": lease_id, "key": call.key,
                    "old": now - max(STALE_SECONDS, 2 * call.limits.window_seconds),
                },
            )  # fmt: skip
            counted = conn.execute(
                sa.text(
                    f"SELECT ended_at, tokens FROM {CALLS_TABLE} WHERE limit_key = :key AND "
                    "admitted_at IS NOT NULL AND (ended_at > :since OR (ended_at IS NULL AND "
                    "seen_at > :stale))"
                ),
                {
                    "key": call.key,
                    "since": now - call.limits.window_seconds,
                    "stale": now - STALE_SECONDS,
                },
            ).all()
            window = sorted(
                ((None if e is None else float(e), int(t)) for e, t in counted),
                key=lambda row: float("inf") if row[0] is None else row[0],
            )
            in_flight = 0
            if call.limits.concurrent is not None:
                in_flight = conn.execute(
                    sa.text(
                        f"SELECT count(*) FROM {CALLS_TABLE} WHERE limit_key = :key AND "
                        "admitted_at IS NOT NULL AND ended_at IS NULL AND seen_at > :stale"
                    ),
                    {"key": call.key, "stale": now - STALE_SECONDS},
                ).scalar_one()
            wait = wait_seconds(call.limits, now, float(paused), window, in_flight, call.tokens)
            values = {
                "lease": lease_id, "key": call.key, "run": call.run_id, "call": call.call,
                "agent": call.agent, "tokens": call.tokens, "now": now,
                "admitted": None if wait > 0 else now, "until": now + wait if wait > 0 else None,
            }  # fmt: skip
            conn.execute(
                sa.text(
                    f"INSERT INTO {CALLS_TABLE} (lease_id, limit_key, run_id, call, agent, "
                    "tokens, admitted_at, ended_at, wait_until, seen_at) VALUES (:lease, :key, "
                    ":run, :call, :agent, :tokens, :admitted, NULL, :until, :now) ON CONFLICT "
                    "(lease_id) DO UPDATE SET admitted_at = excluded.admitted_at, "
                    "wait_until = excluded.wait_until, seen_at = excluded.seen_at"
                ),
                values,
            )
            return wait if wait > 0 else None

    def end(self, lease_id: str, tokens: int | None = None) -> None:
        """The call of `lease_id` is over (with the tokens the server counted, if it said)."""
        with self._engine().begin() as conn:
            conn.execute(
                sa.text(
                    f"UPDATE {CALLS_TABLE} SET ended_at = :now, seen_at = :now, "
                    "tokens = COALESCE(:tokens, tokens) WHERE lease_id = :lease"
                ),
                {"now": _now(conn), "tokens": tokens, "lease": lease_id},
            )

    def hold(self, lease_id: str, seconds: float) -> None:
        """The waiting call of `lease_id` parks its run for `seconds`: its row counts as a
        waiting call until then (and `FRESH_SECONDS` more), and the step's next execution
        replaces it."""
        with self._engine().begin() as conn:
            conn.execute(
                sa.text(
                    f"UPDATE {CALLS_TABLE} SET seen_at = :until WHERE lease_id = :lease AND "
                    f"{_WAITING}"
                ),
                {"until": _now(conn) + seconds, "lease": lease_id},
            )

    def forget(self, lease_id: str) -> None:
        """Delete the row of a call that stopped waiting without being admitted (cancelled)."""
        with self._engine().begin() as conn:
            conn.execute(
                sa.text(f"DELETE FROM {CALLS_TABLE} WHERE lease_id = :lease AND {_WAITING}"),
                {"lease": lease_id},
            )

    def pause(self, key: str, seconds: float, reason: str) -> float:
        """Pause every call of `key`, in every process, for `seconds` (a later pause already
        set stands); returns the moment it ends (seconds since the epoch)."""
        with self._engine().begin() as conn:
            self._lock_key(conn, key, None)
            until = _now(conn) + seconds
            conn.execute(
                sa.text(
                    f"UPDATE {LIMITS_TABLE} SET paused_until = CASE WHEN paused_until < :until "
                    "THEN :until ELSE paused_until END, pause_reason = :reason "
                    "WHERE limit_key = :key"
                ),
                {"until": until, "reason": reason[:500], "key": key},
            )
        return until

    # --- reading (any process; a database that never had a limited call reads nothing) -------

    def waiting_of(self, run_id: str) -> dict[str, Any] | None:
        """What `run_id` waits for now, if it waits for a model limit: `{"key", "agent",
        "until", "since"}` (times as UTC datetimes); None if it does not."""
        query = sa.text(
            f"SELECT c.limit_key, c.agent, c.wait_until, l.pause_reason, c.seen_at "
            f"FROM {CALLS_TABLE} c LEFT JOIN {LIMITS_TABLE} l ON l.limit_key = c.limit_key "
            "WHERE c.run_id = :run AND c.admitted_at IS NULL AND c.seen_at > :fresh "
            "ORDER BY c.seen_at DESC"
        )
        try:
            with engine_for(self._url).connect() as conn:
                fresh = _now(conn) - FRESH_SECONDS
                row = conn.execute(query, {"run": run_id, "fresh": fresh}).first()
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return None
            raise
        if row is None:
            return None
        return {
            "key": row[0],
            "agent": row[1],
            "until": _utc(row[2]),
            "paused_because": row[3],
        }

    def snapshot(self) -> list[dict[str, Any]]:
        """Per limit key: its limits (as last set), the calls waiting and in flight now, the
        requests and tokens admitted in the last 60 s, and the seconds its pause has left."""
        try:
            with engine_for(self._url).connect() as conn:
                now = _now(conn)
                keys = conn.execute(
                    sa.text(f"SELECT limit_key, paused_until, limits FROM {LIMITS_TABLE}")
                ).all()
                counts = conn.execute(
                    sa.text(
                        "SELECT limit_key, "
                        f"SUM(CASE WHEN {_WAITING} AND seen_at > :fresh THEN 1 ELSE 0 END), "
                        "SUM(CASE WHEN admitted_at IS NOT NULL AND ended_at IS NULL AND "
                        "seen_at > :stale THEN 1 ELSE 0 END), "
                        "SUM(CASE WHEN admitted_at > :minute THEN 1 ELSE 0 END), "
                        "SUM(CASE WHEN admitted_at > :minute THEN tokens ELSE 0 END) "
                        f"FROM {CALLS_TABLE} GROUP BY limit_key"
                    ),
                    {"fresh": now - FRESH_SECONDS, "stale": now - STALE_SECONDS,
                     "minute": now - 60.0},
                ).all()  # fmt: skip
        except sa.exc.DBAPIError as e:
            if missing_table(e):
                return []
            raise
        by_key = {row[0]: row for row in counts}
        found = []
        for key, paused_until, limits in keys:
            row = by_key.get(key)
            found.append(
                {
                    "key": key,
                    "limits": json.loads(limits) if limits else None,
                    "waiting": int(row[1] or 0) if row else 0,
                    "in_flight": int(row[2] or 0) if row else 0,
                    "requests_last_minute": int(row[3] or 0) if row else 0,
                    "tokens_last_minute": int(row[4] or 0) if row else 0,
                    "paused_seconds": max(0.0, float(paused_until) - now),
                }
            )
        return found

    # --- a model call's turn ---------------------------------------------------------------

    async def admit(self, call: LimitedCall, park: Parker | None = None) -> str:
        """Wait until `call` may go; returns its lease id (end it with `end`). A run cancelled
        meanwhile stops waiting (`DBOSWorkflowCancelledError`). With `park`, a call that must
        wait longer than `PARK_SECONDS` does not wait here: `park(seconds, waiting)` parks its
        run (it holds no worker slot meanwhile, and is resumed when its turn may have come;
        `waiting` is what `waiting_of` says), and raises."""
        lease_id = uuid.uuid4().hex
        checked = time.monotonic()
        admitted = False
        try:
            while True:
                wait = await asyncio.to_thread(self.try_admit, call, lease_id)
                if wait is None:
                    admitted = True
                    return lease_id
                if park is not None and wait > PARK_SECONDS:
                    waiting = await asyncio.to_thread(self.waiting_of, call.run_id)
                    # the row stays: the call still waits (counted), until its step runs again
                    await asyncio.to_thread(self.hold, lease_id, wait)
                    admitted = True
                    await park(wait, _json_safe(waiting or {"key": call.key}))
                if time.monotonic() - checked >= MAX_LOOK:
                    checked = time.monotonic()
                    if await asyncio.to_thread(_dbos.run_status, call.run_id) == "CANCELLED":
                        raise DBOSWorkflowCancelledError(f"Run {call.run_id} was cancelled")
                # A little later than the moment computed, spread out: waiters do not all look
                # in the same millisecond.
                nap = min(wait, MAX_LOOK) + random.uniform(0.002, 0.02 + wait * 0.05)
                await asyncio.sleep(nap)
        finally:
            if not admitted:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.forget, lease_id)


def _utc(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(float(epoch), tz=timezone.utc)


_limiters: dict[str, Limiter] = {}


def limiter_for(database_url: str) -> Limiter:
    """The limiter of `database_url` (one per database per process)."""
    limiter = _limiters.get(database_url)
    if limiter is None:
        limiter = _limiters[database_url] = Limiter(database_url)
    return limiter


def rate_limited_seconds(error: BaseException, pauses: int) -> float | None:
    """How long a model call must wait after `error` if it is a provider's rate limit (a 429
    that is not a spent quota): what its headers say (`limits.retry_after`), else 1 s doubled
    with each pause of this call (`pauses` so far), at most 60 s; None for any other error."""
    import openai

    if not isinstance(error, openai.RateLimitError):
        return None
    if getattr(error, "code", None) == "insufficient_quota":
        return None  # the account's quota, not a rate: waiting does not help
    response = getattr(error, "response", None)
    seconds = retry_after(getattr(response, "headers", None))
    if seconds is None:
        seconds = min(60.0, DEFAULT_PAUSE * 2**pauses)
    return seconds


# `park(seconds, waiting)`: park the run for its call's turn (see `Limiter.admit`); it raises.
Parker = Callable[[float, dict[str, Any]], Awaitable[None]]


def _json_safe(waiting: dict[str, Any]) -> dict[str, Any]:
    """`waiting_of`'s answer as JSON data (its times as ISO texts)."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in waiting.items()}


async def call_limited(
    limiter: Limiter,
    call: LimitedCall,
    enter: Callable[[], Awaitable[None]],
    leave: Callable[[], None],
    attempt: Callable[[], Awaitable[dict[str, Any]]],
    park: Parker | None = None,
) -> dict[str, Any]:
    """The body of a limited model step: wait for the call's turn, then `attempt()` it between
    `enter()` and `leave()` (the drain gate: a stopping process begins no new request). A 429
    pauses the key for every process (for as long as the provider says) and the call waits its
    turn again, within the same step attempt: it uses none of the step's retries."""
    pauses = 0
    while True:
        lease = await limiter.admit(call, park)
        await enter()
        try:
            output = await attempt()
        except BaseException as e:
            if not isinstance(e, Exception):  # cancelled, stopping: end the lease, unawaited
                asyncio.get_running_loop().run_in_executor(None, limiter.end, lease)
                raise
            seconds = rate_limited_seconds(e, pauses)
            await asyncio.to_thread(limiter.end, lease)
            if seconds is None or pauses >= MAX_PAUSES:
                raise
            pauses += 1
            reason = f"429 from the model endpoint for {call.key} (run {call.run_id})"
            await asyncio.to_thread(limiter.pause, call.key, seconds, reason)
            logger.warning(
                "Run %s: the model endpoint refused a call of %s with 429 (rate limit); every "
                "process waits %.3g s before the next call of it.",
                call.run_id,
                call.key,
                seconds,
            )
            leave()
            continue
        usage = output.get("usage") or {}
        total = usage.get("total_tokens") if isinstance(usage, dict) else None
        await asyncio.to_thread(limiter.end, lease, total if isinstance(total, int) else None)
        return output
