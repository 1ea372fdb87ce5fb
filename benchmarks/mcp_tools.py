"""What an MCP tool call and a shell command cost, in memory and as durable steps.

An MCP server (written with the `mcp` package, an `echo` tool) runs over stdio and over streamable
HTTP on this machine. The benchmark prints:

  * connect: the first call of a fresh `MCPTools` (starting the server process for stdio, the
    session handshake for both), median of a few;
  * call: one `MCPTools.call` on an open connection (median), against calling a Python function;
  * run: a whole `Swarm` run (model -> tool -> model, scripted model in process) whose tool is the
    MCP `echo`, a Python `echo`, or `ShellTool` running `true` (directly, and under bubblewrap
    when it works here), and the same as durable runs (SQLite, and PostgreSQL when reachable).

    .venv/bin/python benchmarks/mcp_tools.py            # 200 calls, 50 runs of each kind
    .venv/bin/python benchmarks/mcp_tools.py --quick    # 30 calls, 10 runs
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _common import databases, median, print_table

from durable_swarm import Agent, DurableSwarm, MCPTools, ShellTool, Swarm
from durable_swarm.durable import shutdown
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text
from durable_swarm.toolkit._shell import _working_bwrap

SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench", log_level="ERROR")


@server.tool()
def echo(text: str) -> str:
    """Return `text`."""
    return text


if sys.argv[1:2] == ["http"]:
    server.run("streamable-http", port=int(sys.argv[2]))
else:
    server.run()
'''


def echo(text: str) -> str:
    """Return `text` (the Python twin of the server's tool)."""
    return text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(script: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the MCP HTTP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def timed_ms(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def script(call: ToolCall) -> Callable[..., Any]:
    def answer(messages: list[dict[str, Any]], tools: Any) -> Any:
        return text("done") if messages[-1]["role"] == "tool" else calls(call)

    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 calls and 10 runs of each kind")
    args = parser.parse_args()
    n_calls, n_runs = (30, 10) if args.quick else (200, 50)
    with tempfile.TemporaryDirectory(prefix="durable-swarm-bench-mcp-") as tmp:
        server = Path(tmp) / "server.py"
        server.write_text(SERVER)
        with http_server(server) as url:
            targets = {
                "stdio": lambda: MCPTools(command=[sys.executable, str(server)], name="bench"),
                "http": lambda: MCPTools(url=url, name="bench"),
            }
            rows = []
            for label, make in targets.items():
                connects = []
                for _ in range(3):
                    fresh = make()
                    connects.append(timed_ms(lambda t=fresh: t.call("echo", {"text": "hi"})))
                    fresh.close()
                tools = make()
                per_call = [
                    timed_ms(lambda t=tools: t.call("echo", {"text": "hi"})) for _ in range(n_calls)
                ]
                tools.close()
                rows.append((label, median(connects), median(per_call)))
            python = [timed_ms(lambda: echo("hi")) for _ in range(n_calls)]
            rows.append(("python function", 0.0, median(python)))
            print_table("MCP calls (ms, median)", ["transport", "connect", "call"], rows)

            kinds: dict[str, tuple[Any, ToolCall]] = {
                "python tool": (echo, ToolCall("echo", {"text": "hi"})),
                "MCP stdio": (targets["stdio"](), ToolCall("echo", {"text": "hi"})),
                "MCP http": (targets["http"](), ToolCall("echo", {"text": "hi"})),
                "shell (direct)": (
                    ShellTool(tmp, needs_approval=False, sandbox=False),
                    ToolCall("run_command", {"command": ["true"]}),
                ),
            }
            if not _working_bwrap().startswith("Error"):
                kinds["shell (bwrap)"] = (
                    ShellTool(tmp, needs_approval=False, sandbox=True),
                    ToolCall("run_command", {"command": ["true"]}),
                )
            agents = {
                label: Agent(name=f"bench-{i}", functions=[tool])
                for i, (label, (tool, _)) in enumerate(kinds.items())
            }
            messages = [{"role": "user", "content": "go"}]
            memory = {}
            for label, (_, call) in kinds.items():
                swarm = Swarm(ScriptedClient(script(call)))
                swarm.run(agents[label], messages)  # connects
                memory[label] = median(
                    [
                        timed_ms(lambda s=swarm, a=agents[label]: s.run(a, messages))
                        for _ in range(n_runs)
                    ]
                )
            durable: dict[str, dict[str, float]] = {}
            with databases() as dbs:
                for db_label, db_url in dbs:
                    for label, (_, call) in kinds.items():
                        swarm = DurableSwarm(ScriptedClient(script(call)), database_url=db_url)
                        swarm.run(agents[label], messages, run_id=f"warm-{uuid.uuid4().hex}")
                        durable.setdefault(label, {})[db_label] = median(
                            [
                                timed_ms(
                                    lambda s=swarm, a=agents[label]: s.run(
                                        a, messages, run_id=f"bench-{uuid.uuid4().hex}"
                                    )
                                )
                                for _ in range(n_runs)
                            ]
                        )
                    shutdown()
            labels = [db for db, _ in dbs]
            print_table(
                "Whole runs, model -> tool -> model (ms per run, median)",
                ["tool", "Swarm", *(f"durable {db}" for db in labels)],
                [(label, memory[label], *(durable[label][db] for db in labels)) for label in kinds],
            )
            for tool, _ in kinds.values():
                if isinstance(tool, MCPTools):
                    tool.close()


if __name__ == "__main__":
    main()
