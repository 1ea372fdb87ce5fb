"""What an oversized MCP answer costs a worker: time and peak memory, over stdio and HTTP.

A worker process (`tests/toolkit/_mcp_bounds_child.py`) talks to the MCP test server
(`tests/toolkit/_mcp_server.py`, written with the `mcp` package) over stdio, and over streamable
HTTP with the server in a process of its own, and:

  * calls `big`, which answers 200 MB of text (the default `max_message_bytes`, 10 MiB, refuses
    it; with `--max-message-bytes 400000000` the whole answer is read, showing the reader is
    linear);
  * lists 5,000 tools described by 100 KB each (500 MB of listing).

For each it prints the seconds until the answer (from the request: most of them are the
server's, building its answer before the first byte arrives), the CPU seconds the worker spent
meanwhile, the worker's peak memory over its baseline (VmHWM, MiB), and the seconds of the next
call on the same `MCPTools` (a stdio server is started again, the connection having been closed;
on the 5,000-tool server the `mcp` package lists the tools again before a new connection's first
call returns, so that call meets the limit too).

    .venv/bin/python benchmarks/mcp_bounds.py
    .venv/bin/python benchmarks/mcp_bounds.py --max-message-bytes 400000000 --only call
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import print_table

TESTS = Path(__file__).resolve().parent.parent / "tests"
CHILD = TESTS / "toolkit" / "_mcp_bounds_child.py"
sys.path[:0] = [str(TESTS), str(TESTS / "toolkit")]

from _mcp_support import http_server  # noqa: E402

CASES = {
    "call": ({}, {"action": "call", "tool": "big", "arguments": {"size": 200_000_000}}),
    "list": ({"MCP_TEST_MANY": "5000:100000"}, {"action": "list"}),
}


def worker(config: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(config)], capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def outcome(report: dict[str, Any]) -> str:
    if "error" in report:
        return report["error"][:60]
    if "listing" in report:
        return f"{len(report['listing'])} tools"
    return str(report["answer"])[:60].replace("\n", " ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-message-bytes", type=int, default=None)
    parser.add_argument("--only", choices=sorted(CASES), default=None)
    args = parser.parse_args()
    options = (
        {} if args.max_message_bytes is None else {"max_message_bytes": args.max_message_bytes}
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="durable-swarm-bench-mcp-bounds-") as tmp:
        log = Path(tmp) / "calls.jsonl"
        for case, (env, request) in CASES.items():
            if args.only not in (None, case):
                continue
            for transport in ("stdio", "http"):
                config: dict[str, Any] = {**request, "options": options}
                if transport == "stdio":
                    report = worker({**config, "log": str(log), "env": env})
                else:
                    with http_server(log, **env) as url:
                        report = worker({**config, "url": url})
                growth = (report["peak_kib"] - report["baseline_kib"]) / 1024
                rows.append(
                    (
                        f"{case} {transport}",
                        report["seconds"],
                        report["cpu_seconds"],
                        growth,
                        report["next_seconds"],
                        outcome(report),
                    )
                )
    print_table(
        "Oversized MCP answers (200 MB result; 5,000 tools x 100 KB)",
        ["case", "answer s", "cpu s", "peak +MiB", "next call s", "outcome"],
        rows,
    )


if __name__ == "__main__":
    main()
