"""`durable-swarm chat module:agent`: the terminal chat (`run_demo_loop`) on durable runs."""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ..durable import DurableSwarm, resolve_database_url
from ..durable._database import display_url
from ..repl import run_demo_loop
from ._budget import budget_of
from ._store import CliError
from ._style import Style

__all__ = ["cmd_chat", "load_agent"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXAMPLE = "e.g. `myapp.agents:triage_agent` or `examples/triage_agent/agents.py:triage_agent`"


def _import(module: str) -> ModuleType:
    """Import a module by dotted name (from the working directory too) or by file path."""
    if module.endswith(".py") or os.sep in module or "/" in module:
        path = Path(module).resolve()
        if not path.is_file():
            raise CliError(f"No such file: {path}. chat expects MODULE:AGENT, {_EXAMPLE}.", 2)
        # The script's directory and its parent, so its own imports work as when run directly.
        for folder in (path.parent.parent, path.parent):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        name = path.stem if path.name != "__init__.py" else path.parent.name
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CliError(f"Cannot import {path}: not a Python module.", 2)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
        return loaded
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(module)


def load_agent(target: str) -> Any:
    """The agent `target` names: `module:attribute` (dotted attributes allowed)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise CliError(f"chat expects MODULE:AGENT, got {target!r}; {_EXAMPLE}.", 2)
    try:
        module = _import(module_name)
    except CliError:
        raise
    except Exception as e:
        raise CliError(f"Cannot import {module_name!r}: {type(e).__name__}: {e}", 1) from e
    try:
        agent = functools.reduce(getattr, attribute.split("."), module)
    except AttributeError as e:
        raise CliError(f"{module_name!r} has no attribute {attribute!r}; {_EXAMPLE}.", 1) from e
    if not (hasattr(agent, "name") and hasattr(agent, "functions")):
        raise CliError(f"{target!r} is a {type(agent).__name__}, not an Agent.", 1)
    return agent


def _client(base_url: str | None) -> Any:
    """A real model client: OpenAI, or any OpenAI-compatible server at `base_url` (default
    OPENAI_BASE_URL)."""
    if not (base_url or os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        raise CliError(
            "chat needs a model: set OPENAI_API_KEY, or --base-url (or OPENAI_BASE_URL) for an "
            "OpenAI-compatible server (offline: `python -m durable_swarm.testing.server` serves "
            "an echo model)."
        )
    from openai import OpenAI

    return OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "not-needed", base_url=base_url)


def cmd_chat(args: argparse.Namespace, style: Style) -> int:
    """`chat`: chat with an agent in the terminal; every turn is a durable run, with
    `--session NAME` a run of that session, so the conversation carries over to the next chat
    of the session (and compacts past `--compact-at` tokens)."""
    agent = load_agent(args.target)
    try:
        context = json.loads(args.context) if args.context else None
    except ValueError as e:
        raise CliError(f"--context must be a JSON object: {e}", 2) from e
    if context is not None and not isinstance(context, dict):
        raise CliError('--context must be a JSON object, like \'{"name": "Ada"}\'.', 2)
    url = resolve_database_url(getattr(args, "database_url", None))
    swarm = DurableSwarm(
        _client(args.base_url),
        model=args.model,
        database_url=url,
        budget=budget_of(args),
        compact_at=getattr(args, "compact_at", None),
    )
    options: dict[str, Any] = {"swarm": swarm, "stream": args.stream, "context_variables": context}
    if args.session:
        options["session"] = args.session
    model = f"model {swarm.model}" if swarm.model else "each agent's model"
    print(
        style.paint(
            f"(durable chat: every turn is a run stored in {display_url(url)}; {model})", "dim"
        )
    )
    stdout = sys.stdout
    if not style.enabled:  # run_demo_loop prints Swarm's colours: not for a pipe, nor NO_COLOR
        sys.stdout = _Plain(stdout)
    try:
        run_demo_loop(agent, **options)
    finally:
        sys.stdout = stdout
    return 0


class _Plain:
    """A text stream that drops ANSI colour codes on their way to `stream`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(_ANSI.sub("", text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
