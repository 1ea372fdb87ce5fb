"""Helpers of the MCP tests: the test server (`_mcp_server.py`) over stdio or streamable HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _support.procs import wait_for
from durable_swarm.toolkit import MCPTools

SERVER = str(Path(__file__).with_name("_mcp_server.py"))
STARTUP_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@contextmanager
def http_server(log: Path, port: int | None = None, **env: str) -> Iterator[str]:
    """The test server over streamable HTTP, in a process of its own; yields its URL."""
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        env={**_base_env(), "MCP_TEST_LOG": str(log), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            lambda: accepts(port) or process.poll() is not None,
            "the MCP HTTP server",
            timeout=STARTUP_TIMEOUT,
        )
        assert process.poll() is None, "the MCP HTTP server exited at start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}


def stdio_tools(log: Path, **options: Any) -> MCPTools:
    """`MCPTools` starting the test server over stdio."""
    env = {"MCP_TEST_LOG": str(log), **options.pop("env", {})}
    return MCPTools(command=[sys.executable, SERVER], env=env, name="tests", **options)


def lines(log: Path) -> list[dict[str, Any]]:
    """What `append_line` appended, one dict per call."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]
