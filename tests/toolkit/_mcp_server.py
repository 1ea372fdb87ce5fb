"""The MCP server of the MCP tests, written with the `mcp` package's `MCPServer` (FastMCP).

`python _mcp_server.py` serves over stdio; `python _mcp_server.py http PORT` serves streamable
HTTP at `http://127.0.0.1:PORT/mcp`. Every call of `append_line` appends `text`, the request's
idempotency key and the server's pid to the file named by `MCP_TEST_LOG`, so tests count side
effects at the server. `MCP_TEST_EXTRA=1` adds the tool `multiply` (a changed server).

`MCP_TEST_ODD=1` adds odd tools: `crash` (appends a line as `append_line`, then exits without
answering), one whose name is 70 characters long (`LONG_NAME`), `keyed` (a parameter named
`idempotency_key`), `sleep`, and `only_as_task` (to be run only as an MCP task:
`execution.taskSupport` "required", which clients of the 2025 protocol see).
`MCP_TEST_LEGACY=1` makes the server speak only the 2025 protocol (over HTTP: a session per
client, forgotten when the server restarts).

`MCP_TEST_CLASH=1` adds tools whose names clash: `transfer_to_billing` (appends a line as
`append_line` and answers "mcp transfer"), `get.user` and `get_user` (one name once made valid).
`MCP_TEST_JSON=1` makes the HTTP server answer with JSON bodies instead of event streams.
`MCP_TEST_MANY=COUNT:SIZE` lists COUNT more tools `tool_0`, `tool_1`, ... each described by SIZE
characters; `MCP_TEST_SCHEMA=SIZE` gives `add` an input schema of about SIZE characters (a
description of `a` that long).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND, Tool, ToolExecution

LONG_NAME = "a_tool_with_a_very_long_name_that_no_model_api_accepts_as_it_is_given"


class TestServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        """The tools, `only_as_task` marked as runnable only as a task; with `MCP_TEST_MANY`/
        `MCP_TEST_SCHEMA`, many tools, long descriptions, a long schema."""
        required = ToolExecution(task_support="required")
        tools = []
        for t in await super().list_tools():
            if t.name == "only_as_task":
                t = t.model_copy(update={"execution": required})
            elif t.name == "add" and os.environ.get("MCP_TEST_SCHEMA"):
                schema = json.loads(json.dumps(t.input_schema))
                schema["properties"]["a"]["description"] = "a" * int(os.environ["MCP_TEST_SCHEMA"])
                t = t.model_copy(update={"input_schema": schema})
            tools.append(t)
        if os.environ.get("MCP_TEST_MANY"):
            count, size = (int(n) for n in os.environ["MCP_TEST_MANY"].split(":"))
            description = "d" * size  # one string shared by every tool
            schema = {"type": "object", "properties": {}}
            tools += [
                Tool(name=f"tool_{i}", description=description, input_schema=schema)
                for i in range(count)
            ]
        return tools


server = TestServer("test-server", log_level="ERROR")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def append_line(text: str, ctx: Context) -> str:
    """Append a line of text to the log (a side effect)."""
    meta = ctx.request_context.meta or {}
    line = {"text": text, "key": meta.get("idempotency_key"), "pid": os.getpid()}
    with open(os.environ["MCP_TEST_LOG"], "a") as f:
        f.write(json.dumps(line) + "\n")
    return f"appended {text!r}"


@server.tool()
def fail(reason: str = "broken") -> str:
    """Always fails."""
    raise ToolError(f"cannot do it: {reason}")


@server.tool()
def picture() -> Image:
    """A tiny PNG image."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + b"\0" * 40, format="png")


@server.tool()
def big(size: int) -> str:
    """`size` characters of text."""
    return "x" * size


@server.tool()
def pid() -> int:
    """The server process's id."""
    return os.getpid()


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of the HTTP request header `name` (empty over stdio)."""
    request = ctx.request_context.request
    return str(request.headers.get(name, "")) if request is not None else ""


@server.tool()
def evolve() -> str:
    """Change the server: `add` goes away and `multiply` arrives."""
    server.remove_tool("add")
    server.add_tool(multiply)
    return "evolved"


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


if os.environ.get("MCP_TEST_EXTRA") == "1":
    server.add_tool(multiply)

if os.environ.get("MCP_TEST_LEGACY") == "1":

    async def legacy_only(ctx: Any, call_next: Any) -> Any:
        """Refuse `server/discover`: clients fall back to the 2025 protocol's handshake."""
        if ctx.method == "server/discover":
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found")
        return await call_next(ctx)

    server.middleware.append(legacy_only)

if os.environ.get("MCP_TEST_ODD") == "1":

    @server.tool()
    def crash(text: str, ctx: Context) -> str:
        """Append a line of text to the log (as `append_line`), then exit without answering."""
        append_line(text, ctx)
        os._exit(1)

    @server.tool(name=LONG_NAME)
    def long_name() -> str:
        """A tool with a 70-character name."""
        return "long"

    @server.tool()
    def keyed(idempotency_key: str, ctx: Context) -> str:
        """A tool with a parameter named idempotency_key: both it and the request's key."""
        meta = ctx.request_context.meta or {}
        return json.dumps({"param": idempotency_key, "meta": meta.get("idempotency_key")})

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Wait `seconds`, then answer."""
        await asyncio.sleep(seconds)
        return "awake"

    @server.tool()
    def only_as_task() -> str:
        """A tool that can only be run as an MCP task."""
        return "never"


if os.environ.get("MCP_TEST_CLASH") == "1":

    @server.tool()
    def transfer_to_billing(ctx: Context) -> str:
        """Not a handoff: appends a line to the log (as `append_line`)."""
        append_line("mcp transfer", ctx)
        return "mcp transfer"

    @server.tool(name="get.user")
    def get_user_dotted() -> str:
        """The user, by a dotted name."""
        return "dotted"

    @server.tool(name="get_user")
    def get_user_plain() -> str:
        """The user, by a plain name."""
        return "plain"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        json_response = os.environ.get("MCP_TEST_JSON") == "1"
        server.run("streamable-http", port=int(sys.argv[2]), json_response=json_response)
    else:
        server.run()
