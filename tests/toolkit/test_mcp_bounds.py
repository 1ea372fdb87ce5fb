"""MCPTools is bounded, with the real test server (`_mcp_server.py`) over stdio and streamable HTTP:
a 200 MB result and a listing of 5,000 tools with 100 KB descriptions are read no further than
`max_message_bytes` in a worker process whose peak memory stays small, and the limits of the tool
list (`max_tools`, `max_description_chars`, `max_schema_chars`) are errors naming what was too
large. MCP tools cannot take the name of a handoff's transfer tool, of the agent's functions or of
each other; tools whose input is not an object are refused; `rename=` and `prefix=` resolve
clashes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import Agent, DurableSwarmError, OnCondition, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import MCPTools, SkillCompositionError

from ._mcp_support import http_server, lines, stdio_tools

CHILD = str(Path(__file__).with_name("_mcp_bounds_child.py"))
MIB = 1024 * 1024
# The worker's peak memory may grow this much over its baseline while a 200 MB result or a
# 500 MB listing is refused (before: the whole message was read, 2 GB over HTTP).
PEAK_GROWTH_KIB = 150 * 1024
CLASH = {"MCP_TEST_CLASH": "1"}


def in_a_worker(config: dict[str, Any]) -> dict[str, Any]:
    """Run `_mcp_bounds_child.py` with `config`; its JSON report."""
    done = subprocess.run(
        [sys.executable, CHILD, json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(params=["stdio", "http", "http-json"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """`**env -> config` for `in_a_worker`: the test server with `env`, over the parameter's
    transport (an HTTP server, answering with event streams or with JSON bodies, is started for
    the test and stopped after it)."""
    log = tmp_path / "calls.jsonl"
    with_servers: list[Any] = []

    def config(**env: str) -> dict[str, Any]:
        if request.param == "stdio":
            return {"log": str(log), "env": env}
        json_bodies = {"MCP_TEST_JSON": "1"} if request.param == "http-json" else {}
        server = http_server(log, **env, **json_bodies)
        with_servers.append(server)
        return {"url": server.__enter__()}

    yield config
    for server in with_servers:
        server.__exit__(None, None, None)


def test_a_200_mb_result_is_read_no_further_than_the_limit(transport):
    report = in_a_worker(
        {**transport(), "action": "call", "tool": "big", "arguments": {"size": 200_000_000}}
    )
    answer = report["answer"]
    assert answer.startswith(
        f"Error: MCP server 'tests' sent a message larger than {10 * MIB} bytes (the limit "
        "max_message_bytes of MCPTools) during the call to tool big"
    )
    assert "MCPTools(..., max_message_bytes=...)" in answer
    assert report["next"] == "3"  # the connection was closed, and the next call opens a new one
    assert report["peak_kib"] - report["baseline_kib"] < PEAK_GROWTH_KIB, report


def test_a_result_under_a_raised_limit_is_read_and_cut_for_the_model(transport):
    report = in_a_worker(
        {
            **transport(),
            "action": "call",
            "tool": "big",
            "arguments": {"size": 3 * MIB},
            "options": {"max_message_bytes": 8 * MIB, "max_result_chars": 100},
        }
    )
    assert report["answer"].startswith("x" * 100 + "\n[... ")
    small = in_a_worker(
        {**transport(), "action": "call", "tool": "big", "arguments": {"size": 3 * MIB},
         "options": {"max_message_bytes": 2 * MIB}}
    )  # fmt: skip
    assert "larger than 2097152 bytes" in small["answer"] and small["next"] == "3"


def test_a_listing_of_5000_tools_with_100_kb_descriptions_is_refused_naming_the_limit(transport):
    report = in_a_worker({**transport(MCP_TEST_MANY="5000:100000"), "action": "list"})
    error = report["error"]
    assert error.startswith(
        "DurableSwarmError: MCP server 'tests' sent its tool list in a message "
    )
    assert f"larger than {10 * MIB} bytes (the limit max_message_bytes)" in error
    assert "MCPTools(..., max_message_bytes=...)" in error
    # a call lists the tools first on a new connection (the `mcp` package checks structured
    # results against the listed output schemas): refused as quickly
    assert "during the call to tool add" in report["next"], report
    assert report["peak_kib"] - report["baseline_kib"] < PEAK_GROWTH_KIB, report


@pytest.fixture(params=["stdio", "http"])
def make_tools(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., MCPTools]]:
    """`(env, **options) -> MCPTools` on a test server of the test's own with `env`."""
    log = tmp_path / "calls.jsonl"
    made: list[MCPTools] = []
    servers: list[Any] = []

    def make(env: dict[str, str] | None = None, **options: Any) -> MCPTools:
        if request.param == "stdio":
            tools = stdio_tools(log, env=env or {}, **options)
        else:
            server = http_server(log, **(env or {}))
            servers.append(server)
            tools = MCPTools(url=server.__enter__(), name="tests", **options)
        made.append(tools)
        return tools

    yield make
    for tools in made:
        tools.close()
    for server in servers:
        server.__exit__(None, None, None)


def run_refused(tools: MCPTools, error: type[Exception], match: str) -> str:
    """Run an agent with `tools`: refused with `error` before any model request; the message."""
    client = ScriptedClient([text("never")])
    with pytest.raises(error, match=match) as raised:
        Swarm(client).run(
            Agent(name="Bounded", functions=[tools]), [{"role": "user", "content": "hi"}]
        )
    assert client.requests == []
    return str(raised.value)


def test_more_tools_than_max_tools_are_refused_and_include_or_the_limit_allows_them(make_tools):
    many = {"MCP_TEST_MANY": "200:10"}
    message = run_refused(make_tools(many), DurableSwarmError, "offers more than 128 tools")
    assert "max_tools" in message and "include=[...]" in message
    assert "MCPTools(..., max_tools=...)" in message
    assert len(make_tools(many, max_tools=300).list_tools()) == 208
    assert len(make_tools(many, include=["add", "tool_7"]).list_tools()) == 2


def test_a_long_description_or_schema_is_refused_naming_the_tool_and_the_limit(make_tools):
    long_description = {"MCP_TEST_MANY": "1:20000"}
    message = run_refused(
        make_tools(long_description), DurableSwarmError, "tool 'tool_0' with a description of"
    )
    assert "20000 characters, more than 10000 (the limit max_description_chars)" in message
    assert "exclude=['tool_0']" in message
    assert "tool_0" not in [
        d["tool"] for d in make_tools(long_description, exclude=["tool_0"]).list_tools()
    ]
    message = run_refused(
        make_tools({"MCP_TEST_SCHEMA": "60000"}),
        DurableSwarmError,
        "tool 'add' with an input schema",
    )
    assert "more than 50000 (the limit max_schema_chars)" in message
    assert "MCPTools(..., max_schema_chars=...)" in message
    tools = make_tools({"MCP_TEST_SCHEMA": "60000"}, max_schema_chars=100_000, include=["add"])
    assert [d["tool"] for d in tools.list_tools()] == ["add"]


def test_limits_must_be_positive_ints_and_rename_valid_names():
    for option in ("max_message_bytes", "max_tools", "max_description_chars", "max_schema_chars"):
        with pytest.raises(ValueError, match=f"MCPTools\\({option}=...\\) must be a positive int"):
            MCPTools(["server"], **{option: 0})
    with pytest.raises(ValueError, match="'bad name' is not a valid tool name"):
        MCPTools(["server"], rename={"a": "bad name"})


def billing_desk(tools: Any, **condition: Any) -> tuple[Agent, Agent]:
    billing = Agent(name="Billing", instructions="Bill.")
    desk = Agent(name="Desk", functions=[tools], handoffs=[OnCondition(billing, **condition)])
    return desk, billing


def test_an_mcp_tool_cannot_take_the_name_of_a_handoffs_transfer(make_tools, tmp_path: Path):
    for available in (None, "never_set"):  # offered now or not: the name is the handoff's
        desk, _ = billing_desk(
            make_tools(CLASH, include=["transfer_to_billing"]), available=available
        )
        client = ScriptedClient([text("never")])
        with pytest.raises(SkillCompositionError) as error:
            Swarm(client).run(desk, [{"role": "user", "content": "bill me"}])
        assert client.requests == []
        message = str(error.value)
        assert "Tool name 'transfer_to_billing' is offered twice" in message
        assert "MCP server 'tests' (its tool 'transfer_to_billing')" in message
        assert "the agent's handoff to agent 'Billing' (OnCondition)" in message
        assert "prefix=True" in message and "rename=" in message and "exclude=" in message


def test_an_mcp_tool_cannot_take_the_name_of_a_function_that_hands_off(make_tools):
    billing = Agent(name="Billing")

    def transfer_to_billing() -> Agent:
        """Hand the conversation to Billing."""
        return billing

    tools = make_tools(CLASH, include=["transfer_to_billing"])
    agent = Agent(name="Desk", functions=[transfer_to_billing, tools])
    with pytest.raises(SkillCompositionError, match="offered twice") as error:
        Swarm(ScriptedClient([text("never")])).run(agent, [{"role": "user", "content": "x"}])
    assert "transfer_to_billing" in str(error.value).split("and by ")[1]


def test_a_prefix_keeps_the_mcp_tool_apart_from_the_handoff(make_tools, tmp_path: Path):
    desk, billing = billing_desk(make_tools(CLASH, include=["transfer_to_billing"], prefix=True))
    client = ScriptedClient(
        [
            calls(ToolCall("tests_transfer_to_billing", id="mcp")),
            calls(ToolCall("transfer_to_billing", id="handoff")),
            text("billing here"),
        ]
    )
    response = Swarm(client).run(desk, [{"role": "user", "content": "bill me"}])
    offered = [t["function"]["name"] for t in client.requests[0]["tools"]]
    assert offered == ["tests_transfer_to_billing", "transfer_to_billing"]
    results = {m["tool_call_id"]: m["content"] for m in response.messages if m["role"] == "tool"}
    assert results["mcp"] == "mcp transfer"  # the MCP tool ran
    assert [line["text"] for line in lines(tmp_path / "calls.jsonl")] == ["mcp transfer"]
    assert response.agent is billing  # and the handoff handed off


def test_names_that_clash_once_made_valid_are_refused_and_rename_resolves_them(make_tools):
    message = run_refused(
        make_tools(CLASH, include=["get.user", "get_user"]), SkillCompositionError, "offered twice"
    )
    assert "by MCP server 'tests': for its tools 'get.user' and 'get_user'" in message
    assert "rename={'get_user': '<new name>'}" in message
    tools = make_tools(
        CLASH, include=["get.user", "get_user"], rename={"get.user": "get_user_dotted"}
    )
    client = ScriptedClient(
        [calls(ToolCall("get_user_dotted", id="d"), ToolCall("get_user", id="p")), text("ok")]
    )
    response = Swarm(client).run(Agent(name="Users", functions=[tools]), [])
    results = {m["tool_call_id"]: m["content"] for m in response.messages if m["role"] == "tool"}
    assert results == {"d": "dotted", "p": "plain"}


def test_a_recorded_tool_whose_input_is_not_an_object_is_refused(tmp_path: Path):
    """The `mcp` package refuses such a tool list when it reads it (`inputSchema.type` must be
    "object"); a list recorded otherwise is refused when its tools are built."""
    listing = [
        {"name": "scalar", "tool": "scalar", "description": "", "prefix": "",
         "parameters": {"type": "string"}},
    ]  # fmt: skip
    with pytest.raises(SkillCompositionError, match="tool 'scalar'") as error:
        stdio_tools(tmp_path / "calls.jsonl").tools(listing)
    assert "input schema of type 'string', not 'object'" in str(error.value)
    assert "exclude=['scalar']" in str(error.value)
    assert stdio_tools(tmp_path / "calls.jsonl", exclude=["scalar"]).tools(listing) == []
