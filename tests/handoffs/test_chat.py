"""`initiate_swarm_chat`: on a default `Swarm` (the real `openai` client over HTTP to the fake
server), on a given `Swarm`, and on a `DurableSwarm` (SQLite and PostgreSQL), where the chat is
a durable run and `REVERT_TO_USER` waits for `send_input`."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from durable_swarm import (
    AfterWork,
    AfterWorkOption,
    ChatResult,
    OnCondition,
    Swarm,
    initiate_swarm_chat,
)
from durable_swarm.testing import FakeOpenAIServer, ToolCall, calls

from ._memory import Model, agent, speaker
from ._waiting import wait_status


def _triage_and_sales() -> tuple[Any, Any]:
    sales = agent("Sales")
    triage = agent("Triage", handoffs=[OnCondition(sales, "When the user wants to buy.")])
    return triage, sales


def _sales_script(messages: list[dict[str, Any]], tools: Any) -> Any:
    if speaker(messages) == "Triage":
        return calls(ToolCall("transfer_to_sales"))
    return f"Sales: {len(messages) - 1} messages so far."


def test_initiate_swarm_chat_on_a_default_swarm(monkeypatch: pytest.MonkeyPatch) -> None:
    triage, sales = _triage_and_sales()
    with FakeOpenAIServer(_sales_script) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "fake-key")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)

        result, context, last = initiate_swarm_chat(
            triage, [triage, sales], "I want to buy the blue one.", {"customer": "ada"}
        )

        assert server.request_count == 2
    assert isinstance(result, ChatResult)
    assert result.run_id is None
    assert result.chat_history[0] == {"role": "user", "content": "I want to buy the blue one."}
    assert [m["role"] for m in result.chat_history] == ["user", "assistant", "tool", "assistant"]
    assert result.summary == "Sales: 3 messages so far."
    assert context == {"customer": "ada"}
    assert last is sales


def test_initiate_swarm_chat_on_a_given_swarm_with_message_dicts() -> None:
    triage, sales = _triage_and_sales()
    model = Model(Triage=_sales_script, Sales=_sales_script)
    messages = [
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": "Buy."},
    ]
    result, _, last = initiate_swarm_chat(
        triage, [triage, sales], messages, swarm=Swarm(model.client)
    )
    assert result.chat_history[:3] == messages
    assert result.summary == "Sales: 5 messages so far."
    assert last is sales
    assert model.speakers == ["Triage", "Sales"]


def test_initiate_swarm_chat_terminates_by_default_and_takes_a_swarm_after_work() -> None:
    helper, other = agent("Helper"), agent("Other", handoffs=[AfterWork("TERMINATE")])
    model = Model(Helper=["Done."], Other=["Other here."])
    _, _, last = initiate_swarm_chat(helper, [helper], "Hi", swarm=Swarm(model.client))
    assert last is helper
    assert model.speakers == ["Helper"]

    _, _, last = initiate_swarm_chat(
        helper, [helper, other], "Hi", swarm=Swarm(model.client), after_work=AfterWork(other)
    )
    assert last is other


def test_max_rounds_bounds_the_chat() -> None:
    chatty = agent("Chatty", handoffs=[AfterWork(AfterWorkOption.STAY)])
    model = Model(Chatty=lambda messages, tools: f"reply {len(messages)}")
    result, _, _ = initiate_swarm_chat(
        chatty, [chatty], "Talk to me.", max_rounds=4, swarm=Swarm(model.client)
    )
    assert len(result.chat_history) == 1 + 4
    assert len(model.requests) == 4


def test_revert_to_user_answers_come_from_the_user_agent() -> None:
    class UserProxy:  # AG2's user agent: get_human_input(prompt)
        def __init__(self) -> None:
            self.prompts: list[str] = []

        def get_human_input(self, prompt: str) -> str:
            self.prompts.append(prompt)
            return f"answer {len(self.prompts)}"

    helper = agent("Helper", handoffs=[AfterWork(AfterWorkOption.REVERT_TO_USER)])
    model = Model(Helper=lambda messages, tools: f"question {len(messages)}")
    user = UserProxy()
    result, _, _ = initiate_swarm_chat(
        helper, [helper], "Hi", max_rounds=4, user_agent=user, swarm=Swarm(model.client)
    )
    assert user.prompts == ["question 2", "question 4"]
    assert result.human_input == ["answer 1", "answer 2"]
    assert [m["content"] for m in result.chat_history] == [
        "Hi",
        "question 2",
        "answer 1",
        "question 4",
        "answer 2",
    ]


# --- durable -------------------------------------------------------------------------------


def test_initiate_swarm_chat_on_a_durable_swarm(durable: Any, run_id: str) -> None:
    triage, sales = _triage_and_sales()
    model = Model(Triage=_sales_script, Sales=_sales_script)
    swarm = durable(model.client)

    result, context, last = initiate_swarm_chat(
        triage, [triage, sales], "Buy.", {"customer": "ada"}, swarm=swarm, run_id=run_id
    )

    assert result.run_id == run_id
    assert result.summary == "Sales: 3 messages so far."
    assert context == {"customer": "ada"}
    assert last is sales
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert info.messages == result.chat_history
    assert [(t["rule"], t["source"], t["target"]) for t in info.transitions] == [
        ("tool", "Triage", "Sales"),
        ("swarm_after_work", "Sales", None),  # the chat's default: TERMINATE
    ]

    # the same run id again attaches to the finished run: nothing runs twice
    again, _, _ = initiate_swarm_chat(triage, [triage, sales], "Buy.", swarm=swarm, run_id=run_id)
    assert again.chat_history == result.chat_history
    assert len(model.requests) == 2


def test_durable_chat_reverts_to_the_person_who_answers_with_send_input(
    durable: Any, run_id: str
) -> None:
    helper = agent("Helper", handoffs=[AfterWork(AfterWorkOption.REVERT_TO_USER)])
    model = Model(Helper=lambda messages, tools: f"question {len(messages)}")
    swarm = durable(model.client)
    outcome: list[Any] = []

    def chat() -> None:
        try:
            outcome.append(
                initiate_swarm_chat(
                    helper, [helper], "Hi", max_rounds=4, swarm=swarm, run_id=run_id
                )
            )
        except BaseException as e:  # reported by the assertion below
            outcome.append(e)

    thread = threading.Thread(target=chat, daemon=True)
    thread.start()
    info = wait_status(swarm, run_id, "waiting_for_input", messages=2)
    assert info.waiting_for["prompt"] == "question 2"
    swarm.send_input(run_id, "first answer", by="ada")
    info = wait_status(swarm, run_id, "waiting_for_input", messages=4)
    assert info.waiting_for["prompt"] == "question 4"
    swarm.send_input(run_id, "second answer")
    thread.join(timeout=60)

    assert not thread.is_alive()
    assert not isinstance(outcome[0], BaseException), outcome[0]
    result, _, last = outcome[0]
    assert last is helper
    assert result.human_input == ["first answer", "second answer"]
    assert [m["content"] for m in result.chat_history] == [
        "Hi",
        "question 2",
        "first answer",
        "question 4",
        "second answer",
    ]
    assert swarm.get_run(run_id).status == "succeeded"
