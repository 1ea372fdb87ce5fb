"""Runs waiting for a person are parked: no process holds them (SQLite and PostgreSQL).

* many waiting runs: each is parked (CANCELLED in DBOS, its wait parked in the library's table),
  none executes anywhere, and while they wait no statement of this process names any of them;
  each answer resumes exactly its run, and no wait is left once they are answered;
* an answer that comes while a run parks (between its look and its park) resumes it once;
* a waiting run that is cancelled takes no answer (its `RunHandle` says `RunCancelledError`);
  resumed, it waits again and finishes; cancelled or deleted from another process likewise.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from _support.wait import wait_for
from durable_swarm import DurableSwarm, ask_user
from durable_swarm.durable import _dbos
from durable_swarm.durable._waits import WaitBook
from durable_swarm.errors import DurableSwarmError, RunCancelledError, RunNotFoundError
from durable_swarm.testing import ToolCall, calls

from ._memory import Model, agent, ask_then_greet
from ._waiting import wait_status

RUNS = 30
IDLE_SECONDS = 2.0


def _swarm(durable: Callable[..., DurableSwarm]) -> tuple[DurableSwarm, Any]:
    clerk = agent("Clerk", functions=[ask_user])
    return durable(Model(Clerk=ask_then_greet).client), clerk


def _statements_naming(run_ids: list[str], seconds: float) -> list[str]:
    """The statements this process sends in `seconds` whose text or parameters name one of
    `run_ids` (any engine)."""
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        text = f"{statement} {parameters}"
        if any(run_id in text for run_id in run_ids):
            seen.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        time.sleep(seconds)  # the idle window being measured, not a synchronisation
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
    return seen


def _waits() -> WaitBook:
    url = _dbos.run_database_url()
    assert url is not None
    return WaitBook(url)


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


def test_many_waiting_runs_are_parked_and_cost_nothing(
    durable: Callable[..., DurableSwarm],
) -> None:
    swarm, clerk = _swarm(durable)
    handles = [swarm.start(clerk, [{"role": "user", "content": "hi"}]) for _ in range(RUNS)]
    ids = [handle.run_id for handle in handles]
    for run_id in ids:
        wait_status(swarm, run_id, "waiting_for_input")
    # `parked()` counts a wait still `parking` (its run is about to cancel itself): wait for
    # every run to have cancelled itself and marked its wait parked.
    wait_for(
        lambda: [w.state for w in _waits().parked(ids).values()] == ["parked"] * RUNS,
        f"{RUNS} parked waits",
    )
    statuses = {r.workflow_id: r.status for r in swarm.runs.source.list_workflows(workflow_ids=ids)}
    assert set(statuses.values()) == {"CANCELLED"}  # in DBOS: nothing executes, nothing queued
    assert {swarm.get_run(run_id).status for run_id in ids} == {"waiting_for_input"}

    assert _statements_naming(ids, IDLE_SECONDS) == []  # a parked run costs no query

    for i, handle in enumerate(handles):
        swarm.send_input(handle.run_id, f"Ada{i}")
    for i, handle in enumerate(handles):
        assert handle.result().messages[-1]["content"] == f"Hello Ada{i}."
    assert _waits().parked(ids) == {}
    for run_id in ids:
        assert [s.kind for s in swarm.get_run(run_id).steps].count("wait") == 1


def test_an_answer_that_comes_while_the_run_parks_resumes_it_once(
    durable: Callable[..., DurableSwarm], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The answer lands after the run looked (no answer) and before it marks its wait parked:
    # its second look finds it and it resumes itself.
    swarm, clerk = _swarm(durable)
    real_park = WaitBook.park
    answered = threading.Event()

    def park_after_an_answer(self: WaitBook, run_id: str, *args: Any, **kwargs: Any) -> bool:
        if not answered.is_set():
            answered.set()
            book = WaitBook(_dbos.run_database_url() or "")
            won = book.answer(run_id, args[0], "input", {"text": "Ada", "by": None, "at": ""})
            assert won is not None and won.state == "waiting"  # the run is live: no resume
        return real_park(self, run_id, *args, **kwargs)

    monkeypatch.setattr(WaitBook, "park", park_after_an_answer)
    handle = swarm.start(clerk, [{"role": "user", "content": "hi"}])
    assert handle.result().messages[-1]["content"] == "Hello Ada."
    info = swarm.get_run(handle.run_id)
    assert [s.kind for s in info.steps].count("wait") == 1
    assert _waits().parked([handle.run_id]) == {}


def test_two_answers_at_once_one_wins(durable: Callable[..., DurableSwarm]) -> None:
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [{"role": "user", "content": "hi"}])
    wait_status(swarm, handle.run_id, "waiting_for_input")
    wait_for(lambda: _waits().parked([handle.run_id]), "the run to park")
    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def answer(name: str) -> None:
        barrier.wait()
        try:
            swarm.send_input(handle.run_id, name, by=name)
            outcomes.append(name)
        except DurableSwarmError as e:
            outcomes.append(e)

    threads = [threading.Thread(target=answer, args=(n,)) for n in ("Ada", "Bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    winners = [o for o in outcomes if isinstance(o, str)]
    assert len(winners) == 1, outcomes
    assert handle.result().messages[-1]["content"] == f"Hello {winners[0]}."


def test_a_cancelled_waiting_run_gives_its_wait_up_and_resumes(
    durable: Callable[..., DurableSwarm],
) -> None:
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [{"role": "user", "content": "hi"}])
    wait_status(swarm, handle.run_id, "waiting_for_input")

    swarm.cancel(handle.run_id)
    assert swarm.get_run(handle.run_id).status == "cancelled"
    with pytest.raises(RunCancelledError, match="was cancelled before it finished") as raised:
        handle.result()
    assert raised.value.run_id == handle.run_id
    with pytest.raises(DurableSwarmError, match="is not waiting for input"):
        swarm.send_input(handle.run_id, "Ada")

    swarm.resume(handle.run_id)
    wait_status(swarm, handle.run_id, "waiting_for_input")
    swarm.send_input(handle.run_id, "Ada")
    info = wait_status(swarm, handle.run_id, "succeeded")
    assert info.messages[-1]["content"] == "Hello Ada."
    assert [s.kind for s in info.steps].count("wait") == 1


def test_a_waiting_run_cancelled_from_another_process_ends(
    durable: Callable[..., DurableSwarm],
) -> None:
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [{"role": "user", "content": "hi"}])
    wait_status(swarm, handle.run_id, "waiting_for_input")

    _cancel_from_another_process(handle.run_id)
    with pytest.raises(RunCancelledError):
        handle.result()
    assert swarm.get_run(handle.run_id).status == "cancelled"


def test_a_sub_agent_waiting_when_its_parent_is_cancelled_elsewhere_is_cancelled(
    durable: Callable[..., DurableSwarm],
) -> None:
    clerk = agent("Clerk", functions=[ask_user])

    def boss(messages: list[dict[str, Any]], tools: Any) -> Any:
        if messages[-1]["role"] == "user":
            return calls(ToolCall("delegate_to_clerk", {"task": "ask"}))
        return f"The clerk said: {messages[-1]['content']}"

    swarm = durable(Model(Clerk=ask_then_greet, Boss=boss).client)
    handle = swarm.start(agent("Boss", functions=[clerk.as_tool()]), [user("hi")])
    child = f"{handle.run_id}-sub1"
    wait_for(lambda: _waiting(swarm, child), "the sub-agent to ask")
    wait_for(lambda: swarm.get_run(handle.run_id).status == "pending", "the parent to wait")
    wait_for(lambda: len(_waits().parked([child, handle.run_id])) == 2, "both to park")

    _cancel_from_another_process(handle.run_id)
    assert swarm.get_run(child).status == "cancelled"
    assert swarm.get_run(handle.run_id).status == "cancelled"
    with pytest.raises(RunCancelledError):
        handle.result()


def test_a_waiting_run_deleted_from_another_process_is_gone(
    durable: Callable[..., DurableSwarm],
) -> None:
    swarm, clerk = _swarm(durable)
    handle = swarm.start(clerk, [user("hi")])
    wait_status(swarm, handle.run_id, "waiting_for_input")

    _in_another_process("client.delete_run(sys.argv[2], force=True)", handle.run_id)
    with pytest.raises(RunNotFoundError):
        swarm.get_run(handle.run_id)
    assert _waits().parked([handle.run_id]) == {}
