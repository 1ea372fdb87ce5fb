"""Retention: how long finished runs are kept, and the sweep that deletes the older ones.

A `Retention` policy gives each finished status (succeeded, failed, cancelled) an age; a run of
that status whose *finish time* (DBOS's `completed_at`) is older than its age is expired. A sweep
(`expire`) finds expired runs through DBOS's public `list_workflows`, in batches, and deletes each
with its sub-agent runs (DBOS child workflows) through DBOS's public `delete_workflows` (which
takes the run's steps, stream, events and messages), after deleting the rows this library keeps
for it in its own tables (`durable._tables.run_tables`: decisions, notices).

Never a run in flight: only runs whose status is final are listed; a run whose sub-agent has not
finished is kept; and the statuses of a batch are read again just before it is deleted, so a run
resumed (or forked back to life) meanwhile is kept. A run is only ever deleted with its parent,
never on its own.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import DurableSwarmError
from ._log import WORKFLOW_NAME
from ._runs import DBOS_STATUSES, time_of
from ._tables import forget_runs
from ._waits import WaitBook

__all__ = [
    "RETENTION_ENV",
    "RETENTION_STATUSES",
    "ExpiredRun",
    "Retention",
    "RetentionReport",
    "descendants",
    "expire",
    "parse_duration",
    "purge",
]

RETENTION_ENV = "DURABLE_SWARM_RETENTION"
RETENTION_STATUSES = ("succeeded", "failed", "cancelled")
DEFAULT_BATCH_SIZE = 100
DEFAULT_INTERVAL = 60.0

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_FORM = 'a number and a unit: s, m, h, d or w (e.g. "90m", "12h", "30d", "2w")'
_KEEP = ("never", "forever", "keep")
_MARGIN = timedelta(seconds=1)
_FINAL = {dbos: name for name in RETENTION_STATUSES for dbos in DBOS_STATUSES[name]}


def parse_duration(value: Any, key: str) -> timedelta:
    """`value` ("30d", "12h", "90m", "45s", "2w", or a `timedelta`) as a positive `timedelta`.

    Raises `DurableSwarmError` naming `key` and the accepted form for anything else."""
    if isinstance(value, timedelta):
        if value > timedelta(0):
            return value
    elif isinstance(value, str):
        found = _DURATION.match(value.strip().lower())
        if found and float(found.group(1)) > 0:
            return timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2)])
    raise DurableSwarmError(
        f"Retention {key!r}: {value!r} is not a duration; write {_FORM}, above zero."
    )


def _format(age: timedelta) -> str:
    """`age` in the largest unit that divides it ("30d", "36h", "90s")."""
    seconds = age.total_seconds()
    for unit in ("w", "d", "h", "m"):
        n = seconds / _UNITS[unit]
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    return f"{seconds:g}s"


def _positive_int(value: Any, key: str) -> int:
    try:
        number = int(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else 0
    except ValueError:
        number = 0
    if number < 1:
        raise DurableSwarmError(
            f"Retention {key!r}: {value!r} is not a whole number of runs of 1 or more."
        )
    return number


def _interval(value: Any) -> float:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and math.isfinite(value) and value > 0:
        return float(value)
    if number:
        raise DurableSwarmError(f"Retention 'interval': {value!r} is not above zero.")
    return parse_duration(value, "interval").total_seconds()


@dataclass(frozen=True)
class Retention:
    """How long finished runs are kept: `Retention(succeeded="30d", failed="90d",
    cancelled="7d")`. A status left out (or set to None / "never") is kept for good.

    Ages are durations like "45s", "90m", "12h", "30d", "2w" (or `timedelta`s), counted from
    the run's finish time. Runs in flight (pending, queued, waiting for a person) are never
    deleted, whatever their age; a sub-agent run goes with its parent, never before.

    A process that launches DBOS with a policy (`DurableSwarm(retention=...)`, `durable-swarm
    worker --retention ...`, or `DURABLE_SWARM_RETENTION`) applies it in the background: every
    `interval` seconds (or a duration like "5m"; default 60 s), one process of the database at
    a time deletes expired runs, `batch_size` top-level runs (default 100) per database
    transaction of DBOS, until none is left.

    Raises `DurableSwarmError` naming the key for an unknown status, a live status, or a value
    that is not a duration.
    """

    succeeded: timedelta | None = None
    failed: timedelta | None = None
    cancelled: timedelta | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    interval: float = DEFAULT_INTERVAL

    def __init__(
        self,
        succeeded: str | timedelta | None = None,
        failed: str | timedelta | None = None,
        cancelled: str | timedelta | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        interval: float | str = DEFAULT_INTERVAL,
    ) -> None:
        for key, value in (("succeeded", succeeded), ("failed", failed), ("cancelled", cancelled)):
            keep = value is None or (isinstance(value, str) and value.strip().lower() in _KEEP)
            object.__setattr__(self, key, None if keep else parse_duration(value, key))
        object.__setattr__(self, "batch_size", _positive_int(batch_size, "batch_size"))
        object.__setattr__(self, "interval", _interval(interval))

    @property
    def ages(self) -> dict[str, timedelta]:
        """The age of each status the policy deletes (statuses kept for good left out)."""
        found = {s: getattr(self, s) for s in RETENTION_STATUSES}
        return {s: age for s, age in found.items() if age is not None}

    @classmethod
    def of(cls, policy: Any) -> Retention | None:
        """A policy from what `DurableSwarm(retention=...)` takes: a `Retention`, a mapping
        (`{"succeeded": "30d", "failed": "90d", "batch_size": 200, "interval": "5m"}`), the same
        as text (`"succeeded=30d,failed=90d"`, as in `DURABLE_SWARM_RETENTION` and `worker
        --retention`), or None (no policy)."""
        if policy is None or isinstance(policy, Retention):
            return policy
        if isinstance(policy, str):
            policy = _pairs(policy)
        if not isinstance(policy, Mapping):
            raise DurableSwarmError(
                f"retention must be a Retention, a dict like {{'succeeded': '30d'}} or text "
                f"like 'succeeded=30d,failed=90d', not {type(policy).__name__}."
            )
        known = (*RETENTION_STATUSES, "batch_size", "interval")
        for key in policy:
            if key in DBOS_STATUSES and key not in RETENTION_STATUSES:
                raise DurableSwarmError(
                    f"Retention {key!r}: runs in flight (pending, waiting for a person) are "
                    f"never deleted; a policy names only {', '.join(RETENTION_STATUSES)}."
                )
            if key not in known:
                raise DurableSwarmError(
                    f"Retention {key!r} is not a key of a policy; use {', '.join(known)}."
                )
        return cls(**dict(policy))

    @classmethod
    def from_env(cls) -> Retention | None:
        """The policy in `DURABLE_SWARM_RETENTION` (None when unset or empty)."""
        text = os.environ.get(RETENTION_ENV, "").strip()
        if not text:
            return None
        try:
            return cls.of(text)
        except DurableSwarmError as e:
            raise DurableSwarmError(f"{RETENTION_ENV}: {e}") from None

    def to_text(self) -> str:
        """The policy as `of` reads it back: `succeeded=30d,failed=90d,batch_size=100,...`."""
        parts = [f"{s}={_format(age)}" for s, age in self.ages.items()]
        return ",".join([*parts, f"batch_size={self.batch_size}", f"interval={self.interval:g}s"])

    def describe(self) -> str:
        """One line for people: each status's age, what is kept for good, the pace."""
        ages = [f"{s} after {_format(self.ages[s])}" for s in self.ages]
        kept = [s for s in RETENTION_STATUSES if s not in self.ages]
        text = "deletes " + (", ".join(ages) if ages else "nothing")
        if kept:
            text += f"; keeps {', '.join(kept)} runs for good"
        return text + f" (batches of {self.batch_size}, every {self.interval:g} s)"


def _pairs(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise DurableSwarmError(
                f"Retention {part!r} is not KEY=VALUE; write e.g. "
                "'succeeded=30d,failed=90d,cancelled=7d'."
            )
        found[key.strip()] = value.strip()
    return found


@dataclass
class ExpiredRun:
    """A top-level run past its age: its status and finish time, and the sub-agent runs
    deleted with it (by status)."""

    run_id: str
    status: str
    finished_at: datetime | None
    sub_runs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "sub_runs": sorted(self.sub_runs),
        }


@dataclass
class RetentionReport:
    """What a sweep deleted (or, with `dry_run`, would delete): the expired top-level runs
    (`runs`), with their sub-agent runs; the runs past their age kept because a sub-agent
    of theirs is still in flight, or they were resumed while the sweep looked (`kept`); and
    the runs DBOS shows cancelled that only wait, parked (`waiting`: not finished, never
    deleted, not reported)."""

    dry_run: bool
    now: datetime
    runs: list[ExpiredRun] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        """Runs deleted by status, sub-agent runs included under their own status."""
        counts = dict.fromkeys(RETENTION_STATUSES, 0)
        for run in self.runs:
            counts[run.status] += 1
            for status in run.sub_runs.values():
                counts[status] = counts.get(status, 0) + 1
        return counts

    @property
    def deleted(self) -> int:
        """How many runs (sub-agent runs included)."""
        return sum(self.counts.values())

    def span(self, status: str) -> tuple[datetime | None, datetime | None]:
        """The oldest and newest finish times of the top-level runs of `status`."""
        times = [r.finished_at for r in self.runs if r.status == status and r.finished_at]
        return (min(times), max(times)) if times else (None, None)

    def merge(self, other: RetentionReport) -> None:
        """Add `other`'s runs (the next batch of the same sweep)."""
        self.runs += other.runs
        self.kept += [k for k in other.kept if k not in self.kept]
        self.waiting += [w for w in other.waiting if w not in self.waiting]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: counts, spans, and every run."""
        statuses = {}
        for status, n in self.counts.items():
            oldest, newest = self.span(status)
            statuses[status] = {
                "runs": n,
                "oldest_finished_at": oldest.isoformat() if oldest else None,
                "newest_finished_at": newest.isoformat() if newest else None,
            }
        return {
            "dry_run": self.dry_run,
            "now": self.now.isoformat(),
            "deleted": self.deleted,
            "statuses": statuses,
            "runs": [r.to_json() for r in self.runs],
            "kept_in_flight": list(self.kept),
        }


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


def _status_of(row: Any) -> str | None:
    """This library's name of `row`'s status if it is final, else None."""
    return _FINAL.get(row.status)


def descendants(source: Any, run_ids: list[str]) -> dict[str, Any]:
    """Every run below `run_ids` (DBOS child workflows: sub-agent runs, recursively), as DBOS
    status rows by run id."""
    found: dict[str, Any] = {}
    frontier = list(run_ids)
    while frontier:
        rows = source.list_workflows(
            parent_workflow_id=frontier, load_input=False, load_output=False
        )
        frontier = [r.workflow_id for r in rows if r.workflow_id not in found]
        found.update((r.workflow_id, r) for r in rows)
    return found


def purge(source: Any, database_url: str, run_ids: list[str]) -> list[str]:
    """Delete `run_ids` and every run below them: their rows in this library's tables, then
    (through DBOS's `delete_workflows`) their status, inputs, steps, streams, events and
    messages. Returns every id deleted. The one deletion path of `delete_run`, `prune_runs`
    and retention."""
    ids = list(dict.fromkeys([*run_ids, *descendants(source, run_ids)]))
    if ids:
        forget_runs(database_url, ids)
        source.delete_workflows(list(run_ids), delete_children=True)
    return ids


def _expired(
    source: Any,
    policy: Retention,
    now: datetime,
    limit: int | None,
    skip: Iterable[str],
    waiting: set[str],
) -> list[Any]:
    """Top-level runs past their age, oldest first, at most `limit` (None: all) beyond `skip`
    and the runs of `waiting` (parked at a wait: CANCELLED in DBOS, yet not finished).

    A second of margin: DBOS stores finish times in whole seconds on SQLite under Python 3.11
    (truncated), so a run is kept up to a second past its age, never deleted a moment early."""
    skipped = set(skip)
    found: list[Any] = []
    for status, age in policy.ages.items():
        left_out = skipped | (waiting if status == "cancelled" else set())
        rows = source.list_workflows(
            status=list(DBOS_STATUSES[status]),
            completed_before=_iso(now - age - _MARGIN),
            name=WORKFLOW_NAME,
            has_parent=False,
            limit=None if limit is None else limit + len(left_out),
            load_input=False,
            load_output=False,
        )
        found += [r for r in rows if r.workflow_id not in left_out]
    found.sort(key=lambda r: (r.completed_at or 0, r.workflow_id))
    return found if limit is None else found[:limit]


def _batch(
    source: Any,
    database_url: str,
    policy: Retention,
    now: datetime,
    *,
    dry_run: bool,
    limit: int | None,
    skip: Iterable[str] = (),
) -> RetentionReport:
    report = RetentionReport(dry_run=dry_run, now=now)
    doomed: list[str] = []
    waits = WaitBook(database_url)
    waiting = waits.live_run_ids()
    for row in _expired(source, policy, now, limit, skip, waiting):
        below = descendants(source, [row.workflow_id])
        status = _status_of(row)
        subs = {run_id: _status_of(sub) for run_id, sub in below.items()}
        # a run parked at a wait is CANCELLED in DBOS, yet it waits: in flight
        cancelled = [r for r, s in {row.workflow_id: status, **subs}.items() if s == "cancelled"]
        parked = waits.parked(cancelled)
        if parked:
            report.waiting.append(row.workflow_id)
            continue
        if status is None or None in subs.values():  # a sub-agent runs: in flight
            report.kept.append(row.workflow_id)
            continue
        finished = time_of(row.completed_at)
        report.runs.append(ExpiredRun(row.workflow_id, status, finished, subs))  # type: ignore[arg-type]
        doomed.append(row.workflow_id)
    if dry_run or not doomed:
        return report
    # Read the batch again just before it goes: a run resumed since it was listed is live.
    again = {
        r.workflow_id: r
        for r in source.list_workflows(workflow_ids=doomed, load_input=False, load_output=False)
    }
    going = []
    for run in report.runs:
        row = again.get(run.run_id)
        if row is None:  # deleted meanwhile (by hand, or a sweep elsewhere): nothing to do
            continue
        if _status_of(row) != run.status or time_of(row.completed_at) != run.finished_at:
            report.kept.append(run.run_id)
            continue
        going.append(run)
    report.runs = going
    purge(source, database_url, [run.run_id for run in going])
    return report


def expire(
    source: Any,
    database_url: str,
    policy: Retention,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    batches: int | None = None,
    on_batch: Callable[[RetentionReport], None] | None = None,
) -> RetentionReport:
    """Apply `policy` to the run database behind `source` (the `DBOS` class or a
    `ClientSource`) as of `now` (default: the current time): delete expired runs in batches of
    `policy.batch_size` (at most `batches` of them; None: until none is left), calling
    `on_batch` with each batch's report. With `dry_run`, delete nothing and report every run
    that would go."""
    now = now or datetime.now(timezone.utc)
    if now.tzinfo is None:
        now = now.astimezone()
    if dry_run:
        return _batch(source, database_url, policy, now, dry_run=True, limit=None)
    total = RetentionReport(dry_run=False, now=now)
    done = 0
    while batches is None or done < batches:
        report = _batch(
            source, database_url, policy, now, dry_run=False, limit=policy.batch_size,
            skip=[*total.kept, *total.waiting],
        )  # fmt: skip
        done += 1
        total.merge(report)
        if report.runs and on_batch is not None:
            on_batch(report)
        if len(report.runs) + len(report.kept) + len(report.waiting) < policy.batch_size:
            break  # the last batch: fewer expired runs were left than a batch holds
    return total
