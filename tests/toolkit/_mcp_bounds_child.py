"""A child process of the MCP bounds tests and benchmark: `python _mcp_bounds_child.py CONFIG_JSON`.

It makes `MCPTools` on the test server (`url`, else over stdio with `env`) with `options`, then
`call`s the tool `tool` with `arguments` (and `add` after it, on the same `MCPTools`) or `list`s
the server's tools, and prints JSON: what came back (or the error), the seconds it took, the CPU
seconds this process spent meanwhile (all its threads), and its peak resident memory (`VmHWM`,
in KiB).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from durable_swarm.toolkit import MCPTools

SERVER = str(Path(__file__).with_name("_mcp_server.py"))


def peak_kib() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(config: dict[str, Any]) -> None:
    options = config.get("options", {})
    if config.get("url"):
        tools = MCPTools(url=config["url"], name="tests", **options)
    else:
        env = {"MCP_TEST_LOG": config["log"], **config.get("env", {})}
        tools = MCPTools(command=[sys.executable, SERVER], env=env, name="tests", **options)
    tools.call("pid", {})  # connected before the clock starts
    out: dict[str, Any] = {"baseline_kib": peak_kib()}
    started, cpu = time.monotonic(), cpu_seconds()
    try:
        if config["action"] == "call":
            out["answer"] = tools.call(config["tool"], config.get("arguments", {}))
        else:
            out["listing"] = [d["tool"] for d in tools.list_tools()]
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = time.monotonic() - started
    out["cpu_seconds"] = cpu_seconds() - cpu
    out["peak_kib"] = peak_kib()
    started = time.monotonic()
    out["next"] = tools.call("add", {"a": 1, "b": 2})
    out["next_seconds"] = time.monotonic() - started
    tools.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
