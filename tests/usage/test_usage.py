"""Token usage, prices and budgets in memory: `Usage`, `Budget`, `call_cost`, the in-memory
`Swarm`'s `Response.usage` (streamed and not, with a server that refuses `stream_options`), and
`ChatResult.cost`. The model is the fake server, over real HTTP."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from durable_swarm import (
    Agent,
    Budget,
    BudgetExceededError,
    DurableSwarmError,
    Swarm,
    initiate_swarm_chat,
)
from durable_swarm.testing import FakeOpenAIServer, ToolCall, calls, text
from durable_swarm.usage import Tally, Usage, call_cost, check_prices

USER = [{"role": "user", "content": "hi"}]
# Each answer reports its own usage, so totals can be checked exactly.
USAGES = [
    {"prompt_tokens": 120, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 100}},
    {"prompt_tokens": 150, "completion_tokens": 11},
    {"prompt_tokens": 90, "completion_tokens": 30},
]


def look(topic: str) -> str:
    """Look something up."""
    return f"found {topic}"


def script() -> list[Any]:
    return [
        calls(ToolCall("look", {"topic": "a"}), usage=USAGES[0]),
        calls(ToolCall("look", {"topic": "b"}), usage=USAGES[1]),
        text("done", usage=USAGES[2]),
    ]


def expected_total() -> Usage:
    return Usage(
        input_tokens=360,
        output_tokens=48,
        total_tokens=408,
        cached_tokens=100,
        model_calls=3,
        cost_usd=None,
    )


def test_usage_of_a_call_reads_openai_names() -> None:
    usage = Usage.of_call(USAGES[0], 0.5)
    assert usage == Usage(120, 7, 127, 100, 1, 0.5)
    assert Usage.of_call(None, None) == Usage(model_calls=1, cost_usd=None)


def test_usage_adds_up_and_an_unknown_cost_stays_unknown() -> None:
    total = Usage.of_call(USAGES[0], 0.25) + Usage.of_call(USAGES[1], 0.5)
    assert (total.total_tokens, total.model_calls, total.cost_usd) == (288, 2, 0.75)
    assert total.cached_tokens == 100
    assert (total + Usage.of_call(USAGES[2], None)).cost_usd is None
    assert Usage.from_json(total.to_json()) == total


def test_usage_as_stored_names_every_field() -> None:
    usage = Usage(1, 2, 3, 4, 5, 0.5)
    assert usage.to_json() == dataclasses.asdict(usage)
    assert Usage.from_json(usage.to_json()) == usage


def test_tally_keeps_each_agent_and_merges_sub_runs() -> None:
    parent, child = Tally(), Tally()
    parent.add("Lead", Usage.of_call(USAGES[0], 1.0))
    child.add("Helper", Usage.of_call(USAGES[1], 2.0))
    parent.merge(child)
    assert parent.total.cost_usd == 3.0 and parent.total.model_calls == 2
    assert set(parent.by_agent) == {"Lead", "Helper"}
    assert Tally.from_json(parent.to_json()) == parent


def test_cost_of_a_known_model_comes_from_genai_prices() -> None:
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    reported = {"prompt_tokens": 1000, "completion_tokens": 100}
    expected = calc_price(PriceUsage(input_tokens=1000, output_tokens=100), model_ref="gpt-4o")
    assert call_cost("gpt-4o", reported) == pytest.approx(float(expected.total_price))
    assert call_cost("gpt-4o", reported) > 0


def test_a_model_genai_prices_does_not_know_is_asked_about_again_only_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A local or custom model is never in the table: every call of it asking again would cost
    # more than the call's own bookkeeping. The table can be updated while the process runs,
    # so a miss is remembered for `_UNPRICED_SECONDS` only.
    import genai_prices

    from durable_swarm import usage

    asked: list[str] = []
    known: dict[str, float] = {}

    def calc_price(price_usage: Any, model_ref: str) -> Any:
        asked.append(model_ref)
        if model_ref not in known:
            raise LookupError(model_ref)
        return dataclasses.make_dataclass("Price", ["total_price"])(known[model_ref])

    monkeypatch.setattr(genai_prices, "calc_price", calc_price)
    monkeypatch.setattr(usage, "_unpriced", {})
    assert call_cost("local-model", USAGES[1]) is None
    assert call_cost("local-model", USAGES[1]) is None
    assert asked == ["local-model"]
    known["local-model"] = 0.5  # the table was updated
    monkeypatch.setattr(usage, "_UNPRICED_SECONDS", 0.0)
    assert call_cost("local-model", USAGES[1]) == 0.5
    assert call_cost("local-model", USAGES[1]) == 0.5
    assert asked == ["local-model"] * 3 and usage._unpriced == {}


def test_user_prices_take_precedence_and_price_cached_input() -> None:
    prices = check_prices({"gpt-4o": {"input": 1.0, "output": 2.0, "cached_input": 0.5}})
    # 20 uncached input at 1.0, 100 cached at 0.5, 7 output at 2.0 (USD per million)
    assert call_cost("gpt-4o", USAGES[0], prices) == pytest.approx((20 + 50 + 14) / 1e6)
    assert call_cost("my-model", USAGES[1], {"my-model": {"input": 0.2, "output": 0.6}}) == (
        pytest.approx((150 * 0.2 + 11 * 0.6) / 1e6)
    )


def test_unknown_model_or_missing_usage_has_no_cost() -> None:
    assert call_cost("no-such-model-xyz", USAGES[1]) is None
    assert call_cost("gpt-4o", None) is None


@pytest.mark.parametrize(
    "prices",
    [
        {"m": {"input": 1.0}},
        {"m": {"input": 1.0, "output": -1}},
        {"m": {"input": 1.0, "output": "2"}},
        {"m": {"input": 1.0, "output": 2.0, "discount": 1}},
        {"m": 3.0},
    ],
)
def test_bad_prices_are_refused_with_what_to_give(prices: Any) -> None:
    with pytest.raises(DurableSwarmError, match="USD per million tokens"):
        Swarm(client=object(), prices=prices)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_model_calls": -1},
        {"max_model_calls": 1.5},
        {"max_total_tokens": "100"},
        {"max_cost_usd": float("inf")},
        {"max_cost_usd": True},
    ],
)
def test_bad_budgets_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(DurableSwarmError, match="Budget max_"):
        Budget(**kwargs)


def test_budget_names_the_first_limit_reached() -> None:
    budget = Budget(max_model_calls=3, max_total_tokens=200, max_cost_usd=1.0)
    used = Usage.of_call(USAGES[1], 0.1)
    assert budget.exceeded(used) is None
    assert budget.exceeded(used + Usage.of_call(USAGES[2], 0.1)) == ("max_total_tokens", 281)
    left = budget.remaining(used)
    assert (left.max_model_calls, left.max_total_tokens) == (2, 39)
    assert left.max_cost_usd == pytest.approx(0.9)
    with pytest.raises(BudgetExceededError) as caught:
        Budget(max_model_calls=1).check(
            used, model="gpt-4o", prices=None, run_id="r-1", agent="Lead"
        )
    error = caught.value
    assert (error.limit, error.allowed, error.reached) == ("max_model_calls", 1, 1)
    assert "'r-1'" in str(error) and "'Lead'" in str(error) and "higher budget" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.limit, copy.reached, str(copy)) == (error.limit, error.reached, str(error))


def test_a_cost_limit_refuses_a_model_without_a_price() -> None:
    with pytest.raises(BudgetExceededError, match="price of model 'no-such-model-xyz'"):
        Budget(max_cost_usd=1.0).check(
            Usage(), model="no-such-model-xyz", prices=None, run_id=None, agent="A"
        )
    Budget(max_cost_usd=1.0).check(
        Usage(), model="mine", prices={"mine": {"input": 1, "output": 1}}, run_id=None, agent="A"
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("accept_options", [True, False], ids=["options", "refused"])
def test_in_memory_response_usage_equals_what_the_server_sent(
    stream: bool, accept_options: bool
) -> None:
    with FakeOpenAIServer(script(), accept_stream_options=accept_options) as server:
        swarm = Swarm(server.client())
        agent = Agent(name="Looker", model="no-such-model-xyz", functions=[look])
        result = swarm.run(agent, USER, stream=stream)
        response = list(result)[-1]["response"] if stream else result
        assert response.messages[-1]["content"] == "done"
        refused = stream and not accept_options
        # a server refusing stream_options is asked once with them, then never again
        assert server.request_count == 3 + refused
        if stream:
            assert [("stream_options" in r) for r in server.requests] == (
                [True, False, False, False] if refused else [True] * 3
            )
    if refused:  # such a server reports no usage for streams: calls counted, tokens unknown
        assert response.usage == Usage(model_calls=3, cost_usd=None)
    else:
        assert response.usage == expected_total()
        assert response.usage_by_agent == {"Looker": expected_total()}


def test_in_memory_cost_with_user_prices_and_sub_agents() -> None:
    helper = Agent(name="Helper", model="helper-model")
    lead = Agent(name="Lead", model="lead-model", functions=[helper.as_tool()])
    replies = [
        calls(ToolCall("delegate_to_helper", {"task": "t"}), usage=USAGES[1]),
        text("sub answer", usage=USAGES[2]),
        text("final", usage=USAGES[1]),
    ]
    prices = {
        "lead-model": {"input": 1.0, "output": 1.0},
        "helper-model": {"input": 2, "output": 2},
    }
    with FakeOpenAIServer(replies) as server:
        response = Swarm(server.client(), prices=prices).run(lead, USER)
    assert response.usage_by_agent["Helper"].total_tokens == 120
    assert response.usage_by_agent["Helper"].cost_usd == pytest.approx(240 / 1e6)
    assert response.usage_by_agent["Lead"].cost_usd == pytest.approx(2 * 161 / 1e6)
    assert response.usage.model_calls == 3
    assert response.usage.cost_usd == pytest.approx((240 + 322) / 1e6)


def test_chat_result_cost_is_filled() -> None:
    agent = Agent(name="Solo", model="gpt-4o")
    with FakeOpenAIServer([text("hello", usage=USAGES[1])]) as server:
        result, _, _ = initiate_swarm_chat(agent, [agent], "hi", swarm=Swarm(server.client()))
    cost = result.cost["usage_including_cached_inference"]["total_cost"]
    assert cost == pytest.approx(call_cost("gpt-4o", USAGES[1]))
    assert result.cost["usage"]["total_tokens"] == 161


def test_cli_budget_options() -> None:
    from durable_swarm._cli._budget import budget_of
    from durable_swarm.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["runs", "resume", "r1", "--max-model-calls", "5"])
    assert budget_of(args) == Budget(max_model_calls=5)
    args = parser.parse_args(
        ["worker", "app:swarm", "--max-total-tokens", "900", "--max-cost-usd", "0.25"]
    )
    assert budget_of(args) == Budget(max_total_tokens=900, max_cost_usd=0.25)
    assert budget_of(parser.parse_args(["runs", "resume", "r1"])) is None
    with pytest.raises(SystemExit):
        parser.parse_args(["chat", "app:agent", "--max-model-calls", "-1"])
