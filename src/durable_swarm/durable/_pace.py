"""A worker queue's pace: how often DBOS's queue threads look at it, faster while runs wait.

DBOS's queue thread in each worker looks at the queue once per polling interval, so a slot that
a finished run frees stays empty until the next look: on average half an interval, which is
much of a short run's time and nothing beside a long one's. Idle, the interval is the worker's
`poll_interval` (every look costs the database a statement or two, in every worker, all day).
While the runs executing in a worker fill its slots (so runs likely wait on the queue), the
worker shortens it to `hurried_interval`: a twentieth of how long its runs hold a slot
(a moving average of its executions; a slot then waits about 2.5% of a run for the next one),
never below `busy_poll_interval`; runs that hold a slot for 20 idle intervals or more leave it
idle. It sets the queue's polling interval through DBOS's public, fleet-wide
`Queue.set_polling_interval_sec` (every worker's queue thread reads it again at each look), and
sets it back to `poll_interval` once no run waits on the queue.

The setting is the queue's, shared by its workers, so each decision is about the queue: a full
worker shortens it to its own interval (or leaves a shorter one another worker set); a worker
that hurried it looks each heartbeat whether runs still wait (look, set back, look again: runs
queued in between hurry it again); and every worker looks once per `dead_after` whether the
queue was left hurried (by a worker killed while it was busy) with no run waiting, and sets it
back. Only speed depends on this, never correctness: a run waits at most one idle interval for
a free slot, as without it.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from ._engine import DBOS, Queue

__all__ = ["QueuePace", "hurried_interval"]

logger = logging.getLogger("durable_swarm")

# A hurried queue is looked at every (how long a run holds a slot) / SHARE seconds.
SHARE = 20.0
# Weight of the newest execution in the moving average of how long runs hold a slot.
SPAN_WEIGHT = 0.2


def hurried_interval(span: float, busy: float, idle: float) -> float:
    """The polling interval for runs that hold a slot `span` seconds: `idle` once
    `span / SHARE` reaches it, else `span / SHARE` rounded down to `busy` times a power of two
    (so it changes only when the runs' length doubles or halves), at least `busy`."""
    wanted = span / SHARE
    if wanted >= idle:
        return idle
    if wanted <= busy:
        return busy
    return min(idle, busy * 2 ** math.floor(math.log2(wanted / busy)))


class QueuePace:
    """The pace of one worker queue (see the module docs), kept by one thread per worker.

    `entered` and `left` are told as each execution begins and ends here (cheap: no statement;
    the thread acts); `start` and `stop` bracket the worker's serving. `settle_every`: seconds
    between the looks of a worker that hurried the queue (its heartbeat interval);
    `check_every`: seconds between the looks of an idle worker for a hurry left behind (its
    `dead_after`); `version`: the application version whose queued runs count as waiting (a
    worker takes only its own version's runs; None: every version's)."""

    def __init__(
        self,
        queue: Queue,
        *,
        slots: int,
        idle: float,
        busy: float,
        settle_every: float,
        check_every: float,
        version: str | None = None,
    ) -> None:
        self.queue = queue
        self.slots = slots
        self.idle = idle
        self.busy = busy
        self.settle_every = settle_every
        self.check_every = check_every
        self.version = version
        self.hurried = False
        self.span: float | None = None  # how long an execution here holds its slot (average)
        self._set_to: float | None = None  # the interval this worker last set
        self._confirmed = 0.0  # when this worker last found or set the queue hurried
        self._poked = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        """Whether hurrying can change anything (`busy` is shorter than `idle`)."""
        return self.busy < self.idle

    def interval(self) -> float:
        """The interval this worker's runs call for while they wait for slots (`idle` until
        one of them has ended here)."""
        span = self.span
        return self.idle if span is None else hurried_interval(span, self.busy, self.idle)

    def entered(self, running: int) -> None:
        """An execution began here, `running` execute here now: at `slots` or more, have the
        thread hurry the queue (unless it confirmed it within `settle_every`)."""
        if running < self.slots or self._stop.is_set():
            return
        if not self.hurried or time.monotonic() - self._confirmed > self.settle_every:
            self._poked.set()

    def left(self, seconds: float) -> None:
        """An execution here ended after `seconds`: into the average of `span`."""
        span = self.span
        self.span = seconds if span is None else span + SPAN_WEIGHT * (seconds - span)

    def start(self) -> None:
        """Start the pace thread (a daemon: a worker that exits takes it along)."""
        if not self.active or self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._serve, name=f"durable-swarm-pace-{self.queue.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread, after it settles the queue once if this worker hurried it; waits
        at most `timeout` seconds (a database that is away holds the thread, not the stop)."""
        self._stop.set()
        self._poked.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _serve(self) -> None:
        while True:
            poked = self._poked.wait(self.settle_every if self.hurried else self.check_every)
            if poked:
                self._poked.clear()
            stopping = self._stop.is_set()
            try:
                if poked and not stopping:
                    self._hurry()
                elif self.hurried:
                    self._settle()
                elif not stopping:
                    self._check()
            except Exception as e:  # the database away: the next look tries again
                logger.warning("could not pace the queue %r: %s", self.queue.name, e)
            if stopping:
                return

    def _set(self, seconds: float) -> None:
        self.queue.set_polling_interval_sec(seconds)
        self._set_to = seconds
        logger.debug("queue %r looked at every %g s", self.queue.name, seconds)

    def _waiting(self) -> bool:
        return bool(
            DBOS.list_workflows(
                queue_name=self.queue.name,
                status="ENQUEUED",
                app_version=self.version,
                limit=1,
                load_input=False,
                load_output=False,
            )
        )

    def _hurry(self) -> None:
        wanted = self.interval()
        current = self.queue.polling_interval_sec
        # Shorter than it is, or other than this worker set it; a shorter one of another
        # worker's stands.
        if wanted < current or (current == self._set_to and wanted != current):
            self._set(wanted)
        self.hurried = min(wanted, current) < self.idle
        self._confirmed = time.monotonic()

    def _settle(self) -> None:
        if self._waiting():
            # Hurried again if someone set it back meanwhile (a worker that started and
            # registered the queue, another worker's settle).
            self._hurry()
            return
        self._set(self.idle)
        if self._waiting():  # queued after the first look: hurried again
            self._set(self.interval())
            self._confirmed = time.monotonic()
            return
        self.hurried = False

    def _check(self) -> None:
        if self.queue.polling_interval_sec < self.idle:
            self.hurried = True  # someone's hurry: settled at the next look if no run waits
