"""The model adapter: one Chat Completions call, and the assistant message dict it yields.

The only call made on a client is `client.chat.completions.create(**request)`, so any object that
has it works: `openai.OpenAI`, `openai.AsyncOpenAI`, a test double, or a mock. Transient HTTP
errors (429, 5xx, dropped connections, timeouts) are retried by the `openai` client itself, with
exponential backoff that honours `Retry-After` (its `max_retries`, 2 by default).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ._aio import in_thread, is_async_callable, run_coroutine
from .errors import ModelResponseError
from .util import merge_chunk

__all__ = ["StreamAssembler", "acreate", "completion_message", "create", "usage_of"]


def _not_json(error: ValueError, sender: str | None, run_id: str | None) -> ModelResponseError:
    who = f" for agent {sender!r}" if sender else ""
    where = f" in run {run_id!r}" if run_id else ""
    return ModelResponseError(
        f"The model endpoint answered{who}{where} with a body that is not valid JSON ({error}). "
        "Check that the endpoint (OPENAI_BASE_URL) speaks the OpenAI Chat Completions API.",
        agent=sender,
        run_id=run_id,
    )


def create(
    client: Any, request: dict[str, Any], *, sender: str | None = None, run_id: str | None = None
) -> Any:
    """Call the client synchronously (an async client's coroutine is run to completion)."""
    try:
        result = client.chat.completions.create(**request)
        if inspect.isawaitable(result):
            result = run_coroutine(result)
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, run_id) from e
    return result


async def acreate(
    client: Any, request: dict[str, Any], *, sender: str | None = None, run_id: str | None = None
) -> Any:
    """Call the client from async code: an async client's `create` (`openai.AsyncOpenAI`'s is
    an `async def` behind a decorator) is awaited on the loop; a synchronous client runs in a
    thread of `_aio.blocking_executor()`."""
    create_fn = client.chat.completions.create
    try:
        if is_async_callable(create_fn):
            result = create_fn(**request)
        else:
            result = await in_thread(create_fn, **request)
        if inspect.isawaitable(result):
            result = await result
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, run_id) from e
    return result


def _describe(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 200 else text[:200] + "..."


def completion_message(
    completion: Any, sender: str, *, run_id: str | None = None
) -> dict[str, Any]:
    """The assistant message of a chat completion as a plain dict with `"sender"` added."""
    try:
        message = completion.choices[0].message
        data = json.loads(message.model_dump_json())
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as e:
        where = f" in run {run_id!r}" if run_id else ""
        raise ModelResponseError(
            f"The model endpoint returned no usable chat completion for agent {sender!r}{where} "
            f"(got {_describe(completion)}). Check that the endpoint (OPENAI_BASE_URL) speaks "
            "the OpenAI Chat Completions API.",
            agent=sender,
            run_id=run_id,
        ) from e
    data["sender"] = sender
    return data


def usage_of(completion: Any) -> dict[str, Any] | None:
    """Token usage of a completion or chunk, as a dict, when the endpoint reported it."""
    usage = getattr(completion, "usage", None)
    if usage is None:
        return None
    dump = getattr(usage, "model_dump", None)
    return dump(mode="json") if dump else None


class StreamAssembler:
    """Turns a stream of chunks into Swarm's stream events and the final assistant message."""

    def __init__(self, sender: str) -> None:
        self.sender = sender
        self.usage: dict[str, Any] | None = None
        self.last_chunk: Any = None  # the last one with a choice (its id, model, finish reason)
        self._message: dict[str, Any] = {
            "content": "",
            "sender": sender,
            "role": "assistant",
            "function_call": None,
            "tool_calls": {},
        }

    def feed(self, chunk: Any) -> dict[str, Any] | None:
        """Merge one chunk; return the event to show for it (None for a chunk with no choice)."""
        self.usage = usage_of(chunk) or self.usage
        choices = getattr(chunk, "choices", None)
        if not choices:
            if choices is None:
                raise ModelResponseError(
                    f"The model endpoint streamed something that is not a chat completion chunk "
                    f"for agent {self.sender!r} (got {_describe(chunk)}).",
                    agent=self.sender,
                )
            return None
        self.last_chunk = chunk
        delta = json.loads(choices[0].delta.model_dump_json())
        if delta.get("role") == "assistant":
            delta["sender"] = self.sender
        merged = {k: v for k, v in delta.items() if k not in ("role", "sender")}
        merge_chunk(self._message, json.loads(json.dumps(merged)))
        return delta

    def message(self) -> dict[str, Any]:
        """The assembled assistant message (Swarm's streamed-message shape)."""
        message = dict(self._message)
        calls = [message["tool_calls"][i] for i in sorted(message["tool_calls"])]
        message["tool_calls"] = calls or None
        return message


# Clients whose server refused `stream_options`: later streamed calls go without it.
_NO_STREAM_OPTIONS: weakref.WeakSet[Any] = weakref.WeakSet()


def _usage_request(client: Any, request: dict[str, Any]) -> dict[str, Any]:
    """`request` asking the server to report token usage at the end of the stream."""
    try:
        refused = client in _NO_STREAM_OPTIONS
    except TypeError:  # not weak-referenceable: ask every time
        refused = False
    if refused or "stream_options" in request:
        return request
    return {**request, "stream_options": {"include_usage": True}}


def _refused_options(client: Any, request: dict[str, Any], error: Exception) -> bool:
    """Whether `error` is the server (or client) refusing the `stream_options` we added; the
    client is remembered so that later calls do not ask again."""
    import openai

    if "stream_options" not in request or "stream_options" not in str(error):
        return False
    if not isinstance(error, (openai.BadRequestError, openai.UnprocessableEntityError, TypeError)):
        return False
    with contextlib.suppress(TypeError):
        _NO_STREAM_OPTIONS.add(client)
    return True


def _without_options(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != "stream_options"}


def stream_chunks(
    client: Any, request: dict[str, Any], *, sender: str | None = None
) -> Iterator[Any]:
    """The chunks of a streamed completion (synchronous). Usage is asked for at the end of the
    stream (`stream_options`); a server that refuses that option is asked again without it."""
    asked = _usage_request(client, request)
    try:
        try:
            stream = create(client, asked, sender=sender)
        except Exception as e:
            if not _refused_options(client, asked, e):
                raise
            stream = create(client, _without_options(asked), sender=sender)
        yield from stream
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, None) from e


async def astream_chunks(
    client: Any, request: dict[str, Any], *, sender: str | None = None, run_id: str | None = None
) -> AsyncIterator[Any]:
    """The chunks of a streamed completion (asynchronous; sync clients iterate in a thread),
    asking for usage as `stream_chunks` does."""
    asked = _usage_request(client, request)
    try:
        stream = await acreate(client, asked, sender=sender, run_id=run_id)
    except Exception as e:
        if not _refused_options(client, asked, e):
            raise
        stream = await acreate(client, _without_options(asked), sender=sender, run_id=run_id)
    try:
        if hasattr(stream, "__aiter__"):
            async for chunk in stream:
                yield chunk
            return
        iterator = iter(stream)
        done = object()
        while (chunk := await in_thread(next, iterator, done)) is not done:
            yield chunk
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, run_id) from e
