"""Structured output in memory (`Agent(output_type=...)`): the shape asked of the model (a
`final_answer` tool, or `response_format` over real HTTP at the fake server), validation, the
error sent back and the retries, the error once they are spent, handoffs, async and streaming;
and Swarm's requests unchanged without an output type."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from durable_swarm import Agent, OutputValidationError, Swarm
from durable_swarm.errors import DurableSwarmError
from durable_swarm.output import shape_of
from durable_swarm.testing import FakeOpenAIServer, ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "Where is order 7?"}]


class Order(BaseModel):
    order_id: int
    status: str
    items: list[str]


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Movie(TypedDict):
    title: str
    year: int


def final(arguments: dict[str, Any] | str) -> Any:
    return calls(ToolCall("final_answer", arguments))


ORDER = {"order_id": 7, "status": "shipped", "items": ["lamp"]}


def test_a_pydantic_model_is_asked_for_with_a_final_answer_tool_and_comes_back_typed() -> None:
    client = ScriptedClient([final(ORDER)])
    agent = Agent(name="Orders", output_type=Order)

    response = Swarm(client).run(agent, USER)

    assert response.output == Order(order_id=7, status="shipped", items=["lamp"])
    assert isinstance(response.output, Order)
    [request] = client.requests
    [tool] = request["tools"]
    assert tool["function"]["name"] == "final_answer"
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"]["required"] == ["order_id", "status", "items"]
    assert tool["function"]["parameters"]["additionalProperties"] is False
    assert request["tool_choice"] == "required"
    assert "response_format" not in request
    # the call is answered, so the conversation can go on from these messages
    assert response.messages[-1] == {
        "role": "tool",
        "tool_call_id": response.messages[0]["tool_calls"][0]["id"],
        "tool_name": "final_answer",
        "content": "Final answer accepted.",
    }


@pytest.mark.parametrize(
    ("output_type", "sent", "expected"),
    [
        (Order, ORDER, Order(**ORDER)),
        (Point, {"x": 1.5, "y": -2}, Point(1.5, -2.0)),
        (Movie, {"title": "Heat", "year": 1995}, {"title": "Heat", "year": 1995}),
        (int, {"response": 42}, 42),
        (list[str], {"response": ["a", "b"]}, ["a", "b"]),
    ],
    ids=["pydantic", "dataclass", "typeddict", "int", "list-of-str"],
)
def test_json_schema_mode_sends_response_format_over_http_and_validates_the_text(
    output_type: Any, sent: dict[str, Any], expected: Any
) -> None:
    agent = Agent(name="Typed", output_type=output_type, output_mode="json_schema")
    with FakeOpenAIServer([text(json.dumps(sent))]) as server:
        response = Swarm(server.client()).run(agent, USER)
        [body] = server.requests

    assert response.output == expected
    assert type(response.output) is type(expected)
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    schema = response_format["json_schema"]["schema"]
    assert schema["type"] == "object"
    assert response_format["json_schema"]["strict"] is True
    if output_type in (int, list[str]):  # a plain type is wrapped in an object
        assert schema["required"] == ["response"]
    assert body.get("tools") is None and body["tool_choice"] is None
    assert response.messages[-1]["content"] == json.dumps(sent)  # nothing appended


def test_a_schema_strict_mode_cannot_take_is_sent_without_strict() -> None:
    @dataclasses.dataclass
    class Loose:
        name: str
        tags: dict[str, int]  # a free-form object
        note: str = ""  # optional

    agent = Agent(name="Loose", output_type=Loose, output_mode="json_schema")
    client = ScriptedClient([text('{"name": "n", "tags": {"a": 1}}')])

    response = Swarm(client).run(agent, USER)

    assert response.output == Loose("n", {"a": 1})
    assert "strict" not in client.requests[0]["response_format"]["json_schema"]


def test_an_invalid_answer_is_sent_back_with_what_did_not_validate_then_the_valid_one_wins() -> (
    None
):
    agent = Agent(name="Orders", output_type=Order)
    script = [final({"order_id": "seven", "status": "shipped"}), final(ORDER)]
    with FakeOpenAIServer(script) as server:
        response = Swarm(server.client()).run(agent, USER)
        first, retry = server.requests

    assert response.output == Order(**ORDER)
    sent_back = retry["messages"][-1]
    assert sent_back["role"] == "tool"
    assert sent_back["tool_call_id"] == retry["messages"][-2]["tool_calls"][0]["id"]
    assert sent_back["content"] == (
        "Your answer is not a valid Order:\n"
        "- order_id: Input should be a valid integer, unable to parse string as an integer "
        '(got "seven")\n'
        "- items: Field required\n"
        "Please call final_answer again with arguments that fit its schema."
    )
    assert len(first["messages"]) == 2  # system + user
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant", "tool"]


def test_a_text_answer_in_json_schema_mode_is_sent_back_as_a_user_message() -> None:
    agent = Agent(name="Counter", output_type=int, output_mode="json_schema")
    with FakeOpenAIServer([text("about twelve"), text('{"response": 12}')]) as server:
        response = Swarm(server.client()).run(agent, USER)
        retry = server.requests[1]

    assert response.output == 12
    assert retry["messages"][-1]["role"] == "user"
    assert retry["messages"][-1]["content"].startswith("Your answer is not a valid int:\n- ")
    assert retry["messages"][-1]["content"].endswith(
        "Please reply with only the JSON value, as the response format says."
    )
    # the JSON the model wrapped in a fence is read too
    fenced = Swarm(ScriptedClient([text('```json\n{"response": 3}\n```')])).run(agent, USER)
    assert fenced.output == 3


def test_spent_retries_raise_an_error_naming_the_agent_type_and_what_did_not_validate() -> None:
    agent = Agent(name="Orders", output_type=Order, output_retries=1)
    client = ScriptedClient([final({"order_id": 1}), final({"order_id": 2, "status": "x"})])

    with pytest.raises(OutputValidationError) as caught:
        Swarm(client).run(agent, USER)

    assert len(client.requests) == 2  # the answer and one retry
    error = caught.value
    assert str(error) == (
        "Agent 'Orders' gave no valid Order in 2 answers (output_retries=1); the last one failed "
        "with:\n- items: Field required\nSay in the agent's instructions what to answer, raise "
        "its output_retries, or try the other output_mode ('tool' or 'json_schema'). Every "
        "answer is in the run's log."
    )
    assert (error.agent, error.output_type, error.answers, error.run_id) == (
        "Orders",
        "Order",
        2,
        None,
    )
    assert isinstance(error, DurableSwarmError)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_the_agent_that_answers_last_decides_the_output_type() -> None:
    orders = Agent(name="Orders", output_type=Order)

    def transfer_to_orders() -> Agent:
        """Hand the customer to the orders agent."""
        return orders

    triage = Agent(name="Triage", functions=[transfer_to_orders])
    client = ScriptedClient([calls(ToolCall("transfer_to_orders")), final(ORDER)])

    response = Swarm(client).run(triage, USER)

    assert response.agent is orders
    assert response.output == Order(**ORDER)
    triage_request, orders_request = client.requests
    assert [t["function"]["name"] for t in triage_request["tools"]] == ["transfer_to_orders"]
    assert triage_request["tool_choice"] is None  # the triage agent is not asked for a shape
    assert [t["function"]["name"] for t in orders_request["tools"]] == ["final_answer"]


def test_a_typed_agent_may_call_its_tools_before_it_answers() -> None:
    def look_up(order_id: int) -> str:
        """Look an order up."""
        return "shipped, 1 lamp"

    agent = Agent(name="Orders", output_type=Order, functions=[look_up])
    both = calls(ToolCall("final_answer", ORDER), ToolCall("look_up", {"order_id": 7}))
    client = ScriptedClient([calls(ToolCall("look_up", {"order_id": 7})), both])

    response = Swarm(client).run(agent, USER)

    assert response.output == Order(**ORDER)
    tools = [t["function"]["name"] for t in client.requests[0]["tools"]]
    assert tools == ["look_up", "final_answer"]
    assert [m.get("content") for m in response.messages[-2:]] == [
        "Final answer accepted.",
        "Not run: the final answer was given in the same message.",
    ]


def test_without_an_output_type_requests_and_responses_are_swarms() -> None:
    client = ScriptedClient([text("hi")])

    response = Swarm(client).run(Agent(), USER)

    assert response.output is None
    assert set(client.requests[0]) == {"model", "messages", "tools", "tool_choice", "stream"}


async def test_async_and_streamed_runs_give_the_typed_output() -> None:
    agent = Agent(name="Orders", output_type=Order)
    swarm = Swarm(ScriptedClient([final({"order_id": 7}), final(ORDER)]))

    response = await swarm.arun(agent, USER)
    assert response.output == Order(**ORDER)

    streamed = Swarm(ScriptedClient([final({"order_id": 7}), final(ORDER)]))
    events = list(streamed.run(agent, USER, stream=True))
    assert [e for e in events if "delim" in e].count({"delim": "start"}) == 2
    assert events[-1]["response"].output == Order(**ORDER)

    json_agent = Agent(name="Json", output_type=Point, output_mode="json_schema")
    async_stream = await Swarm(ScriptedClient([text('{"x": 1, "y": 2}')])).arun(
        json_agent, USER, stream=True
    )
    last = [event async for event in async_stream][-1]
    assert last["response"].output == Point(1.0, 2.0)


def test_a_type_pydantic_cannot_validate_is_refused_when_the_agent_is_made() -> None:
    with pytest.raises(DurableSwarmError, match=r"Agent 'Odd': output_type .* cannot be used"):
        Agent(name="Odd", output_type=object())


def test_a_tool_named_final_answer_clashes_with_the_output_tool() -> None:
    def final_answer() -> str:
        """Mine."""
        return "x"

    agent = Agent(name="Clash", output_type=int, functions=[final_answer])
    with pytest.raises(DurableSwarmError, match="has a tool named 'final_answer'"):
        Swarm(ScriptedClient([text("1")])).run(agent, USER)


def test_a_typed_sub_agent_answers_its_parent_with_the_json_of_its_output() -> None:
    orders = Agent(name="OrderLookup", output_type=Order)
    parent = Agent(name="Desk", functions=[orders.as_tool()])

    def model(messages: list[dict[str, Any]], tools: Any) -> Any:
        names = [t["function"]["name"] for t in tools or []]
        if "final_answer" in names:
            return final(ORDER)
        if messages[-1]["role"] == "tool":
            return text(f"The sub-agent said {messages[-1]['content']}")
        return calls(ToolCall("delegate_to_orderlookup", {"task": "order 7"}))

    response = Swarm(ScriptedClient(model)).run(parent, USER)

    assert response.output is None  # the desk has no output type
    assert response.messages[-1]["content"] == f"The sub-agent said {json.dumps(ORDER)}"


class Line(BaseModel):
    sku: str
    quantity: int


class Basket(BaseModel):
    lines: list[Line]
    note: str | None


class Described(BaseModel):
    line: Line = Field(description="the one line")  # a reference with a sibling


@pytest.mark.parametrize(
    ("output_type", "strict"),
    [(Basket, True), (Described, False), (dict[str, int], False), (int | None, True)],
    ids=["nested-models", "ref-with-description", "free-form-dict", "optional-int"],
)
def test_strict_is_sent_only_for_schemas_strict_mode_takes(output_type: Any, strict: bool) -> None:
    assert shape_of(output_type).strict is strict
    schema = shape_of(output_type).schema
    assert schema["type"] == "object"
    free_form = output_type == dict[str, int]
    assert schema["additionalProperties"] == ({"type": "integer"} if free_form else False)


def test_output_retries_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="output_retries"):
        Agent(name="Negative", output_type=int, output_retries=-1)
