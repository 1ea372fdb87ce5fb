"""Run `FakeOpenAIServer` as a process: ``python -m durable_swarm.testing.server --help``."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._script import Script, entry_from_json
from ._server import FakeOpenAIServer

__all__ = ["FakeOpenAIServer", "main"]


def _load_script(spec: str | None, script_file: str | None) -> Script | None:
    if script_file is not None:
        data = json.loads(Path(script_file).read_text())
        if not isinstance(data, list):
            raise SystemExit(f"{script_file}: expected a JSON list of replies")
        return [entry_from_json(item) for item in data]
    if spec is None:
        return None
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise SystemExit(f"--script expects module:attribute, got {spec!r}")
    script: Any = importlib.import_module(module_name)
    return functools.reduce(getattr, attribute.split("."), script)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a `FakeOpenAIServer` until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m durable_swarm.testing.server",
        description=(
            "An OpenAI-compatible fake chat completions server. Without --script or --script-file "
            "it answers every request with 'You said: <last user message>'."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default 0: any free)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between streamed chunks"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--script",
        metavar="MODULE:ATTR",
        help="a script: a list of replies or a function (messages, tools) -> reply",
    )
    source.add_argument(
        "--script-file",
        metavar="PATH",
        help='a JSON list of replies, e.g. [{"content": "hi"}, {"tool_calls": [{"name": "f", '
        '"arguments": {"a": 1}}]}, {"fault": "status", "status": 429}]',
    )
    parser.add_argument(
        "--port-file", metavar="PATH", help="write the bound port to PATH once listening"
    )
    args = parser.parse_args(argv)

    server = FakeOpenAIServer(
        _load_script(args.script, args.script_file),
        latency=args.latency,
        chunk_delay=args.chunk_delay,
        host=args.host,
        port=args.port,
    )
    stopping = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    with server:
        if args.port_file:
            partial = Path(f"{args.port_file}.partial")
            partial.write_text(str(server.port))
            os.replace(partial, args.port_file)
        print(f"FakeOpenAIServer listening on {server.base_url}", flush=True)
        stopping.wait()
    print("FakeOpenAIServer stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
