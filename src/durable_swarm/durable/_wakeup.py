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
  process would take it right back.

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

import importlib.metadata
import logging
import threading
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

    return callable(getattr(queue, "queue_worker_thread", None)) and hasattr(
        core.ActiveWorkflowById, "_remove"
    )


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


class Wakeups:
    """The queue threads of one DBOS instance, by queue name, and the wake-ups they get."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakers: dict[str, _Waker] = {}
        self._held: set[str] = set()
        self._open = False

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
        """DBOS's set of runs executing here, waking a run's queue thread when it leaves."""

        def _remove(self, key: str, bucket: Any) -> None:
            super()._remove(key, bucket)
            wakeups._released(key, bucket[0] if bucket is not None else None)

    replacement = ActiveRuns()
    with active._lock:
        replacement._m = active._m
    dbos._active_workflows_set = replacement
    dbos._durable_swarm_wakeups = wakeups
    _install_queue_thread()
    return wakeups
