"""Polling a durable run's status from the test process (generous timeouts: a loaded machine)."""

from __future__ import annotations

from typing import Any

from _support.wait import wait_for
from durable_swarm import DurableSwarm, RunNotFoundError

TIMEOUT = 60.0


def wait_status(
    swarm: DurableSwarm, run_id: str, *statuses: str, messages: int = 0, timeout: float = TIMEOUT
) -> Any:
    """Poll `get_run(run_id)` until its status is one of `statuses` (with at least `messages`
    messages); return that `RunInfo`. Fails at once if the run ends in another status."""
    seen: list[Any] = [None]

    def reached() -> Any:
        try:
            info = seen[0] = swarm.get_run(run_id)
        except RunNotFoundError:
            return None
        if info.status in statuses and len(info.messages) >= messages:
            return info
        if info.status in ("succeeded", "failed", "cancelled"):
            raise AssertionError(
                f"run {run_id} ended {info.status} (error: {info.error}) while waiting for "
                f"{statuses}"
            )
        return None

    try:
        return wait_for(reached, f"run {run_id} to be {statuses}", timeout=timeout)
    except AssertionError as e:
        info = seen[0]
        last = None if info is None else (info.status, info.waiting_for, info.problem)
        raise AssertionError(f"{e} (last: {last})") from None
