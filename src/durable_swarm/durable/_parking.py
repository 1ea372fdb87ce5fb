"""Parking a run at a wait, and resuming it: the two sides of `durable._waits`' protocol.

`park` is the run's side (called in the body of the step that looks for what the run waits for,
or where it misses an agent); `resume` is the side of whoever ends the wait (an answer, a
sub-agent that ended, a sweep). Both use DBOS's public API only: `get_workflow_status`,
`cancel_workflow` and `resume_workflow`, called outside the run's context so that none of them
is one of its recorded steps (`_engine.outside_run`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

from .. import _registry
from ..errors import DurableSwarmError
from . import _dbos, _drain
from ._engine import (
    DBOS,
    DBOSAwaitedWorkflowCancelledError,
    DBOSWorkflowCancelledError,
    outside_run,
    outside_run_async,
    own_queue,
)
from ._sealing import keyring
from ._swarms import registry
from ._waits import CANCELLED_STATES, Wait, WaitBook

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "RESUME_DEADLINE",
    "book",
    "cancel_self",
    "client_outcome",
    "end_join",
    "outcome",
    "park",
    "resume",
    "resume_at",
    "resume_queue",
    "resume_won",
    "sweep",
]

logger = logging.getLogger("durable_swarm")


def book() -> WaitBook:
    """The waits table of this process's run database (DBOS launched here)."""
    url = _dbos.run_database_url()
    assert url is not None, "DBOS is not launched in this process"
    return WaitBook(url)


def resume_queue(queue_name: str | None) -> str | None:
    """The queue a parked run goes back on when resumed: the queue it was taken from (a
    worker's), else None, DBOS's own queue, which every process serves (a run started without a
    queue, or taken from the queue of a dead process's runs)."""
    if own_queue(queue_name) or queue_name == _dbos.RECOVERY_QUEUE:
        return None
    return queue_name


async def park(
    run_id: str,
    key: str,
    kind: str,
    ready: Callable[[], Awaitable[bool]],
    *,
    why: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """End this execution of `run_id`, which waits at `key` (arrived there: `WaitBook.arrive`),
    leaving nothing of it in this process; whoever ends the wait resumes it.

    Only while the execution still owns the run (`_dbos.admit`: a thawed process's stale
    execution must not cancel the run another process runs now). It marks the wait parking,
    cancels its own workflow, then marks the wait parked (so nobody resumes a live execution),
    checks a person's cancel, and asks `ready()` once more: if the wait ended meanwhile (an
    answer came between the run's look and its park), it resumes itself. Raises DBOS's
    `DBOSWorkflowCancelledError` once parked: raised in a step's body, DBOS records nothing for
    the step (it runs again when the run is resumed); raised in the workflow, DBOS records
    nothing for the run, which stays CANCELLED until it is resumed. Returns (without parking)
    if the wait was answered before it could park: the caller looks again."""
    waits = book()
    gate = _drain.Admission(f"run {run_id}, its park", run_id)
    await gate.aenter()  # the ownership gate (and a stopping process parks nothing)
    gate.leave()
    status = await outside_run_async(DBOS.get_workflow_status, run_id)
    queue = resume_queue(getattr(status, "queue_name", None))
    if not await _in_thread(waits.begin_park, run_id, key, kind, queue, detail):
        found = await _in_thread(waits.look, run_id, key)
        if found is not None and found.state in CANCELLED_STATES:
            await cancel_self(waits, run_id, why)
        return  # answered meanwhile: the caller takes the answer
    _QUIET.add(run_id)
    await outside_run_async(DBOS.cancel_workflow, run_id)
    parked = await _in_thread(waits.park, run_id, key)
    if await _in_thread(waits.cancelled, run_id):  # a person cancelled it meanwhile
        await _in_thread(waits.honour_cancel, run_id)
        raise DBOSWorkflowCancelledError(f"Run {run_id} was cancelled while it waited ({why})")
    if not parked:  # someone took the resume already (it saw the run cancelled)
        raise DBOSWorkflowCancelledError(f"Run {run_id} is parked: it waits for {why}")
    if await ready():
        since = time.monotonic()
        won = await _in_thread(waits.claim_resume, run_id, key)
        if won is not None:
            await _in_thread(resume_won, DBOS, won, since)
    raise DBOSWorkflowCancelledError(f"Run {run_id} is parked: it waits for {why}")


async def cancel_self(waits: WaitBook, run_id: str, why: str) -> NoReturn:
    """A person cancelled `run_id` (its wait says so; the mark follows their cancel in DBOS):
    end this execution without recording anything more. While their tombstone stands, make
    sure DBOS shows the run cancelled first (a resumer that won the wait before the cancel
    resumed the run after it, and may have died before cancelling it again), then mark the
    run's waits that are still `cancelling` (`honour_cancel`). Never once a person's resume
    removed the tombstone: the cancel in DBOS would stop the resumed run."""
    if await _in_thread(waits.cancelled, run_id):
        await outside_run_async(DBOS.cancel_workflow, run_id)
        await _in_thread(waits.honour_cancel, run_id)
    raise DBOSWorkflowCancelledError(f"Run {run_id} was cancelled while it waited ({why})")


async def _in_thread(call: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(call, *args)


def resume(source: Any, wait: Wait, waits: WaitBook | None = None) -> None:
    """Resume the run of `wait`, whose resume the caller won (`state` "resuming"), onto the
    queue it parked from. `source` is DBOS (in a process that launched it: the call is made
    outside any run's context) or a `DBOSClient`; `waits`, the waits of the run's database
    (default: this process's).

    A person's cancel is never undone: the tombstone it left is checked after the resume (one
    that came before the resume is seen here, and the run cancelled again; one that comes
    after cancels the resumed run itself). The wait's row stays until the run leaves it (or the
    sweep finds it left behind): a reader never sees the run without it."""
    if source is DBOS:
        outside_run(DBOS.resume_workflow, wait.run_id, queue_name=wait.queue)
    else:
        source.resume_workflow(wait.run_id, queue_name=wait.queue)
    waits = waits or book()
    if waits.cancelled(wait.run_id):
        if source is DBOS:
            outside_run(DBOS.cancel_workflow, wait.run_id)
        else:
            source.cancel_workflow(wait.run_id)
        waits.honour_cancel(wait.run_id)


# A resume won at a compare-and-set is made within this many seconds of it, or not at all (the
# sweep makes it later: `durable._sweeps`): a process frozen between the two must not resume a
# run that the sweep resumed meanwhile and that runs again.
RESUME_DEADLINE = 20.0


def resume_won(source: Any, wait: Wait, since: float, waits: WaitBook | None = None) -> None:
    """`resume`, if the caller won it (at `since`, `time.monotonic()`) less than
    `RESUME_DEADLINE` seconds ago; else it is left to the sweep (which waits longer)."""
    late = time.monotonic() - since
    if late > RESUME_DEADLINE:
        logger.warning(
            "Run %s: its resume was won %.0f s ago (this process was paused?); it is left to the "
            "sweep of a live process, which resumes it within a minute.",
            wait.run_id,
            late,
        )
        return
    resume(source, wait, waits)


def resume_at(run_id: str, key: str, seconds: float) -> None:
    """In `seconds`, resume `run_id` parked at `key` if it still is (a wait that ends at a known
    time: a model limit's turn). Kept in this process only: if it dies, any process's sweep
    resumes the run once its time has passed."""

    def due() -> None:
        since = time.monotonic()
        try:
            won = book().claim_resume(run_id, key)
            if won is not None:
                resume_won(DBOS, won, since)
        except Exception as e:  # the sweep resumes it
            logger.warning("Run %s could not be resumed at its time (%s)", run_id, e)

    timer = threading.Timer(seconds + 0.05, due)
    timer.daemon = True
    timer.start()


def end_join(parent_run_id: str, child_run_id: str) -> None:
    """The sub-agent run `child_run_id` ends: resume its parent if it parked waiting for it.
    Idempotent (a replay of the child's end changes nothing more)."""
    since = time.monotonic()
    parent = outside_run(DBOS.get_workflow_status, parent_run_id)
    stopped = getattr(parent, "status", None) == "CANCELLED"
    won = book().end_join(parent_run_id, child_run_id, stopped=stopped)
    if won is not None:
        resume_won(DBOS, won, since)


# How often a caller waiting for a run's outcome looks at it: at first, and at most.
OUTCOME_POLL = (0.05, 1.0)
_ENDED = ("SUCCESS", "ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")


async def outcome(run_id: str, handle: Any = None) -> Any:
    """The output of `run_id` once it ends (its error raised, as DBOS's `get_result` does).
    A run that parks has not ended: it is waited for until it is resumed and ends, in any
    process. `handle`: the run's DBOS handle in this process (it ends when the run parks)."""
    waits = book()
    if handle is not None:
        try:
            return await handle.get_result(polling_interval_sec=OUTCOME_POLL[0])
        except DBOSAwaitedWorkflowCancelledError:
            if not await _in_thread(waits.is_parked, run_id):
                raise
    delay = OUTCOME_POLL[0]
    while True:
        status = await outside_run_async(DBOS.get_workflow_status, run_id)
        state = getattr(status, "status", None)
        ended = state in _ENDED or (
            state == "CANCELLED" and not await _in_thread(waits.is_parked, run_id)
        )
        if ended:
            ended_run: Any = await DBOS.retrieve_workflow_async(run_id)
            return await ended_run.get_result(polling_interval_sec=OUTCOME_POLL[0])
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, OUTCOME_POLL[1])


def client_outcome(client: Any, waits: WaitBook, run_id: str, poll: float) -> Any:
    """`outcome` for a thin client (a `DBOSClient`), blocking."""
    delay = poll
    while True:
        found: list[Any] = client.list_workflows(
            workflow_ids=[run_id], load_input=False, load_output=False
        )
        state = found[0].status if found else None
        if state in _ENDED or (state == "CANCELLED" and not waits.is_parked(run_id)):
            return client.retrieve_workflow(run_id).get_result(polling_interval_sec=poll)
        time.sleep(delay)
        delay = min(delay * 1.5, max(poll, OUTCOME_POLL[1]))


# How long a wait is left alone before the sweep looks at it: a `missing` or `limit` one (only
# the sweep, a timer and the run itself resume those, by compare-and-set), and any other (a
# resumer or a parking run that is merely slow is left alone: `RESUME_DEADLINE` is shorter).
MISSING_AGE_SECONDS = 2.0
STALE_SECONDS = 60.0


def sweep(source: Any, engine: sa.Engine | None = None) -> int:
    """Resume the parked runs whose wait ended but that nobody resumed, in this process's run
    database; returns how many. Run by every process's ownership thread now and then:

    * a `missing` wait whose agent, function, swarm or key this process has; a `limit` wait
      whose time has come (its process's timer died with it);
    * a sub-agent join whose sub-agent run has ended (its process died between its end and the
      parent's resume);
    * an answered wait, or one whose resume was won, whose run is still CANCELLED: whoever won
      the resume died (or was paused past `RESUME_DEADLINE`) before making it; or one still
      `parking` (its process died between its cancel and its mark).

    Each is taken by a compare-and-set on its row as read, so one sweeper resumes it. It also
    deletes the waits of runs that ended or are gone, and the `missing` and `limit` waits a run
    got past (resumed, it went on or parked elsewhere); never a wait for a person or a
    sub-agent of a run still waiting (its answer is the run's). `source` is a `DBOSClient` that
    fails at once while the database is away (this runs in the heartbeat's thread), `engine`
    the engine to read and write the waits on (default: the process's shared one)."""
    url = _dbos.run_database_url()
    assert url is not None, "DBOS is not launched in this process"
    waits = WaitBook(url, engine)
    stale = waits.stale(MISSING_AGE_SECONDS, STALE_SECONDS)
    if not stale:
        return 0
    ids = list({*(w.run_id for w in stale), *(w.key[5:] for w in stale if w.kind == "join")})
    found = source.list_workflows(workflow_ids=ids, load_input=False, load_output=False)
    status = {row.workflow_id: row.status for row in found}
    resumed = 0
    for wait in stale:
        state = status.get(wait.run_id)
        passing = wait.kind in ("missing", "limit")
        if state is None or state in _ENDED:
            waits.drop_if(wait)  # the run ended (or is gone): its wait is over
            continue
        if state != "CANCELLED":  # it runs or is queued: only a wait it got past goes
            if passing and wait.state == "resuming":
                waits.drop_if(wait)
            continue
        if wait.state == "waiting":
            continue  # cancelled under it by DBOS's own tools, or about to park: not ours
        now = waits.parked([wait.run_id]).get(wait.run_id)
        if now is not None and now.key != wait.key:  # the run waits on something newer
            if passing:
                waits.drop_if(wait)
            continue
        if wait.kind == "missing":
            due = provides(wait.detail or {})
        elif wait.kind == "limit":
            due = float((wait.detail or {}).get("until") or 0) <= time.time()
        elif wait.kind == "join":
            due = wait.answered or status.get(wait.key[5:]) in _ENDED
        else:
            due = wait.answered or wait.state == "resuming"
        old = wait.updated_at <= (waits.now_ms() or 0) - STALE_SECONDS * 1000
        if wait.state in ("parking", "resuming") or not passing:
            # a run parking, or a resumer, that is merely slow is left alone for a while
            due = (due or wait.state == "parking") and old
        since = time.monotonic()
        won = waits.touch(wait) if due else None
        if won is not None:
            resume_won(source, won, since, waits)
            resumed += 1
    if resumed:
        logger.info("durable-swarm: the sweep resumed %d parked runs", resumed)
    return resumed


def provides(missing: dict[str, Any]) -> bool:
    """Whether this process has what a `missing` wait misses (`missing_of` in `_workflow`)."""
    try:
        if "agent" in missing:
            _registry.resolve(str(missing["agent"]))
        elif "function" in missing:
            _registry.resolve_function(str(missing["function"]))
        elif "swarm" in missing:
            registry.settings(str(missing["swarm"]))
        elif "key" in missing:
            ring = keyring()
            return ring is not None and ring.has(str(missing["key"]))
        else:
            return False
    except DurableSwarmError:
        return False
    return True


_dbos.add_sweep(sweep)


class _Quiet(logging.Filter):
    """Drops what DBOS logs when a run parks, for the runs that parked here: its warning that
    the run "was cancelled during execution" and its error that the awaited run "was
    cancelled" (the cancellation is this library's own, and the run only waits)."""

    _PATTERNS = (
        re.compile(r"Workflow (\S+) was cancelled during execution"),
        re.compile(r"Awaited workflow (\S+) was cancelled"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._runs: dict[str, int] = {}  # run id -> records of its park still to drop
        self._lock = threading.Lock()

    def add(self, run_id: str) -> None:
        with self._lock:
            self._runs[run_id] = 2
            while len(self._runs) > 10_000:  # records DBOS never logged: forget the oldest
                del self._runs[next(iter(self._runs))]

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        run_id = getattr(error, "workflow_id", None)
        if not isinstance(error, DBOSAwaitedWorkflowCancelledError):
            run_id = None
            message = record.getMessage()
            for pattern in self._PATTERNS:
                found = pattern.search(message)
                if found:
                    run_id = found.group(1)
                    break
        if run_id is None:
            return True
        with self._lock:
            left = self._runs.get(run_id)
            if left is None:
                return True
            if left <= 1:
                del self._runs[run_id]
            else:
                self._runs[run_id] = left - 1
        return False


_QUIET = _Quiet()
logging.getLogger("dbos").addFilter(_QUIET)
