"""Structured output in durable runs, on SQLite and PostgreSQL: the typed answer stored as JSON
and read back as its type (in this process, and in another one through the agent it defines; as
JSON through the thin client), each validation retry a model step of its own, a spent retry
budget failing the run with an error naming it, handoffs and streaming; and a real SIGKILL
during the retry, after which the recovered run repeats no finished model call."""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import TypedDict

from _support import procs
from durable_swarm import Agent, DurableClient, OutputValidationError
from durable_swarm.testing import FakeOpenAIServer, Fault, Reply, ToolCall, calls, text

from ._structured_child import ORDERS, USER, Order

ORDER = {"order_id": 7, "status": "shipped", "items": ["lamp"]}
INVALID = {"order_id": "seven", "status": "shipped"}


def final(arguments: dict[str, Any]) -> Reply:
    return calls(ToolCall("final_answer", arguments))


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Movie(TypedDict):
    title: str
    year: int


def model_steps(swarm: Any, run_id: str) -> list[Any]:
    return [s for s in swarm.get_run(run_id).steps if s.kind == "model"]


def test_the_typed_answer_is_stored_as_json_and_read_back_as_its_type(
    durable_swarm_factory, run_id, database_url
) -> None:
    with FakeOpenAIServer([final(ORDER)]) as server:
        swarm = durable_swarm_factory(server.client())
        response = swarm.run(ORDERS, USER, run_id=run_id)

    assert response.output == Order(**ORDER)
    assert isinstance(response.output, Order)
    info = swarm.get_run(run_id)
    assert info.output == ORDER  # the log keeps JSON data
    assert swarm.handle(run_id).result().output == Order(**ORDER)
    with DurableClient(database_url) as client:  # no agent code: the stored JSON
        assert client.handle(run_id).result().output == ORDER
        assert client.get_run(run_id).output == ORDER


def test_runs_show_prints_the_stored_output(durable_swarm_factory, run_id, database_url, capsys):
    from durable_swarm.cli import main

    with FakeOpenAIServer([final(ORDER)]) as server:
        durable_swarm_factory(server.client()).run(ORDERS, USER, run_id=run_id)
    capsys.readouterr()

    assert main(["--database-url", database_url, "runs", "show", run_id, "--no-color"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[shown.index("Output") + 1] == f"  {json.dumps(ORDER)}"
    assert main(["--database-url", database_url, "runs", "show", run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == ORDER


@pytest.mark.parametrize(
    ("output_type", "sent", "expected"),
    [
        (Point, {"x": 1.5, "y": -2}, Point(1.5, -2.0)),
        (Movie, {"title": "Heat", "year": 1995}, {"title": "Heat", "year": 1995}),
        (int, {"response": 42}, 42),
        (list[str], {"response": ["a", "b"]}, ["a", "b"]),
    ],
    ids=["dataclass", "typeddict", "int", "list-of-str"],
)
def test_json_schema_mode_over_http_for_each_kind_of_type(
    durable_swarm_factory, run_id, output_type, sent, expected
) -> None:
    name = f"Durable{getattr(output_type, '__name__', 'List')}"
    agent = Agent(name=name, output_type=output_type, output_mode="json_schema")
    with FakeOpenAIServer([text(json.dumps(sent))]) as server:
        swarm = durable_swarm_factory(server.client())
        response = swarm.run(agent, USER, run_id=run_id)
        [body] = server.requests

    assert response.output == expected
    assert type(response.output) is type(expected)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    stored = swarm.get_run(run_id).output
    assert stored == sent.get("response", sent)


def test_each_retry_is_a_model_step_and_the_error_sent_back_is_in_the_messages(
    durable_swarm_factory, run_id
) -> None:
    with FakeOpenAIServer([final(INVALID), final(ORDER)]) as server:
        swarm = durable_swarm_factory(server.client())
        response = swarm.run(ORDERS, USER, run_id=run_id)
        retry_body = server.requests[1]

    assert response.output == Order(**ORDER)
    assert len(model_steps(swarm, run_id)) == 2
    sent_back = retry_body["messages"][-1]
    assert sent_back["role"] == "tool"
    assert sent_back["content"].startswith("Your answer is not a valid Order:\n- order_id: ")
    assert response.messages[1] == sent_back  # the run's messages hold it too
    assert swarm.get_run(run_id).new_messages == response.messages


def test_spent_retries_fail_the_run_with_an_error_naming_agent_run_and_problem(
    durable_swarm_factory, run_id
) -> None:
    agent = Agent(name="StrictOrders", output_type=Order, output_retries=1)
    with FakeOpenAIServer([final(INVALID), final(INVALID), final(ORDER)]) as server:
        swarm = durable_swarm_factory(server.client())
        with pytest.raises(OutputValidationError) as caught:
            swarm.run(agent, USER, run_id=run_id)
        assert server.request_count == 2

    error = caught.value
    assert error.run_id == run_id and error.agent == "StrictOrders" and error.answers == 2
    assert str(error).startswith(
        f"Agent 'StrictOrders' in run {run_id!r} gave no valid Order in 2 answers "
        "(output_retries=1); the last one failed with:\n- order_id: Input should be a valid "
        'integer, unable to parse string as an integer (got "seven")\n- items: Field required\n'
    )
    info = swarm.get_run(run_id)
    assert info.status == "failed"
    assert "gave no valid Order" in (info.error or "")


def test_a_handoff_then_the_typed_answer(durable_swarm_factory, run_id) -> None:
    def transfer_to_orders() -> Agent:
        """Hand over to the orders agent."""
        return ORDERS

    triage = Agent(name="StructuredTriage", functions=[transfer_to_orders])
    with FakeOpenAIServer([calls(ToolCall("transfer_to_orders")), final(ORDER)]) as server:
        swarm = durable_swarm_factory(server.client())
        response = swarm.run(triage, USER, run_id=run_id)
        first, second = server.requests

    assert response.agent is ORDERS
    assert response.output == Order(**ORDER)
    assert first["tool_choice"] is None
    assert [t["function"]["name"] for t in second["tools"]] == ["final_answer"]
    assert [s.name for s in model_steps(swarm, run_id)] == ["StructuredTriage", "StructuredOrders"]


async def test_async_runs_and_started_runs_give_the_typed_output(
    durable_swarm_factory, run_id
) -> None:
    with FakeOpenAIServer([final(ORDER)] * 3) as server:
        swarm = durable_swarm_factory(server.async_client())
        awaited = await swarm.arun(ORDERS, USER, run_id=run_id)
        handle = await swarm.astart(ORDERS, USER, run_id=run_id + "-started")
        started = await handle.aresult()

    assert awaited.output == started.output == Order(**ORDER)


def test_a_streamed_run_ends_with_the_typed_output(durable_swarm_factory, run_id) -> None:
    with FakeOpenAIServer([final(INVALID), final(ORDER)]) as server:
        swarm = durable_swarm_factory(server.client())
        events = list(swarm.run(ORDERS, USER, stream=True, run_id=run_id))

    assert events.count({"delim": "start"}) == 2
    assert events[-1]["response"].output == Order(**ORDER)


def test_a_typed_sub_agent_answers_its_parent_with_the_json_of_its_output(
    durable_swarm_factory, run_id
) -> None:
    parent = Agent(name="StructuredDesk", functions=[ORDERS.as_tool()])

    def model(messages: list[dict[str, Any]], tools: Any) -> Reply:
        names = [t["function"]["name"] for t in tools or []]
        if "final_answer" in names:
            return final(ORDER)
        if messages[-1]["role"] == "tool":
            return text(f"The sub-agent said {messages[-1]['content']}")
        return calls(ToolCall("delegate_to_structuredorders", {"task": "order 7"}))

    with FakeOpenAIServer(model) as server:
        swarm = durable_swarm_factory(server.client())
        response = swarm.run(parent, USER, run_id=run_id)

    assert response.output is None
    assert response.messages[-1]["content"] == f"The sub-agent said {json.dumps(ORDER)}"
    [child] = swarm.get_run(run_id).children
    assert swarm.get_run(child).output == ORDER
    assert swarm.get_run(run_id).messages[-2]["content"] == json.dumps(ORDER)  # read from the log


class RetryHeld:
    """The fake server's script: an invalid answer first; the retry (after the error sent back)
    is held at the server the first time it arrives, so the test can kill the caller then."""

    def __init__(self) -> None:
        self.arrivals: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Reply | Fault:
        stage = "retry" if messages[-1]["role"] == "tool" else "first"
        with self.lock:
            self.arrivals[stage] += 1
            held = stage == "retry" and self.arrivals[stage] == 1
        if stage == "first":
            return final(INVALID)
        return Fault.delay(300, final(ORDER)) if held else final(ORDER)


@pytest.mark.crash
def test_a_crash_during_the_retry_repeats_no_finished_model_call(
    children_database_url, tmp_path: Path
) -> None:
    model = RetryHeld()
    run_id = f"structured-crash-{uuid.uuid4().hex[:10]}"
    base = {
        "database_url": children_database_url,
        "run_id": run_id,
        "executor_id": f"structured-{uuid.uuid4().hex[:8]}",
    }
    with (
        FakeOpenAIServer(model) as server,
        procs.script_processes(tmp_path, procs.CHILD_ENV) as start,
    ):
        config = {**base, "base_url": server.base_url}
        first = start(
            "first", "durable._structured_child", {**config, "action": "run", "result": "-"}
        )
        procs.wait_for(
            lambda: model.arrivals["retry"] == 1, "the retry request", processes=(first,)
        )
        first.kill()  # SIGKILL while the retry is in flight: the invalid answer is recorded
        assert first.poll() == -9

        result_path = tmp_path / "recovered.json"
        second = start(
            "second",
            "durable._structured_child",
            {**config, "action": "recover", "result": str(result_path)},
        )
        procs.wait_for(result_path.exists, "the recovered run", processes=(second,))
        recovered = json.loads(result_path.read_text())

        read_path = tmp_path / "read.json"
        other = {**config, "executor_id": f"reader-{uuid.uuid4().hex[:8]}"}
        reader = start(
            "reader",
            "durable._structured_child",
            {**other, "action": "read", "result": str(read_path)},
        )
        procs.wait_for(read_path.exists, "the reading process", processes=(reader,))
        read = json.loads(read_path.read_text())
        bodies = server.requests

    # the invalid answer was asked once; the retry twice (the killed call, then once more)
    assert model.arrivals == {"first": 1, "retry": 2}
    assert server.request_count == 3
    assert bodies[1]["messages"] == bodies[2]["messages"]  # the same error sent back on replay
    assert bodies[2]["messages"][-1]["content"].startswith("Your answer is not a valid Order:")
    for seen in (recovered, read):  # the recovering process, and another one reading the run
        assert seen["status"] == "succeeded"
        assert seen["is_order"] is True
        assert seen["output_type"].rpartition(".")[2] == "Order"
        assert seen["output"] == ORDER
        assert seen["stored_output"] == ORDER
        assert len(seen["model_steps"]) == 2
        assert [m["role"] for m in seen["messages"]] == ["assistant", "tool", "assistant", "tool"]
