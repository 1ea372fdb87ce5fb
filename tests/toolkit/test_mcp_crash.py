"""Crash tests of MCP and shell tool calls, on SQLite and PostgreSQL: a child process runs a durable
conversation whose tool has a side effect, and is killed with SIGKILL right after that tool call
finished (while the next model call is in flight); a new process recovers the run, which must end
without making the call again (the side effect happens once, counted at the MCP server or in the
workspace) and, for MCP, offering the tool list it recorded although the server changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from _support.logs import read_lines
from _support.procs import wait_for
from durable_swarm.testing import FakeOpenAIServer, Fault, ToolCall, calls, text

from ._mcp_support import free_port, http_server, lines

pytestmark = pytest.mark.crash

CHILD = str(Path(__file__).with_name("_mcp_child.py"))
TIMEOUT = 120.0
TOOL_CALLS = {
    "mcp": ToolCall("append_line", {"text": "charged"}, id="effect"),
    "mcp-http": ToolCall("append_line", {"text": "charged"}, id="effect"),
    "shell": ToolCall(
        "run_command", {"command": ["sh", "-c", "echo charged >> effects.txt"]}, id="effect"
    ),
}


class Model:
    """The fake model: call the tool, then answer; the first answer after the tool is held (so
    the test can kill the child while it waits for it)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.after_tool = 0

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Any:
        if not any(m["role"] == "tool" for m in messages):
            return calls(TOOL_CALLS[self.tool])
        self.after_tool += 1
        return Fault.delay(300, text("done")) if self.after_tool == 1 else text("done")


def spawn(config: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, CHILD, json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "DURABLE_SWARM_LOG_LEVEL": "ERROR"},
        )


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


@pytest.mark.parametrize("tool", ["mcp", "mcp-http", "shell"])
def test_a_finished_tool_call_is_not_made_again_after_a_crash(
    tool: str, make_database_url, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    mcp_log = tmp_path / "mcp-calls.jsonl"
    model = Model(tool)
    port = free_port()
    with ExitStack() as servers:
        server = servers.enter_context(FakeOpenAIServer(model))
        mcp_server = servers.enter_context(ExitStack())
        if tool == "mcp-http":
            mcp_server.enter_context(http_server(mcp_log, port))
        config = {
            "tool": tool,
            "url": f"http://127.0.0.1:{port}/mcp",
            "database_url": make_database_url(f"crash_{tool.replace('-', '_')}"),
            "base_url": server.base_url,
            "run_id": f"crash-{tool}-{uuid.uuid4().hex[:8]}",
            "executor_id": f"mcp-crash-{uuid.uuid4().hex[:8]}",
            "log": str(mcp_log),
            "work_dir": str(work),
            "result": str(tmp_path / "result.json"),
        }
        output = tmp_path / "children.log"
        first = spawn({**config, "action": "run"}, output)
        try:
            wait_for(
                lambda: model.after_tool or first.poll() is not None,
                "the model call after the tool",
                timeout=TIMEOUT,
            )
            assert first.poll() is None, output.read_text()[-4000:]
        finally:
            first.send_signal(signal.SIGKILL)  # right after the tool call's step finished
            first.wait()

        def effects() -> list[Any]:
            if tool != "shell":
                return lines(mcp_log)
            return read_lines(work / "effects.txt")

        assert len(effects()) == 1
        if tool == "mcp-http":  # the server changes: restarted with one more tool
            mcp_server.close()
            servers.enter_context(http_server(mcp_log, port, MCP_TEST_EXTRA="1"))
        second = spawn({**config, "action": "recover", "changed": True}, output)
        try:
            code = second.wait(TIMEOUT)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait()
        assert code == 0, output.read_text()[-4000:]
        result = json.loads(Path(config["result"]).read_text())
        requests = server.requests

    assert result["status"] == "succeeded", result["error"]
    assert len(effects()) == 1  # the finished call was not made again
    if tool != "shell":
        assert effects()[0]["key"].startswith(config["run_id"] + ":")
    tool_message = next(m for m in result["messages"] if m["role"] == "tool")
    expected = "exit code 0" if tool == "shell" else "appended 'charged'"
    assert tool_message["content"] == expected
    assert result["messages"][-1]["content"] == "done"
    # model calls: the first once, the held one (in flight at the kill) again after recovery
    assert len(requests) == 3
    if tool != "shell":
        # the recovered run offered the tool list it recorded, not the changed server's
        assert offered(requests[2]) == offered(requests[0])
        assert "multiply" not in offered(requests[2])
        assert [kind for _, kind, _ in result["steps"]].count("tools") == 1
