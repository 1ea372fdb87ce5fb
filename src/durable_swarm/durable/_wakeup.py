"""Taking queued runs as soon as a slot frees, instead of at the queue's next poll.

DBOS's queue thread (one per queue a process listens to) sleeps `polling_interval_sec` between
two looks at its queue. A run of that queue that finishes in this process frees a slot, but the
slot stays idle until the next look: with the worker's 0.5 s poll and runs shorter than that, a
busy worker spends much of its time waiting with work in its queue.

DBOS (3.4) has no public call to wake a queue thread, so `_engine.install_wakeups` does it on
this process's DBOS instance, before launch (this module keeps the bookkeeping, which touches no
DBOS object; `_engine` holds the parts that reach into DBOS's queue thread and active-run set):
* every queue thread sleeps on a `_Waker` standing in for DBOS's stop event: it returns at once
  when DBOS stops (as the event did) and also when woken;
* a run of a queue leaving DBOS's set of active runs here (its slot is free, in DBOS's own count)
  wakes that queue's thread, which then takes runs through DBOS's own dequeue, limits included;
  a run handed back to its queue for another process (`_dbos.hand_back`) wakes nothing, or this
  process would take it right back;
* a run waiting for a person (`Wakeups.parked`, around its `watch:<kind>` step) does not count
  against its queue's per-worker concurrency while it waits, and its slot goes to the next run
  as a finished run's does: a worker's slots go to runs that execute, not to conversations
  that wait hours for an answer. Once answered, the run takes a slot back before it goes on,
  waiting for one if the worker is full (runs the queue thread took and has not begun yet
  count, as in the ownership gate); a slot that frees goes to such a run first. A
  queue-wide limit (`concurrency`, which DBOS counts from the database) still counts waiting
  runs. Which execution waits is known from the task (a context variable set where DBOS
  registers the execution), so a run that DBOS runs twice here for a moment (a re-dispatch
  beside a stale execution) frees the right slot;
* the same holds for a run and the sub-agent runs it started here (its tree: the sub-agents
  have no queue, and DBOS registers each in a task copied from its parent's): while the parent
  waits for a sub-agent to end (`parked(run_id, joins=...)`) and every sub-agent still running
  waits for a person, the tree gives its one slot back; the first of them answered takes it
  back, and a sub-agent that ends hands it to the parent joining it. A join of a sub-agent that
  runs in another process (taken over there after a crash) gives the slot back once the
  sub-agent has not registered here within `JOIN_ELSEWHERE_SECONDS`.
DBOS counts a queue's active runs by scanning all of them at every look at every queue (1.5
ms per look with 10,000 waiting runs here); the replacement set keeps a count per queue.

A queue with limits shared across processes (a global concurrency or a rate limit) gets no
wake-ups: DBOS claims from it in a stricter transaction and backs off its polls while claims
conflict, which wake-ups would bypass. Nothing else changes: a wake-up is one more of DBOS's
own polls, so its concurrency limits, its ownership tokens and the project's ownership gate
(`_engine.gate_queues`: no queue work while this process's ownership is not confirmed)
apply as before. Wake-ups only follow runs that end or start waiting for a person, so an idle
process polls exactly as often as before. Wake-ups that arrive while the thread is dequeuing
coalesce into one more look. No thread looks at its queue before `open` is called (after the
ownership gate is in place: DBOS starts its queue threads during its launch, before the gate
wraps its dequeue); each then looks at once, so a starting worker does not wait one poll for
work.

On another DBOS version (its internals may differ) nothing is installed and queues are polled
as configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["Wakeups"]

logger = logging.getLogger("durable_swarm")

# The DBOS versions whose queue thread and active-run set this module was written against.
SUPPORTED_DBOS = ((3, 4),)

# How long a join of a run not registered here counts as running: DBOS registers a sub-agent
# started here within moments; one that is not registered by then runs in another process (taken
# over there after a crash) or has ended, and the join waits on work that is not the tree's.
JOIN_ELSEWHERE_SECONDS = 1.0

# False leaves DBOS's queue threads as they are (polling only): the baseline that
# `benchmarks/workers.py` measures the wake-ups against.
ENABLED = True


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

# An answered run waiting for a slot: its loop, the future that ends the wait (with `_SLOT`: a
# slot was handed to it; `_TREE`: another execution of its tree took the slot back), its tree.
_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[str]", Any]
_SLOT, _TREE = "slot", "tree"

# The execution of a run that the current task belongs to: set by `ActiveRuns.add` in the task
# that runs the workflow, inherited by the tasks of its steps.
_execution: contextvars.ContextVar[Any] = contextvars.ContextVar("durable_swarm_execution")


class Wakeups:
    """The queue threads of one DBOS instance, by queue name, the wake-ups they get, and the
    slots that runs waiting for a person give back (see `parked`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wakers: dict[str, _Waker] = {}
        self._held: set[str] = set()
        self._open = False
        self._active: Any = None  # the instance's `ActiveRuns`, set by `_engine.install_wakeups`
        self._limits: dict[str, int] = {}  # per-worker concurrency of the queues listened to
        # runs of a queue this process took but has not begun (set by `_dbos`; see `starting_on`)
        self.starting: Callable[[str], int] = lambda queue: 0
        # answered runs waiting to take a slot back, per queue, first come first served
        self._returning: dict[str, list[_Waiter]] = {}

    @contextlib.asynccontextmanager
    async def parked(self, run_id: str, joins: str | None = None) -> AsyncIterator[None]:
        """While the block runs, the current execution of `run_id` waits: for a person, or
        (`joins`) for the run `joins`, a sub-agent it started here, to end. Once no execution
        of its tree (a queued run here and the sub-agent runs it started here) runs, the run
        does not count against its queue's per-worker concurrency, and its slot goes to the next
        run: an answered run waiting for a slot (see below), else the queue's thread is woken.
        When the block ends normally (the answer is in, the sub-agent ended), the execution
        goes on at once if its tree kept the slot, else the run takes a slot back first: at
        once if the worker has room, else when one of the queue's runs here ends or starts to
        wait, before the queue takes a new run. A block that raises (the run was cancelled, the
        process stops) takes the slot back at once. A run in no queued tree, a second wait of
        the same execution, or a wait in a task that is not the run's workflow's frees nothing.
        A join of a run that is not registered here counts as running until it is, or for
        `JOIN_ELSEWHERE_SECONDS` at most (a run that ended, or runs in another process, never
        is); then, as a join of a run registered here outside the tree (a sub-agent this
        process recovered on its own after a crash), it waits on work that is not the tree's,
        as a wait for a person does."""
        execution, active = _execution.get(None), self._active
        paused, freed = (False, None)
        if active is not None and execution is not None:
            paused, freed = active.pause(execution, run_id, joins)
        if not paused:
            yield
            return
        elsewhere = None
        if isinstance(execution.joins, str):  # not registered here (yet)
            elsewhere = asyncio.get_running_loop().call_later(
                JOIN_ELSEWHERE_SECONDS, self._joins_elsewhere, execution
            )
        try:
            if freed is not None:
                self._slot_freed(freed)
            yield
            queue = active.resume(execution)
            if queue is not None:  # the tree gave its slot back: take one first
                await self._slot_back(queue, execution)
        finally:
            if elsewhere is not None:
                elsewhere.cancel()
            if active.retake(execution):  # the block raised: the tree took its slot back
                self._tree_back(execution.tree.queue, execution.tree)

    def _joins_elsewhere(self, execution: Any) -> None:
        """`execution` still joins a run that has not registered here: that run's work is
        not its tree's (see `parked`); the tree's slot goes to the next run if none of it runs."""
        freed = self._active.join_elsewhere(execution)
        if freed is not None:
            self._slot_freed(freed)

    async def _slot_back(self, queue: str, execution: Any) -> None:
        """Count waiting `execution` as running again once its tree may run: when the worker
        runs fewer than its limit of `queue`'s runs here (those begun, and those its queue
        thread took that have not begun yet; the tree then takes the slot back), or when
        another execution of the tree took it back first. A slot handed to this wait and not
        used (the tree had one by then, or the wait was cancelled) goes to the next in line."""
        active, tree = self._active, execution.tree
        limit = self._limits.get(queue)
        loop = asyncio.get_running_loop()
        handed = False
        while limit is not None and active.given_back(tree):
            # Registered before the look, so a slot freed in between is not missed.
            waiter: _Waiter = (loop, loop.create_future(), tree)
            with self._lock:
                self._returning.setdefault(queue, []).append(waiter)
            try:
                handed = False
                if active.count_for_queue(queue) + self.starting(queue) < limit:
                    break
                await waiter[1]
                handed = waiter[1].result() == _SLOT
            except BaseException:
                if waiter[1].done() and not waiter[1].cancelled() and waiter[1].result() == _SLOT:
                    self._slot_freed(queue)
                raise
            finally:
                if not waiter[1].done():  # a slot handed to it from now on goes to the next
                    waiter[1].cancel()
                self._leave_line(queue, waiter)
        if active.retake(execution):
            self._tree_back(queue, tree)
        elif handed:
            self._slot_freed(queue)

    def _leave_line(self, queue: str, waiter: _Waiter) -> None:
        with self._lock:
            waiters = self._returning.get(queue, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._returning.pop(queue, None)

    def _tree_back(self, queue: str, tree: Any) -> None:
        """`tree` took its slot back: its other executions waiting for one go on without."""
        with self._lock:
            waiters = self._returning.get(queue, [])
            for waiter in [w for w in waiters if w[2] is tree]:
                waiters.remove(waiter)
                with contextlib.suppress(RuntimeError):  # its loop is closed
                    waiter[0].call_soon_threadsafe(_settle, waiter[1], _TREE)

    def _slot_freed(self, queue: str, *, wake: bool = True) -> None:
        """A slot of `queue` is free here: the first answered run waiting for one gets it (it
        leaves the line at once, so a second slot freed before it runs goes to the next), or
        else the queue's thread looks for a new run (unless not `wake`)."""
        with self._lock:
            waiters = self._returning.get(queue, [])
            while waiters:
                loop, future, _ = waiters.pop(0)
                if future.done():
                    continue
                try:
                    loop.call_soon_threadsafe(self._hand, queue, future)
                except RuntimeError:  # its loop is closed: the next in line
                    continue
                return
        if wake:
            self.wake(queue)

    def _hand(self, queue: str, future: asyncio.Future[str]) -> None:
        """On the loop of an answered run waiting for a slot of `queue`: give it the slot
        freed for it, or, if its wait ended meanwhile (it was cancelled), to the next."""
        if future.done():
            self._slot_freed(queue)
        else:
            future.set_result(_SLOT)

    def add(
        self, queue: str, stop: threading.Event, wakeable: bool = True, limit: int | None = None
    ) -> _Waker:
        """A waker for the (new) thread of `queue`; it looks at once if `open` was called.
        A thread that is not `wakeable` waits for `open` like the others, then only polls.
        `limit` is the queue's per-worker concurrency (None: no limit)."""
        with self._lock:
            waker = _Waker(stop, opened=self._open, wakeable=wakeable)
            self._wakers[queue] = waker
            if limit is not None:
                self._limits[queue] = limit
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
        """`run_id` left DBOS's active set here: its slot is free (if it has a queue). A held
        run's slot goes only to an answered run waiting here, never to the queue's thread;
        the hold is used up either way."""
        with self._lock:
            held = run_id in self._held
            self._held.discard(run_id)
        if queue is not None:
            self._slot_freed(queue, wake=not held)  # an answered run here may take it

    def open(self) -> None:
        """Let every queue thread look at its queue now, and new ones as soon as they start
        (call once the ownership gate is in place)."""
        with self._lock:
            self._open = True
            wakers = list(self._wakers.values())
        for waker in wakers:
            waker.open()


def _tally(counter: Counter[Any], key: Any, change: int) -> None:
    """Add `change` to `counter[key]`, dropping the key at zero (no key is kept for every
    partition ever seen)."""
    counter[key] += change
    if not counter[key]:
        del counter[key]


def _settle(future: asyncio.Future[str], why: str) -> None:
    if not future.done():
        future.set_result(why)


class _Tree:
    """A queued run's execution here (`root`) and the executions of the sub-agent runs it
    started here (`members`, by run id; their runs have no queue), and how many of them are
    counted as running (see `Execution`). The root's slot is given back while none is."""

    __slots__ = ("bucket", "given_back", "live", "members", "queue", "root", "running")

    def __init__(self, root: Any) -> None:
        self.root = root  # None once it left (no reference cycle is left behind)
        self.bucket: Bucket = root.bucket
        self.queue: str = root.queue
        self.members: dict[str, Any] = {}
        self.running = 1
        self.given_back = False  # the root does not count against its queue now
        self.live = True  # the root has not left the active set

    def executions(self) -> list[Any]:
        """The root (while it runs here) and the members, as they are now."""
        root = [] if self.root is None else [self.root]
        return [*root, *self.members.values()]
