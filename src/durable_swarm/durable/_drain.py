"""Draining: a stopping process lets the steps it runs finish, and begins no new one.

Every model call, tool call and tool listing of a durable run is a DBOS step whose body runs
here. Before a body begins it passes the ownership gate (`use_gate`: `_dbos.admit`), then this
one. `step(run_id, name)` wraps one such step from the workflow's side: the body calls
`Admission.enter()` (or `aenter()`) as it begins, and the step counts as *in flight* from then
until DBOS has recorded its outcome and the `with` block ends. Once `close()` was called (the
worker got SIGTERM), a body that has not begun yet never begins: `enter` parks it for good, so
its step stays unrecorded and runs in whichever process takes the run over.

`wait_idle(timeout)` then waits until no step is in flight. Only then may the process let other
processes take its runs (mark itself stopped): a step is never executed by two processes at the
same moment, and a step whose body finished here is recorded before anyone else replays the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator

__all__ = [
    "Admission",
    "close",
    "closed",
    "in_flight",
    "parked",
    "reopen",
    "step",
    "use_gate",
    "wait_idle",
]

_lock = threading.Lock()
_idle = threading.Condition(_lock)
_active: dict[int, str] = {}  # admission number -> "run <id>, step <name>"
_closed = False
_numbers = itertools.count()
_parked = threading.Event()  # never set: what a body that may not begin waits on
_parked_count = 0


# The ownership gate a body passes first (`use_gate`): `(fast, slow)`, each taking the run id;
# `fast` answers at once (True: go) or None (ask `slow`, which may block until it can answer,
# and returns True to go, False to never begin; it raises to end the execution).
_gate: tuple[Callable[[str], bool | None], Callable[[str], bool]] | None = None


def use_gate(fast: Callable[[str], bool | None], slow: Callable[[str], bool]) -> None:
    """Make every step body pass `fast`, then if need be `slow`, before it begins (the ownership
    gate of `_dbos.admit`: a process paused or cut off begins no step until it knows its runs
    are still its own)."""
    global _gate
    _gate = (fast, slow)


class Admission:
    """One step's passage through the gate (see the module docs)."""

    def __init__(self, what: str, run_id: str | None = None) -> None:
        self.what = what
        self.run_id = run_id
        self.number: int | None = None

    def _owned(self) -> bool:
        """The ownership gate, blocking (see `use_gate`)."""
        if _gate is None or self.run_id is None or self.number is not None:
            return True
        fast, slow = _gate
        verdict = fast(self.run_id)
        return verdict if verdict is not None else slow(self.run_id)

    async def _aowned(self) -> bool:
        if _gate is None or self.run_id is None or self.number is not None:
            return True
        fast, slow = _gate
        verdict = fast(self.run_id)
        if verdict is not None:
            return verdict
        return await asyncio.to_thread(slow, self.run_id)

    def _admit(self, owned: bool = True) -> bool:
        global _parked_count
        with _lock:
            if self.number is not None:
                return True  # a retry of a body already in flight
            if _closed or not owned:  # stopping (or the ownership gate said never here)
                _parked_count += 1
                return False
            self.number = next(_numbers)
            _active[self.number] = self.what
            return True

    def enter(self) -> None:
        """Begin the step's body (sync code); parks the calling thread for good if the process
        is stopping and the body had not begun yet, and waits while the ownership gate says
        so (see `use_gate`)."""
        if not self._admit(self._owned()):
            _parked.wait()

    async def aenter(self) -> None:
        """`enter` for an async body: parks the task for good instead of a thread."""
        if not self._admit(await self._aowned()):
            await asyncio.Event().wait()

    def leave(self) -> None:
        """The step is over (recorded, or failed): it no longer counts as in flight."""
        with _lock:
            if self.number is not None:
                del _active[self.number]
                self.number = None
                _idle.notify_all()


@contextlib.contextmanager
def step(run_id: str, name: str) -> Iterator[Admission]:
    """Around one DBOS step of run `run_id`: its body calls `enter`/`aenter` (see the module
    docs); the step counts as in flight from then until the block ends."""
    admission = Admission(f"run {run_id}, step {name!r}", run_id)
    try:
        yield admission
    finally:
        admission.leave()


def close() -> None:
    """Begin no new step body in this process (a body already running goes on)."""
    global _closed
    with _lock:
        _closed = True


def reopen() -> None:
    """Let step bodies begin again (a process that launches DBOS anew after a stop)."""
    global _closed
    with _lock:
        _closed = False


def closed() -> bool:
    """Whether `close` was called (and not `reopen`)."""
    return _closed


def in_flight() -> list[str]:
    """The steps whose bodies run here now (or ran and are being recorded), described."""
    with _lock:
        return list(_active.values())


def parked() -> int:
    """How many step bodies were kept from beginning since the process began stopping (each
    holds its thread or task for good: the process should exit, not wait for them)."""
    return _parked_count


def wait_idle(timeout: float | None) -> bool:
    """Wait until no step is in flight here (at most `timeout` seconds; None: for good).
    True if none is."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _lock:
        while _active:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            _idle.wait(left if left is None else min(left, 1.0))
        return True
