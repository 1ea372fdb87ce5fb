"""MCPTools and ShellTool in durable runs, on SQLite and PostgreSQL: the tool list is a step of its
own and replays as recorded, each call is a step whose idempotency key reaches the server, a server
that is down fails the run naming it and the run resumes once it is back, and shell commands wait
for approval."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import Agent, MCPServerUnavailableError, OnCondition, ShellTool
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import MCPTools

from ._mcp_server import LONG_NAME
from ._mcp_support import free_port, http_server, lines, stdio_tools

TIMEOUT = 90.0


def wait_status(swarm: Any, run_id: str, *statuses: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while (info := swarm.get_run(run_id)).status not in statuses:
        assert time.monotonic() < deadline, f"run {run_id} is {info.status}, not {statuses}"
        time.sleep(0.02)
    return info


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_listing_and_calls_are_steps_and_the_key_reaches_the_server(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    log = tmp_path / "calls.jsonl"
    tools = stdio_tools(log, include=["append_line", "add"])
    try:
        client = ScriptedClient(
            [calls(ToolCall("append_line", {"text": "paid"}, id="w")), text("done")]
        )
        agent = Agent(name="Clerk", functions=[tools])
        swarm = durable_swarm_factory(client)
        response = swarm.run(agent, [{"role": "user", "content": "pay"}], run_id=run_id)
        assert response.messages[-1]["content"] == "done"
        steps = swarm.get_run(run_id).steps
        named = [(s.kind, s.name) for s in steps if s.kind in ("model", "tool", "tools")]
        assert named == [
            ("tools", "tests"),
            ("model", "Clerk"),
            ("tool", "append_line"),
            ("model", "Clerk"),
        ]
        listing = next(s.output for s in steps if s.kind == "tools")
        assert [d["name"] for d in listing] == ["add", "append_line"]
        tool_step = next(s.step for s in steps if s.kind == "tool")
        assert lines(log) == [
            {"text": "paid", "key": f"{run_id}:{tool_step}", "pid": lines(log)[0]["pid"]}
        ]
    finally:
        tools.close()


def test_the_recorded_tool_list_is_offered_for_the_whole_run(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    tools = stdio_tools(tmp_path / "calls.jsonl")  # a server of its own: the run changes it
    try:
        client = ScriptedClient(
            [calls(ToolCall("evolve", id="e")), calls(ToolCall("pid", id="p")), text("done")]
        )
        swarm = durable_swarm_factory(client)
        agent = Agent(name="Steady", functions=[tools])
        swarm.run(agent, [{"role": "user", "content": "go"}], run_id=run_id)
        names = [offered(r) for r in client.requests]
        assert names[0] == names[1] == names[2]
        assert "add" in names[0] and "multiply" not in names[0]
        assert "multiply" in [d["name"] for d in tools.list_tools()]  # the server did change
        assert [s.kind for s in swarm.get_run(run_id).steps].count("tools") == 1
    finally:
        tools.close()


def test_a_server_that_is_down_fails_the_run_which_resumes_once_it_is_up(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    port = free_port()
    log = tmp_path / "calls.jsonl"
    tools = MCPTools(url=f"http://127.0.0.1:{port}/mcp", name="ledger", timeout=10)
    client = ScriptedClient([calls(ToolCall("append_line", {"text": "entry"}, id="w")), text("ok")])
    swarm = durable_swarm_factory(client)
    agent = Agent(name="Bookkeeper", functions=[tools])
    handle = swarm.start(agent, [{"role": "user", "content": "book it"}], run_id=run_id)
    info = wait_status(swarm, run_id, "failed", "succeeded")
    assert info.status == "failed"
    assert "MCP server 'ledger' could not be reached" in (info.error or "")
    with pytest.raises(MCPServerUnavailableError):
        handle.result()
    assert client.requests == []  # the run stopped at its first step: nothing else happened
    with http_server(log, port=port):
        swarm.resume(run_id)
        info = wait_status(swarm, run_id, "succeeded", "failed")
        assert info.status == "succeeded", info.error
        assert [line["text"] for line in lines(log)] == ["entry"]
    tools.close()


def test_odd_tools_in_a_durable_run_long_name_keyed_parameter_and_a_crash(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    log = tmp_path / "calls.jsonl"
    tools = stdio_tools(log, env={"MCP_TEST_ODD": "1"}, include=[LONG_NAME, "keyed", "crash"])
    short = f"{LONG_NAME[:55]}_{hashlib.sha256(LONG_NAME.encode()).hexdigest()[:8]}"
    try:
        client = ScriptedClient(
            [
                calls(
                    ToolCall(short, id="long"),
                    ToolCall("keyed", {"idempotency_key": "model"}, id="keyed"),
                    ToolCall("crash", {"text": "charged"}, id="crash"),
                ),
                text("done"),
            ]
        )
        swarm = durable_swarm_factory(client)
        agent = Agent(name="Odd", functions=[tools])
        response = swarm.run(agent, [{"role": "user", "content": "go"}], run_id=run_id)
        results = {
            m["tool_call_id"]: m["content"] for m in response.messages if m["role"] == "tool"
        }
        assert results["long"] == "long"
        info = swarm.get_run(run_id)
        keyed_step = next(s.step for s in info.steps if s.kind == "tool" and s.name == "keyed")
        assert json.loads(results["keyed"]) == {"param": "model", "meta": f"{run_id}:{keyed_step}"}
        assert "exited during the call to tool crash" in results["crash"]
        assert [line["text"] for line in lines(log)] == ["charged"]  # once, not retried
        listing = next(s.output for s in info.steps if s.kind == "tools")
        assert short in [d["name"] for d in listing]
    finally:
        tools.close()


def test_a_shell_command_waits_for_approval_and_runs_once_approved(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    (tmp_path / "notes.txt").write_text("one\ntwo\n")
    client = ScriptedClient(
        [calls(ToolCall("run_command", {"command": ["wc", "-l", "notes.txt"]}, id="wc")),
         text("counted")]
    )  # fmt: skip
    swarm = durable_swarm_factory(client)
    agent = Agent(name="Ops", functions=[ShellTool(tmp_path)])
    swarm.start(agent, [{"role": "user", "content": "count"}], run_id=run_id)
    info = wait_status(swarm, run_id, "waiting_for_approval")
    assert info.waiting_for["tool_call"]["function"]["name"] == "run_command"
    swarm.approve(run_id, "wc")
    info = wait_status(swarm, run_id, "succeeded")
    result = next(m for m in info.messages if m["role"] == "tool")
    assert result["content"] == "exit code 0\n2 notes.txt\n"
    assert ("tool", "run_command") in [(s.kind, s.name) for s in info.steps]


def test_a_clash_in_the_recorded_tool_list_stops_the_run_which_resumes_once_configured(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    """The clash is found on the recorded list, before any model request; the run resumes with
    the options in force when it resumes (here a prefix; this process still holds the agent
    objects the run met, so their options are changed; a new process would define them so)."""
    log = tmp_path / "calls.jsonl"
    clash = {"MCP_TEST_CLASH": "1"}
    billing = Agent(name="Billing", instructions="Bill.")
    tools = stdio_tools(log, env=clash, include=["transfer_to_billing", "add"])
    try:
        client = ScriptedClient([calls(ToolCall("crm_transfer_to_billing", id="m")), text("done")])
        swarm = durable_swarm_factory(client)
        desk = Agent(name="Desk", functions=[tools], handoffs=[OnCondition(billing)])
        swarm.start(desk, [{"role": "user", "content": "bill me"}], run_id=run_id)
        info = wait_status(swarm, run_id, "failed", "succeeded")
        assert info.status == "failed"
        assert "Tool name 'transfer_to_billing' is offered twice" in (info.error or "")
        assert "handoff to agent 'Billing'" in (info.error or "")
        assert client.requests == []  # no model request offered the clashing list
        assert [s.kind for s in info.steps].count("tools") == 1
        tools.prefix = "crm"  # the fix: MCPTools(..., prefix="crm")
        swarm.resume(run_id)
        info = wait_status(swarm, run_id, "succeeded", "failed")
        assert info.status == "succeeded", info.error
        assert offered(client.requests[0]) == ["crm_add", "crm_transfer_to_billing",
                                               "transfer_to_billing"]  # fmt: skip
        assert [line["text"] for line in lines(log)] == ["mcp transfer"]  # the MCP tool ran
        assert info.messages[-1]["content"] == "done"
    finally:
        tools.close()


def test_a_list_over_max_tools_stops_the_run_at_its_step_which_resumes_with_a_raised_limit(
    durable_swarm_factory, run_id: str, tmp_path: Path
):
    many = {"MCP_TEST_MANY": "200:10"}
    tools = stdio_tools(tmp_path / "calls.jsonl", env=many)
    try:
        client = ScriptedClient([text("done")])
        swarm = durable_swarm_factory(client)
        agent = Agent(name="Crowded", functions=[tools])
        swarm.start(agent, [{"role": "user", "content": "hi"}], run_id=run_id)
        info = wait_status(swarm, run_id, "failed", "succeeded")
        assert info.status == "failed"
        assert "offers more than 128 tools (the limit max_tools" in (info.error or "")
        assert client.requests == []
        tools.max_tools = 250  # the fix: MCPTools(..., max_tools=250)
        swarm.resume(run_id)
        info = wait_status(swarm, run_id, "succeeded", "failed")
        assert info.status == "succeeded", info.error
        assert len(offered(client.requests[0])) == 208
        listing = next(s.output for s in info.steps if s.kind == "tools" and s.output)
        assert len(listing) == 208
    finally:
        tools.close()
