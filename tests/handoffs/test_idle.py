"""An idle waiting run holds no thread (SQLite and PostgreSQL): 50 runs that wait for the person
in this process must not add ~50 threads, whether started with `start` or `astart`."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from durable_swarm import ask_user

from ._memory import Model, agent, ask_then_greet
from ._waiting import TIMEOUT

RUNS = 50
# Pools may grow by a few threads while 50 runs start at once; one thread per run may not.
MAX_NEW_THREADS = 20


def _all_waiting(swarm: Any, run_ids: list[str]) -> None:
    deadline = time.monotonic() + TIMEOUT
    wanted = set(run_ids)
    while True:
        waiting = {r.run_id for r in swarm.list_runs(status="waiting_for_input", limit=None)}
        if wanted <= waiting:
            return
        assert time.monotonic() < deadline, f"{len(wanted & waiting)} of {len(wanted)} runs wait"
        time.sleep(0.1)


def _answer(swarm: Any, run_id: str) -> None:
    if swarm.get_run(run_id).status == "waiting_for_input":
        swarm.send_input(run_id, "Ada")


def _warm_up(swarm: Any, clerk: Any) -> None:
    """A few complete runs first, so the pools every run uses exist before counting."""
    handles = [swarm.start(clerk, [{"role": "user", "content": "hi"}]) for _ in range(3)]
    for handle in handles:
        _all_waiting(swarm, [handle.run_id])
        swarm.send_input(handle.run_id, "warm")
        handle.result()


def test_idle_waiting_runs_started_with_start_hold_no_thread(durable: Any) -> None:
    swarm = durable(Model(Clerk=ask_then_greet).client)
    clerk = agent("Clerk", functions=[ask_user])
    _warm_up(swarm, clerk)
    before = threading.active_count()
    prefix = uuid.uuid4().hex[:8]
    handles = [
        swarm.start(clerk, [{"role": "user", "content": "hi"}], run_id=f"idle-{prefix}-{i}")
        for i in range(RUNS)
    ]
    try:
        _all_waiting(swarm, [h.run_id for h in handles])
        time.sleep(0.5)
        during = threading.active_count()
    finally:  # answer every run, so none is left holding anything
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda h: _answer(swarm, h.run_id), handles))
        results = [h.result() for h in handles]
    assert all(r.messages[-1]["content"] == "Hello Ada." for r in results)
    assert during - before <= MAX_NEW_THREADS, (
        f"{RUNS} idle waiting runs added {during - before} threads ({before} -> {during}): "
        "each run started with start() holds a DBOS executor thread while it waits"
    )


async def test_idle_waiting_runs_started_with_astart_hold_no_thread(durable: Any) -> None:
    swarm = durable(Model(Clerk=ask_then_greet).client)
    clerk = agent("Clerk", functions=[ask_user])
    before = threading.active_count()
    prefix = uuid.uuid4().hex[:8]
    handles = [
        await swarm.astart(clerk, [{"role": "user", "content": "hi"}], run_id=f"aidle-{prefix}-{i}")
        for i in range(RUNS)
    ]
    try:
        await asyncio.to_thread(_all_waiting, swarm, [h.run_id for h in handles])
        await asyncio.sleep(0.5)
        during = threading.active_count()
    finally:
        await asyncio.gather(*(asyncio.to_thread(_answer, swarm, h.run_id) for h in handles))
        results = [await h.aresult() for h in handles]
    assert all(r.messages[-1]["content"] == "Hello Ada." for r in results)
    assert during - before <= MAX_NEW_THREADS, f"{before} -> {during} threads"
