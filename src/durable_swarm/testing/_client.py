"""In-process stand-ins for ``openai.OpenAI`` / ``openai.AsyncOpenAI`` that answer from a script."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, TypeVar

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from ._render import Rendering, jsonable
from ._script import Fault, Reply, Script, ScriptCursor, ScriptError

_C = TypeVar("_C")

# Values the openai SDK uses for "parameter not given"; they are dropped like the SDK does.
_OMITTED = tuple(
    kind for kind in (getattr(openai, "NotGiven", None), getattr(openai, "Omit", None)) if kind
)


class _ChunkStream:
    """What ``create(stream=True)`` returns: an iterator of chunks, usable in ``with``."""

    def __init__(self, chunks: list[ChatCompletionChunk]) -> None:
        self._chunks = iter(chunks)

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return self

    def __next__(self) -> ChatCompletionChunk:
        return next(self._chunks)

    def close(self) -> None:
        self._chunks = iter(())

    def __enter__(self) -> _ChunkStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncChunkStream:
    """What the async ``create(stream=True)`` returns: an async iterator of chunks."""

    def __init__(self, chunks: list[ChatCompletionChunk]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        self._chunks = iter(())

    async def __aenter__(self) -> _AsyncChunkStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _given(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if not isinstance(v, _OMITTED)}


def _chunks(rendering: Rendering, params: dict[str, Any]) -> list[ChatCompletionChunk]:
    include_usage = bool((params.get("stream_options") or {}).get("include_usage"))
    return [ChatCompletionChunk.model_validate(c) for c in rendering.chunks(include_usage)]


class _ScriptedBase:
    def __init__(self, script: Script) -> None:
        self._cursor = ScriptCursor(script)
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        """Every ``create()`` call's parameters, deep-copied, in call order."""

    @property
    def call_count(self) -> int:
        """How many ``create()`` calls were made."""
        return len(self.requests)

    def _answer(self, params: dict[str, Any]) -> tuple[Rendering, float]:
        """Record the request; return the rendered reply and how long to wait first."""
        with self._lock:
            self.requests.append(copy.deepcopy(params))
        messages = jsonable(params.get("messages", []))
        tools = jsonable(params.get("tools")) or None
        answer = self._cursor.take(messages, tools)
        delay = 0.0
        if isinstance(answer, Fault):
            if answer.kind != "delay":
                raise ScriptError(
                    f"{type(self).__name__} cannot serve Fault.{answer.kind}(): "
                    "faults other than delays need FakeOpenAIServer"
                )
            delay, reply = answer.seconds, answer.reply
            answer = reply if isinstance(reply, Reply) else Reply(content=reply)
        model = params.get("model", "scripted-model")
        return Rendering(answer, model=model, messages=messages, tools=tools), delay


class _Completions:
    def __init__(self, client: ScriptedClient) -> None:
        self._client = client

    def create(self, **params: Any) -> ChatCompletion | _ChunkStream:
        """Answer like ``OpenAI().chat.completions.create``, from the script."""
        params = _given(params)
        rendering, delay = self._client._answer(params)
        if delay:
            time.sleep(delay)
        if params.get("stream"):
            return _ChunkStream(_chunks(rendering, params))
        return ChatCompletion.model_validate(rendering.completion())


class _AsyncCompletions:
    def __init__(self, client: AsyncScriptedClient) -> None:
        self._client = client

    async def create(self, **params: Any) -> ChatCompletion | _AsyncChunkStream:
        """Answer like ``AsyncOpenAI().chat.completions.create``, from the script."""
        params = _given(params)
        rendering, delay = self._client._answer(params)
        await asyncio.sleep(delay)
        if params.get("stream"):
            return _AsyncChunkStream(_chunks(rendering, params))
        return ChatCompletion.model_validate(rendering.completion())


class _Chat(Generic[_C]):
    def __init__(self, completions: _C) -> None:
        self.completions = completions


class ScriptedClient(_ScriptedBase):
    """A synchronous stand-in for ``openai.OpenAI`` answering from ``script``.

    Only ``client.chat.completions.create(**params)`` exists. It returns real
    ``ChatCompletion`` objects, or with ``stream=True`` an iterator of real
    ``ChatCompletionChunk`` objects. Every call is recorded in :attr:`requests`. A script entry
    that is a fault other than `Fault.delay` raises `ScriptError`; an exhausted
    sequence raises `ScriptExhaustedError`.
    """

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.chat = _Chat(_Completions(self))


class AsyncScriptedClient(_ScriptedBase):
    """The ``openai.AsyncOpenAI`` counterpart of `ScriptedClient`: ``create`` is async and
    ``stream=True`` gives an async iterator of chunks."""

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        self.chat = _Chat(_AsyncCompletions(self))
