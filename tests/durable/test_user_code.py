"""`user_code`: a BaseException the user's code raises fails only its run, but the GeneratorExit
that `close()` throws into a coroutine dropped from outside is not the user's and passes through
(turned into an error, DBOS would record the step as failed)."""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

import pytest

from durable_swarm.durable._workflow import user_code
from durable_swarm.errors import DurableSwarmError


async def _waits_in_user_code(entered: asyncio.Event, ended: list[str] | None = None) -> None:
    try:
        with user_code("run-1", "Tool 'slow'"):
            entered.set()
            await asyncio.sleep(3600)
    except BaseException as e:
        if ended is not None:
            ended.append(type(e).__name__)
        raise


def test_generator_exit_raised_by_user_code_fails_the_run() -> None:
    async def raises() -> None:
        with user_code("run-1", "Tool 'odd'"):
            raise GeneratorExit

    with pytest.raises(DurableSwarmError, match=r"Tool 'odd' in run 'run-1' raised GeneratorExit"):
        asyncio.run(raises())


def test_closing_a_coroutine_from_another_task_is_not_a_user_failure() -> None:
    async def main() -> None:
        entered = asyncio.Event()
        coroutine = _waits_in_user_code(entered)
        task = asyncio.ensure_future(coroutine)
        await entered.wait()
        coroutine.close()  # raised DurableSwarmError before: 'raised GeneratorExit'
        task.cancel()  # the task's next step finds its coroutine closed
        with pytest.raises((asyncio.CancelledError, RuntimeError)):
            await task

    asyncio.run(main())


def test_a_pending_task_dropped_with_its_loop_closes_quietly(monkeypatch: Any) -> None:
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    loop = asyncio.new_event_loop()
    entered = asyncio.Event()
    ended: list[str] = []
    task = loop.create_task(_waits_in_user_code(entered, ended))
    loop.run_until_complete(entered.wait())
    loop.close()  # not run again, its task never cancelled: the garbage collector closes it
    del task
    gc.collect()
    assert ended == ["GeneratorExit"]  # the coroutine was closed, and saw it as it was thrown
    errors = [u.exc_value for u in unraisable if isinstance(u.exc_value, DurableSwarmError)]
    assert errors == []
