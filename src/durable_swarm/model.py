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
import sys
import weakref
from collections.abc import AsyncIterator, Generator, Iterator
from typing import Any

from ._aio import in_thread, is_async_callable, run_coroutine
from ._response_limit import bound, bounded_api
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
    """Call the client synchronously (an async client's coroutine is run to completion). An
    `openai` client's answer is read up to the size limit (`_response_limit`)."""
    api = bounded_api(client) if not request.get("stream") else None
    try:
        if api is not None:
            if is_async_callable(api.create):
                return run_coroutine(_abounded(api, request, sender, run_id))
            with api.create(**request) as response:
                bound(response.http_response, sender, run_id)
                return response.parse()
        result = client.chat.completions.create(**request)
        if inspect.isawaitable(result):
            result = run_coroutine(result)
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, run_id) from e
    return result


async def _abounded(
    api: Any, request: dict[str, Any], sender: str | None, run_id: str | None
) -> Any:
    """An async `openai` client's answer, read up to the size limit."""
    async with api.create(**request) as response:
        bound(response.http_response, sender, run_id)
        return await response.parse()


async def acreate(
    client: Any, request: dict[str, Any], *, sender: str | None = None, run_id: str | None = None
) -> Any:
    """Call the client from async code: an async client's `create` (`openai.AsyncOpenAI`'s is
    an `async def` behind a decorator) is awaited on the loop; a synchronous client runs in a
    thread of `_aio.blocking_executor()`."""
    create_fn = client.chat.completions.create
    api = bounded_api(client) if not request.get("stream") else None
    try:
        if api is not None:
            if is_async_callable(api.create):
                return await _abounded(api, request, sender, run_id)
            return await in_thread(create, client, request, sender=sender, run_id=run_id)
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
    api = bounded_api(client)
    try:
        if api is not None and not is_async_callable(api.create):
            yield from _bounded_chunks(api, client, asked, sender)
            return
        try:
            stream = create(client, asked, sender=sender)
        except Exception as e:
            if not _refused_options(client, asked, e):
                raise
            stream = create(client, _without_options(asked), sender=sender)
        yield from stream
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, None) from e


def _bounded_chunks(
    api: Any, client: Any, asked: dict[str, Any], sender: str | None, run_id: str | None = None
) -> Generator[Any, None, None]:
    """A sync `openai` client's stream, read up to the size limit (asked again without
    `stream_options` if the server refuses them)."""
    try:
        manager = api.create(**asked)
        response = manager.__enter__()
    except Exception as e:
        if not _refused_options(client, asked, e):
            raise
        manager = api.create(**_without_options(asked))
        response = manager.__enter__()
    try:
        bound(response.http_response, sender, run_id)
        yield from response.parse()
    except BaseException:
        if not manager.__exit__(*sys.exc_info()):
            raise
    else:
        manager.__exit__(None, None, None)


async def astream_chunks(
    client: Any, request: dict[str, Any], *, sender: str | None = None, run_id: str | None = None
) -> AsyncIterator[Any]:
    """The chunks of a streamed completion (asynchronous; sync clients iterate in a thread),
    asking for usage as `stream_chunks` does."""
    asked = _usage_request(client, request)
    api = bounded_api(client)
    if api is not None:
        async for chunk in _abounded_chunks(api, client, asked, sender, run_id):
            yield chunk
        return
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


async def _abounded_chunks(
    api: Any, client: Any, asked: dict[str, Any], sender: str | None, run_id: str | None
) -> AsyncIterator[Any]:
    """`astream_chunks` for an `openai` client: its stream read up to the size limit (a sync
    client's in a thread, chunk by chunk)."""
    try:
        if not is_async_callable(api.create):
            chunks = _bounded_chunks(api, client, asked, sender, run_id)
            done = object()
            try:
                while (chunk := await in_thread(next, chunks, done)) is not done:
                    yield chunk
            finally:
                await in_thread(chunks.close)
            return
        try:
            manager = api.create(**asked)
            response = await manager.__aenter__()
        except Exception as e:
            if not _refused_options(client, asked, e):
                raise
            manager = api.create(**_without_options(asked))
            response = await manager.__aenter__()
        try:
            bound(response.http_response, sender, run_id)
            stream = await response.parse()
            async for chunk in stream:
                yield chunk
        except BaseException:
            if not await manager.__aexit__(*sys.exc_info()):
                raise
        else:
            await manager.__aexit__(None, None, None)
    except json.JSONDecodeError as e:
        raise _not_json(e, sender, run_id) from e
