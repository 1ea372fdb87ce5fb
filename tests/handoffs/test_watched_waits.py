"""Runs waiting for a person are watched by one thread per process (SQLite and PostgreSQL).

* many waiting runs cost a bounded number of queries: far fewer than one per waiting run per
  poll interval (what a plain `DBOS.recv` per run costs on SQLite), and none on PostgreSQL,
  where DBOS's trigger notifies each message;
* each answer wakes exactly its run, and the watcher holds no wait once they are answered;
* a waiting run that is cancelled gives its wait up (its `RunHandle` says `RunCancelledError`);
  resumed, it waits again and finishes; cancelled from another process, it gives its wait up
  at once too (the cancel's notice wakes the watcher, not its 30 s sweep).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from _support.wait import wait_for
from durable_swarm import DurableSwarm, ask_user
from durable_swarm.durable import _dbos, _waits
from durable_swarm.durable._waits import watcher_for
from durable_swarm.errors import RunCancelledError, RunNotFoundError
from durable_swarm.testing import ToolCall, calls

from ._memory import Model, agent, ask_then_greet
from ._waiting import wait_status

RUNS = 30
IDLE_SECONDS = 2.0


def _swarm(durable: Callable[..., DurableSwarm]) -> tuple[DurableSwarm, Any]:
    clerk = agent("Clerk", functions=[ask_user])
    return durable(Model(Clerk=ask_then_greet).client), clerk


def _notification_queries(seconds: float) -> int:
    """Statements on DBOS's `notifications` table this process makes in `seconds`."""
    engine = _dbos.system_database().engine
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "notifications" in statement:
            seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        time.sleep(seconds)  # the idle window being measured, not a synchronisation
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    return len(seen)


def _in_another_process(call: str, run_id: str) -> None:
    """`call` (on `client`, a `DurableClient` on this test's database; the run id is
    `sys.argv[2]`) in a process of its own."""
    code = (
        "import sys\n"
        "from durable_swarm.durable import DurableClient\n"
        "with DurableClient(sys.argv[1]) as client:\n"
        f"    {call}\n"
    )
    url = _dbos.launched_url()
    assert url is not None
    subprocess.run([sys.executable, "-c", code, url, run_id], check=True, timeout=120)


def _cancel_from_another_process(run_id: str) -> None:
    """`DurableClient.cancel(run_id)` in a process of its own."""
    _in_another_process("client.cancel(sys.argv[2])", run_id)


def _waiting(swarm: DurableSwarm, run_id: str) -> Any:
    """What `run_id` waits for (None: nothing, or no such run yet)."""
    try:
        return swarm.get_run(run_id).waiting_for
    except RunNotFoundError:
        return None


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_many_waiting_runs_cost_one_watcher(
    durable: Callable[..., DurableSwarm], backend: str
) -> None:
    swarm, clerk = _swarm(durable)
    handles = [swarm.start(clerk, [{"role": "user", "content": "hi"}]) for _ in range(RUNS)]
    for handle in handles:
        wait_status(swarm, handle.run_id, "waiting_for_input")
    watcher = watcher_for(_dbos.system_database())
    wait_for(lambda: watcher.waiting() >= RUNS, f"{RUNS} waits held by the watcher")

    queries = _notification_queries(IDLE_SECONDS)
    # A plain DBOS.recv per run polls once per run per interval on SQLite (RUNS x 10 / s here).
    per_run_polls = RUNS * IDLE_SECONDS / swarm.poll_interval
    assert queries < per_run_polls / 5, (queries, per_run_polls)
    if backend == "postgres":
        assert queries <= 2  # LISTEN: no polling (a sweep may fall in the window)

    for i, handle in enumerate(handles):
        swarm.send_input(handle.run_id, f"Ada{i}")
    for i, handle in enumerate(handles):
        assert handle.result().messages[-1]["content"] == f"Hello Ada{i}."
    wait_for(lambda: watcher.waiting() == 0, "the watcher to hold no wait")


def test_a_cancelled_waiting_run_gives_its_wait_up_and_resumes(
    durable: Callable[..., DurableSwarm],
) -> None:
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [{"role": "user", "content": "hi"}])
    wait_status(swarm, handle.run_id, "waiting_for_input")
    watcher = watcher_for(_dbos.system_database())
    wait_for(lambda: watcher.waiting() >= 1, "the run's wait held by the watcher")

    swarm.cancel(handle.run_id)
    wait_for(lambda: watcher.waiting() == 0, "the cancelled run to give its wait up")
    assert swarm.get_run(handle.run_id).status == "cancelled"
    with pytest.raises(RunCancelledError, match="was cancelled before it finished") as raised:
        handle.result()  # ends at once: the run's task is gone
    assert raised.value.run_id == handle.run_id

    swarm.resume(handle.run_id)
    wait_status(swarm, handle.run_id, "waiting_for_input")
    swarm.send_input(handle.run_id, "Ada")
    info = wait_status(swarm, handle.run_id, "succeeded")
    assert info.messages[-1]["content"] == "Hello Ada."
    assert [s.kind for s in info.steps].count("wait") == 1


def test_a_waiting_run_cancelled_from_another_process_gives_its_wait_up_at_once(
    durable: Callable[..., DurableSwarm], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sweep that would find the cancellation is an hour away: only the notice the cancel
    # sends can end the wait here.
    monkeypatch.setattr(_waits, "SWEEP_SECONDS", 3600.0)
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [{"role": "user", "content": "hi"}])
    wait_status(swarm, handle.run_id, "waiting_for_input")
    watcher = watcher_for(_dbos.system_database())
    wait_for(lambda: watcher.waiting() >= 1, "the run's wait held by the watcher")

    _cancel_from_another_process(handle.run_id)
    wait_for(lambda: watcher.waiting() == 0, "the run to give its wait up", timeout=15)
    with pytest.raises(RunCancelledError):
        handle.result()


def test_a_sub_agent_waiting_when_its_parent_is_cancelled_elsewhere_gives_its_wait_up(
    durable: Callable[..., DurableSwarm], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_waits, "SWEEP_SECONDS", 3600.0)
    clerk = agent("Clerk", functions=[ask_user])

    def boss(messages: list[dict[str, Any]], tools: Any) -> Any:
        if messages[-1]["role"] == "user":
            return calls(ToolCall("delegate_to_clerk", {"task": "ask"}))
        return f"The clerk said: {messages[-1]['content']}"

    swarm = durable(Model(Clerk=ask_then_greet, Boss=boss).client)
    handle = swarm.start(agent("Boss", functions=[clerk.as_tool()]), [user("hi")])
    child = f"{handle.run_id}-sub1"
    wait_for(lambda: _waiting(swarm, child), "the sub-agent to ask")
    watcher = watcher_for(_dbos.system_database())
    wait_for(lambda: watcher.waiting() >= 1, "the sub-agent's wait held by the watcher")

    _cancel_from_another_process(handle.run_id)
    wait_for(lambda: watcher.waiting() == 0, "the sub-agent to give its wait up", timeout=15)
    assert swarm.get_run(child).status == "cancelled"


def test_a_waiting_run_deleted_from_another_process_gives_its_wait_up(
    durable: Callable[..., DurableSwarm], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A forced delete cancels the run, then deletes its rows (the cancel's notice with them, on
    # SQLite possibly before the watcher reads it): the sweep ends a wait whose run is gone.
    monkeypatch.setattr(_waits, "SWEEP_SECONDS", 1.0)
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [user("hi")])
    wait_status(swarm, handle.run_id, "waiting_for_input")
    watcher = watcher_for(_dbos.system_database())
    wait_for(lambda: watcher.waiting() >= 1, "the run's wait held by the watcher")

    _in_another_process("client.delete_run(sys.argv[2], force=True)", handle.run_id)
    wait_for(lambda: watcher.waiting() == 0, "the run to give its wait up", timeout=15)
    with pytest.raises(RunNotFoundError):
        swarm.get_run(handle.run_id)
