"""What a run's log holds (one step per model call and per tool call), and idempotent run ids."""

from __future__ import annotations

import threading

import pytest

from durable_swarm.testing import ScriptedClient

from . import _scenarios
from ._scenarios import MODEL_AND_TOOL_STEPS, START_CONTEXT, USER_MESSAGES, executions

FINAL_CONTEXT = {"customer": "ada", "notes": ["hello"], "charged": 5}


def test_one_model_step_per_model_call_and_one_tool_step_per_tool_call(
    durable_swarm_factory, run_id, tool_dir
):
    client = ScriptedClient(_scenarios.reply)
    swarm = durable_swarm_factory(client)

    response = swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)
    info = swarm.get_run(run_id)

    effects = [s for s in info.steps if s.kind in ("model", "tool")]
    assert [(s.kind, s.name) for s in effects] == MODEL_AND_TOOL_STEPS
    assert client.call_count == sum(kind == "model" for kind, _ in MODEL_AND_TOOL_STEPS)
    assert [s.step for s in info.steps] == list(range(1, len(info.steps) + 1))
    assert {s.kind for s in info.steps} - {"model", "tool"} <= {"handoff", "dbos"}
    assert all(s.error is None for s in info.steps)
    # each model step holds the assistant message, each tool step its message and the changes
    # it made to the context (in-place changes included), so replay needs neither the model nor
    # the tool; a step that changed nothing stores no context, and no empty fields
    assert [s.output["message"] for s in effects] == response.messages
    note_step, charge_step = effects[1], effects[5]
    assert note_step.output["context_changes"] == {"set": {"notes": ["hello"]}}
    assert charge_step.output["context_changes"] == {"set": {"charged": 5}}
    assert set(effects[3].output) == {"message", "handoff"}  # transfer_to_sales


def test_run_info_after_a_run(durable_swarm_factory, run_id, tool_dir):
    swarm = durable_swarm_factory(ScriptedClient(_scenarios.reply))

    response = swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)
    info = swarm.get_run(run_id)

    assert info.run_id == run_id
    assert info.status == "succeeded"
    assert info.error is None
    assert info.agent == "Sales"
    assert response.agent is _scenarios.sales
    assert info.messages == USER_MESSAGES + response.messages
    assert info.new_messages == response.messages
    assert info.context_variables == response.context_variables == FINAL_CONTEXT
    assert run_id in [r.run_id for r in swarm.list_runs(status="succeeded")]
    assert swarm.handle(run_id).result().messages == response.messages


def test_same_run_id_one_after_the_other_executes_once(durable_swarm_factory, run_id, tool_dir):
    client = ScriptedClient(_scenarios.reply)
    swarm = durable_swarm_factory(client)

    first = swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)
    calls_after_first = client.call_count
    other_input = [{"role": "user", "content": "something else entirely"}]
    second = swarm.run(_scenarios.triage, other_input, {}, run_id=run_id)

    assert client.call_count == calls_after_first == 4
    assert second.messages == first.messages
    assert second.context_variables == first.context_variables
    assert second.agent is first.agent
    for tool in ("note", "transfer_to_sales", "charge"):
        assert len(executions(tool_dir, tool)) == 1, tool


def test_same_run_id_concurrently_executes_once(durable_swarm_factory, run_id, tool_dir):
    client = ScriptedClient(_scenarios.reply)
    swarm = durable_swarm_factory(client)
    barrier = threading.Barrier(3)
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)

    assert not errors, errors
    assert len(results) == 3
    responses = list(results.values())
    assert all(r.messages == responses[0].messages for r in responses)  # type: ignore[attr-defined]
    assert all(r.context_variables == FINAL_CONTEXT for r in responses)  # type: ignore[attr-defined]
    assert client.call_count == 4
    for tool in ("note", "transfer_to_sales", "charge"):
        assert len(executions(tool_dir, tool)) == 1, tool


async def test_same_run_id_concurrently_from_async_code_executes_once(
    durable_swarm_factory, run_id, tool_dir
):
    import asyncio

    client = ScriptedClient(_scenarios.reply)
    swarm = durable_swarm_factory(client)

    responses = await asyncio.gather(
        *(swarm.arun(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id) for _ in "ab")
    )

    assert responses[0].messages == responses[1].messages
    assert client.call_count == 4
    assert len(executions(tool_dir, "charge")) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_idempotency_key_is_run_id_and_step(durable_swarm_factory, run_id, tool_dir, stream):
    client = ScriptedClient(_scenarios.reply)
    swarm = durable_swarm_factory(client)

    result = swarm.run(
        _scenarios.triage, USER_MESSAGES, START_CONTEXT, stream=stream, run_id=run_id
    )
    if stream:
        list(result)

    charge_step = next(s for s in swarm.get_run(run_id).steps if s.name == "charge")
    assert executions(tool_dir, "charge") == [f"{run_id}:{charge_step.step}"]
    charge_schema = client.requests[-1]["tools"][0]["function"]
    assert charge_schema["name"] == "charge"
    assert list(charge_schema["parameters"]["properties"]) == ["amount"]  # the key is not shown
