"""Guardrails in memory (`Swarm`): input, parallel input, output and tool guardrails, a guardrail
agent, and the verdicts a guardrail function may return."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from durable_swarm import Agent, GuardrailResult, GuardrailTripped, Swarm, guardrail
from durable_swarm.errors import DurableSwarmError
from durable_swarm.guardrails import Guardrail, result_of
from durable_swarm.testing import AsyncScriptedClient, ScriptedClient

from ._refunds import executions, hasty, moderated, refunder, reply


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_tripped_input_guardrail_ends_the_run_before_the_model_or_a_tool(work_dir):
    client = ScriptedClient(reply)
    with pytest.raises(GuardrailTripped) as caught:
        Swarm(client).run(refunder, user("refund 50, you idiot"))
    error = caught.value
    assert (error.guardrail, error.kind, error.agent, error.reason) == (
        "screen", "input", "Refunder", "abusive language",
    )  # fmt: skip
    assert error.run_id is None
    assert "Guardrail 'screen' tripped on the user's input of agent 'Refunder'" in str(error)
    assert client.call_count == 0
    assert executions(work_dir, "refund") == []
    assert executions(work_dir, "screen") == ["refund 50, you idiot"]
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is GuardrailTripped and str(again) == str(error)
    assert again.reason == "abusive language" and isinstance(again, DurableSwarmError)


def test_a_passing_input_guardrail_lets_the_run_go_on(work_dir):
    response = Swarm(ScriptedClient(reply)).run(refunder, user("refund 50"))
    assert response.messages[-1]["content"] == "Done: refunded 50"
    assert executions(work_dir, "screen") == ["refund 50"]
    assert executions(work_dir, "refund") == ["50"]


def test_a_parallel_input_guardrail_discards_the_model_answer_it_ran_with(work_dir):
    client = ScriptedClient(reply)
    with pytest.raises(GuardrailTripped) as caught:
        Swarm(client).run(hasty, user("refund 50, you idiot"))
    assert caught.value.guardrail == "screen"
    assert client.call_count == 1  # asked (and paid for) while the guardrail ran
    assert executions(work_dir, "refund") == []  # its tool call was discarded with it


def test_a_parallel_input_guardrail_that_passes_costs_no_extra_call(work_dir):
    client = ScriptedClient(reply)
    response = Swarm(client).run(hasty, user("refund 50"))
    assert response.messages[-1]["content"] == "Done: refunded 50"
    assert client.call_count == 2
    assert executions(work_dir, "screen") == ["refund 50"]


def test_a_parallel_input_guardrail_in_async_code(work_dir):
    client = AsyncScriptedClient(reply)
    with pytest.raises(GuardrailTripped):
        asyncio.run(Swarm(client).arun(hasty, user("refund 50, you idiot")))
    assert client.call_count == 1
    assert executions(work_dir, "refund") == []


def test_a_streamed_run_asks_a_parallel_guardrail_before_the_model(work_dir):
    client = ScriptedClient(reply)
    stream = Swarm(client).run(hasty, user("refund 50, you idiot"), stream=True)
    with pytest.raises(GuardrailTripped):
        list(stream)
    assert client.call_count == 0  # nothing was shown that would have to be taken back


def test_a_tripped_output_guardrail_ends_the_run(work_dir):
    with pytest.raises(GuardrailTripped) as caught:
        Swarm(ScriptedClient(reply)).run(refunder, user("a rude question"))
    assert (caught.value.guardrail, caught.value.kind) == ("polite", "output")
    assert caught.value.reason == "Refunder was rude"
    assert executions(work_dir, "polite") == ["That is a stupid question."]


def test_a_tool_guardrail_blocks_the_call_and_the_model_reads_why(work_dir):
    client = ScriptedClient(reply)
    response = Swarm(client).run(refunder, user("refund 500"))
    rejection = response.messages[1]
    assert rejection["role"] == "tool" and rejection["tool_name"] == "refund"
    assert rejection["content"] == (
        "Error: the call to refund was blocked by guardrail limit and did not run: "
        "refunds over 100 need a manager"
    )
    assert executions(work_dir, "refund") == []  # the tool body never ran
    assert client.requests[-1]["messages"][-1]["content"] == rejection["content"]
    assert response.messages[-1]["content"] == f"Done: {rejection['content']}"  # it went on
    assert executions(work_dir, "limit") == ['{"amount": 500}']


def test_a_tool_guardrail_reads_the_context(work_dir):
    response = Swarm(ScriptedClient(reply)).run(
        refunder, user("refund 500"), context_variables={"limit": 1000}
    )
    assert response.messages[-1]["content"] == "Done: refunded 500"


def test_an_after_guardrail_withholds_the_result(work_dir):
    response = Swarm(ScriptedClient(reply)).run(refunder, user("what card is on file"))
    assert executions(work_dir, "card_on_file") == [""]  # the tool ran
    assert response.messages[1]["content"] == (
        "Error: the result of card_on_file was withheld by guardrail redact: "
        "guardrail redact tripped"
    )
    assert "4111" not in str(response.messages)
    assert executions(work_dir, "redact") == ["card 4111 1111 1111 1111"]


def test_a_guardrail_of_one_tool(work_dir):
    response = Swarm(ScriptedClient(reply)).run(refunder, user("cancel X-1"))
    assert "blocked by guardrail frozen" in response.messages[1]["content"]
    assert executions(work_dir, "cancel") == []
    response = Swarm(ScriptedClient(reply)).run(refunder, user("cancel X-2"))
    assert response.messages[1]["content"] == "cancelled X-2"


def test_an_agent_as_guardrail(work_dir):
    client = ScriptedClient(reply)
    with pytest.raises(GuardrailTripped) as caught:
        Swarm(client).run(moderated, user("refund 50, you idiot"))
    assert (caught.value.guardrail, caught.value.reason) == ("Moderator", "rude")
    assert client.call_count == 1  # the Moderator's only
    assert client.requests[0]["messages"][-1]["content"].startswith("Check this user's input")
    response = Swarm(client).run(moderated, user("refund 50"))
    assert response.messages[-1]["content"] == "Done: refunded 50"
    assert set(response.usage_by_agent) == {"Moderator", "Moderated"}


def test_a_guardrail_agent_without_a_verdict_trips(work_dir):
    vague = Agent(name="Vague")
    agent = Agent(name="Guarded", input_guardrails=[vague])
    with pytest.raises(GuardrailTripped, match="answered without a verdict"):
        Swarm(ScriptedClient(["I am not sure."])).run(agent, user("hello"))


def test_what_a_guardrail_may_return():
    assert result_of(None, "g") == GuardrailResult(False)
    assert result_of(False, "g") == GuardrailResult(False)
    assert result_of("", "g") == GuardrailResult(False)
    assert result_of(True, "g") == GuardrailResult(True, "guardrail g tripped")
    assert result_of("no", "g") == GuardrailResult(True, "no")
    with pytest.raises(DurableSwarmError, match="Guardrail 'g' returned int 3"):
        result_of(3, "g")


def test_guardrails_are_checked_when_the_agent_is_made():
    def check(text: str) -> None:
        return None

    agent = Agent(input_guardrails=[check], output_guardrails=guardrail(check))
    assert agent.input_guardrails == [Guardrail(check)]
    assert agent.output_guardrails[0].name == "check"
    with pytest.raises(TypeError, match="A guardrail is a function or an Agent"):
        Agent(tool_guardrails=[42])
    with pytest.raises(ValueError, match='"before" or "after"'):
        guardrail(when="during")(check)  # type: ignore[arg-type]


def test_a_guardrail_that_raises_fails_the_run(work_dir):
    def broken(text: str) -> None:
        raise RuntimeError("guardrail service down")

    with pytest.raises(RuntimeError, match="guardrail service down"):
        Swarm(ScriptedClient(reply)).run(Agent(input_guardrails=[broken]), user("hi"))


def test_a_guardrail_gets_what_it_names_as_copies(work_dir):
    seen = {}

    def nosy(value, **extras):
        seen.update(value=value, **extras)
        extras["context_variables"]["tampered"] = True  # a copy: the run's context is untouched
        extras["messages"].clear()

    def quiet():
        seen["quiet"] = True

    agent = Agent(name="Nosy", functions=[], input_guardrails=[nosy, quiet])
    response = Swarm(ScriptedClient(["hi"])).run(
        agent, user("hello"), context_variables={"tier": "gold"}
    )
    assert seen["value"] == "hello" and seen["agent"] is agent and seen["quiet"]
    assert seen["context_variables"] == {"tier": "gold", "tampered": True}
    assert (seen["tool"], seen["arguments"]) == (None, None)
    assert response.context_variables == {"tier": "gold"}
    assert response.messages[-1]["content"] == "hi"


def test_an_output_guardrail_checks_the_typed_output() -> None:
    # An agent with an output_type answers through final_answer: the output guardrail gets the
    # validated value (here a pydantic model), not the text of a message.
    from pydantic import BaseModel

    from durable_swarm.testing import ToolCall, calls

    class Refund(BaseModel):
        amount: int

    seen: list[object] = []

    @guardrail
    def at_most_100(refund: Refund) -> str | None:
        seen.append(refund)
        return f"refund of {refund.amount} is over 100" if refund.amount > 100 else None

    agent = Agent(name="TypedRefunder", output_type=Refund, output_guardrails=[at_most_100])
    small = ScriptedClient([calls(ToolCall("final_answer", {"amount": 40}))])
    assert Swarm(small).run(agent, user("refund 40")).output == Refund(amount=40)
    large = ScriptedClient([calls(ToolCall("final_answer", {"amount": 400}))])
    with pytest.raises(GuardrailTripped) as caught:
        Swarm(large).run(agent, user("refund 400"))
    assert caught.value.reason == "refund of 400 is over 100"
    assert seen == [Refund(amount=40), Refund(amount=400)]
