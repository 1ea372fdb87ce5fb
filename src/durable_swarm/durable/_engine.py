"""The one seam to DBOS: the only module of durable-swarm that imports `dbos` or touches it.

Everything else in the package goes through the names here: DBOS's public API, re-exported
(`DBOS`, `DBOSClient`, `SetWorkflowID`, `StepOptions`, `EnqueueOptions`, `Serializer`, the
errors of the public `dbos.error` module), and functions for what DBOS (3.4) has no public call
for. `tests/test_engine_seam.py` holds every other module to it; `scripts/dbos_touches.py`
counts the private reaches left here, and the test holds that count down.

Each private reach below says what it is for, and what happens on a DBOS release whose
internals differ (`tests/durable/test_engine_contract.py` fails, naming the change):

* the launched instance and its system database (`instance`, `system_database`): DBOS has no
  public accessor. Fallback: none needed beyond DBOS's own module-level instance; a missing
  attribute fails the contract test before a release ships.
* the execution's ownership token (`execution_token`): None on a DBOS without tokens (runs are
  then fenced by status and executor id only).
* the wake-ups and the active-run set (`install_wakeups`, `wakeups_supported`): nothing is
  installed on a DBOS release other than `_wakeup.SUPPORTED_DBOS`; queues are then polled.
* the ownership gate around the queue thread's dequeue (`gate_queues`): DBOS has no public hook
  before a claim. No fallback: ownership fencing depends on it (the contract test fails first).
* batched recovery (`recover_runs_of`, `batched_launch_recovery`, `reenqueue`): only on a DBOS
  in `BATCHED_RECOVERY_DBOS`; any other gets DBOS's own recovery, one transaction per run.
* a run's status read outside any step (`run_status`): `DBOS.get_workflow_status` inside a
  workflow records a step, which would change the run's log.
* DBOS's background event loop (`on_dbos_loop`).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar, cast

import dbos
import dbos._dbos as dbos_internals
import sqlalchemy as sa
from dbos import (
    DBOS,
    DBOSClient,
    EnqueueOptions,
    Serializer,
    SetWorkflowID,
    StepOptions,
)
from dbos import error as dbos_error

from . import _wakeup

__all__ = [
    "BATCHED_RECOVERY_DBOS",
    "DBOS",
    "DBOS_DIR",
    "RECOVERY_BATCH",
    "DBOSAwaitedWorkflowCancelledError",
    "DBOSBaseException",
    "DBOSClient",
    "DBOSMaxStepRetriesExceeded",
    "DBOSWorkflowCancelledError",
    "DBOSWorkflowConflictIDError",
    "EnqueueOptions",
    "Serializer",
    "SetWorkflowID",
    "StepOptions",
    "active_run_ids",
    "batched_launch_recovery",
    "batched_recovery",
    "client_system_database",
    "dbos_version",
    "execution_token",
    "executor_id",
    "gate_queues",
    "install_wakeups",
    "instance",
    "instance_serializer",
    "is_launched",
    "notification_poll_interval",
    "on_dbos_loop",
    "owner_of",
    "recover_runs_of",
    "recovery_queue",
    "reenqueue_run",
    "run_status",
    "system_database",
    "use_recovery_queue",
    "wakeups_of",
    "wakeups_supported",
    "worker_concurrency",
]

# DBOS's public errors (`dbos.error`, the module DBOS exports for them).
DBOSBaseException = dbos_error.DBOSBaseException
DBOSWorkflowCancelledError = dbos_error.DBOSWorkflowCancelledError
DBOSWorkflowConflictIDError = dbos_error.DBOSWorkflowConflictIDError
DBOSAwaitedWorkflowCancelledError = dbos_error.DBOSAwaitedWorkflowCancelledError
DBOSMaxStepRetriesExceeded = dbos_error.DBOSMaxStepRetriesExceeded

# Where DBOS's code lives: a database error raised in a frame under it is DBOS's own call
# (see `_workflow._from_dbos`).
DBOS_DIR = os.path.dirname(os.path.abspath(dbos.__file__))

# The attribute of a DBOS instance that holds its `_wakeup.Wakeups` (set by `install_wakeups`).
WAKEUPS_ATTR = "_durable_swarm_wakeups"

logger = logging.getLogger("durable_swarm")

T = TypeVar("T")


def instance() -> Any:
    """The DBOS instance of this process (configured, launched or not), or None."""
    return getattr(dbos_internals, "_dbos_global_instance", None)


def system_database(dbos: Any = None) -> Any:
    """The system database object (its engine and table definitions) of `dbos` (default: the
    DBOS instance of this process). The one read of DBOS's private `_sys_db` on an instance."""
    return (instance() if dbos is None else dbos)._sys_db


def _active_set(dbos: Any = None) -> Any:
    """DBOS's set of the runs executing in this process (default: on this process's instance)."""
    return (instance() if dbos is None else dbos)._active_workflows_set


def client_system_database(client: DBOSClient) -> Any:
    """DBOS's system database object behind a `DBOSClient` (its engine and tables)."""
    return client._sys_db


def is_launched() -> bool:
    """Whether DBOS (ours or the app's) is launched in this process."""
    inst = instance()
    return bool(inst is not None and getattr(inst, "_launched", False))


def instance_serializer() -> Any:
    """The serializer the DBOS of this process stores through (None: none configured)."""
    return getattr(instance(), "_serializer", None)


def executor_id() -> str:
    """This process's DBOS executor id (DBOS's public `DBOS.executor_id`)."""
    return str(DBOS.executor_id)


def execution_token(run_id: str) -> str | None:
    """The ownership token of the execution of `run_id` that runs the calling code (DBOS
    writes it on the run when the execution begins, and refuses the checkpoints of an
    execution whose token is no longer there); None outside one, or on a DBOS without
    tokens. DBOS has no public call for it."""
    try:
        from dbos._context import current_owner_xid

        token = current_owner_xid(run_id)
    except (ImportError, AssertionError):
        return None
    return None if token is None else str(token)


def wakeups_of(dbos: Any = None) -> _wakeup.Wakeups | None:
    """The wake-ups installed on `dbos` (default: this process's instance), or None."""
    found: _wakeup.Wakeups | None = getattr(
        instance() if dbos is None else dbos, WAKEUPS_ATTR, None
    )
    return found


def active_run_ids() -> list[str]:
    """The ids of the runs executing in this process now (DBOS's set of active runs)."""
    return list(_active_set().activeList())


def run_status(run_id: str) -> str | None:
    """The DBOS status of `run_id` read now, outside any workflow step (so a workflow may call
    it any number of times without changing its recorded steps; `DBOS.get_workflow_status`
    would record one)."""
    status = system_database().get_workflow_status(run_id)
    return None if status is None else str(status["status"])


def owner_of(run_id: str) -> str | None:
    """The ownership token `run_id` holds now (None if it has none, or no such run)."""
    runs = system_database().tables.workflow_status
    query = sa.select(runs.c.owner_xid).where(runs.c.workflow_uuid == run_id)
    with system_database().engine.begin() as conn:
        row = conn.execute(query).first()
    return None if row is None or row[0] is None else str(row[0])


def notification_poll_interval(sys_db: Any, default: float = 1.0) -> float:
    """How often DBOS polls for messages on `sys_db` (its SQLite notification poll)."""
    return float(getattr(sys_db, "_notification_listener_polling_interval_sec", default))


def worker_concurrency(queue: Any) -> int | None:
    """A DBOS queue's per-process concurrency limit (None: none). `Queue` keeps it private."""
    limit = getattr(queue, "_worker_concurrency", None)
    return None if limit is None else int(limit)


def on_dbos_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on DBOS's own event loop and wait for it (from synchronous code).

    A sync `DBOS.start_workflow` of an async workflow keeps one of DBOS's executor threads busy
    for the whole run, waits included; started from DBOS's loop, the run is a task there and
    holds no thread. (DBOS exposes no public call for this: it is its background loop.)
    """
    result: T = instance()._background_event_loop.submit_coroutine(coroutine)
    return result


# The queue a run started without one goes back on when recovered here: this library's
# recovery queue once registered (`use_recovery_queue`), else DBOS's internal queue.
_recovery_queue: str | None = None


def use_recovery_queue(name: str | None) -> None:
    """Send recovered runs that have no queue to `name` (None: to DBOS's internal queue)."""
    global _recovery_queue
    _recovery_queue = name


def recovery_queue() -> str:
    """The queue a run started without one goes back on when it is recovered here."""
    from dbos._utils import INTERNAL_QUEUE_NAME

    return _recovery_queue or INTERNAL_QUEUE_NAME


# The DBOS releases whose system database `_reenqueue` was written and tested against
# (its table, and the update DBOS's own recovery makes); any other release gets DBOS's own
# recovery, one transaction per run.
BATCHED_RECOVERY_DBOS = ("3.4.",)
# Runs put back on their queues per transaction: a dequeue waits at most for one batch.
RECOVERY_BATCH = 500


def dbos_version() -> str:
    """The installed DBOS release ("" if unknown)."""
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return ""


_dbos_version = dbos_version


def batched_recovery(sys_db: Any) -> bool:
    """Whether this DBOS's recovery can be batched (`_reenqueue`): a tested DBOS
    release, whose system database has what the batch uses, not sharded."""
    names = ("tables", "engine", "app_name", "_now_ms_sql", "_name_filter")
    return (
        _dbos_version().startswith(BATCHED_RECOVERY_DBOS)
        and getattr(sys_db, "sharded", True) is False
        and all(hasattr(sys_db, name) for name in names)
    )


def recover_runs_of(executor_id: str) -> int:
    """Put the PENDING runs of the (dead) executor `executor_id` back on their queues; returns
    how many. Needs DBOS launched in this process."""
    sys_db = system_database()
    if batched_recovery(sys_db):
        return _reenqueue(sys_db, executor_id)
    # DBOS recovers only its own executor's runs at launch and has no public call for another
    # executor's. This private one is what launch uses: it re-enqueues each PENDING run of the
    # current application version on its own queue (DBOS's internal queue for runs started
    # without one), each in a transaction of its own, only if the run still carries
    # `executor_id`, so a run a live process has dequeued since is left alone and calling it
    # twice is harmless.
    return len(DBOS._recover_pending_workflows([executor_id]))


def reenqueue_run(run_id: str, owner: str | None) -> bool:
    """Put `run_id`, PENDING under this executor, back on its queue; with `owner`, only while
    the execution holding that token still owns it (see `_dbos.hand_back`)."""
    sys_db = system_database()
    if batched_recovery(sys_db):
        return _reenqueue(sys_db, executor_id(), [run_id], owner=owner or owner_of(run_id)) > 0
    # another DBOS release: its own call, fenced by status and executor id only
    return bool(sys_db.reenqueue_for_recovery(run_id, [executor_id()], recovery_queue()))


def _reenqueue(
    sys_db: Any,
    executor_id: str,
    run_ids: Sequence[str] | None = None,
    *,
    owner: str | None = None,
) -> int:
    """DBOS's recovery of `executor_id`'s PENDING runs (all of them, in batches of
    `RECOVERY_BATCH` runs per statement; or those of `run_ids`, in one statement) instead of one
    transaction per run; returns how many went back on a queue.

    Each batch makes the update DBOS's `reenqueue_for_recovery` makes to one run (PENDING ->
    ENQUEUED on the run's queue, else DBOS's internal queue; the execution's ownership token
    cleared). Without `run_ids` it takes the runs DBOS's `get_pending_workflows` selects (this
    executor, this application version and name): only for a dead executor, which starts no run
    meanwhile. The `executor_id` condition keeps it idempotent like DBOS's: a run that a live
    process has dequeued since carries that process's id and is left alone. `owner` (with
    `run_ids`): only runs still owned by the execution holding that token (see `hand_back`).
    """
    runs = sys_db.tables.workflow_status
    pending = sa.and_(runs.c.status == "PENDING", runs.c.executor_id == executor_id)

    def reenqueue(which: Any) -> int:
        statement = (
            sa.update(runs)
            .where(runs.c.workflow_uuid.in_(which), pending)
            .values(
                status="ENQUEUED",
                owner_xid=None,
                started_at_epoch_ms=None,
                updated_at=sys_db._now_ms_sql(),
                queue_name=sa.func.coalesce(runs.c.queue_name, recovery_queue()),
            )
        )
        with sys_db.engine.begin() as conn:
            return int(conn.execute(statement).rowcount)

    if owner is not None:
        pending = sa.and_(pending, runs.c.owner_xid == owner)
    if run_ids is not None:  # the caller batches them (`_recover_own_runs`)
        return reenqueue(list(run_ids))
    of_this_app = sa.and_(
        pending,
        runs.c.application_version == DBOS.application_version,
        sys_db._name_filter(runs.c.application_name, sys_db.app_name),
    )
    # in id order, so two processes sweeping the same dead executor lock its rows alike
    batch = (
        sa.select(runs.c.workflow_uuid)
        .where(of_this_app)
        .order_by(runs.c.workflow_uuid)
        .limit(RECOVERY_BATCH)
    )
    total = 0
    while count := reenqueue(batch):  # (a batch of fewer may only mean some were taken meanwhile)
        total += count
    return total


def _recover_own_runs(dbos: Any, pending: list[Any]) -> None:
    """DBOS's launch recovery of this executor's own pending runs (`startup_recovery_thread`,
    given the runs DBOS listed at launch, before this process could start any), batched."""
    run_ids = [run.workflow_id for run in pending]
    for start in range(0, len(run_ids), RECOVERY_BATCH):
        batch = run_ids[start : start + RECOVERY_BATCH]
        try:
            _reenqueue(system_database(dbos), executor_id(), batch)
        except Exception as e:  # as DBOS does for one run: say so and go on with the next
            # The batch's runs stay PENDING here; the ownership thread hands them back to their
            # queues once they have been left alone for `dead_after` (see `Ownership._heal`).
            dbos.logger.error(
                f"Exception encountered when recovering runs {batch[0]} .. {batch[-1]} "
                f"({len(batch)} runs; they go back to their queues later): {e!r}"
            )


@contextlib.contextmanager
def batched_launch_recovery() -> Iterator[None]:
    """While DBOS launches here: its recovery of this executor's own runs goes in batches
    (`_recover_own_runs`) if this DBOS release is one the batch was tested with.

    DBOS (3.4) submits `startup_recovery_thread` (one transaction per run) to its executor at
    launch and has no public switch for it; the function it submits is looked up in its module
    at launch, so it is replaced for that moment only.
    """
    original = getattr(dbos_internals, "startup_recovery_thread", None)
    if original is None or not _dbos_version().startswith(BATCHED_RECOVERY_DBOS):
        yield
        return

    def recover(dbos: Any, pending: list[Any]) -> None:
        listed = all(hasattr(r, "workflow_id") for r in pending)
        if batched_recovery(system_database(dbos)) and listed:
            _recover_own_runs(dbos, pending)
        else:
            original(dbos, pending)

    dbos_internals.startup_recovery_thread = recover  # type: ignore[assignment]
    try:
        yield
    finally:
        dbos_internals.startup_recovery_thread = original


def gate_queues(
    dbos: Any,
    ownership: Any,
    taken: Callable[[Sequence[str], str], None] = lambda ids, queue: None,
    give_back: Callable[[str], bool] = bool,
    starting: Callable[[str], int] = lambda queue: 0,
    slots: tuple[int, Sequence[str], str, int] | None = None,
) -> None:
    """Make DBOS's queue thread take no run while `ownership` is not confirmed, and tell `taken`
    the ids of the runs it does take and their queue (before it starts them).

    `starting(queue)` is how many runs this process took from `queue` that have not begun yet;
    the claim counts them as running here, with those begun (DBOS counts a run against its
    queue's per-worker concurrency only once it begins, and only as of the start of its poll, so
    a second look soon after a claim would overshoot).

    `slots` is `(count, queues, recovery queue, its limit)`: this process runs at most `count`
    runs at once from `queues` together (a worker: its queue and the recovery queue), so a claim
    from one of them counts the runs of all of them; the recovery queue, whose per-worker limit
    in DBOS (`its limit`) is only a ceiling, gets exactly the free slots. That is how a dead
    process's runs spread over the live processes instead of going all to the first that looks.

    The confirmation is checked again once the claim returns, under the same registration: a
    process paused (or cut off) between the first check and its claim may have been taken for
    dead meanwhile, and the runs it claimed go back to their queues through `give_back` instead
    of starting here.

    DBOS (3.4) has no public switch for this; its queue thread claims runs through these two
    system-database calls, wrapped here on this process's instance only.
    """
    sys_db = system_database(dbos)
    plain, partitioned = sys_db.start_queued_workflows, sys_db.start_queued_partitioned_workflows
    count, shared, recovery, ceiling = slots if slots is not None else (0, (), "", 0)

    def admitted(run_ids: list[str], incarnation: str, queue: str) -> list[str]:
        if run_ids and not (
            ownership.confirmed() and ownership.registry.incarnation == incarnation
        ):
            for run_id in run_ids:
                give_back(run_id)
            return []
        taken(run_ids, queue)
        return run_ids

    def load_of(name: str) -> int:
        # Runs taken but not begun, then those begun (read in this order, a run moving from one
        # to the other in between counts twice, never zero times).
        taken_here = starting(name)
        return taken_here + int(_active_set(dbos).count_for_queue(name))

    def load(queue: Any) -> int:
        if queue.name not in shared:
            return load_of(queue.name)
        busy = sum(load_of(name) for name in shared)
        if queue.name == recovery:  # DBOS's limit is a ceiling: leave exactly the free slots
            return ceiling - max(0, count - busy)
        return busy

    # DBOS 3.4's calls: start_queued_workflows(queue, executor_id, app_version, partition_key,
    # local_running_count, ...) and start_queued_partitioned_workflows(queue, executor_id,
    # app_version, max_tasks, ...). Only a queue with a per-worker limit uses the count (not
    # DBOS's internal queue, which carries thousands of recovered runs at once); DBOS's count
    # (its active runs when the poll began, plus what this poll claimed) stands where it is
    # the larger.
    def start_queued(queue: Any, *args: Any, **kwargs: Any) -> Any:
        if not ownership.confirmed():
            return [], None
        incarnation = ownership.registry.incarnation
        if worker_concurrency(queue) is not None:
            if len(args) >= 4:
                args = (*args[:3], max(args[3], load(queue)), *args[4:])
            else:
                running = max(kwargs.get("local_running_count", 0), load(queue))
                kwargs["local_running_count"] = running
        run_ids, reason = plain(queue, *args, **kwargs)
        return admitted(run_ids, incarnation, queue.name), reason

    def start_partitioned(queue: Any, *args: Any, **kwargs: Any) -> Any:
        if not ownership.confirmed():
            return []
        incarnation = ownership.registry.incarnation
        limit = worker_concurrency(queue)
        if limit is not None and len(args) >= 3:
            room = min(args[2], max(0, limit - load(queue)))
            if room <= 0:
                return []
            args = (*args[:2], room, *args[3:])
        return admitted(partitioned(queue, *args, **kwargs), incarnation, queue.name)

    sys_db.start_queued_workflows = start_queued
    sys_db.start_queued_partitioned_workflows = start_partitioned


# The wake-ups (see `_wakeup`): the parts that reach into DBOS's queue thread and active-run set.


def wakeups_supported() -> bool:
    """Whether the installed DBOS is one whose internals `install_wakeups` knows (see
    `_wakeup.SUPPORTED_DBOS`): its queue thread, and the fields and methods of its active-run
    set that `_active_runs` relies on, probed on a throwaway one."""
    try:
        parts = importlib.metadata.version("dbos").split(".")
        version = (int(parts[0]), int(parts[1]))
    except (importlib.metadata.PackageNotFoundError, ValueError, IndexError):
        return False
    if version not in _wakeup.SUPPORTED_DBOS:
        return False
    import dbos._core as core
    import dbos._queue as queue

    if not callable(getattr(queue, "queue_worker_thread", None)):
        return False
    # The active-run set's fields and methods `_active_runs` relies on, on a throwaway one.
    try:
        active = core.ActiveWorkflowById()
        entry = active.add("probe", "queue", None)
        fields = (active._m, active._lock, entry._key, entry._bucket, entry._active)
        known = fields[0] == {"probe": [("queue", None)]} and entry._released is False
        entry.release()
        methods = ("count_for_queue", "count_for_partition")
        return known and not active._m and all(hasattr(active, name) for name in methods)
    except (AttributeError, TypeError, KeyError, ValueError):
        return False


def _active_runs(core: Any, wakeups: _wakeup.Wakeups) -> Any:
    """A new set of active runs for a DBOS instance (DBOS's `ActiveWorkflowById`, which its
    queue threads count a queue's runs by), reporting to `wakeups`."""

    class Execution(core.ActiveWorkflowEntry):
        """One execution of a run here (DBOS's entry): its tree (None: neither a queued run nor
        a sub-agent started by one here), whether it waits (for a person, or for the run
        `joins` to end), and whether its tree counts it as running. A join counts as running
        until the run it joins is registered here (DBOS registers a run in its own task, which
        may not have begun when its parent joins it), then as waiting; also as waiting once
        that run has not registered within `_wakeup.JOIN_ELSEWHERE_SECONDS` (it runs elsewhere)."""

        _released: bool

        def __init__(self, active: Any, key: str, bucket: _wakeup.Bucket | None) -> None:
            super().__init__(active, key, bucket)
            self.tree: _wakeup._Tree | None = None
            self.waiting = False
            self.counted = True
            self.joins: Any = None  # the member (or, not registered yet, the run id) it joins

        @property
        def run_id(self) -> str:
            return str(self._key)

        @property
        def bucket(self) -> _wakeup.Bucket | None:
            """DBOS's (queue name, partition key) of this execution (None: no queue)."""
            return self._bucket

        @property
        def queue(self) -> str | None:
            return None if self._bucket is None else self._bucket[0]

        def release(self) -> None:
            if not self._released:
                self._released = True
                self._active._remove_execution(self)

    class ActiveRuns(core.ActiveWorkflowById):
        """DBOS's set of runs executing here. It counts them per queue (and partition) as
        they come and go, without the ones whose tree gave its slot back (DBOS scanned every
        active run at each look at each queue), and frees a slot when a run leaves."""

        def __init__(self) -> None:
            super().__init__()
            self._queues: Counter[str] = Counter()  # executions counted, by queue
            self._buckets: Counter[_wakeup.Bucket] = Counter()  # and by (queue, partition)
            # joins of runs not registered here (yet), by the run id they join
            self._pending: dict[str, list[Any]] = {}

        def _count(self, bucket: _wakeup.Bucket | None, change: int) -> None:
            if bucket is None:
                return
            _wakeup._tally(self._queues, bucket[0], change)
            _wakeup._tally(self._buckets, bucket, change)

        def add(
            self, key: str, queue_name: str | None = None, queue_partition_key: str | None = None
        ) -> Any:
            bucket = None if queue_name is None else (queue_name, queue_partition_key)
            execution = Execution(self, key, bucket)
            # A run without a queue started from the task of an execution here (a sub-agent:
            # DBOS registers it in its own task, a copy of its parent's context) joins the
            # parent's tree, which holds its slot while the parent starts it.
            parent = _wakeup._execution.get(None) if bucket is None else None
            freed, back = [], None
            with self._lock:
                self._m.setdefault(key, []).append(bucket)
                self._count(bucket, 1)
                if bucket is not None:
                    execution.tree = _wakeup._Tree(execution)
                elif parent is not None and parent._active is self and not parent._released:
                    tree = parent.tree
                    if tree is not None and tree.live:
                        execution.tree = tree
                        tree.members[key] = execution
                        tree.running += 1
                        if tree.given_back:  # it runs: the tree takes its slot back at once
                            tree.given_back = False
                            self._count(tree.bucket, 1)
                            back = tree
                # Joins of this run now wait on something known: a member of the joiner's
                # tree (which runs for it), or a run outside it (whose work is not the tree's).
                for joiner in self._pending.pop(key, ()):
                    joined = joiner.tree
                    if not (joiner.waiting and joined and joined.live):
                        continue
                    joiner.joins = execution if execution.tree is joined else None
                    if joiner.counted:  # else no longer counted (see `join_elsewhere`)
                        joiner.counted = False
                        joined.running -= 1
                        freed.append(self._give_back(joined))
            _wakeup._execution.set(execution)
            if back is not None:  # its members in line for a slot go on in the tree's
                wakeups._tree_back(back.queue, back)
            for queue in freed:
                if queue is not None:
                    wakeups._slot_freed(queue)
            return execution

        def _unpend(self, execution: Any) -> None:
            """Under the lock: forget `execution`'s join of a run not registered here."""
            joins = execution.joins
            if isinstance(joins, str):
                joiners = self._pending.get(joins, [])
                if execution in joiners:
                    joiners.remove(execution)
                if not joiners:
                    self._pending.pop(joins, None)

        def _remove_execution(self, execution: Any) -> None:
            key, bucket, tree = execution._key, execution._bucket, execution.tree
            freed, counted = None, True
            with self._lock:
                buckets = self._m[key]
                buckets.remove(bucket)
                if not buckets:
                    del self._m[key]
                if tree is None:
                    self._count(bucket, -1)
                elif execution is tree.root:
                    tree.root, tree.live, counted = None, False, not tree.given_back
                    if counted:
                        self._count(bucket, -1)
                else:
                    if tree.members.get(key) is execution:
                        del tree.members[key]
                    if execution.counted:
                        tree.running -= 1
                    # Whoever joins it goes on with the slot it leaves (none, if the tree
                    # gave it back: the joiner then takes one back itself).
                    for joiner in tree.executions():
                        if joiner.joins is execution and not tree.given_back:
                            joiner.joins, joiner.counted = None, True
                            tree.running += 1
                    freed = self._give_back(tree)
                self._unpend(execution)
                execution.waiting, execution.joins, execution.counted = False, None, True
            wakeups._released(key, execution.queue if counted else None)
            if freed is not None:
                wakeups._slot_freed(freed)

        def _give_back(self, tree: _wakeup._Tree) -> str | None:
            """Under the lock: if no execution of `tree` runs, its root stops counting against
            its queue; returns that queue (its slot is free), else None."""
            if tree.running or tree.given_back or not tree.live:
                return None
            tree.given_back = True
            self._count(tree.bucket, -1)
            return tree.queue

        def pause(
            self, execution: Any, run_id: str, joins: str | None = None
        ) -> tuple[bool, str | None]:
            """Mark `execution` (of `run_id`, in a live tree, running here) as waiting: for a
            person, or for the run `joins` to end (a member of the tree, or a run registered
            here outside it; counted as running until that run is registered, see
            `join_elsewhere`). Returns whether it did (nothing is done for any other
            execution), and the queue whose slot that freed (no execution of the tree is
            counted as running any more), if any."""
            with self._lock:
                tree = execution.tree
                if (
                    execution._active is not self
                    or execution.run_id != run_id
                    or tree is None
                    or not tree.live
                    or execution._released
                    or execution.waiting
                ):
                    return False, None
                execution.waiting = True
                if joins is not None:
                    member = tree.members.get(joins)
                    if member is not None:
                        execution.joins = member
                    elif joins not in self._m:  # not registered (yet): still counted
                        execution.joins = joins
                        self._pending.setdefault(joins, []).append(execution)
                        return True, None
                    # else a run registered here outside the tree (recovered on its own):
                    # its work is not the tree's, and its end hands nothing over
                execution.counted = False
                tree.running -= 1
                return True, self._give_back(tree)

        def join_elsewhere(self, execution: Any) -> str | None:
            """If waiting `execution` still joins a run not registered here, stop counting it
            as running (the run it joins is not its tree's work, unless it registers here in
            the tree later, which then runs for it); returns the queue whose slot that freed,
            if any."""
            with self._lock:
                tree = execution.tree
                if not (
                    isinstance(execution.joins, str)
                    and execution.waiting
                    and execution.counted
                    and tree is not None
                    and tree.live
                ):
                    return None
                execution.counted = False
                tree.running -= 1
                return self._give_back(tree)

        def given_back(self, tree: _wakeup._Tree) -> bool:
            """Whether `tree` gave its slot back (and its root still runs here)."""
            with self._lock:
                return tree.given_back and tree.live

        def resume(self, execution: Any) -> str | None:
            """Mark waiting `execution` as running, unless its tree gave its slot back: then
            return the queue to take a slot of first (see `retake`)."""
            with self._lock:
                tree = execution.tree
                if not execution.waiting or tree is None:
                    return None
                if not execution.counted and tree.given_back and tree.live:
                    return tree.queue
                self._run(execution, tree)
                return None

        def _run(self, execution: Any, tree: _wakeup._Tree) -> None:
            """Under the lock: `execution` no longer waits, and is counted as running."""
            self._unpend(execution)
            execution.waiting, execution.joins = False, None
            if not execution.counted:
                execution.counted = True
                tree.running += 1

        def retake(self, execution: Any) -> bool:
            """Mark `execution`, if it waits, as running, its tree counting against its queue
            again at once; returns whether this took the tree's slot back (False: the tree
            held it, or nothing waited)."""
            with self._lock:
                tree = execution.tree
                if not execution.waiting or tree is None:
                    return False
                self._run(execution, tree)
                if not (tree.given_back and tree.live):
                    return False
                tree.given_back = False
                self._count(tree.bucket, 1)
                return True

        def count_for_queue(self, queue_name: str) -> int:
            with self._lock:
                return self._queues[queue_name]

        def count_for_partition(self, queue_name: str, queue_partition_key: str | None) -> int:
            with self._lock:
                return self._buckets[(queue_name, queue_partition_key)]

    return ActiveRuns()


_installed_thread = False

# A queue's limits shared with other processes: DBOS claims from such a queue in a stricter
# transaction (REPEATABLE READ or SERIALIZABLE on PostgreSQL) and backs its polls off while
# claims conflict; wake-ups would bypass that backoff, so such queues are only polled.
_SHARED_LIMITS = ("_concurrency", "_partition_concurrency", "_limiter", "_partition_limiter")


def _shares_budget(queue: Any) -> bool:
    return any(getattr(queue, name, None) is not None for name in _SHARED_LIMITS)


def _install_queue_thread() -> None:
    """Route DBOS's per-queue thread through a waker of its instance's `_wakeup.Wakeups` (once per
    process; instances without one keep DBOS's plain behaviour)."""
    global _installed_thread
    if _installed_thread:
        return
    import dbos._queue as dbos_queue

    plain = dbos_queue.queue_worker_thread

    def queue_worker_thread(stop_event: threading.Event, dbos: Any, queue: Any) -> None:
        wakeups: _wakeup.Wakeups | None = getattr(dbos, WAKEUPS_ATTR, None)
        if wakeups is None:
            plain(stop_event, dbos, queue)
            return
        limit = worker_concurrency(queue)
        waker = wakeups.add(queue.name, stop_event, not _shares_budget(queue), limit)
        dbos.background_thread_stop_events.append(waker)  # DBOS's shutdown wakes it too
        try:
            plain(cast(threading.Event, waker), dbos, queue)  # it uses is_set and wait only
        finally:
            wakeups.remove(queue.name, waker)

    dbos_queue.queue_worker_thread = queue_worker_thread
    _installed_thread = True


def install_wakeups(dbos: Any) -> _wakeup.Wakeups | None:
    """Make `dbos` (an instance not launched yet) take queued runs as soon as one of its runs of
    the queue finishes; returns its `_wakeup.Wakeups` (call `open()` once queue work may
    start), or None when this DBOS version is not supported or `_wakeup.ENABLED` is False
    (queues are then polled as configured)."""
    if not _wakeup.ENABLED:
        return None
    if not wakeups_supported():
        logger.info(
            "durable-swarm: this DBOS version is not one whose queue thread durable-swarm knows "
            "(%s); workers take new runs every poll_interval only",
            _wakeup.SUPPORTED_DBOS,
        )
        return None
    import dbos._core as core

    wakeups = _wakeup.Wakeups()
    active = _active_set(dbos)

    if active._m:
        raise RuntimeError("durable-swarm: install the wake-ups before DBOS runs anything")
    replacement = _active_runs(core, wakeups)
    dbos._active_workflows_set = replacement
    wakeups._active = replacement
    setattr(dbos, WAKEUPS_ATTR, wakeups)
    _install_queue_thread()
    return wakeups
