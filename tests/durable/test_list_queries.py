"""The thin client's list queries on SQLite and PostgreSQL: status (the waits included), agent,
text search in messages, paging with `limit`/`offset`, `count_runs`, and the pending approvals."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durable_swarm import Agent, DurableSwarmError, ask_user
from durable_swarm.durable import DurableClient
from durable_swarm.durable._runs import run_status
from durable_swarm.testing import ScriptedClient, ToolCall, calls
from durable_swarm.toolkit import tool


@tool(needs_approval=True)
def transfer(amount: int, to: str) -> str:
    """Transfer money."""
    return f"sent {amount} to {to}"


def _script(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    if last["role"] == "user" and "question" in str(last["content"]):
        return calls(ToolCall("ask_user", {"question": "Which colour?"}))
    if last["role"] == "user" and "pay" in str(last["content"]):
        return calls(ToolCall("transfer", {"amount": 42, "to": "Ada Ōkubo"}))
    return f"You said: {last['content']}"


def _wait(client: DurableClient, run_id: str, status: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while client.get_run(run_id).status != status:
        assert time.monotonic() < deadline, f"run {run_id} never became {status}"
        time.sleep(0.02)


@pytest.fixture
def runs(durable_swarm_factory: Any, database_url: str, run_id: str) -> Any:
    """Five runs of one agent: three finished, one waiting for input, one for approval."""
    swarm = durable_swarm_factory(ScriptedClient(_script))
    agent = Agent(name=f"Lister-{run_id[-8:]}", functions=[ask_user, transfer])
    texts = ["the blue whale", "a red fox", "50% off_sale", "a question", "please pay Ada Ōkubo"]
    ids = [f"{run_id}-{n}" for n in range(len(texts))]
    for n, text in enumerate(texts[:3]):
        swarm.run(agent, [{"role": "user", "content": text}], run_id=ids[n])
    swarm.start(agent, [{"role": "user", "content": texts[3]}], run_id=ids[3])
    swarm.start(agent, [{"role": "user", "content": texts[4]}], run_id=ids[4])
    with DurableClient(database_url) as client:
        _wait(client, ids[3], "waiting_for_input")
        _wait(client, ids[4], "waiting_for_approval")
        yield client, agent.name, ids


def _ids(found: list[Any]) -> list[str]:
    return [r.run_id for r in found]


def test_status_filters_include_the_waits(runs: Any) -> None:
    client, agent, ids = runs
    assert _ids(client.list_runs(agent=agent)) == ids[::-1]
    assert _ids(client.list_runs(agent=agent, status="succeeded")) == ids[2::-1]
    assert _ids(client.list_runs(agent=agent, status="waiting_for_input")) == [ids[3]]
    assert _ids(client.list_runs(agent=agent, status="waiting_for_approval")) == [ids[4]]
    assert client.list_runs(agent=agent, status="pending") == []
    both = client.list_runs(agent=agent, status=["waiting_for_input", "waiting_for_approval"])
    assert _ids(both) == [ids[4], ids[3]]
    assert both[0].waiting_for["tool_call"]["function"]["name"] == "transfer"
    assert client.count_runs(agent=agent) == 5
    assert client.count_runs(agent=agent, status="succeeded") == 3
    assert client.count_runs(agent=agent, status=["failed", "cancelled"]) == 0


def test_paging_with_limit_and_offset_newest_first(runs: Any) -> None:
    client, agent, ids = runs
    newest_first = ids[::-1]
    pages = [_ids(client.list_runs(agent=agent, limit=2, offset=o)) for o in (0, 2, 4)]
    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:]]
    assert client.list_runs(agent=agent, limit=2, offset=5) == []
    assert _ids(client.list_runs(agent=agent, limit=None)) == newest_first


def test_search_finds_text_in_messages_case_insensitively(runs: Any) -> None:
    client, agent, ids = runs
    assert _ids(client.list_runs(agent=agent, search="BLUE whale")) == [ids[0]]
    # in the model's answer ("You said: a red fox"), not only in the input
    assert _ids(client.list_runs(agent=agent, search="said: a red")) == [ids[1]]
    # LIKE's wildcards are plain text
    assert _ids(client.list_runs(agent=agent, search="50% off_")) == [ids[2]]
    assert client.list_runs(agent=agent, search="0%_o") == []
    # non-ASCII text, in a running run
    assert _ids(client.list_runs(agent=agent, search="Ada Ōkubo")) == [ids[4]]
    # text only in a tool call's arguments or in JSON keys is not in a message
    assert client.list_runs(agent=agent, search='"amount"') == []
    assert client.list_runs(agent=agent, search="role") == []
    assert client.count_runs(agent=agent, search="whale") == 1
    assert client.list_runs(agent=agent, search="no such words anywhere") == []


def test_since_and_until_bound_the_creation_time(runs: Any) -> None:
    client, agent, _ = runs
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert client.list_runs(agent=agent, since=future) == []
    assert client.count_runs(agent=agent, until=future.isoformat()) == 5
    with pytest.raises(DurableSwarmError, match="ISO 8601"):
        client.list_runs(since="yesterday-ish")


def test_an_unknown_agent_or_status_finds_nothing_or_is_refused(runs: Any) -> None:
    client, _, _ = runs
    assert client.list_runs(agent="Nobody-at-all") == []
    assert client.count_runs(agent="Nobody-at-all") == 0
    with pytest.raises(DurableSwarmError, match="Unknown run status 'done'"):
        client.count_runs(status="done")
    with pytest.raises(DurableSwarmError, match="must not be negative"):
        client.list_runs(offset=-1)


def test_pending_approvals_name_the_exact_call(runs: Any, durable_swarm_factory: Any) -> None:
    client, agent, ids = runs
    mine = [a for a in client.list_approvals() if a.run_id == ids[4]]
    assert len(mine) == 1
    approval = mine[0]
    waiting = client.get_run(ids[4]).waiting_for
    assert approval.tool_call_id == waiting["tool_call"]["id"]
    assert approval.tool == "transfer"
    assert approval.arguments == waiting["tool_call"]["function"]["arguments"]
    assert approval.agent == agent
    assert approval.since is not None
    assert approval.since <= datetime.now(timezone.utc)
    assert ids[3] not in {a.run_id for a in client.list_approvals()}

    client.approve(ids[4], approval.tool_call_id)
    _wait(client, ids[4], "succeeded")
    assert ids[4] not in {a.run_id for a in client.list_approvals()}
    swarm = durable_swarm_factory(ScriptedClient(_script))
    assert swarm.count_runs(agent=agent, status="succeeded") == 4
    assert ids[4] not in {a.run_id for a in swarm.list_approvals()}


def test_a_run_back_on_its_queue_still_waits() -> None:
    # A waiting run whose process died goes back on its queue (ENQUEUED) and still waits for
    # its answer: get_run, list_runs and the counts all say so.
    asked = {"kind": "input", "prompt": "Which colour?"}
    assert run_status("PENDING", asked) == "waiting_for_input"
    assert run_status("ENQUEUED", {"kind": "approval"}) == "waiting_for_approval"
    assert run_status("ENQUEUED", None) == "pending"
    assert run_status("CANCELLED", asked) == "cancelled"
