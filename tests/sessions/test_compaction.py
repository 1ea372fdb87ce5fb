"""Compaction: past `compact_at` tokens, older turns are summarized (a recorded step) and the
model sees the summary plus the recent turns, checked in the request bodies the fake server got
over real HTTP; tool calls and their results are never split; the log keeps every original
message; a session keeps the compact form. In memory and durable (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from durable_swarm import Agent, DurableSwarmError, Swarm
from durable_swarm.compaction import (
    SUMMARY_PREFIX,
    Summarize,
    Window,
    compaction_budget,
    estimate_tokens,
)
from durable_swarm.testing import FakeOpenAIServer, ScriptedClient

from ._model import SUMMARY, SessionModel, clerk, is_summary_request

BUDGET = 350


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def earlier_turns() -> list[dict[str, Any]]:
    """A conversation with a tool call in it, about 700 tokens as estimated."""
    function = {"name": "lookup", "arguments": '{"item": "jam"}'}
    call = {"id": "call_1", "type": "function", "function": function}
    result = "jam is in stock " + "." * 600
    return [
        user("hello, I would like to order some things " + "x" * 300),
        {"role": "assistant", "content": "Sure, what would you like? " + "y" * 300},
        user("look up jam"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "tool_name": "lookup", "content": result},
        {"role": "assistant", "content": "We have jam. " + "z" * 300},
    ]


def assert_pairs_whole(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a tool call of an assistant message before it, and every
    tool call of an assistant message is answered by the tool messages right after it."""
    for position, message in enumerate(messages):
        if message.get("role") == "tool":
            asked = [
                c["id"]
                for m in messages[:position]
                if m.get("role") == "assistant"
                for c in m.get("tool_calls") or []
            ]
            assert message["tool_call_id"] in asked, (position, messages)
        for call in message.get("tool_calls") or []:
            answers = [m.get("tool_call_id") for m in messages[position + 1 :]]
            assert call["id"] in answers, (position, messages)


def agent_requests(server: FakeOpenAIServer) -> list[list[dict[str, Any]]]:
    return [r["messages"] for r in server.requests if not is_summary_request(r["messages"])]


def summary_requests(server: FakeOpenAIServer) -> list[list[dict[str, Any]]]:
    return [r["messages"] for r in server.requests if is_summary_request(r["messages"])]


# --- the window, alone -------------------------------------------------------------------------


def drive_fit(window: Window, history: list[dict[str, Any]], summary: str = "S") -> Any:
    request = {"model": "m", "messages": [{"role": "system", "content": "sys"}, *history]}
    fit = window.fit(None, history, request)
    effects = []
    try:
        effect = next(fit)
        while True:
            effects.append(effect)
            effect = fit.send(summary)
    except StopIteration as stop:
        return stop.value, effects


def test_without_a_budget_the_request_is_unchanged():
    history = earlier_turns()
    request = {"model": "m", "messages": [{"role": "system", "content": "s"}, *history]}
    fit = Window(None).fit(None, history, request)
    with pytest.raises(StopIteration) as done:
        next(fit)
    assert done.value.value is request


@pytest.mark.parametrize("budget", range(40, 900, 7))
def test_the_cut_never_splits_a_tool_call_from_its_results(budget):
    history = [*earlier_turns(), user("and now? " + "w" * 100)]
    request, effects = drive_fit(Window(budget), history)
    for effect in effects:
        assert isinstance(effect, Summarize)
        assert history[effect.upto].get("role") != "tool"
        assert_pairs_whole(effect.messages)
    assert_pairs_whole(request["messages"])
    if effects:  # the model sees the summary and then the history from the cut, unchanged
        cut = effects[-1].upto
        assert request["messages"][1]["content"] == f"[{SUMMARY_PREFIX}]\nS"
        assert request["messages"][2:] == history[cut:]
    else:
        assert request["messages"][1:] == history


def test_estimates_are_deterministic_and_budgets_known_models():
    assert estimate_tokens([user("x" * 400)]) == estimate_tokens([user("x" * 400)])
    assert estimate_tokens([user("x" * 4000)]) > 1000
    assert compaction_budget(None, "gpt-4o") is None
    assert compaction_budget(500, "anything") == 500
    assert compaction_budget("auto", "gpt-4o") == 102_400
    assert compaction_budget("auto", "gpt-4o-2024-08-06") == 102_400
    assert compaction_budget("auto", "my-own-model") is None
    with pytest.raises(DurableSwarmError, match="compact_at"):
        Swarm(ScriptedClient(["x"]), compact_at=-3)


# --- in memory --------------------------------------------------------------------------------


def test_in_memory_the_model_sees_the_summary_and_the_recent_turns():
    with FakeOpenAIServer(SessionModel()) as server:
        swarm = Swarm(server.client(), compact_at=BUDGET)
        history = earlier_turns()
        response = swarm.run(clerk, [*history, user("look up tea")])
    summaries, asks = summary_requests(server), agent_requests(server)
    assert len(summaries) == 1
    first = asks[0]
    assert first[1]["content"].startswith(f"[{SUMMARY_PREFIX}") and SUMMARY in first[1]["content"]
    assert estimate_tokens(asks[0]) < estimate_tokens([{"role": "system"}, *history])
    for messages in asks:
        assert_pairs_whole(messages)
    # the summarized turns reached the summarizing call as text
    assert "hello, I would like" in summaries[0][1]["content"]
    # the Response holds the originals the run added: the tool call, its result, the answer
    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]


def test_a_compactor_function_summarizes_instead_of_the_model():
    seen: list[list[dict[str, Any]]] = []

    def compactor(messages: list[dict[str, Any]]) -> str:
        seen.append(messages)
        return "my summary"

    with FakeOpenAIServer(SessionModel()) as server:
        swarm = Swarm(server.client(), compact_at=BUDGET, compactor=compactor)
        swarm.run(clerk, [*earlier_turns(), user("thanks")])
    assert summary_requests(server) == []
    assert len(seen) == 1 and seen[0][0] == earlier_turns()[0]
    assert "my summary" in agent_requests(server)[0][1]["content"]


# --- durable ----------------------------------------------------------------------------------


def test_durable_compaction_is_a_recorded_step_and_the_log_keeps_every_message(
    durable_swarm_factory, run_id
):
    with FakeOpenAIServer(SessionModel()) as server:
        swarm = durable_swarm_factory(server.client(), compact_at=BUDGET)
        history = [*earlier_turns(), user("look up tea")]
        response = swarm.run(clerk, history, run_id=run_id)
        info = swarm.get_run(run_id)
        asks = agent_requests(server)
        summaries = summary_requests(server)
    assert len(summaries) == 1
    compact = [s for s in info.steps if s.kind == "compact"]
    assert len(compact) == 1 and compact[0].name == "Clerk"
    assert compact[0].output["summary"] == SUMMARY
    assert compact[0].output["upto"] == 5
    assert compact[0].output["usage"]  # the summary's tokens count as the run's
    assert info.usage is not None and info.usage.model_calls == 3
    # the log keeps every original message; the model saw the summary and the recent turns
    assert info.messages == history + response.messages
    assert [m["role"] for m in asks[0]] == ["system", "user", "assistant", "user"]
    assert SUMMARY in asks[0][1]["content"]
    for messages in asks:
        assert_pairs_whole(messages)
    # replaying the recorded outputs (the result read back) needs no new request
    assert swarm.run(clerk, history, run_id=run_id).messages == response.messages
    assert server.request_count == 3  # the summary, the tool call, the answer


def test_a_session_keeps_the_summary_so_its_next_run_starts_compact(durable_swarm_factory):
    session = f"compacting-{uuid.uuid4().hex[:8]}"
    with FakeOpenAIServer(SessionModel()) as server:
        plain = durable_swarm_factory(server.client())  # no compaction
        plain.run(clerk, earlier_turns(), session=session)
        assert summary_requests(server) == []
        swarm = durable_swarm_factory(server.client(), compact_at=BUDGET)
        swarm.run(clerk, [user("look up tea")], session=session)
        stored = swarm.get_session(session)
        assert stored.compacted
        assert stored.messages[0]["content"].endswith(SUMMARY)
        roles = [m["role"] for m in stored.messages]
        assert roles[-4:] == ["user", "assistant", "tool", "assistant"] and roles[1] != "tool"
        assert len(stored.messages) < len(earlier_turns()) + 5
        before = server.request_count
        swarm.run(clerk, [user("bye")], session=session, compact_at=5000)
        last = agent_requests(server)[-1]
    assert server.request_count == before + 1
    # the session's next run starts from the summary and the recent turns
    assert last[1:] == [*stored.messages, user("bye")]
    assert json.dumps(last).count(SUMMARY) == 1


def test_an_agent_with_output_over_the_budget_still_runs(durable_swarm_factory, run_id):
    """A single message over the budget cannot be summarized away: the request goes as it is."""
    agent = Agent(name="Clerk", instructions="i" * 2000, functions=clerk.functions)
    with FakeOpenAIServer(SessionModel()) as server:
        swarm = durable_swarm_factory(server.client(), compact_at=50)
        response = swarm.run(agent, [user("hi")], run_id=run_id)
    assert response.messages[-1]["content"] == "seen 2: hi"
    assert summary_requests(server) == []
