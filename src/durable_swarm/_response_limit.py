"""The size limit of a model's answer: an `openai` client reads a response body whole before
parsing it, so a server that sends gigabytes (or an endless stream) would cost the worker that
much memory. For `openai.OpenAI` / `AsyncOpenAI` clients the call goes through the client's
public `with_streaming_response`, and the response's byte stream (`httpx` `Response.stream`) is
wrapped so that reading it stops with `ModelResponseError` once it passes the limit, before
anything more is kept. Other clients (test doubles, wrappers) are called as they are.

The limit: `DURABLE_SWARM_MAX_RESPONSE_BYTES`, else 32 MiB, counted on the bytes as they
arrive (a compressed body's encoded bytes), for one response, streamed or not.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

from .errors import DurableSwarmError, ModelResponseError

__all__ = ["MAX_RESPONSE_BYTES_ENV", "bound", "bounded_api", "max_response_bytes"]

MAX_RESPONSE_BYTES_ENV = "DURABLE_SWARM_MAX_RESPONSE_BYTES"
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024


def max_response_bytes() -> int:
    """The limit in force (see the module docs); a bad value is a clear error."""
    raw = os.environ.get(MAX_RESPONSE_BYTES_ENV)
    if not raw:
        return DEFAULT_MAX_RESPONSE_BYTES
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise DurableSwarmError(
            f"{MAX_RESPONSE_BYTES_ENV} must be a whole number of bytes > 0, not {raw!r}."
        )
    return limit


def bounded_api(client: Any) -> Any | None:
    """`client.chat.completions.with_streaming_response` for an `openai` client, else None."""
    openai = sys.modules.get("openai")
    names = ("OpenAI", "AsyncOpenAI")
    kinds = tuple(k for k in (getattr(openai, n, None) for n in names) if isinstance(k, type))
    if not kinds or not isinstance(client, kinds):
        return None
    return getattr(cast(Any, client).chat.completions, "with_streaming_response", None)


def _too_large(limit: int, sender: str | None, run_id: str | None) -> ModelResponseError:
    who = f" for agent {sender!r}" if sender else ""
    where = f" in run {run_id!r}" if run_id else ""
    return ModelResponseError(
        f"The model endpoint answered{who}{where} with more than {limit} bytes; the rest was not "
        f"read and the connection was closed. Check the endpoint (a runaway generation: set "
        f"max_tokens), or raise the limit with {MAX_RESPONSE_BYTES_ENV}.",
        agent=sender,
        run_id=run_id,
    )


def bound(http_response: Any, sender: str | None, run_id: str | None) -> None:
    """Make reading `http_response` (an `httpx`/`httpx2` Response not read yet) stop with
    `ModelResponseError` past the limit. A response of an unknown kind is left as it is."""
    library = sys.modules.get(type(http_response).__module__.partition(".")[0])
    stream: Any = getattr(http_response, "stream", None)
    sync_base = getattr(library, "SyncByteStream", None)
    async_base = getattr(library, "AsyncByteStream", None)
    if stream is None or sync_base is None or async_base is None:
        return
    limit = max_response_bytes()

    if hasattr(stream, "__aiter__"):

        class AsyncBounded(async_base):  # type: ignore[misc, valid-type]
            async def __aiter__(self) -> AsyncIterator[bytes]:
                seen = 0
                async for chunk in stream:
                    seen += len(chunk)
                    if seen > limit:
                        raise _too_large(limit, sender, run_id)
                    yield chunk

            async def aclose(self) -> None:
                with contextlib.suppress(Exception):
                    await stream.aclose()

        http_response.stream = AsyncBounded()
        return

    class Bounded(sync_base):  # type: ignore[misc, valid-type]
        def __iter__(self) -> Iterator[bytes]:
            seen = 0
            for chunk in stream:
                seen += len(chunk)
                if seen > limit:
                    raise _too_large(limit, sender, run_id)
                yield chunk

        def close(self) -> None:
            with contextlib.suppress(Exception):
                stream.close()

    http_response.stream = Bounded()
