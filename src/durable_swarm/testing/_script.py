"""Reply specs and scripts shared by `ScriptedClient` and `FakeOpenAIServer`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

__all__ = [
    "Entry",
    "Fault",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptFunction",
    "ToolCall",
    "calls",
    "echo",
    "text",
]


@dataclass(frozen=True)
class ToolCall:
    """One tool call in a scripted assistant reply.

    ``arguments`` given as a dict are JSON-encoded; a string is sent verbatim, so a test can send
    malformed JSON. ``id`` defaults to a deterministic ``call_<hash>`` derived from the request
    messages and the call's position, so a request retried after a crash gets the same ids.
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as the JSON string the API sends."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """A scripted assistant message: text, tool calls, or both.

    ``usage`` overrides the estimated token counts; it may give ``prompt_tokens``,
    ``completion_tokens`` and ``total_tokens`` (the total defaults to the sum).
    """

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Mapping[str, int] | None = None


def text(content: str, *, usage: Mapping[str, int] | None = None) -> Reply:
    """A plain text reply (``finish_reason="stop"``)."""
    return Reply(content=content, usage=usage)


def calls(
    *tool_calls: ToolCall, content: str | None = None, usage: Mapping[str, int] | None = None
) -> Reply:
    """A reply that calls the given tools (``finish_reason="tool_calls"``), optionally with text."""
    return Reply(content=content, tool_calls=list(tool_calls), usage=usage)


FaultKind = Literal["status", "drop", "malformed", "delay"]

_DEFAULT_MESSAGES = {
    429: "Rate limit reached (injected by FakeOpenAIServer).",
    500: "The server had an error while processing your request (injected by FakeOpenAIServer).",
}
_ERROR_TYPES = {429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
_TRUNCATED_JSON = '{"id": "chatcmpl-broken", "choices": ['


@dataclass(frozen=True)
class Fault:
    """A failure that `FakeOpenAIServer` serves instead of a completion.

    Build one with `status`, `drop`, `malformed` or `delay`, then either
    queue it with `FakeOpenAIServer.inject` or put it in a script. Every fault can first
    wait ``seconds``.
    """

    kind: FaultKind
    seconds: float = 0.0
    status_code: int = 500
    message: str = ""
    error_type: str = ""
    retry_after: float | None = None
    body: str = ""
    reply: Reply | str | None = None

    @classmethod
    def status(
        cls,
        code: int = 500,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        error_type: str | None = None,
        seconds: float = 0.0,
    ) -> Fault:
        """An HTTP error with an OpenAI-shaped body ``{"error": {"message", "type", "code"}}``.

        ``retry_after`` (seconds) is sent as ``retry-after`` and ``retry-after-ms`` headers; a 429
        defaults to 0.01 s so clients retry at once.
        """
        if retry_after is None and code == 429:
            retry_after = 0.01
        return cls(
            "status",
            seconds=seconds,
            status_code=code,
            message=message or _DEFAULT_MESSAGES.get(code, f"Injected HTTP {code} error."),
            error_type=error_type or _ERROR_TYPES.get(code, "server_error"),
            retry_after=retry_after,
        )

    @classmethod
    def drop(cls, *, seconds: float = 0.0) -> Fault:
        """Read the request, then close the connection without responding."""
        return cls("drop", seconds=seconds)

    @classmethod
    def malformed(cls, body: str = _TRUNCATED_JSON, *, seconds: float = 0.0) -> Fault:
        """Answer 200 with ``body``: truncated JSON by default, or any text (e.g. non-completion
        JSON). A streamed request gets it as one ``data:`` event."""
        return cls("malformed", seconds=seconds, body=body)

    @classmethod
    def delay(cls, seconds: float, reply: Reply | str | None = None) -> Fault:
        """Wait ``seconds``, then answer normally: with ``reply`` if given, else with the next
        script entry (a script function returning a delay must give ``reply``). The request counts
        as answered, not as a fault."""
        return cls("delay", seconds=seconds, reply=reply)


Entry: TypeAlias = Reply | str | Fault
"""One scripted answer: a `Reply`, a plain string (text reply) or a `Fault`."""
ScriptFunction: TypeAlias = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Entry]
"""``(messages, tools) -> entry``: decides from the request, so a retried request gets the same."""
Script: TypeAlias = Sequence[Entry] | ScriptFunction
"""A sequence consumed one entry per request, or a :data:`ScriptFunction`."""


class ScriptError(RuntimeError):
    """The script cannot answer a request (bad entry, or the script function raised)."""


class ScriptExhaustedError(ScriptError):
    """A sequence script has no entries left for a request."""


def echo(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
    """Default script: reply ``"You said: <last user message>"``."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return text(f"You said: {_text_of(message.get('content'))}")
    return text("You said nothing.")


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _check_entry(entry: object) -> Entry:
    if not isinstance(entry, (Reply, str, Fault)):
        raise ScriptError(f"script entries must be Reply, str or Fault, got {type(entry).__name__}")
    return entry


class ScriptCursor:
    """Hands out a script's entries one request at a time (thread-safe)."""

    def __init__(self, script: Script) -> None:
        if isinstance(script, (str, bytes)):
            raise TypeError("a script is a sequence of entries or a function, not a string")
        self._function: ScriptFunction | None = None
        self._entries: list[Entry] = []
        if callable(script):
            self._function = script
        else:
            self._entries = [_check_entry(e) for e in script]
        self._position = 0
        self._asked = 0
        self._lock = threading.Lock()

    def rewind(self) -> None:
        """Start again from the first entry."""
        with self._lock:
            self._position = self._asked = 0

    def take(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Reply | Fault:
        """The answer for one request; a delay fault always carries its reply."""
        if self._function is not None:
            try:
                entry = _check_entry(self._function(messages, tools))
            except Exception as exc:
                raise ScriptError(f"the script function raised {exc!r}") from exc
            if isinstance(entry, Fault) and entry.kind == "delay" and entry.reply is None:
                raise ScriptError("a script function returning Fault.delay() must give its reply")
            return _as_answer(entry)
        with self._lock:
            self._asked += 1
            delay = 0.0
            while self._position < len(self._entries):
                entry = self._entries[self._position]
                self._position += 1
                if isinstance(entry, Fault) and entry.kind == "delay" and entry.reply is None:
                    delay += entry.seconds
                    continue
                if isinstance(entry, Fault):
                    return replace(entry, seconds=entry.seconds + delay) if delay else entry
                return Fault.delay(delay, entry) if delay else _as_answer(entry)
            raise ScriptExhaustedError(
                f"script exhausted: it has {len(self._entries)} entries and all were used; "
                f"this is request #{self._asked} to the script"
            )


def _as_answer(entry: Entry) -> Reply | Fault:
    return Reply(content=entry) if isinstance(entry, str) else entry


def entry_from_json(data: Any) -> Entry:
    """Parse the JSON form of an entry used by ``--script-file``.

    ``"hi"`` or ``{"content": "hi"}``; ``{"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}``;
    faults: ``{"fault": "status", "status": 429, "message": ..., "retry_after": ...}``,
    ``{"fault": "drop"}``, ``{"fault": "malformed", "body": ...}``,
    ``{"fault": "delay", "seconds": 1.0, "reply": {...}}``; any fault may give ``"seconds"``.
    """
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"a script entry must be a string or an object, got {data!r}")
    kind = data.get("fault")
    seconds = float(data.get("seconds", 0.0))
    if kind is None:
        return Reply(
            content=data.get("content"),
            tool_calls=[ToolCall(**call) for call in data.get("tool_calls", [])],
            usage=data.get("usage"),
        )
    if kind == "status":
        return Fault.status(
            int(data.get("status", 500)),
            data.get("message"),
            retry_after=data.get("retry_after"),
            seconds=seconds,
        )
    if kind == "drop":
        return Fault.drop(seconds=seconds)
    if kind == "malformed":
        return Fault.malformed(data.get("body", _TRUNCATED_JSON), seconds=seconds)
    if kind == "delay":
        reply = data.get("reply")
        return Fault.delay(seconds, None if reply is None else _reply_from_json(reply))
    raise ValueError(f"unknown fault kind {kind!r}")


def _reply_from_json(data: Any) -> Reply | str:
    entry = entry_from_json(data)
    if isinstance(entry, Fault):
        raise ValueError("a delay's reply must be a reply, not a fault")
    return entry
