"""`get_run` reads what a run waits for and its steps as they were at one moment, even when the
run is answered and reaches its next question between the reads (a run moving from waiting to
running to waiting used to be reported with the old question beside the new steps). On SQLite
and PostgreSQL."""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from _support.wait import wait_for
from durable_swarm import Agent, ask_user
from durable_swarm.durable._log import WAITING_EVENT
from durable_swarm.durable._runs import read_run
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

QUESTIONS = ["Which colour?", "Which size?"]


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    answered = sum(1 for m in messages if m.get("role") == "tool")
    if answered < len(QUESTIONS):
        return calls(ToolCall("ask_user", {"question": QUESTIONS[answered]}))
    return text("Noted.")


ASKER = Agent(name="consistent-read-asker", instructions="Ask.", functions=[ask_user])


def _asks(run_id: str) -> str | None:
    waiting = DBOS.get_event(run_id, WAITING_EVENT, timeout_seconds=0) or {}
    return waiting.get("prompt")


def test_get_run_sees_the_wait_and_the_steps_of_one_moment(
    durable_swarm_factory: Any, run_id: str
) -> None:
    swarm = durable_swarm_factory(ScriptedClient(_script))
    handle = swarm.start(ASKER, [{"role": "user", "content": "a shirt"}], run_id=run_id)
    wait_for(lambda: swarm.get_run(run_id).status == "waiting_for_input", "the first question")

    class MovesOnWhileRead:
        """The run's log as DBOS reads it, except that the run is answered, and reaches its
        next question, after what it waits for was read and before its steps are."""

        answered = False

        def __getattr__(self, name: str) -> Any:
            return getattr(DBOS, name)

        def list_workflow_steps(self, run_id: str) -> Any:
            if not self.answered:
                self.answered = True
                swarm.send_input(run_id, "blue")
                wait_for(lambda: _asks(run_id) == QUESTIONS[1], "the second question")
            return DBOS.list_workflow_steps(run_id)

    info = read_run(run_id, MovesOnWhileRead(), swarm.runs.waits)

    assert info.status == "waiting_for_input"
    assert info.waiting_for is not None and info.waiting_for["prompt"] == QUESTIONS[1]
    asked = [m for m in info.messages if m.get("role") == "assistant" and m.get("tool_calls")]
    assert len(asked) == 2  # the steps of the same moment: both questions asked
    swarm.send_input(run_id, "large")
    assert handle.result().messages[-1]["content"] == "Noted."
