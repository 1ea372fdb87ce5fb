"""Test doubles for code that calls OpenAI chat completions.

* `ScriptedClient` / `AsyncScriptedClient`: in-process stand-ins for
  ``openai.OpenAI`` / ``openai.AsyncOpenAI`` returning real ``openai`` pydantic objects.
* `FakeOpenAIServer`: an OpenAI-compatible HTTP server for the real ``openai`` client,
  with injectable faults (HTTP errors, dropped connections, malformed bodies, latency); also
  runnable as a process: ``python -m durable_swarm.testing.server``.

Both answer from a *script* (``Script``): a sequence of entries (``Entry``: `Reply`,
``str`` or, for the server, `Fault`) consumed one per request, or a function
``(messages, tools) -> entry`` (``ScriptFunction``).
"""

from ._client import AsyncScriptedClient, ScriptedClient
from ._script import (
    Entry,
    Fault,
    Reply,
    Script,
    ScriptError,
    ScriptExhaustedError,
    ScriptFunction,
    ToolCall,
    calls,
    echo,
    text,
)
from ._server import FakeOpenAIServer

__all__ = [
    "AsyncScriptedClient",
    "Entry",
    "FakeOpenAIServer",
    "Fault",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptFunction",
    "ScriptedClient",
    "ToolCall",
    "calls",
    "echo",
    "text",
]
