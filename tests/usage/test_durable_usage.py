"""Usage, cost and budgets of durable runs, on SQLite and PostgreSQL, against the fake server:
the run's totals equal what the server sent (streamed and not), sub-agents roll up into their
parent, each budget kind stops the run before the request that would go past it (counted at the
server), and `resume(run_id, budget=...)` with a higher budget finishes it."""

from __future__ import annotations

from typing import Any

import pytest

from durable_swarm import Agent, Budget, BudgetExceededError, DurableSwarmError
from durable_swarm.testing import FakeOpenAIServer, ToolCall, calls, text
from durable_swarm.usage import Usage, call_cost

from .test_usage import USAGES, USER, expected_total, look, script

CALL = USAGES[1]  # 150 in + 11 out = 161 tokens per call in the budget tests
PRICES = {"priced-model": {"input": 1000.0, "output": 1000.0}}  # 0.161 USD per call


def looping(turns: int) -> list[Any]:
    """`turns` tool-calling answers, then a final one, each reporting `CALL`'s usage."""
    return [calls(ToolCall("look", {"topic": str(i)}), usage=CALL) for i in range(turns)] + [
        text("finished", usage=CALL)
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_run_usage_equals_what_the_server_sent(durable_swarm_factory, run_id, stream) -> None:
    agent = Agent(name="Looker", model="no-such-model-xyz", functions=[look])
    with FakeOpenAIServer(script()) as server:
        swarm = durable_swarm_factory(server.client())
        result = swarm.run(agent, USER, stream=stream, run_id=run_id)
        response = list(result)[-1]["response"] if stream else result
        assert server.request_count == 3
    assert response.usage == expected_total()
    info = swarm.get_run(run_id)
    assert info.usage == expected_total() and info.cost_usd is None
    assert info.usage_by_agent == {"Looker": expected_total()}
    models = [s.output["model"] for s in info.steps if s.kind == "model"]
    assert models == ["no-such-model-xyz"] * 3  # the model name requested, per call
    listed = next(r for r in swarm.list_runs(limit=None) if r.run_id == run_id)
    assert listed.usage == expected_total()


def test_streamed_run_against_a_server_refusing_stream_options(durable_swarm_factory, run_id):
    agent = Agent(name="Looker", model="gpt-4o", functions=[look])
    with FakeOpenAIServer(script(), accept_stream_options=False) as server:
        swarm = durable_swarm_factory(server.client())
        events = list(swarm.run(agent, USER, stream=True, run_id=run_id))
        assert events[-1]["response"].messages[-1]["content"] == "done"
        assert server.request_count == 4  # refused once, then asked without the option
    info = swarm.get_run(run_id)
    assert info.usage == Usage(model_calls=3, cost_usd=None)  # no usage reported: cost unknown


def test_cost_of_a_known_model_a_user_priced_one_and_an_unknown_one(
    durable_swarm_factory, run_id
) -> None:
    replies = [text("a", usage=CALL)]
    costs = {}
    for model in ("gpt-4o", "priced-model", "no-such-model-xyz"):
        with FakeOpenAIServer(replies) as server:
            swarm = durable_swarm_factory(server.client(), prices=PRICES)
            swarm.run(Agent(name="Priced", model=model), USER, run_id=f"{run_id}-{model}")
        costs[model] = swarm.get_run(f"{run_id}-{model}").cost_usd
    assert costs["gpt-4o"] == pytest.approx(call_cost("gpt-4o", CALL)) and costs["gpt-4o"] > 0
    assert costs["priced-model"] == pytest.approx(0.161)
    assert costs["no-such-model-xyz"] is None


def test_sub_agent_usage_rolls_up_into_its_parent(durable_swarm_factory, run_id) -> None:
    helper = Agent(name="UsageHelper", model="priced-model")
    lead = Agent(name="UsageLead", model="priced-model", functions=[helper.as_tool()])
    replies = [
        calls(ToolCall("delegate_to_usagehelper", {"task": "t"}), usage=USAGES[0]),
        text("sub answer", usage=USAGES[2]),
        text("final", usage=USAGES[1]),
    ]
    with FakeOpenAIServer(replies) as server:
        swarm = durable_swarm_factory(server.client(), prices=PRICES)
        response = swarm.run(lead, USER, run_id=run_id)
    parent = swarm.get_run(run_id)
    (child_id,) = parent.children
    child = swarm.get_run(child_id)
    assert child.usage == Usage.of_call(USAGES[2], call_cost("priced-model", USAGES[2], PRICES))
    assert parent.usage_by_agent["UsageHelper"] == child.usage
    assert parent.usage_by_agent["UsageLead"].model_calls == 2
    assert parent.usage is not None and child.usage is not None
    assert parent.usage.total_tokens == 127 + 120 + 161
    assert parent.usage.model_calls == 3
    assert parent.cost_usd == pytest.approx((127 + 120 + 161) * 1000 / 1e6)
    assert response.usage == parent.usage


BUDGETS = {
    "max_model_calls": Budget(max_model_calls=2),
    "max_total_tokens": Budget(max_total_tokens=250),  # 161 after one call, 322 after two
    "max_cost_usd": Budget(max_cost_usd=0.3),  # 0.161 after one call, 0.322 after two
}
REACHED = {"max_model_calls": 2, "max_total_tokens": 322, "max_cost_usd": 0.322}


@pytest.mark.parametrize("limit", list(BUDGETS))
def test_each_budget_stops_the_run_before_its_next_request_and_resume_finishes_it(
    durable_swarm_factory, run_id, limit
) -> None:
    agent = Agent(name="Spender", model="priced-model", functions=[look])
    with FakeOpenAIServer(looping(3)) as server:
        swarm = durable_swarm_factory(server.client(), prices=PRICES)
        with pytest.raises(BudgetExceededError) as caught:
            swarm.run(agent, USER, run_id=run_id, budget=BUDGETS[limit])
        assert server.request_count == 2  # the third request was never sent
        error = caught.value
        assert error.limit == limit and error.reached == pytest.approx(REACHED[limit])
        info = swarm.get_run(run_id)
        assert info.status == "failed" and limit in (info.error or "")
        assert info.usage is not None and info.usage.model_calls == 2

        # resuming without a higher budget stops again, sending nothing
        with pytest.raises(BudgetExceededError):
            swarm.resume(run_id).result()
        assert server.request_count == 2

        response = swarm.resume(run_id, budget=Budget(max_model_calls=10)).result()
        assert response.messages[-1]["content"] == "finished"
        assert server.request_count == 4
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert info.usage == Usage(600, 44, 644, None, 4, pytest.approx(0.644))


def test_a_swarm_default_budget_applies_and_a_run_budget_overrides_it(
    durable_swarm_factory, run_id
) -> None:
    agent = Agent(name="Spender", model="priced-model", functions=[look])
    with FakeOpenAIServer(looping(3)) as server:
        swarm = durable_swarm_factory(server.client(), budget=Budget(max_model_calls=1))
        with pytest.raises(BudgetExceededError, match="max_model_calls=1"):
            swarm.run(agent, USER, run_id=run_id)
        assert server.request_count == 1
        server.set_script(looping(1))
        response = swarm.run(agent, USER, run_id=f"{run_id}-b", budget=Budget(max_model_calls=5))
        assert response.usage.model_calls == 2


def test_a_cost_limit_with_an_unpriced_model_sends_nothing(durable_swarm_factory, run_id) -> None:
    agent = Agent(name="Unpriced", model="no-such-model-xyz")
    with FakeOpenAIServer(looping(0)) as server:
        swarm = durable_swarm_factory(server.client())
        with pytest.raises(BudgetExceededError, match="price of model 'no-such-model-xyz'"):
            swarm.run(agent, USER, run_id=run_id, budget=Budget(max_cost_usd=1.0))
        assert server.request_count == 0
        # resume without a cost limit: it goes on
        response = swarm.resume(run_id, budget=Budget(max_model_calls=3)).result()
        assert response.messages[-1]["content"] == "finished"


def test_a_sub_agent_draws_on_its_parents_budget(durable_swarm_factory, run_id) -> None:
    helper = Agent(name="BudgetHelper", model="priced-model", functions=[look])
    lead = Agent(name="BudgetLead", model="priced-model", functions=[helper.as_tool()])
    replies = [
        calls(ToolCall("delegate_to_budgethelper", {"task": "t"}), usage=CALL),
        *looping(5),  # the helper would loop on; only one call is left for it
    ]
    with FakeOpenAIServer(replies) as server:
        swarm = durable_swarm_factory(server.client())
        with pytest.raises(BudgetExceededError):
            swarm.run(lead, USER, run_id=run_id, budget=Budget(max_model_calls=2))
        assert server.request_count == 2  # the lead's call and one of the helper's
    (child_id,) = swarm.get_run(run_id).children
    child = swarm.get_run(child_id)
    assert child.status == "failed" and "max_model_calls=1" in (child.error or "")


def test_a_budget_that_is_not_a_budget_is_refused(durable_swarm_factory, run_id) -> None:
    swarm = durable_swarm_factory(object())
    with pytest.raises(DurableSwarmError, match=r"must be a durable_swarm\.Budget"):
        swarm.run(Agent(name="X"), USER, run_id=run_id, budget={"max_model_calls": 1})
    with pytest.raises(DurableSwarmError, match=r"must be a durable_swarm\.Budget"):
        swarm.start(Agent(name="X"), USER, run_id=run_id, budget=3)
    assert [r for r in swarm.list_runs(limit=None) if r.run_id == run_id] == []
