"""What every example shares: the model client, Swarm or DurableSwarm, and scripted user input.

Examples run offline by default: a scripted model answers instead of OpenAI. It is a
`durable_swarm.testing.ScriptedClient` driven by a small function of the conversation (each example
writes its own), so the demo behaves like a real agent would, and the example says so on screen.
Set `OPENAI_API_KEY` (OpenAI) or `OPENAI_BASE_URL` / `--base-url` (any OpenAI-compatible server) to
use a real model; `--model` (else `DURABLE_SWARM_MODEL`, else `OPENAI_MODEL`) then picks the model
for every agent.

Options every example accepts (see `parse_args`):

* `--durable` (or `EXAMPLES_DURABLE=1`): run on `DurableSwarm` instead of `Swarm`, stored in the
  embedded SQLite default (`durable_swarm.sqlite` in the working directory, or
  `DURABLE_SWARM_DATABASE_URL`), or in `--database-url`. `durable-swarm runs list` shows the runs.
* `--offline` (or `EXAMPLES_OFFLINE=1`): the scripted model even when a real one is configured.
* `--model NAME`, `--base-url URL`: the real model every agent asks for, and the server.
* `--say TEXT` (repeatable, interactive examples): the user's lines, instead of the keyboard.
  Lines piped on stdin work too; end of input ends the chat.

Examples import this module by putting the `examples/` directory on `sys.path`, so they run both
as files (`python examples/basic/bare_minimum.py`) and as modules
(`python -m examples.basic.bare_minimum`) from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from durable_swarm import DurableSwarm, Swarm
from durable_swarm.testing import ScriptedClient, ScriptFunction

OFFLINE_NOTICE = (
    "(offline: scripted model — set OPENAI_API_KEY or OPENAI_BASE_URL to use a real model)"
)

Message = dict[str, Any]


# --- options --------------------------------------------------------------------------------


def parse_args(
    description: str,
    argv: Sequence[str] | None = None,
    *,
    interactive: bool = False,
    stream: bool = False,
) -> argparse.Namespace:
    """Parse the options every example shares (and `--say`/`--stream` for chats)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--durable",
        action="store_true",
        default=_env_flag("EXAMPLES_DURABLE"),
        help="run on DurableSwarm (every model and tool call checkpointed) instead of Swarm",
    )
    parser.add_argument(
        "--database-url",
        help="where --durable stores runs (default: DURABLE_SWARM_DATABASE_URL, else "
        "durable_swarm.sqlite in the working directory)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        default=_env_flag("EXAMPLES_OFFLINE"),
        help="use the scripted model even if OPENAI_API_KEY or OPENAI_BASE_URL is set",
    )
    add_model_options(parser)
    if interactive:
        parser.add_argument(
            "--say",
            action="append",
            metavar="TEXT",
            help="a line the user types (repeatable); without it lines are read from stdin",
        )
        parser.add_argument(
            "--stream",
            action=argparse.BooleanOptionalAction,
            default=stream,
            help="print the answer as it arrives",
        )
    return parser.parse_args(argv)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """`--model` and `--base-url`, for examples with their own parser."""
    parser.add_argument(
        "--model",
        default=os.environ.get("DURABLE_SWARM_MODEL") or os.environ.get("OPENAI_MODEL"),
        help="the model every agent asks for (default: DURABLE_SWARM_MODEL, else OPENAI_MODEL, "
        "else each agent's own)",
    )
    parser.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL"),
        metavar="URL",
        help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 (default: "
        "OPENAI_BASE_URL); setting it uses the real model",
    )


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


# --- client and swarm -----------------------------------------------------------------------


def real_model_configured(base_url: str | None = None) -> bool:
    """Whether a real model is configured (`base_url`, `OPENAI_API_KEY` or `OPENAI_BASE_URL`)."""
    return bool(base_url or os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


def make_client(
    script: ScriptFunction,
    *,
    offline: bool = False,
    announce: bool = True,
    base_url: str | None = None,
    model: str | None = None,
) -> Any:
    """The model client: a real OpenAI client when one is configured (and not `offline`), at
    `base_url` if given, else a `ScriptedClient` answering with `script`. Says which one on
    screen when `announce` (with `model`, the model the swarm will ask for)."""
    if offline or not real_model_configured(base_url):
        if announce:
            print(OFFLINE_NOTICE)
        return ScriptedClient(script)
    from openai import OpenAI

    client = OpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "not-needed", base_url=base_url)
    if announce:
        print(f"(real model: {model or 'each agent’s model'} at {client.base_url})")
    return client


def make_swarm(script: ScriptFunction, args: argparse.Namespace) -> Any:
    """`Swarm` (or `DurableSwarm` with `--durable`) on the client `make_client` picks, asking
    for `--model` when one is given."""
    client = make_client(script, offline=args.offline, base_url=args.base_url, model=args.model)
    model = None if args.offline else args.model
    if not args.durable:
        return Swarm(client=client, model=model)
    swarm = DurableSwarm(client, model=model, database_url=args.database_url)
    print(
        f"(durable: runs are stored in {swarm.database_url} — see them with "
        "`durable-swarm runs list`)"
    )
    return swarm


def input_lines(args: argparse.Namespace) -> Callable[[str], str] | None:
    """The user's lines from `--say`, as an `input` replacement (None: read the terminal)."""
    lines = list(getattr(args, "say", None) or [])
    if not lines:
        return None

    def scripted_input(prompt: str) -> str:
        if not lines:
            raise EOFError
        line = lines.pop(0)
        print(f"{prompt}{line}")
        return line

    return scripted_input


# --- reading the conversation (for the scripted models) -------------------------------------


def last_user_text(messages: Sequence[Message]) -> str:
    """The text of the latest user message ("" if there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def this_turn(messages: Sequence[Message]) -> list[Message]:
    """The messages after the latest user message: what the agents did in this turn."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return list(messages[index + 1 :])
    return list(messages)


def tools_called(messages: Sequence[Message]) -> list[str]:
    """The names of the tools that ran since the latest user message, in order."""
    return [
        str(m.get("tool_name") or m.get("name") or "")
        for m in this_turn(messages)
        if m.get("role") == "tool"
    ]


def tool_names(tools: Sequence[dict[str, Any]] | None) -> set[str]:
    """The names of the tools offered in a request (which tells the script who is speaking)."""
    return {t["function"]["name"] for t in tools or []}


def system_prompt(messages: Sequence[Message]) -> str:
    """The system message of a request: the speaking agent's instructions."""
    if messages and messages[0].get("role") == "system":
        return str(messages[0].get("content") or "")
    return ""


def my_tool_result(
    messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None
) -> str | None:
    """The content of the last message if it is the result of one of the offered tools.

    A result of another agent's tool (a handoff into the speaking agent) returns None: the new
    agent then answers the user's latest message itself.
    """
    if not messages or messages[-1].get("role") != "tool":
        return None
    if messages[-1].get("tool_name") not in tool_names(tools):
        return None
    return str(messages[-1].get("content") or "")


def has_words(text: str, *words: str) -> bool:
    """Whether `text` contains any of `words` (whole words, case-insensitive; `*` ends a prefix)."""
    lowered = text.lower()
    for word in words:
        pattern = re.escape(word.lower()).replace(r"\*", r"\w*")
        if re.search(rf"(?<!\w){pattern}(?!\w)", lowered):
            return True
    return False


def arguments(messages: Sequence[Message], tool: str) -> dict[str, Any]:
    """The arguments of the latest call to `tool` in this turn ({} if it was not called)."""
    for message in reversed(this_turn(messages)):
        for call in message.get("tool_calls") or []:
            if call["function"]["name"] == tool:
                try:
                    parsed = json.loads(call["function"].get("arguments") or "{}")
                except ValueError:
                    return {}
                return parsed if isinstance(parsed, dict) else {}
    return {}


_PLACE = re.compile(
    r"\b(?:in|for|at)\s+([A-Za-z][A-Za-z .'-]*?)"
    r"\s*(?:[?.!,;]|\b(?:to|and|please|today|now|tomorrow)\b|$)"
)
_NOT_PLACES = {"the", "a", "an", "general", "my", "your", "it", "there", "here"}


def place_in(text: str) -> str | None:
    """The place a sentence names after "in", "for" or "at" (title-cased), if any."""
    for match in _PLACE.finditer(text):
        place = match.group(1).strip()
        if place and place.split()[0].lower() not in _NOT_PLACES:
            return place if place.isupper() else place.title()
    return None
