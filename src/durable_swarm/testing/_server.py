"""``FakeOpenAIServer``: an OpenAI-compatible HTTP server answering from a script.

It runs one asyncio loop in a background thread (thousands of concurrent requests are cheap),
parses HTTP/1.1 with h11 and keeps connections alive, so the real ``openai`` client talks to it
as to the real API.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import h11
import openai

from ._render import Rendering
from ._script import Fault, Reply, Script, ScriptCursor, ScriptError, echo

_READ_SIZE = 65536


def _error(message: str, error_type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _parse_chat_request(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """The request's JSON body, or ``None`` and what is wrong with it."""
    try:
        params = json.loads(body)
    except ValueError as exc:
        return None, f"Invalid request body: {exc}"
    if not isinstance(params, dict) or not isinstance(params.get("messages"), list):
        return None, "Invalid request body: expected a JSON object with a 'messages' list"
    return params, ""


def _sse(payload: str) -> bytes:
    return f"data: {payload}\n\n".encode()


class FakeOpenAIServer:
    """An OpenAI-compatible chat completions server for tests and offline demos.

    Endpoints: ``POST /v1/chat/completions`` (JSON, or ``text/event-stream`` with
    ``"stream": true``), ``GET /v1/models``, and for tests ``GET /_fake/stats``,
    ``GET /_fake/requests`` and ``POST /_fake/reset``; anything else is a 404 in OpenAI's error
    shape. Requests are answered from ``script`` (default `echo`), after any faults queued
    with `inject`. ``latency`` delays every completion (before its first chunk when
    streamed); ``chunk_delay`` spaces streamed chunks. Completions report token usage; a streamed
    one does in a last chunk when asked with ``stream_options={"include_usage": true}``, or,
    with ``accept_stream_options=False``, refuses that option with a 400 as some servers do.
    ``rate_limit=(requests, seconds)`` makes it a rate-limited provider (see `set_rate_limit`);
    `arrivals` and `most_in_window` tell how many requests arrived when.

    Use it as a context manager or call `start` / `stop`.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        accept_stream_options: bool = True,
        rate_limit: tuple[int, float] | None = None,
    ) -> None:
        self._cursor = ScriptCursor(echo if script is None else script)
        self.accept_stream_options = accept_stream_options
        self._latency = latency
        self._chunk_delay = chunk_delay
        self._host = host
        self._wanted_port = port
        self._lock = threading.Lock()
        self._faults: deque[Fault] = deque()
        self._requests: list[dict[str, Any]] = []
        self._arrivals: list[tuple[float, bool]] = []  # (time.monotonic(), refused by the limit)
        self._rate_limit: tuple[int, float] | None = None
        self._counts = dict.fromkeys(
            ("requests", "answered", "faults", "errors", "connections", "rate_limited"), 0
        )
        self._in_flight = self._max_in_flight = 0
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        if rate_limit is not None:
            self.set_rate_limit(*rate_limit)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FakeOpenAIServer:
        """Start listening (in a background thread); returns ``self``."""
        if self._thread is not None:
            raise RuntimeError("FakeOpenAIServer is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="FakeOpenAIServer", daemon=True)
        thread.start()
        try:
            listening = asyncio.start_server(
                self._serve_connection, self._host, self._wanted_port, backlog=4096
            )
            self._server = asyncio.run_coroutine_threadsafe(listening, loop).result()
        except BaseException:
            _halt(loop, thread)
            raise
        self._port = self._server.sockets[0].getsockname()[1]
        self._loop, self._thread = loop, thread
        return self

    def stop(self) -> None:
        """Close every connection and stop listening. Safe to call twice."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), loop).result()
        _halt(loop, thread)
        self._loop = self._thread = self._server = None

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- addresses and clients

    @property
    def port(self) -> int:
        """The bound TCP port (known once started)."""
        if self._port is None:
            raise RuntimeError("FakeOpenAIServer has not been started")
        return self._port

    @property
    def url(self) -> str:
        """The server's root URL, e.g. ``http://127.0.0.1:8123``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url``, e.g. ``http://127.0.0.1:8123/v1``."""
        return f"{self.url}/v1"

    def client(self, **kwargs: Any) -> openai.OpenAI:
        """An ``openai.OpenAI`` client for this server; ``kwargs`` go to its constructor."""
        kwargs.setdefault("api_key", "fake-key")
        return openai.OpenAI(base_url=self.base_url, **kwargs)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for this server; ``kwargs`` go to its constructor."""
        kwargs.setdefault("api_key", "fake-key")
        return openai.AsyncOpenAI(base_url=self.base_url, **kwargs)

    # ----------------------------------------------------------------- control and inspection

    def set_script(self, script: Script | None) -> None:
        """Answer later requests from ``script`` (``None``: `echo`), from its start."""
        self._cursor = ScriptCursor(echo if script is None else script)

    def set_latency(self, seconds: float, *, chunk_delay: float | None = None) -> None:
        """Delay every later completion by ``seconds`` (and optionally set ``chunk_delay``)."""
        self._latency = seconds
        if chunk_delay is not None:
            self._chunk_delay = chunk_delay

    def set_rate_limit(self, requests: int | None, seconds: float = 60.0) -> None:
        """Behave like a provider's rate limit: a chat request that arrives when ``requests``
        requests were already let through in the last ``seconds`` (a sliding window) is refused
        with a 429 whose ``retry-after`` and ``retry-after-ms`` headers say when the window has
        room again, and ``x-ratelimit-reset-requests`` the same as a duration (``"1.5s"``).
        Refused requests do not count against the window; they count in ``stats`` as
        ``rate_limited``. ``None`` lifts the limit."""
        if requests is not None and (requests < 1 or seconds <= 0):
            raise ValueError("set_rate_limit needs requests >= 1 and seconds > 0")
        with self._lock:
            self._rate_limit = None if requests is None else (requests, float(seconds))

    @property
    def arrivals(self) -> list[float]:
        """When each chat request arrived (`time.monotonic()` of this process), in order,
        those refused by `set_rate_limit`'s limit included."""
        with self._lock:
            return [at for at, _ in self._arrivals]

    def most_in_window(self, seconds: float, *, refused: bool = False) -> int:
        """The most chat requests that arrived within any span of ``seconds`` (e.g. to check
        that a fleet kept to a limit); ``refused=False`` leaves out those the rate limit
        refused."""
        with self._lock:
            times = [at for at, limited in self._arrivals if refused or not limited]
        most, first = 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= seconds:
                first += 1
            most = max(most, last - first + 1)
        return most

    def _over_limit(self, now: float) -> float | None:
        """Seconds until the rate limit's window has room, if a request arriving ``now`` is
        over it (called with the lock held)."""
        if self._rate_limit is None:
            return None
        requests, seconds = self._rate_limit
        recent = [at for at, limited in self._arrivals if not limited and at > now - seconds]
        if len(recent) < requests:
            return None
        return max(0.001, recent[len(recent) - requests] + seconds - now)

    def inject(self, fault: Fault, times: int = 1) -> None:
        """Serve ``fault`` to the next ``times`` chat requests, before any script entry."""
        with self._lock:
            self._faults.extend([fault] * times)

    def reset(self) -> None:
        """Forget recorded requests, counts and queued faults; restart the script."""
        with self._lock:
            self._faults.clear()
            self._requests.clear()
            self._arrivals.clear()
            self._counts = dict.fromkeys(self._counts, 0)
            self._max_in_flight = self._in_flight
        self._cursor.rewind()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Copies of the JSON bodies of the chat requests received, in arrival order."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def request_count(self) -> int:
        """How many chat requests arrived, whatever their outcome."""
        with self._lock:
            return self._counts["requests"]

    @property
    def stats(self) -> dict[str, int]:
        """Counts of chat requests: ``requests`` (all), ``answered`` (a completion was sent),
        ``faults`` (a fault was served), ``errors`` (bad request or script error),
        ``rate_limited`` (refused by `set_rate_limit`'s limit),
        ``in_flight`` and ``max_in_flight`` (concurrency); and ``connections`` (TCP connections
        accepted, to check keep-alive). Also served as JSON at ``/_fake/stats``."""
        with self._lock:
            return {
                **self._counts,
                "in_flight": self._in_flight,
                "max_in_flight": self._max_in_flight,
            }

    # ----------------------------------------------------------------- HTTP plumbing

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        with self._lock:
            self._counts["connections"] += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while await self._serve_exchange(conn, reader, writer):
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.CancelledError):
            pass  # the peer went away, spoke bad HTTP, or stop() cancelled us: just hang up
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve_exchange(
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serve one request; return whether the connection can take another."""
        try:
            request = await _next_event(conn, reader)
            if not isinstance(request, h11.Request):
                return False
            body = bytearray()
            while not isinstance(event := await _next_event(conn, reader), h11.EndOfMessage):
                if not isinstance(event, h11.Data):
                    return False
                body += event.data
        except h11.RemoteProtocolError as exc:
            if conn.our_state is h11.SEND_RESPONSE:
                payload = _error(str(exc), "invalid_request_error")
                await _send_json(conn, writer, exc.error_status_hint, payload)
            return False
        method, path = request.method.decode(), request.target.decode().split("?")[0].rstrip("/")
        if (method, path) == ("POST", "/v1/chat/completions"):
            if not await self._chat_completion(conn, writer, bytes(body)):
                return False
        else:
            status, payload = self._control(method, path)
            await _send_json(conn, writer, status, payload)
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    def _control(self, method: str, path: str) -> tuple[int, Any]:
        if (method, path) == ("GET", "/v1/models"):
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
            return 200, {"object": "list", "data": [model]}
        if (method, path) == ("GET", "/_fake/stats"):
            return 200, self.stats
        if (method, path) == ("GET", "/_fake/requests"):
            return 200, {"requests": self.requests}
        if (method, path) == ("POST", "/_fake/reset"):
            self.reset()
            return 200, self.stats
        message = f"Invalid URL ({method} {path})"
        return 404, _error(message, "invalid_request_error", "unknown_url")

    # ----------------------------------------------------------------- chat completions

    async def _chat_completion(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, body: bytes
    ) -> bool:
        """Answer one chat request; return ``False`` if the connection was dropped."""
        params, problem = _parse_chat_request(body)
        with self._lock:
            now = time.monotonic()
            wait = self._over_limit(now)
            self._arrivals.append((now, wait is not None))
            self._counts["requests"] += 1
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            if params is not None:
                self._requests.append(params)
            fault: Fault | None = None
            if wait is not None:
                self._counts["rate_limited"] += 1
                refusal = "Rate limit reached (FakeOpenAIServer)."
                fault = Fault.status(429, refusal, retry_after=wait)
            else:
                fault = self._faults.popleft() if self._faults else None
        try:
            if params is None:
                return await self._fail(conn, writer, 400, problem, "invalid_request_error")
            if "stream_options" in params and not self.accept_stream_options:
                problem = "Unrecognized request argument supplied: stream_options"
                return await self._fail(conn, writer, 400, problem, "invalid_request_error")
            try:
                answer, delay = self._pick(params, fault)
            except ScriptError as exc:
                return await self._fail(
                    conn, writer, 400, f"FakeOpenAIServer: {exc}", "script_error"
                )
            if delay:
                await asyncio.sleep(delay)
            if isinstance(answer, Fault):
                return await self._serve_fault(conn, writer, answer, bool(params.get("stream")))
            await self._serve_reply(conn, writer, answer, params)
            return True
        finally:
            with self._lock:
                self._in_flight -= 1

    def _pick(self, params: dict[str, Any], fault: Fault | None) -> tuple[Reply | Fault, float]:
        """The answer for a request (an injected fault, else the script's) and its delay."""
        delay = self._latency
        if fault is not None and fault.kind == "delay" and fault.reply is None:
            delay, fault = delay + fault.seconds, None
        answer = (
            fault
            if fault is not None
            else self._cursor.take(params["messages"], params.get("tools") or None)
        )
        if isinstance(answer, Fault):
            delay += answer.seconds
            if answer.kind == "delay":
                reply = answer.reply
                answer = reply if isinstance(reply, Reply) else Reply(content=reply)
        return answer, delay

    async def _fail(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        status: int,
        message: str,
        kind: str,
    ) -> bool:
        with self._lock:
            self._counts["errors"] += 1
        await _send_json(conn, writer, status, _error(message, kind, kind))
        return True

    async def _serve_fault(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, fault: Fault, stream: bool
    ) -> bool:
        with self._lock:
            self._counts["faults"] += 1
        if fault.kind == "drop":
            return False
        if fault.kind == "malformed":
            if stream:
                await _send_stream(conn, writer, [_sse(fault.body)], 0.0)
            else:
                await _send(conn, writer, fault.body.encode(), 200, "application/json")
            return True
        headers: list[tuple[str, str]] = []
        if fault.retry_after is not None:
            headers += [
                ("retry-after", str(math.ceil(fault.retry_after))),
                ("retry-after-ms", str(math.ceil(fault.retry_after * 1000))),
                ("x-ratelimit-reset-requests", f"{fault.retry_after:.3f}s"),
            ]
        payload = _error(fault.message, fault.error_type, fault.error_type)
        await _send_json(conn, writer, fault.status_code, payload, headers)
        return True

    async def _serve_reply(
        self,
        conn: h11.Connection,
        writer: asyncio.StreamWriter,
        reply: Reply,
        params: dict[str, Any],
    ) -> None:
        rendering = Rendering(
            reply,
            model=str(params.get("model", "fake-model")),
            messages=params["messages"],
            tools=params.get("tools") or None,
        )
        with self._lock:
            self._counts["answered"] += 1
        if not params.get("stream"):
            await _send_json(conn, writer, 200, rendering.completion())
            return
        include_usage = bool((params.get("stream_options") or {}).get("include_usage"))
        events = [_sse(json.dumps(chunk)) for chunk in rendering.chunks(include_usage)]
        await _send_stream(conn, writer, [*events, _sse("[DONE]")], self._chunk_delay)


def _halt(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await reader.read(_READ_SIZE))
    return event


async def _send(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    body: bytes,
    status: int,
    content_type: str,
    headers: Sequence[tuple[str, str]] = (),
) -> None:
    head = [("content-type", content_type), ("content-length", str(len(body))), *headers]
    for event in (
        h11.Response(status_code=status, headers=head),
        h11.Data(data=body),
        h11.EndOfMessage(),
    ):
        writer.write(conn.send(event) or b"")
    await writer.drain()


async def _send_json(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    payload: Any,
    headers: Sequence[tuple[str, str]] = (),
) -> None:
    await _send(conn, writer, json.dumps(payload).encode(), status, "application/json", headers)


async def _send_stream(
    conn: h11.Connection, writer: asyncio.StreamWriter, events: list[bytes], chunk_delay: float
) -> None:
    head = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]
    writer.write(conn.send(h11.Response(status_code=200, headers=head)) or b"")
    for index, event in enumerate(events):
        if index and chunk_delay:
            await asyncio.sleep(chunk_delay)
        writer.write(conn.send(h11.Data(data=event)) or b"")
        await writer.drain()
    writer.write(conn.send(h11.EndOfMessage()) or b"")
    await writer.drain()
