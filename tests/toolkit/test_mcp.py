"""MCPTools with a real MCP server (`_mcp_server.py`, written with the `mcp` package) over stdio
and streamable HTTP, in plain `Swarm` runs (sync and async): the tools and schemas offered, results
and errors as tool messages, filters, approval, the tool list kept for the whole run, connections
reused and restarted, and a server that is down."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _support.procs import wait_for
from durable_swarm import Agent, MCPServerUnavailableError, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit import MCPTools, SkillCompositionError

from ._mcp_server import LONG_NAME
from ._mcp_support import free_port, http_server, lines, stdio_tools

SERVER_TOOLS = ["add", "append_line", "fail", "picture", "big", "pid", "header", "evolve"]
ODD = {"MCP_TEST_ODD": "1"}


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest.fixture(scope="module")
def url(log: Path) -> Iterator[str]:
    with http_server(log) as address:
        yield address


@pytest.fixture(params=["stdio", "http"])
def make_tools(request: pytest.FixtureRequest, log: Path) -> Iterator[Callable[..., MCPTools]]:
    """`**options -> MCPTools` on the test server, over the transport of the test's parameter."""
    made: list[MCPTools] = []

    def make(**options: Any) -> MCPTools:
        if request.param == "stdio":
            tools = stdio_tools(log, **options)
        else:
            tools = MCPTools(url=request.getfixturevalue("url"), name="tests", **options)
        made.append(tools)
        return tools

    yield make
    for tools in made:
        tools.close()


def offered(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"] for t in request.get("tools") or []}


def tool_messages(messages: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def test_the_model_is_offered_the_servers_tools_with_their_schemas(make_tools):
    client = ScriptedClient([text("hello")])
    agent = Agent(name="Helper", functions=[make_tools()])
    Swarm(client).run(agent, [{"role": "user", "content": "hi"}])
    tools = offered(client.requests[0])
    assert list(tools) == SERVER_TOOLS
    assert tools["add"]["description"] == "Add two integers."
    schema = tools["add"]["parameters"]
    assert schema["type"] == "object"
    assert {k: v["type"] for k, v in schema["properties"].items()} == {
        "a": "integer",
        "b": "integer",
    }
    assert schema["required"] == ["a", "b"]
    assert list(tools["append_line"]["parameters"]["properties"]) == ["text"]  # no ctx


def test_results_and_errors_become_tool_messages_the_model_reads(make_tools):
    client = ScriptedClient(
        [
            calls(
                ToolCall("add", {"a": 2, "b": 3}, id="sum"),
                ToolCall("fail", {"reason": "no disk"}, id="fail"),
                ToolCall("picture", id="pic"),
                ToolCall("add", {"a": "two"}, id="bad"),
                ToolCall("big", {"size": 50}, id="big"),
            ),
            text("done"),
        ]
    )
    agent = Agent(name="Helper", functions=[make_tools()])
    response = Swarm(client).run(agent, [{"role": "user", "content": "go"}])
    results = tool_messages(response.messages)
    assert results["sum"] == "5"
    assert results["fail"].startswith("Error: MCP tool fail on server 'tests' failed: ")
    assert results["fail"].endswith("cannot do it: no disk")
    assert results["pic"] == "[image image/png, about 48 bytes, not shown]"
    assert results["bad"].startswith("Error: MCP tool add on server 'tests' failed:")
    assert "validation error" in results["bad"]
    assert results["big"] == "x" * 50
    assert response.messages[-1]["content"] == "done"
    # the model read exactly these tool messages
    sent = client.requests[1]["messages"]
    assert tool_messages(sent) == results


def test_long_results_are_cut_to_max_result_chars(make_tools):
    client = ScriptedClient([calls(ToolCall("big", {"size": 5000}, id="big")), text("ok")])
    agent = Agent(name="Helper", functions=[make_tools(max_result_chars=100)])
    response = Swarm(client).run(agent, [{"role": "user", "content": "go"}])
    content = tool_messages(response.messages)["big"]
    assert content.startswith("x" * 100 + "\n[... 4900 more characters cut")
    assert len(content) < 200


def test_include_exclude_and_prefix_choose_what_is_offered(make_tools):
    client = ScriptedClient([text("a"), text("b"), calls(ToolCall("srv_add", {"a": 1, "b": 1})),
                             text("c")])  # fmt: skip
    swarm = Swarm(client)
    only = Agent(name="Only", functions=[make_tools(include=["add", "pid"])])
    swarm.run(only, [{"role": "user", "content": "hi"}])
    without = Agent(name="Without", functions=[make_tools(exclude=["fail", "evolve"])])
    swarm.run(without, [{"role": "user", "content": "hi"}])
    prefixed = Agent(name="Prefixed", functions=[make_tools(prefix="srv", include=["add"])])
    response = swarm.run(prefixed, [{"role": "user", "content": "hi"}])
    assert list(offered(client.requests[0])) == ["add", "pid"]
    assert list(offered(client.requests[1])) == [
        t for t in SERVER_TOOLS if t not in ("fail", "evolve")
    ]
    assert list(offered(client.requests[2])) == ["srv_add"]
    assert response.messages[1]["content"] == "2"  # srv_add called the server's add


def test_a_tool_name_clash_is_refused_with_both_names(make_tools):
    def add(a: int, b: int) -> int:
        """The agent's own add."""
        return a + b

    agent = Agent(name="Clash", functions=[add, make_tools()])
    with pytest.raises(SkillCompositionError) as error:
        Swarm(ScriptedClient([text("never")])).run(agent, [{"role": "user", "content": "hi"}])
    message = str(error.value)
    assert "'add' is offered twice" in message
    assert "MCP server 'tests'" in message
    assert "add" in message and "prefix" in message and "exclude" in message


def test_two_servers_of_one_agent_need_different_names(log: Path):
    agent = Agent(name="Twice", functions=[stdio_tools(log), stdio_tools(log)])
    with pytest.raises(SkillCompositionError, match="Two tool sources of one agent are named"):
        Swarm(ScriptedClient([text("never")])).run(agent, [{"role": "user", "content": "hi"}])


def test_needs_approval_asks_for_the_named_tools_only(make_tools, log: Path):
    asked: list[str] = []

    def approve(call: dict[str, Any]) -> bool:
        asked.append(call["function"]["name"])
        return False

    before = len(lines(log))
    client = ScriptedClient(
        [
            calls(
                ToolCall("append_line", {"text": "needs a yes"}, id="w"),
                ToolCall("add", {"a": 1, "b": 2}, id="a"),
            ),
            text("ok"),
        ]
    )
    agent = Agent(name="Careful", functions=[make_tools(needs_approval=["append_line"])])
    response = Swarm(client, approve_fn=approve).run(agent, [{"role": "user", "content": "go"}])
    assert asked == ["append_line"]
    results = tool_messages(response.messages)
    assert "not approved" in results["w"].lower() or "rejected" in results["w"].lower()
    assert results["a"] == "3"
    assert len(lines(log)) == before  # the rejected call never reached the server


def test_async_runs_and_runs_inside_an_event_loop_use_the_same_connection(make_tools):
    tools = make_tools()
    agent = Agent(name="Async", functions=[tools])

    def script(messages: list[dict[str, Any]], _: Any) -> Any:
        done = [m for m in messages if m["role"] == "tool"]
        return text(done[-1]["content"]) if done else calls(ToolCall("pid", id="p"))

    first = Swarm(ScriptedClient(script)).run(agent, [{"role": "user", "content": "pid?"}])

    async def inside_a_loop() -> tuple[Any, Any]:
        swarm = Swarm(ScriptedClient(script))
        awaited = await swarm.arun(agent, [{"role": "user", "content": "pid?"}])
        blocking = swarm.run(agent, [{"role": "user", "content": "pid?"}])  # sync, in a loop
        return awaited, blocking

    awaited, blocking = asyncio.run(inside_a_loop())
    pids = {r.messages[-1]["content"] for r in (first, awaited, blocking)}
    assert len(pids) == 1 and pids.pop().isdigit()  # one server process served all runs


def test_the_tool_list_stays_the_same_for_the_whole_run_when_the_server_changes(
    tmp_path: Path,
):
    log = tmp_path / "calls.jsonl"
    tools = stdio_tools(log)  # a server of its own: this test changes it
    try:
        client = ScriptedClient(
            [
                calls(ToolCall("evolve", id="e")),
                calls(ToolCall("add", {"a": 1, "b": 2}, id="a")),
                text("done"),
                text("next run"),
            ]
        )
        agent = Agent(name="Steady", functions=[tools])
        swarm = Swarm(client)
        response = swarm.run(agent, [{"role": "user", "content": "go"}])
        first, second, third = (offered(r) for r in client.requests[:3])
        assert list(first) == SERVER_TOOLS
        assert second == first and third == first  # the run keeps the list it met
        # the server really changed: its `add` is gone, and the model reads that as an error
        assert "Unknown tool: add" in tool_messages(response.messages)["a"]
        swarm.run(agent, [{"role": "user", "content": "again"}])
        assert "multiply" in offered(client.requests[3]) and "add" not in offered(
            client.requests[3]
        )  # a new run lists the server again
    finally:
        tools.close()


def test_a_dead_stdio_server_is_started_again(tmp_path: Path):
    tools = stdio_tools(tmp_path / "calls.jsonl")
    try:
        first = int(tools.call("pid", {}))
        os.kill(first, signal.SIGKILL)  # the server process this test's MCPTools started
        second = int(tools.call("pid", {}))
        assert second != first
        assert tools.call("add", {"a": 20, "b": 22}) == "42"
    finally:
        tools.close()


def test_connections_are_closed_by_close_and_reopened_on_next_use(tmp_path: Path):
    tools = stdio_tools(tmp_path / "calls.jsonl")
    try:
        first = int(tools.call("pid", {}))
        tools.close()
        wait_gone(first)
        assert int(tools.call("pid", {})) != first
    finally:
        tools.close()


def wait_gone(pid: int) -> None:
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as f:  # a zombie waiting to be reaped is gone too
            return f.read().split(") ")[-1].startswith("Z")

    wait_for(gone, f"server process {pid} to exit")


def test_the_idempotency_key_reaches_the_server_in_the_request_meta(make_tools, log: Path):
    tools = make_tools()
    tools.call("append_line", {"text": "keyed"}, idempotency_key="run-7:3")
    tools.call("append_line", {"text": "unkeyed"})
    seen = {line["text"]: line["key"] for line in lines(log)}
    assert seen["keyed"] == "run-7:3"
    assert seen["unkeyed"] is None


def test_a_server_that_is_down_fails_the_run_with_an_error_naming_it():
    tools = MCPTools(url=f"http://127.0.0.1:{free_port()}/mcp", name="inventory", timeout=5)
    agent = Agent(name="Stock", functions=[tools])
    with pytest.raises(MCPServerUnavailableError) as error:
        Swarm(ScriptedClient([text("never")])).run(agent, [{"role": "user", "content": "hi"}])
    assert error.value.server == "inventory"
    message = str(error.value)
    assert "MCP server 'inventory' could not be reached" in message
    assert "ConnectError" in message and "3 attempts" in message and "resume" in message


def test_a_stdio_server_that_cannot_start_is_reported_by_name(tmp_path: Path):
    tools = MCPTools(command=[str(tmp_path / "no-such-server")], name="ghost")
    with pytest.raises(MCPServerUnavailableError, match="MCP server 'ghost'"):
        tools.list_tools()


def test_bad_configurations_are_refused_when_built():
    with pytest.raises(ValueError, match="exactly one of"):
        MCPTools()
    with pytest.raises(ValueError, match="exactly one of"):
        MCPTools(["server"], url="http://x/mcp")
    with pytest.raises(TypeError, match="argument vector"):
        MCPTools("python server.py")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="http:// or https://"):
        MCPTools(url="ftp://x")
    with pytest.raises(ValueError, match="headers"):
        MCPTools(["server"], headers={"a": "b"})
    with pytest.raises(ValueError, match="not valid"):
        MCPTools(["server"], name="bad name!")


def test_default_names_come_from_the_script_or_the_host():
    assert MCPTools([sys.executable, "path/to/weather_server.py"]).name == "weather_server"
    assert MCPTools(["npx", "-y", "@acme/files"]).name == "files"
    assert MCPTools(["my-server", "--port", "1"]).name == "my-server"
    assert MCPTools(url="https://tools.example.com/mcp").name == "tools_example_com"


def test_headers_are_sent_to_an_http_server(url: str):
    tools = MCPTools(url=url, headers={"X-Api-Key": "sesame"}, name="h")
    try:
        assert tools.call("header", {"name": "x-api-key"}) == "sesame"
    finally:
        tools.close()


def test_the_tools_json_listing_is_json(make_tools):
    listing = make_tools().list_tools()
    assert json.loads(json.dumps(listing)) == listing
    assert {d["tool"] for d in listing} == set(SERVER_TOOLS)


def test_streamed_runs_list_and_call_mcp_tools_too(make_tools):
    tools = make_tools(include=["add"])
    agent = Agent(name="Streamer", functions=[tools])

    def script(messages: list[dict[str, Any]], _: Any) -> Any:
        done = [m for m in messages if m["role"] == "tool"]
        return (
            text(f"sum {done[-1]['content']}") if done else calls(ToolCall("add", {"a": 4, "b": 5}))
        )

    events = list(Swarm(ScriptedClient(script)).run(agent, [], stream=True))
    assert events[-1]["response"].messages[-1]["content"] == "sum 9"

    async def streamed() -> list[Any]:
        stream = await Swarm(ScriptedClient(script)).arun(agent, [], stream=True)
        return [event async for event in stream]

    assert asyncio.run(streamed())[-1]["response"].messages[-1]["content"] == "sum 9"


EXITS_NORMALLY = """
import sys
from durable_swarm.toolkit import MCPTools
tools = MCPTools(command=[sys.executable, sys.argv[1]], env={"MCP_TEST_LOG": sys.argv[2]})
print(tools.call("pid", {}), flush=True)
"""


def test_stdio_servers_are_stopped_when_the_process_exits(tmp_path: Path):
    from ._mcp_support import SERVER

    done = subprocess.run(
        [sys.executable, "-c", EXITS_NORMALLY, SERVER, str(tmp_path / "calls.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    wait_gone(int(done.stdout.strip()))


def test_a_long_tool_name_is_shortened_and_calls_the_servers_tool(tmp_path: Path):
    tools = stdio_tools(tmp_path / "calls.jsonl", env=ODD)
    try:
        short = next(d["name"] for d in tools.list_tools() if d["tool"] == LONG_NAME)
        assert len(short) == 64 and short.startswith(LONG_NAME[:55] + "_")
        client = ScriptedClient([calls(ToolCall(short, id="long")), text("a"), text("b")])
        agent = Agent(name="Long", functions=[tools])
        response = Swarm(client).run(agent, [{"role": "user", "content": "go"}])
        assert tool_messages(response.messages)["long"] == "long"
        Swarm(client).run(agent, [{"role": "user", "content": "again"}])
        for request in client.requests:
            assert all(len(name) <= 64 for name in offered(request))
            assert short in offered(request)
    finally:
        tools.close()


def test_an_invalid_recorded_tool_name_is_refused_every_time_with_mcp_advice(tmp_path: Path):
    tools = stdio_tools(tmp_path / "calls.jsonl")
    listing = [{"name": LONG_NAME, "tool": LONG_NAME, "description": "", "parameters": {}}]
    for _ in range(2):  # never cached: refused again, not offered
        with pytest.raises(ValueError, match="not a valid tool name") as error:
            tools.tools(listing)
        assert f"exclude=[{LONG_NAME!r}]" in str(error.value) and "prefix=" in str(error.value)
        assert "@tool" not in str(error.value)
    assert stdio_tools(tmp_path / "calls.jsonl", exclude=[LONG_NAME]).tools(listing) == []


def test_tools_that_run_only_as_tasks_are_left_out(tmp_path: Path):
    with http_server(tmp_path / "calls.jsonl", MCP_TEST_LEGACY="1", **ODD) as url:
        tools = MCPTools(url=url, name="tests")
        try:
            names = [d["tool"] for d in tools.list_tools()]
        finally:
            tools.close()
    assert "only_as_task" not in names and "keyed" in names


def test_a_restarted_http_server_is_given_a_new_session_and_the_call_made_once(tmp_path: Path):
    log, port = tmp_path / "calls.jsonl", free_port()
    tools = MCPTools(url=f"http://127.0.0.1:{port}/mcp", name="tests", timeout=10)
    try:
        with http_server(log, port, MCP_TEST_LEGACY="1"):
            assert tools.call("append_line", {"text": "one"}) == "appended 'one'"
        with http_server(log, port, MCP_TEST_LEGACY="1"):  # it forgot the session
            assert tools.call("append_line", {"text": "two"}) == "appended 'two'"
            assert tools.call("append_line", {"text": "three"}) == "appended 'three'"
    finally:
        tools.close()
    assert [line["text"] for line in lines(log)] == ["one", "two", "three"]


def test_a_call_that_crashes_a_stdio_server_is_answered_once_and_the_server_restarted(
    tmp_path: Path,
):
    log = tmp_path / "calls.jsonl"
    tools = stdio_tools(log, env=ODD)
    try:
        answer = tools.call("crash", {"text": "charged"})
        assert answer.startswith("Error: MCP server 'tests' exited during the call to tool crash")
        assert "may or may not have taken effect" in answer
        assert [line["text"] for line in lines(log)] == ["charged"]  # not sent again
        assert tools.call("add", {"a": 1, "b": 2}) == "3"  # the next call starts it again
    finally:
        tools.close()


def test_a_call_that_crashes_an_http_server_is_answered_once(tmp_path: Path):
    log = tmp_path / "calls.jsonl"
    with http_server(log, **ODD) as url:
        tools = MCPTools(url=url, name="tests", timeout=10)
        try:
            answer = tools.call("crash", {"text": "charged"})
        finally:
            tools.close()
    assert answer.startswith("Error: MCP server 'tests' dropped the connection during the call")
    assert "may or may not have taken effect" in answer
    assert [line["text"] for line in lines(log)] == ["charged"]


def test_a_call_that_does_not_answer_in_time_is_answered_with_the_timeout(tmp_path: Path):
    tools = stdio_tools(tmp_path / "calls.jsonl", env=ODD, timeout=1)
    try:
        answer = tools.call("sleep", {"seconds": 5})
        assert answer == (
            "Error: MCP tool sleep on server 'tests' did not answer within 1 seconds; it may or "
            "may not have taken effect."
        )
        assert tools.call("add", {"a": 1, "b": 1}) == "2"
    finally:
        tools.close()


def test_a_server_parameter_named_idempotency_key_is_the_models(tmp_path: Path):
    tools = stdio_tools(tmp_path / "calls.jsonl", env=ODD, include=["keyed"])
    try:
        client = ScriptedClient(
            [calls(ToolCall("keyed", {"idempotency_key": "from-the-model"}, id="k")), text("ok")]
        )
        response = Swarm(client).run(
            Agent(name="Keys", functions=[tools]), [{"role": "user", "content": "go"}]
        )
        assert "idempotency_key" in offered(client.requests[0])["keyed"]["parameters"]["properties"]
        seen = json.loads(tool_messages(response.messages)["k"])
        assert seen == {"param": "from-the-model", "meta": None}
    finally:
        tools.close()
