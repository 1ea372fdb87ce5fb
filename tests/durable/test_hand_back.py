"""A hand-back is fenced by the execution's ownership token: an execution whose run was taken
over and started again meanwhile (even by this same executor id) moves nothing, and the run goes
on in the execution that holds it. On SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from _support.wait import wait_for
from durable_swarm import Agent, ask_user
from durable_swarm.durable import _dbos, _engine
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    if not any(m.get("role") == "tool" for m in messages):
        return calls(ToolCall("ask_user", {"question": "Which colour?"}))
    return text("Noted.")


ASKER = Agent(name="hand-back-asker", instructions="Ask.", functions=[ask_user])


def test_a_stale_execution_cannot_hand_back_a_run_another_execution_holds(
    durable_swarm_factory: Any, run_id: str
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(_script))
    handle = swarm.start(ASKER, [{"role": "user", "content": "a shirt"}], run_id=run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question")
    holder = _engine.owner_of(run_id)
    assert holder  # the execution waiting here

    # An execution of this executor id whose run was taken from it since: its token is gone.
    assert _dbos.hand_back(run_id, "the-token-of-an-execution-that-lost-the-run") is False
    assert _dbos.run_status(run_id) == "PENDING"
    assert _engine.owner_of(run_id) == holder

    swarm.send_input(run_id, "blue")
    response = handle.result()
    assert response.messages[-1]["content"] == "Noted."
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]
    assert swarm.get_run(run_id).status == "succeeded"


SEEN: dict[str, str | None] = {}


def note_token(context_variables: dict[str, Any]) -> str:
    """Note the token of the execution running this tool."""
    run_id = context_variables["run"]
    SEEN[run_id] = _dbos.execution_token(run_id)
    return "noted"


def _noting(messages: list[dict[str, Any]], tools: Any) -> Any:
    answered = sum(1 for m in messages if m.get("role") == "tool")
    if answered == 0:
        return calls(ToolCall("note_token", {}))
    if answered == 1:
        return calls(ToolCall("ask_user", {"question": "Ready?"}))
    return text("Done.")


NOTER = Agent(name="hand-back-noter", instructions="Note.", functions=[note_token, ask_user])


def test_an_execution_knows_its_ownership_token(durable_swarm_factory: Any, run_id: str) -> None:
    """Contract with DBOS (its execution context's `owner_xid`, read by
    `_dbos.execution_token`): a DBOS release that moves it makes hand-backs unfenced (they fall
    back to the run's token at the time), and this test says so."""
    swarm = durable_swarm_factory(ScriptedClient(_noting))
    swarm.start(NOTER, [{"role": "user", "content": "go"}], {"run": run_id}, run_id=run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the question")
    assert SEEN[run_id] is not None, (
        "dbos._context.current_owner_xid no longer gives the execution's token: hand-backs "
        "are not fenced on this DBOS release (see durable/_dbos.py execution_token)"
    )
    assert SEEN[run_id] == _engine.owner_of(run_id)
    swarm.send_input(run_id, "yes")
    wait_for(lambda: swarm.get_run(run_id).status == "succeeded", "the run to finish")
