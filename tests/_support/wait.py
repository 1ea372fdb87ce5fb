"""Waiting in tests: poll a condition until it holds, never sleep a fixed time to synchronise.

Every timeout is multiplied by `DURABLE_SWARM_TEST_TIMEOUT_SCALE` (default 1): set it above 1 on
a slow or heavily loaded machine rather than editing timeouts. Timeouts only bound how long a
broken test takes to fail; a passing test never waits for them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

SCALE_ENV = "DURABLE_SWARM_TEST_TIMEOUT_SCALE"


def scaled(seconds: float) -> float:
    """`seconds` times `DURABLE_SWARM_TEST_TIMEOUT_SCALE`."""
    return seconds * float(os.environ.get(SCALE_ENV) or 1)


TIMEOUT = 90.0  # the default, before scaling: generous, the machine is small and shared


class Process(Protocol):
    name: str

    def poll(self) -> int | None: ...

    def output(self) -> str: ...


def wait_for(
    condition: Callable[[], Any],
    what: str,
    *,
    timeout: float | None = None,
    processes: Iterable[Process] = (),
    interval: float = 0.02,
) -> Any:
    """Poll `condition` until it is truthy and return its value; fail after `timeout` seconds
    (scaled; default `TIMEOUT`), or early, with its output, if one of `processes` exits."""
    limit = scaled(TIMEOUT if timeout is None else timeout)
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        for process in processes:
            code = process.poll()
            if code is not None:
                raise AssertionError(
                    f"{process.name} exited ({code}) while waiting for {what}:\n"
                    f"{process.output()[-6000:]}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting for {what}")
        time.sleep(interval)
