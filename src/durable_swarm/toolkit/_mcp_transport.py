"""Transports for `MCPTools` that read at most `max_message_bytes` of one message from a server.

The `mcp` package's `Client` takes any transport (an async context manager yielding its read and
write streams); these two replace the package's stdio and streamable-HTTP readers, which hold a
whole message in memory however large it is (and, over stdio, join a long line chunk by chunk in
quadratic time):

* `stdio_transport`: the server as a child process (its own process group, the package's minimal
  environment); newline-delimited JSON-RPC read into one buffer, scanned once. A line longer than
  the limit kills the server's process group and closes the connection: every request waiting on
  it fails as a lost connection, and the next request starts the server again.
* `BoundedHTTP`: an `httpx2` transport whose response bodies stop with `MessageTooLarge` once a
  JSON body, or one event of an event stream, passes the limit (the `mcp` package answers the
  request with an error and that HTTP connection is closed, not read to its end).

Each counts what passed its limit on a `ReadLimit` shared with its `MCPTools`, which tells a
limit from a lost connection by that count.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import httpx2

__all__ = ["BoundedHTTP", "MessageTooLarge", "ReadLimit", "stdio_transport"]

CHUNK = 64 * 1024
# Grace periods when a stdio connection closes (as the `mcp` package's stdio client).
EXIT_GRACE_SECONDS = 2.0
FLUSH_SECONDS = 0.5
EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


class ReadLimit:
    """The most bytes one message from a server may have, and how often a message passed it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.exceeded = 0
        """How many messages passed the limit (their connection or response was closed)."""

    def passed(self) -> None:
        self.exceeded += 1


class MessageTooLarge(httpx2.StreamError):
    """A response body (or one event of it) passed its `ReadLimit`; the rest is not read."""


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, limit: ReadLimit, events: bool) -> None:
        self.inner = inner
        self.limit = limit
        self.events = events  # an event stream: count each event, not the whole body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = 0  # bytes of the message (the body, or the event) read so far
        tail = b""
        async for chunk in self.inner:
            if self.events:
                window = tail + chunk
                ends = [i + len(sep) for sep in EVENT_ENDS if (i := window.rfind(sep)) >= 0]
                pending = len(window) - max(ends) if ends else pending + len(chunk)
                tail = window[-3:]
            else:
                pending += len(chunk)
            if pending > self.limit.max_bytes:
                self.limit.passed()
                raise MessageTooLarge(
                    f"the server's message is larger than {self.limit.max_bytes} bytes "
                    "(max_message_bytes); it was not read further"
                )
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class BoundedHTTP(httpx2.AsyncBaseTransport):
    """`httpx2.AsyncHTTPTransport` whose response bodies are cut off past `limit` (see the
    module's docstring)."""

    def __init__(self, limit: ReadLimit) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        events = response.headers.get("content-type", "").lower().startswith("text/event-stream")
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedBody(response.stream, self.limit, events),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def _parse(line: bytes) -> Any:
    """One line from the server as a `SessionMessage`, or the parse error (the session reports
    it, as with the `mcp` package's own stdio client)."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as e:
        return e


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def stdio_transport(
    command: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | None,
    errlog: Any,
    limit: ReadLimit,
) -> AsyncGenerator[tuple[Any, Any], None]:
    """Start `command` (environment: the `mcp` package's minimal default with `env` over it) and
    talk newline-delimited JSON-RPC over its stdin and stdout, reading at most `limit` bytes of
    one line; yields the `mcp` `Client`'s read and write streams."""
    from mcp.client.stdio import get_default_environment
    from mcp.os.posix.utilities import terminate_posix_process_tree
    from mcp.shared.message import SessionMessage

    process = await anyio.open_process(
        list(command),
        env=get_default_environment() | dict(env or {}),
        stderr=errlog,
        cwd=cwd,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def reader() -> None:
        buffer = bytearray()
        scanned = 0  # no newline before this offset of `buffer`
        async with to_session:
            with contextlib.suppress(
                anyio.EndOfStream,
                anyio.ClosedResourceError,
                anyio.BrokenResourceError,
                OSError,
            ):
                while True:
                    buffer += await stdout.receive(CHUNK)
                    start, too_long = 0, False
                    while not too_long and (end := buffer.find(b"\n", scanned)) >= 0:
                        line = bytes(buffer[start:end])
                        start = scanned = end + 1
                        too_long = len(line) > limit.max_bytes
                        if line.strip() and not too_long:
                            await to_session.send(_parse(line))
                    del buffer[:start]
                    scanned = len(buffer)
                    if too_long or scanned > limit.max_bytes:
                        limit.passed()
                        _kill_group(process.pid)  # it would go on writing the rest
                        return  # closing `to_session` fails the requests waiting on it

    async def writer() -> None:
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the connection end
        finally:
            writer_done.set()

    async def stop() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(FLUSH_SECONDS):
            await writer_done.wait()
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stdin.aclose()
        with anyio.move_on_after(EXIT_GRACE_SECONDS):
            while process.returncode is None:
                await anyio.sleep(0.01)
        if process.returncode is None:
            if sys.platform == "win32":  # pragma: no cover - no process groups
                process.kill()
            else:
                await terminate_posix_process_tree(process, EXIT_GRACE_SECONDS)
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stdout.aclose()
        for stream in (read_stream, write_stream, to_session, from_session):
            await stream.aclose()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await stop()
            tasks.cancel_scope.cancel()
