"""The MCP server of the MCP tests, written with the `mcp` package's `MCPServer` (FastMCP).

`python _mcp_server.py` serves over stdio; `python _mcp_server.py http PORT` serves streamable
HTTP at `http://127.0.0.1:PORT/mcp`. Every call of `append_line` appends `text`, the request's
idempotency key and the server's pid to the file named by `MCP_TEST_LOG`, so tests count side
effects at the server. `MCP_TEST_EXTRA=1` adds the tool `multiply` (a changed server).
"""

from __future__ import annotations

import json
import os
import sys

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-server", log_level="ERROR")


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

if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run()
