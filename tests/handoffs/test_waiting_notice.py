"""`run()` on a durable run that waits for the person says once per wait what it waits for and
how to answer, then returns when the run finishes."""

from __future__ import annotations

import logging
import threading

from durable_swarm import Agent, ask_user, tool
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

from ._waiting import wait_status


@tool(needs_approval=True)
def pay_refund(amount: int) -> str:
    """Pay a refund."""
    return f"paid {amount}"


def _script(messages, tools):
    tool_messages = [m for m in messages if m.get("role") == "tool"]
    if not tool_messages:
        return calls(ToolCall("ask_user", {"question": "Which order?"}, id="ask-1"))
    if len(tool_messages) == 1:
        return calls(ToolCall("pay_refund", {"amount": 30}, id="pay-1"))
    return text(f"Done: {tool_messages[-1]['content']}")


def test_run_says_once_what_each_wait_needs(durable_swarm_factory, run_id, caplog):
    caplog.set_level(logging.WARNING, logger="durable_swarm")
    swarm = durable_swarm_factory(ScriptedClient(_script))
    agent = Agent(name="Refunds", functions=[ask_user, pay_refund])
    result: dict = {}
    runner = threading.Thread(
        target=lambda: result.update(
            response=swarm.run(agent, [{"role": "user", "content": "refund"}], run_id=run_id)
        )
    )
    runner.start()

    def notices() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "durable_swarm"]

    wait_status(swarm, run_id, "waiting_for_input")
    _poll(lambda: len(notices()) == 1)
    assert f"Run {run_id!r} is waiting for input from the person" in notices()[0]
    assert "Refunds asks: Which order?" in notices()[0]
    assert f'durable-swarm runs send {run_id} "..."' in notices()[0]
    assert f"swarm.send_input({run_id!r}, text)" in notices()[0]
    swarm.send_input(run_id, "order 7")

    wait_status(swarm, run_id, "waiting_for_approval")
    _poll(lambda: len(notices()) == 2)
    approval = notices()[1]
    assert 'waiting for approval of pay_refund({"amount": 30}) (tool call pay-1)' in approval
    assert f"durable-swarm runs approve {run_id} pay-1" in approval
    assert f"swarm.approve({run_id!r}, 'pay-1')" in approval
    swarm.approve(run_id, "pay-1")

    runner.join(60)
    assert result["response"].messages[-1]["content"] == "Done: paid 30"
    assert len(notices()) == 2  # once per wait, however long it lasted


def _poll(condition, timeout: float = 60.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("condition not met in time")
