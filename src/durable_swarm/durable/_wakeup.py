"""Taking queued runs as soon as a slot frees, instead of at the queue's next poll.

DBOS's queue thread (one per queue a process listens to) sleeps `polling_interval_sec` between
two looks at its queue. A run of that queue that finishes in this process frees a slot, but the
slot stays idle until the next look: with the worker's 0.5 s poll and runs shorter than that, a
busy worker spends much of its time waiting with work in its queue.

DBOS (3.4) has no public call to wake a queue thread, so `install` does it on this process's
DBOS instance, before launch:
* every queue thread sleeps on a `_Waker` standing in for DBOS's stop event: it returns at once
  when DBOS stops (as the event did) and also when woken;
* a run of a queue leaving DBOS's set of active runs here (its slot is free, in DBOS's own count)
  wakes that queue's thread, which then takes runs through DBOS's own dequeue, limits included;
  a run handed back to its queue for another process (`_dbos.hand_back`) wakes nothing, or this
  process would take it right back;
* a run waiting for a person (`Wakeups.parked`, around its `watch:<kind>` step) does not count
  against its queue's per-worker concurrency while it waits, and its queue's thread is woken
  as for a finished run: a worker's slots go to runs that execute, not to conversations that
  wait hours for an answer. The answer takes the slot back, even if the worker has filled it
  meanwhile (it then runs one more than its limit until a run ends). A queue-wide limit
  (`concurrency`, which DBOS counts from the database) still counts waiting runs.
DBOS counts a queue's active runs by scanning all of them at every look at every queue (1.5
ms per look with 10,000 waiting runs here); the replacement set keeps a count per queue.

A queue with limits shared across processes (a global concurrency or a rate limit) gets no
wake-ups: DBOS claims from it in a stricter transaction and backs off its polls while claims
conflict, which wake-ups would bypass. Nothing else changes: a wake-up is one more of DBOS's
own polls, so its concurrency limits, its ownership tokens and the project's ownership gate
(`_ownership.gate_queues`: no queue work while this process's ownership is not confirmed)
apply as before. Wake-ups only follow finished runs, so an idle process polls exactly as often
as before. Wake-ups that arrive while the thread is dequeuing coalesce into one more look.
No thread looks at its queue before `open` is called (after the ownership gate is in place:
DBOS starts its queue threads during its launch, before the gate wraps its dequeue); each then
looks at once, so a starting worker does not wait one poll for work.

On another DBOS version (its internals may differ) nothing is installed and queues are polled
as configured.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

__all__ = ["Wakeups", "install", "supported"]

logger = logging.getLogger("durable_swarm")

# The DBOS versions whose queue thread and active-run set this module was written against.
SUPPORTED_DBOS = ((3, 4),)

# False leaves DBOS's queue threads as they are (polling only): the baseline that
# `benchmarks/workers.py` measures the wake-ups against.
ENABLED = True


def supported() -> bool:
    """Whether the installed DBOS is one whose internals `install` knows (see `SUPPORTED_DBOS`)."""
    try:
        parts = importlib.metadata.version("dbos").split(".")
        version = (int(parts[0]), int(parts[1]))
    except (importlib.metadata.PackageNotFoundError, ValueError, IndexError):
        return False
    if version not in SUPPORTED_DBOS:
        return False
    import dbos._core as core
    import dbos._queue as queue

    needed = ("add", "_remove", "count_for_queue", "count_for_partition")
    active = core.ActiveWorkflowById
    queue_thread = getattr(queue, "queue_worker_thread", None)
    return callable(queue_thread) and all(hasattr(active, name) for name in needed)


class _Waker:
    """What a queue thread sleeps on instead of DBOS's stop event: `wait(timeout)` returns when
    DBOS stops (True), when woken by `wake` (False) or after `timeout` (False)."""

    def __init__(self, stop: threading.Event, opened: bool, wakeable: bool = True) -> None:
        self.wakeable = wakeable
        self._stop = stop
        self._cond = threading.Condition()
        self._woken = opened
        self._opened = opened

    def is_set(self) -> bool:
        """Whether DBOS is stopping (its stop event is set)."""
        return self._stop.is_set()

    def set(self) -> None:
        """Called by DBOS's shutdown with its other stop events (after the real one): wakes
        the thread so it sees the stop at once."""
        with self._cond:
            self._cond.notify_all()

    def wake(self) -> None:
        """Have the thread look at its queue now (or right after its current look)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def open(self) -> None:
        """Let the thread look at its queue: now, and from then on at every poll or wake-up."""
        with self._cond:
            self._opened = self._woken = True
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until woken, stopped or `timeout`; returns whether DBOS is stopping. Until
        `open`, only `open` or a stop ends the sleep: DBOS starts its queue threads during its
        launch, before the ownership gate is in place, and none may look at its queue before."""
        with self._cond:
            if self._opened:
                self._cond.wait_for(lambda: self._woken or self._stop.is_set(), timeout)
            else:
                self._cond.wait_for(lambda: self._opened or self._stop.is_set())
            self._woken = False
        return self._stop.is_set()


Bucket = tuple[str, "str | None"]  # DBOS's (queue name, partition key) of an active run


class Wakeups:
    """The queue threads of one DBOS instance, by queue name, the wake-ups they get, and the
    runs of this process that wait for a person (they hold no slot of their queue)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakers: dict[str, _Waker] = {}
        self._held: set[str] = set()
        self._open = False
        self._active: Any = None  # the instance's `ActiveRuns`, set by `install`
        self._parked: dict[str, list[Bucket | None]] = {}  # run id -> what each wait freed
        self._parked_queues: Counter[str] = Counter()
        self._parked_buckets: Counter[Bucket] = Counter()

    @contextlib.contextmanager
    def parked(self, run_id: str) -> Iterator[None]:
        """While the block runs (a run waiting for a person), `run_id` does not count against
        the per-worker concurrency of its queue here, and that queue's thread is woken: the
        slot goes to the next queued run. Each block frees one of the run's executions here
        (DBOS may run a run twice in one process for a moment: a re-dispatch beside a stale
        execution); a block beyond the run's executions, or of a run without a queue, frees
        nothing and wakes nothing."""
        executions = self._active.buckets_of(run_id) if self._active is not None else []
        with self._lock:
            freed = self._parked.setdefault(run_id, [])
            unfreed = list(executions)
            for bucket in freed:
                if bucket in unfreed:
                    unfreed.remove(bucket)
            bucket = unfreed[0] if unfreed else None
            freed.append(bucket)
            if bucket is not None:
                self._parked_queues[bucket[0]] += 1
                self._parked_buckets[bucket] += 1
        if bucket is not None:
            self.wake(bucket[0])
        try:
            yield
        finally:
            with self._lock:
                freed = self._parked[run_id]
                freed.remove(bucket)
                if not freed:
                    del self._parked[run_id]
                if bucket is not None:
                    self._parked_queues[bucket[0]] -= 1
                    self._parked_buckets[bucket] -= 1

    def parked_on(self, queue: str, partition: str | None = None, *, whole: bool = True) -> int:
        """How many runs of `queue` (of its partition `partition` unless `whole`) wait for a
        person here."""
        with self._lock:
            return self._parked_queues[queue] if whole else self._parked_buckets[(queue, partition)]

    def add(self, queue: str, stop: threading.Event, wakeable: bool = True) -> _Waker:
        """A waker for the (new) thread of `queue`; it looks at once if `open` was called.
        A thread that is not `wakeable` waits for `open` like the others, then only polls."""
        with self._lock:
            waker = _Waker(stop, opened=self._open, wakeable=wakeable)
            self._wakers[queue] = waker
            return waker

    def remove(self, queue: str, waker: _Waker) -> None:
        """Forget `waker` (its thread ended)."""
        with self._lock:
            if self._wakers.get(queue) is waker:
                del self._wakers[queue]

    def wake(self, queue: str) -> None:
        """Wake the thread of `queue`, if this process listens to it."""
        waker = self._wakers.get(queue)
        if waker is not None and waker.wakeable:
            waker.wake()

    def hold(self, run_id: str) -> None:
        """The next release of `run_id` here wakes no queue: the run is being handed back to its
        queue for another process to take, and waking this one would take it right back."""
        with self._lock:
            self._held.add(run_id)

    def release_hold(self, run_id: str) -> None:
        """Undo `hold` (the hand-back did not happen)."""
        with self._lock:
            self._held.discard(run_id)

    def _released(self, run_id: str, queue: str | None) -> None:
        """`run_id` left DBOS's active set here: wake its queue's thread (if it has a queue),
        unless the run is held; a hold is used up either way."""
        with self._lock:
            if run_id in self._held:
                self._held.discard(run_id)
                return
        if queue is not None:
            self.wake(queue)

    def open(self) -> None:
        """Let every queue thread look at its queue now, and new ones as soon as they start
        (call once the ownership gate is in place)."""
        with self._lock:
            self._open = True
            wakers = list(self._wakers.values())
        for waker in wakers:
            waker.open()


_installed_thread = False

# A queue's limits shared with other processes: DBOS claims from such a queue in a stricter
# transaction (REPEATABLE READ or SERIALIZABLE on PostgreSQL) and backs its polls off while
# claims conflict; wake-ups would bypass that backoff, so such queues are only polled.
_SHARED_LIMITS = ("_concurrency", "_partition_concurrency", "_limiter", "_partition_limiter")


def _shares_budget(queue: Any) -> bool:
    return any(getattr(queue, name, None) is not None for name in _SHARED_LIMITS)


def _install_queue_thread() -> None:
    """Route DBOS's per-queue thread through a waker of its instance's `Wakeups` (once per
    process; instances without one keep DBOS's plain behaviour)."""
    global _installed_thread
    if _installed_thread:
        return
    import dbos._queue as dbos_queue

    plain = dbos_queue.queue_worker_thread

    def queue_worker_thread(stop_event: threading.Event, dbos: Any, queue: Any) -> None:
        wakeups: Wakeups | None = getattr(dbos, "_durable_swarm_wakeups", None)
        if wakeups is None:
            plain(stop_event, dbos, queue)
            return
        waker = wakeups.add(queue.name, stop_event, wakeable=not _shares_budget(queue))
        dbos.background_thread_stop_events.append(waker)  # DBOS's shutdown wakes it too
        try:
            plain(cast(threading.Event, waker), dbos, queue)  # it uses is_set and wait only
        finally:
            wakeups.remove(queue.name, waker)

    dbos_queue.queue_worker_thread = queue_worker_thread
    _installed_thread = True


def install(dbos: Any) -> Wakeups | None:
    """Make `dbos` (an instance not launched yet) take queued runs as soon as one of its runs of
    the queue finishes; returns its `Wakeups` (call `open()` once queue work may start), or None
    when this DBOS version is not supported or `ENABLED` is False (queues are then polled as
    configured)."""
    if not ENABLED:
        return None
    if not supported():
        logger.info(
            "durable-swarm: this DBOS version is not one whose queue thread durable-swarm knows "
            "(%s); workers take new runs every poll_interval only",
            SUPPORTED_DBOS,
        )
        return None
    import dbos._core as core

    wakeups = Wakeups()
    active = dbos._active_workflows_set

    class ActiveRuns(core.ActiveWorkflowById):
        """DBOS's set of runs executing here, waking a run's queue thread when it leaves,
        counting its runs per queue as they come and go, and leaving out of that count the
        runs that wait for a person."""

        def __init__(self) -> None:
            super().__init__()
            self._queues: Counter[str] = Counter()  # active runs by queue
            self._buckets: Counter[Bucket] = Counter()  # and by (queue, partition)

        def add(
            self, key: str, queue_name: str | None = None, queue_partition_key: str | None = None
        ) -> Any:
            entry = super().add(key, queue_name, queue_partition_key)
            if queue_name is not None:
                with self._lock:
                    self._queues[queue_name] += 1
                    self._buckets[(queue_name, queue_partition_key)] += 1
            return entry

        def _remove(self, key: str, bucket: Any) -> None:
            super()._remove(key, bucket)
            if bucket is not None:
                with self._lock:
                    self._queues[bucket[0]] -= 1
                    self._buckets[bucket] -= 1
            wakeups._released(key, bucket[0] if bucket is not None else None)

        def count_for_queue(self, queue_name: str) -> int:
            with self._lock:
                running = self._queues[queue_name]
            return max(0, running - wakeups.parked_on(queue_name))

        def count_for_partition(self, queue_name: str, queue_partition_key: str | None) -> int:
            with self._lock:
                running = self._buckets[(queue_name, queue_partition_key)]
            parked = wakeups.parked_on(queue_name, queue_partition_key, whole=False)
            return max(0, running - parked)

        def buckets_of(self, key: str) -> list[Bucket]:
            """The queues (and partitions) of `key`'s executions here; none without a queue."""
            with self._lock:
                return [b for b in self._m.get(key, ()) if b is not None]

    replacement = ActiveRuns()
    with active._lock:
        replacement._m = active._m
        for buckets in active._m.values():
            for bucket in buckets:
                if bucket is not None:
                    replacement._queues[bucket[0]] += 1
                    replacement._buckets[bucket] += 1
    dbos._active_workflows_set = replacement
    wakeups._active = replacement
    dbos._durable_swarm_wakeups = wakeups
    _install_queue_thread()
    return wakeups
