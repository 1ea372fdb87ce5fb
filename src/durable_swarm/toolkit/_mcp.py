"""MCP servers as tools: `MCPTools` offers a server's tools to an agent, each call a tool step.

Connections live on one event loop of their own, on a daemon thread of this process, so runs on
any thread and any event loop (plain `Swarm.run`, `Swarm.arun`, DBOS's loop for durable runs)
share them: a connection is opened on first use, reused across runs, reopened when its server
died, and closed when the process exits (or by `MCPTools.close()`).

The official `mcp` package (2.x) does the protocol; it is the optional extra `mcp`
(`pip install 'durable-swarm[mcp]'`) and is imported only when a server is first used.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..errors import DurableSwarmError, MCPServerUnavailableError
from ..tools import TOOL_SPEC_ATTR, ToolSource, ToolSpec, tool_name
from ._mcp_transport import BoundedHTTP, ReadLimit, stdio_transport
from ._skill import SkillCompositionError
from ._tool import check_tool_name, describe_callable

__all__ = ["IDEMPOTENCY_META_KEY", "MCPTools", "source_tools"]

logger = logging.getLogger("durable_swarm")

T = TypeVar("T")

IDEMPOTENCY_META_KEY = "idempotency_key"
"""The `_meta` key of a `tools/call` request that carries the call's idempotency key."""

# A server that cannot be reached is tried this often, waiting 1 s then 2 s (as a model call).
ATTEMPTS = 3
FIRST_DELAY_SECONDS = 1.0
BACKOFF = 2.0
LIST_PAGE_LIMIT = 100  # pages of a tool list read at most (each at most max_message_bytes)
MAX_MESSAGE_BYTES = 10 * 1024 * 1024
MAX_TOOLS = 128  # as many tools as the OpenAI API accepts in one request
MAX_DESCRIPTION_CHARS = 10_000
MAX_SCHEMA_CHARS = 50_000
MAX_NAME = 64  # the longest tool name the OpenAI API accepts
# the keyword argument `MCPTool` receives the call's idempotency key as (not `idempotency_key`,
# which may be a parameter of the server's tool, filled in by the model)
KEY_PARAMETER = "_durable_swarm_idempotency_key"

_LAUNCHERS = {"python", "python3", "node", "npx", "uv", "uvx", "bun", "deno", "docker", "bunx"}
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_VALID_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "MCPTools needs the `mcp` package (2.x): pip install 'durable-swarm[mcp]'"
        ) from e


class _Background:
    """The process's event loop for MCP connections, on a daemon thread started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.sources: weakref.WeakSet[MCPTools] = weakref.WeakSet()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():  # first use, or a forked child
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="durable-swarm-mcp", daemon=True
                )
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
                self.sources = weakref.WeakSet()
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        loop = self.loop()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("MCPTools cannot be called from its own connection thread")
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the connection loop and wait for it (from any thread)."""
        return self._submit(coro).result()

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the connection loop and await it from another event loop."""
        return await asyncio.wrap_future(self._submit(coro))

    def shutdown(self, timeout: float = 5.0) -> None:
        """Close every open connection, then stop the loop (registered with `atexit`)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None or self._pid != os.getpid():
                return
            self._loop = self._thread = None
        sources = list(self.sources)
        if sources:

            async def close_all() -> None:
                await asyncio.gather(*(s._aclose() for s in sources), return_exceptions=True)

            try:
                asyncio.run_coroutine_threadsafe(close_all(), loop).result(timeout)
            except Exception as e:  # closing is best effort at exit
                logger.debug("Closing MCP connections at exit failed: %r", e)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)


_BACKGROUND = _Background()
atexit.register(_BACKGROUND.shutdown)


def _describe_error(error: BaseException) -> str:
    """`Type: message` of the innermost cause (task groups wrap errors in exception groups)."""
    while isinstance(getattr(error, "exceptions", None), (list, tuple)) and error.exceptions:  # type: ignore[attr-defined]
        error = error.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(error).__name__}: {error}"


def _connection_lost(error: BaseException) -> bool:
    """True when `error` means the server is gone (as opposed to refusing this one request)."""
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    inner = getattr(error, "exceptions", None)
    if isinstance(inner, (list, tuple)):
        return any(_connection_lost(e) for e in inner)
    if isinstance(error, MCPError):
        return error.code == CONNECTION_CLOSED
    try:
        import httpx2

        if isinstance(error, httpx2.TransportError):
            return True
    except ImportError:  # pragma: no cover - httpx2 comes with mcp 2
        pass
    return isinstance(
        error, (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
    )


def _session_lost(error: BaseException) -> bool:
    """True when an HTTP server answered 404 for the session ("Session terminated" or "Session
    not found"): it forgot the session (it restarted) and did not run the request."""
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import INVALID_REQUEST

    return (
        isinstance(error, MCPError)
        and error.code == INVALID_REQUEST
        and error.error.message in ("Session terminated", "Session not found")
    )


def _refused_status(error: BaseException) -> bool:
    """True when an HTTP server answered with an error status and no JSON-RPC error (as some
    servers answer 400 for a session they do not know)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types.jsonrpc import INTERNAL_ERROR

    return (
        isinstance(error, MCPError)
        and error.code == INTERNAL_ERROR
        and error.error.message == "Server returned an error response"
    )


def _default_name(command: Sequence[str] | None, url: str | None) -> str:
    if url is not None:
        from urllib.parse import urlsplit

        raw = urlsplit(url).hostname or "mcp"
    else:
        assert command
        words = [Path(w).name for w in command]
        launcher = re.sub(r"[\d.]+$", "", words[0])
        args = [w for w in words[1:] if not w.startswith("-")]
        raw = Path(args[0]).stem if launcher in _LAUNCHERS and args else words[0]
    return _INVALID_NAME_CHARS.sub("_", raw).strip("_") or "mcp"


class MCPTool:
    """One tool of an MCP server, as the agent offers it: calling it calls the server.

    Built by `MCPTools.tools` from a recorded listing; it carries the server's JSON schema and
    the approval setting in its `ToolSpec`. Returns the result as text for the model.
    """

    def __init__(self, source: MCPTools, descriptor: Mapping[str, Any]) -> None:
        self.source = source
        self.tool = str(descriptor["tool"])
        self.__name__ = str(descriptor["name"])
        self.__qualname__ = f"MCPTools({source.name!r}).{self.tool}"
        spec = ToolSpec(
            name=self.__name__,
            description=str(descriptor.get("description") or ""),
            needs_approval=source.needs_approval_for(self.tool),
            parameters=dict(descriptor.get("parameters") or {}),
            key_parameter=KEY_PARAMETER,
        )
        setattr(self, TOOL_SPEC_ATTR, spec)

    def __call__(self, _durable_swarm_idempotency_key: str | None = None, **arguments: Any) -> str:
        key = _durable_swarm_idempotency_key
        return self.source.call(self.tool, arguments, idempotency_key=key)

    def __repr__(self) -> str:
        return f"<MCP tool {self.tool!r} of server {self.source.name!r}>"


class MCPTools(ToolSource):
    """The tools of an MCP server, for an agent's `functions`.

    `MCPTools(command=["python", "server.py"], env={...})` starts the server as a child process and
    talks to it over stdio; `MCPTools(url="http://host/mcp", headers={...})` talks streamable HTTP.
    Put it in `Agent(functions=[...])`: the first time an agent with it takes a turn, the run
    lists the server's tools (a step of its own, `tools:<name>`, in durable runs) and offers them
    with the server's JSON schemas for the rest of the run, even if the server changes meanwhile.
    Each call is a tool call like any other (one step in durable runs, never made again once it
    finished); its idempotency key (run id and step) reaches the server in the request's
    `_meta` as `"idempotency_key"`, so a server can make the effect happen once.

    A result becomes the tool message: text as is, structured content as JSON when there is no
    text, images, audio and binary resources as a short placeholder, cut to `max_result_chars`.
    A tool error (`isError`), a request the server refuses or a call that does not answer within
    `timeout` becomes an error message the model reads. A server that cannot be reached (it does
    not start, refuses connections, or died and does not come back) is tried 3 times, 1 s then
    2 s apart; then `MCPServerUnavailableError` names the server and fails the run at that step
    (a durable run resumes with `resume`). A call is never sent twice: when the server exits or
    the connection drops during the call, the model reads that it may or may not have taken
    effect. Tool names are made valid (long ones shortened with a hash); tools that run only as
    MCP tasks are left out.

    Everything read from the server is bounded: one message (a call's result, a page of the tool
    list) is read up to `max_message_bytes` and no further. A result larger than that closes the
    connection (a stdio server is stopped and started again on the next call) and the model
    reads an error naming the server, the tool and the limit. The tool list is refused with
    `DurableSwarmError` naming what was too large when it has more than `max_tools` tools (after
    `include`/`exclude`), a description longer than `max_description_chars` or an input schema
    longer than `max_schema_chars` (as JSON text), or when a page is larger than
    `max_message_bytes`; a tool whose input schema is not an object (MCP passes arguments as an
    object and models are offered object parameters only) is refused with
    `SkillCompositionError`. These checks run on the list a run recorded, with the options of the
    process running it, so a run they stopped resumes (`resume(run_id)`) once the options
    (`exclude=`, a limit, `prefix=`, `rename=`) allow it.

    An MCP tool may not take the name of another tool of the agent: its functions, its skills'
    tools, another server's tools, or the `transfer_to_<agent>` tool of one of its `OnCondition`
    handoffs (available now or not); a clash is refused with `SkillCompositionError` naming both,
    once the tool list is known and before any model request offers it.

    Args:
        command: the server's argument vector (stdio); exactly one of `command` and `url`.
        url: the server's streamable HTTP endpoint.
        env: environment variables for a stdio server, over the `mcp` package's minimal default
            (the server does not inherit this process's environment).
        cwd: working directory of a stdio server.
        headers: HTTP headers sent with every request to `url` (e.g. authorization).
        name: names the server in errors, in step names and as the key of its recorded tool list
            (default: from the script's or host's name); unique among an agent's servers.
        prefix: offer tools as `<prefix>_<tool>` (`True`: the server's name) to avoid clashes;
            a clash with another tool of the agent is refused with an error naming both.
        rename: offer the server's tools named here under the given names, as they are (no
            prefix): `{"search": "docs_search"}`; for tools whose names clash, even once made
            valid (`get.user` and `get_user` both become `get_user`).
        include: offer only these tools (by the server's names); `exclude`: never these.
        needs_approval: `True` for every tool, or the names of the tools a person must approve.
        timeout: seconds for each call to answer (a late answer is an error message for the
            model).
        connect_timeout: seconds to start or reach the server, open the session and list its
            tools (default: `timeout`, at least 30 s: a short call timeout does not keep a
            slow-starting server from starting).
        max_result_chars: longest result text the model reads; longer results are cut.
        max_message_bytes: most bytes read of one message from the server (default 10 MiB);
            a larger result is an error for the model, a larger page of the tool list an error
            that stops the run.
        max_tools: most tools offered from this server, after `include`/`exclude` (default 128,
            as many as the OpenAI API takes in one request); more stop the run with an error.
        max_description_chars: longest tool description accepted (default 10,000 characters).
        max_schema_chars: longest input schema accepted, as JSON text (default 50,000
            characters).
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: bool | str = False,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        needs_approval: bool | Collection[str] = False,
        timeout: float = 60.0,
        max_result_chars: int = 20_000,
        rename: Mapping[str, str] | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_tools: int = MAX_TOOLS,
        max_description_chars: int = MAX_DESCRIPTION_CHARS,
        max_schema_chars: int = MAX_SCHEMA_CHARS,
        connect_timeout: float | None = None,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError(
                "MCPTools takes exactly one of command=[...] (stdio) or url=... (HTTP)"
            )
        if command is not None:
            if (
                isinstance(command, str)
                or not command
                or not all(isinstance(w, str) for w in command)
            ):
                raise TypeError(
                    f"MCPTools(command=...) is an argument vector such as ['python', 'server.py'], "
                    f"got {command!r}"
                )
            if headers:
                raise ValueError("MCPTools(headers=...) is for url=...; a stdio server takes env=")
        elif not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"MCPTools(url=...) must be an http:// or https:// URL, got {url!r}")
        elif env or cwd:
            raise ValueError("MCPTools(env=..., cwd=...) are for a stdio server (command=[...])")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"MCPTools(timeout=...) must be a positive number, got {timeout!r}")
        limits = {
            "max_result_chars": max_result_chars,
            "max_message_bytes": max_message_bytes,
            "max_tools": max_tools,
            "max_description_chars": max_description_chars,
            "max_schema_chars": max_schema_chars,
        }
        for option, value in limits.items():
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ValueError(f"MCPTools({option}=...) must be a positive int, got {value!r}")
        self.rename = dict(rename or {})
        for tool, offered in self.rename.items():
            if not isinstance(tool, str) or not isinstance(offered, str):
                raise TypeError(
                    f"MCPTools(rename=...) maps the server's tool names to names, got {rename!r}"
                )
            if not _VALID_NAME.fullmatch(offered):
                raise ValueError(
                    f"MCPTools(rename={{{tool!r}: {offered!r}}}): {offered!r} is not a valid tool "
                    "name (1 to 64 letters, digits, '_' or '-')."
                )
        self.command = list(command) if command is not None else None
        self.url = url
        self.env = dict(env) if env else None
        self.cwd = os.fspath(cwd) if cwd is not None else None
        self.headers = dict(headers) if headers else None
        self.name = name or _default_name(command, url)
        check_tool_name(self.name, self)
        self.__name__ = f"mcp:{self.name}"  # how the agent registry names it
        self.prefix = (self.name if prefix is True else prefix) or ""
        self.include = None if include is None else frozenset(include)
        self.exclude = frozenset(exclude)
        if isinstance(needs_approval, str):
            needs_approval = [needs_approval]
        self._approval: bool | frozenset[str] = (
            needs_approval if isinstance(needs_approval, bool) else frozenset(needs_approval)
        )
        self.timeout = float(timeout)
        if connect_timeout is not None and not (
            isinstance(connect_timeout, (int, float)) and connect_timeout > 0
        ):
            raise ValueError(
                f"MCPTools(connect_timeout=...) must be a positive number, got {connect_timeout!r}"
            )
        self.connect_timeout = (
            float(connect_timeout) if connect_timeout is not None else max(self.timeout, 30.0)
        )
        self.max_result_chars = max_result_chars
        self.max_message_bytes = max_message_bytes
        self.max_tools = max_tools
        self.max_description_chars = max_description_chars
        self.max_schema_chars = max_schema_chars
        self._limit = ReadLimit(max_message_bytes)
        self._tools: dict[str, MCPTool] = {}
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None

    def __repr__(self) -> str:
        where = f"url={self.url!r}" if self.url else f"command={self.command!r}"
        return f"MCPTools({where}, name={self.name!r})"

    def needs_approval_for(self, tool: str) -> bool:
        """Whether a call of the server's tool `tool` waits for a person's approval."""
        return self._approval if isinstance(self._approval, bool) else tool in self._approval

    # -- listing -------------------------------------------------------------------------------

    def list_tools(self) -> list[dict[str, Any]]:
        """The tools the server offers now (filtered), as the JSON a run records: for each,
        `name` (as offered to the model now), `tool` (the server's name), `description`,
        `parameters` (the server's input schema) and `prefix` (the prefix in force; a run
        offers each tool under the name its own options give, see `tools`).

        Raises:
            MCPServerUnavailableError: the server cannot be reached.
            DurableSwarmError: the list is too large (`max_message_bytes`, `max_tools`,
                `max_description_chars`, `max_schema_chars`; the message names which and the
                tool), or the server did not answer with a tool list.
        """
        _require_mcp()
        return _BACKGROUND.run(self._alist())

    async def alist_tools(self) -> list[dict[str, Any]]:
        """`list_tools` for async code."""
        return await _BACKGROUND.arun(self._alist())

    async def _alist(self) -> list[dict[str, Any]]:
        async def fetch(client: Any) -> list[dict[str, Any]]:
            listing: list[dict[str, Any]] = []
            cursor = None
            for _ in range(LIST_PAGE_LIMIT):
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    if self._offers(tool.name) and self._callable(tool):
                        listing.append(self._describe(tool))
                        if len(listing) > self.max_tools:  # not one page more is read
                            self._check_count([d["tool"] for d in listing])
                cursor = page.next_cursor
                if cursor is None:
                    break
            return listing

        exceeded = self._limit.exceeded
        try:
            listing = await self._with_client(fetch, resend=True)
        except DurableSwarmError:  # unreachable, or too many tools
            raise
        except Exception as e:
            if self._limit.exceeded != exceeded:
                raise DurableSwarmError(
                    f"MCP server {self.name!r} sent its tool list in a message larger than "
                    f"{self.max_message_bytes} bytes (the limit max_message_bytes); it was not "
                    "read further and the connection was closed. Raise the limit "
                    "(MCPTools(..., max_message_bytes=...)) or have the server offer fewer or "
                    "shorter tools. A durable run stopped at this step and resumes with "
                    "resume(run_id).",
                    server=self.name,
                    limit="max_message_bytes",
                ) from None
            raise DurableSwarmError(
                f"MCP server {self.name!r} did not list its tools ({_describe_error(e)}); check "
                "that it is an MCP server that offers tools. A durable run stopped at this step "
                "and resumes with resume(run_id).",
                server=self.name,
            ) from e
        for descriptor in listing:
            self._check_sizes(descriptor)
        missing = (self.include or frozenset()) - {d["tool"] for d in listing}
        if missing:
            logger.warning(
                "MCP server %r does not offer %s named in include=; it offers %s.",
                self.name,
                ", ".join(sorted(missing)),
                ", ".join(d["tool"] for d in listing) or "no tools",
            )
        return listing

    def _offers(self, tool: str) -> bool:
        return (self.include is None or tool in self.include) and tool not in self.exclude

    def _callable(self, tool: Any) -> bool:
        """False for a tool that only runs as an MCP task (`execution.taskSupport` "required"),
        which this client does not support."""
        execution = getattr(tool, "execution", None)
        if getattr(execution, "task_support", None) != "required":
            return True
        logger.debug(
            "MCP server %r: leaving out tool %r: it runs only as a task (taskSupport 'required')",
            self.name,
            tool.name,
        )
        return False

    def _offered_name(self, tool: str) -> str:
        """The name the server's tool `tool` is offered under: as `rename` says, else made
        valid (with the prefix), long names shortened and kept apart by a hash."""
        if tool in self.rename:
            return self.rename[tool]
        offered = _INVALID_NAME_CHARS.sub("_", f"{self.prefix}_{tool}" if self.prefix else tool)
        if len(offered) > MAX_NAME:  # shortened, kept apart by a hash of the server's name
            digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
            offered = f"{offered[: MAX_NAME - 9]}_{digest}"
        return offered or "_"

    def _describe(self, tool: Any) -> dict[str, Any]:
        schema = dict(tool.input_schema or {})
        schema.pop("$schema", None)
        schema.setdefault("type", "object")
        if schema["type"] == "object":
            schema.setdefault("properties", {})
        return {
            "name": self._offered_name(tool.name),
            "tool": tool.name,
            "description": tool.description or tool.title or "",
            "parameters": schema,
            "prefix": self.prefix,
        }

    def _check_count(self, tools: Sequence[str]) -> None:
        if len(tools) <= self.max_tools:
            return
        shown = ", ".join(tools[:5])
        raise DurableSwarmError(
            f"MCP server {self.name!r} offers more than {self.max_tools} tools (the limit "
            f"max_tools; first: {shown}, ...). Offer only those the agent needs "
            "(MCPTools(..., include=[...]) or exclude=[...]) or raise the limit "
            "(MCPTools(..., max_tools=...)); the model API may refuse that many tools. A "
            "durable run stopped here resumes with resume(run_id) once this is changed.",
            server=self.name,
            limit="max_tools",
        )

    def _check_sizes(self, descriptor: Mapping[str, Any]) -> None:
        """Refuse a tool whose description or input schema is longer than the limits."""
        tool = str(descriptor["tool"])
        sizes = (
            (
                "a description",
                "max_description_chars",
                len(str(descriptor.get("description") or "")),
            ),
            (
                "an input schema (as JSON)",
                "max_schema_chars",
                len(json.dumps(descriptor.get("parameters") or {}, ensure_ascii=False)),
            ),
        )
        for what, option, size in sizes:
            limit = getattr(self, option)
            if size > limit:
                raise DurableSwarmError(
                    f"MCP server {self.name!r} offers tool {tool!r} with {what} of {size} "
                    f"characters, more than {limit} (the limit {option}). Leave the tool out "
                    f"(MCPTools(..., exclude=[{tool!r}])) or raise the limit "
                    f"(MCPTools(..., {option}=...)); a durable run stopped here resumes with "
                    "resume(run_id) once this is changed.",
                    server=self.name,
                    tool=tool,
                    limit=option,
                )

    def _check_schema(self, descriptor: Mapping[str, Any]) -> None:
        """Refuse a tool whose input schema is not an object: MCP sends a call's arguments as
        an object, and models are offered object parameters only."""
        parameters = descriptor.get("parameters") or {}
        kind = parameters.get("type", "object") if isinstance(parameters, Mapping) else None
        if kind == "object":
            return
        tool = str(descriptor["tool"])
        raise SkillCompositionError(
            f"MCP server {self.name!r} offers tool {tool!r} with an input schema of type "
            f"{kind!r}, not 'object': MCP passes a call's arguments as an object and models are "
            "offered object parameters only, so it cannot be offered. Leave it out "
            f"(MCPTools(..., exclude=[{tool!r}])).",
            name=tool,
        )

    def tools(self, listing: list[dict[str, Any]]) -> list[Callable[..., Any]]:
        """The callable tools for a recorded `listing` (one object per tool, reused), leaving
        out those `include`/`exclude` leave out now, named as `prefix`/`rename` say now (a
        listing recorded by an earlier version, without `prefix`, keeps its recorded names).

        Raises:
            DurableSwarmError: more than `max_tools` tools, or a description or schema longer
                than its limit.
            SkillCompositionError: a tool whose input schema is not an object.
            ValueError: a tool's name is not a valid tool name (a listing recorded by an older
                version, which did not shorten long names).
        """
        made: list[Callable[..., Any]] = []
        for descriptor in listing:
            if not self._offers(str(descriptor["tool"])):
                continue
            if "prefix" in descriptor:  # named with the options of this process
                descriptor = {**descriptor, "name": self._offered_name(str(descriptor["tool"]))}
            key = json.dumps(descriptor, sort_keys=True)
            tool = self._tools.get(key)
            if tool is None:
                self._check_sizes(descriptor)
                self._check_schema(descriptor)
                tool = MCPTool(self, descriptor)
                try:
                    check_tool_name(tool.__name__, tool)
                except ValueError:
                    raise ValueError(
                        f"MCP server {self.name!r} offers tool {tool.tool!r} as {tool.__name__!r}, "
                        "which is not a valid tool name (1 to 64 letters, digits, '_' or '-'). "
                        f"Leave it out (MCPTools(..., exclude=[{tool.tool!r}])) or offer it "
                        "under another prefix (MCPTools(..., prefix=...))."
                    ) from None
                self._tools[key] = tool
            made.append(tool)
        self._check_count([str(getattr(t, "tool", "")) for t in made])
        return made

    # -- calling -------------------------------------------------------------------------------

    def call(
        self, tool: str, arguments: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> str:
        """Call the server's tool `tool`; return the text the model reads as the result.

        Raises `MCPServerUnavailableError` when the server cannot be reached after retries.
        """
        return _BACKGROUND.run(self._acall(tool, dict(arguments), idempotency_key))

    async def _acall(self, tool: str, arguments: dict[str, Any], key: str | None) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import REQUEST_TIMEOUT

        meta = {IDEMPOTENCY_META_KEY: key} if key else None

        async def send(client: Any) -> Any:
            return await client.call_tool(
                tool, arguments, read_timeout_seconds=self.timeout, meta=meta
            )

        exceeded = self._limit.exceeded
        try:
            result = await self._with_client(send, resend=False)
        except MCPServerUnavailableError:
            raise
        except Exception as e:
            if self._limit.exceeded != exceeded:
                logger.warning(
                    "MCP server %r: a message larger than max_message_bytes=%d arrived while "
                    "tool %s was called; the connection was closed.",
                    self.name,
                    self.max_message_bytes,
                    tool,
                )
                return (
                    f"Error: MCP server {self.name!r} sent a message larger than "
                    f"{self.max_message_bytes} bytes (the limit max_message_bytes of MCPTools) "
                    f"during the call to tool {tool}; it was not read further and the connection "
                    "was closed. The call may or may not have taken effect. If such results are "
                    "expected, raise the limit (MCPTools(..., max_message_bytes=...))."
                )
            if isinstance(e, TimeoutError) or (
                isinstance(e, MCPError) and e.code == REQUEST_TIMEOUT
            ):
                return (
                    f"Error: MCP tool {tool} on server {self.name!r} did not answer within "
                    f"{self.timeout:g} seconds; it may or may not have taken effect."
                )
            if _connection_lost(e):
                what = "exited" if self.url is None else "dropped the connection"
                return (
                    f"Error: MCP server {self.name!r} {what} during the call to tool {tool} "
                    f"({_describe_error(e)}); the call may or may not have taken effect. Check "
                    "before calling it again (the connection is reopened on the next call)."
                )
            if isinstance(e, MCPError):
                return self._cut(
                    f"Error: MCP server {self.name!r} refused tool {tool}: {e.error.message}"
                )
            raise
        text = _result_text(result)
        if result.is_error:
            text = f"Error: MCP tool {tool} on server {self.name!r} failed: {text or 'no details'}"
        return self._cut(text)

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_result_chars:
            return text
        cut = len(text) - self.max_result_chars
        return (
            f"{text[: self.max_result_chars]}\n[... {cut} more characters cut: the result is "
            f"longer than {self.max_result_chars} characters]"
        )

    # -- the connection ------------------------------------------------------------------------

    async def _with_client(
        self, request: Callable[[Any], Coroutine[Any, Any, T]], *, resend: bool
    ) -> T:
        """`request(client)` on a live connection (3 attempts, 1 s then 2 s apart).

        Connecting is retried, and so is a request the server never ran: one an HTTP server
        refused because it forgot the session (it restarted). A connection lost while the
        request was out is retried only when `resend` (a request without effects); otherwise it
        is closed (the next request reopens it) and the error raised.
        """
        last: BaseException | None = None
        delay = FIRST_DELAY_SECONDS
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(delay)
                delay *= BACKOFF
            try:
                client, fresh = await self._connected()
            except Exception as e:
                last = e
                logger.info("MCP server %r: connecting failed (%s)", self.name, _describe_error(e))
                continue
            exceeded = self._limit.exceeded
            try:
                return await request(client)
            except Exception as e:
                lost, never_ran = _connection_lost(e), not fresh and _session_lost(e)
                if lost or never_ran or (not fresh and _refused_status(e)):
                    await self._drop(client)  # the next request reopens it
                if self._limit.exceeded != exceeded or not (never_ran or (lost and resend)):
                    raise  # a message over the limit would be over it again
                last = e
                logger.info("MCP server %r: connection lost (%s)", self.name, _describe_error(e))
        assert last is not None
        where = f"at {self.url}" if self.url else f"started as {' '.join(self.command or [])!r}"
        raise MCPServerUnavailableError(
            self.name, f"{_describe_error(last)} ({where}; {ATTEMPTS} attempts)"
        )

    def _open(self) -> Any:
        """The open connection's client, or None."""
        if self._holder is None or self._holder.done():
            return None
        return self._client

    async def _alive(self, client: Any) -> bool:
        """Ping an open (stdio) connection: False when its server is gone. Any answer shows the
        server is there (a server of the 2026 protocol answers that it does not know `ping`)."""
        try:
            await client.session.send_ping()
        except Exception as e:
            if _connection_lost(e):
                logger.info("MCP server %r: connection lost (%s)", self.name, _describe_error(e))
                return False
            logger.debug("MCP server %r: ping failed (%s)", self.name, _describe_error(e))
        return True

    async def _drop(self, client: Any) -> None:
        """Close the connection of `client`, unless another one replaced it meanwhile."""
        if self._client is client:
            await self._aclose()

    async def _connected(self) -> tuple[Any, bool]:
        """A client on a live connection, and whether it was opened now. An open stdio
        connection is pinged first (a local round trip), and reopened when its server died, so
        that a call is never sent to a dead server and then taken for one lost on the way. An
        HTTP server that restarted is found out by the request itself: it refuses the session
        it forgot, and the request is sent again on a new one (see `_with_client`)."""
        client = self._open()
        if client is not None:
            if self.url is not None or await self._alive(client):
                return client, False
            await self._drop(client)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if (client := self._open()) is not None:  # opened by another call meanwhile
                return client, False
            await self._aclose()
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._stop = asyncio.Event()
            self._holder = asyncio.create_task(self._hold(ready, self._stop))
            try:
                self._client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
            except BaseException:
                await self._aclose()
                raise
            _BACKGROUND.sources.add(self)
            return self._client, True

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """Open the connection, hand it over through `ready`, keep it open until `stop` (the
        transports must be entered and left by one task)."""
        from mcp import Client

        try:
            if self.url is not None:
                import httpx2
                from mcp.client.streamable_http import streamable_http_client

                timeout = httpx2.Timeout(30.0, read=300.0)
                async with httpx2.AsyncClient(
                    headers=self.headers, timeout=timeout, transport=BoundedHTTP(self._limit)
                ) as http:
                    transport = streamable_http_client(
                        self.url, http_client=http, max_sse_event_size=self.max_message_bytes
                    )
                    async with Client(  # calls pass `timeout`; the rest the connect timeout
                        transport, read_timeout_seconds=self.connect_timeout, cache=None
                    ) as client:
                        ready.set_result(client)
                        await stop.wait()
            else:
                assert self.command is not None
                stdio = stdio_transport(
                    self.command, self.env, self.cwd, _server_errlog(), self._limit
                )
                async with Client(
                    stdio, read_timeout_seconds=self.connect_timeout, cache=None
                ) as client:
                    ready.set_result(client)
                    await stop.wait()
        except Exception as e:
            if not ready.done():
                ready.set_exception(e)
            else:
                logger.debug("MCP server %r: connection ended (%s)", self.name, _describe_error(e))

    async def _aclose(self) -> None:
        holder, stop = self._holder, self._stop
        self._client = self._holder = self._stop = None
        if holder is None or stop is None:
            return
        stop.set()
        try:
            await asyncio.wait_for(holder, self.timeout)
        except BaseException as e:  # a transport that does not close in time is abandoned
            logger.debug("MCP server %r: closing failed (%s)", self.name, _describe_error(e))
            holder.cancel()

    def close(self) -> None:
        """Close the connection (stops a stdio server); the next use opens a new one."""
        if self._holder is not None:
            _BACKGROUND.run(self._aclose())

    async def aclose(self) -> None:
        """`close` for async code."""
        if self._holder is not None:
            await _BACKGROUND.arun(self._aclose())


def _server_errlog() -> Any:
    """Where a stdio server's stderr goes: this process's stderr when it is a real file (not
    when something, such as a test runner or a notebook, replaced it), else the original one."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return subprocess.DEVNULL


def _result_text(result: Any) -> str:
    """A `CallToolResult` as text: text blocks as they are, other content as placeholders,
    structured content as JSON when there is no text."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4
            parts.append(f"[{kind} {block.mime_type}, about {size} bytes, not shown]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is not None:
                parts.append(text)
            else:
                size = len(getattr(resource, "blob", "")) * 3 // 4
                mime = getattr(resource, "mime_type", None) or "binary"
                parts.append(f"[resource {resource.uri} ({mime}), about {size} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}: {block.name}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def source_tools(
    sources: Iterable[ToolSource],
    tool_lists: Mapping[str, list[dict[str, Any]]],
    functions: Sequence[Callable[..., Any]] = (),
    *,
    handoffs: Sequence[Any] = (),
) -> list[Callable[..., Any]]:
    """The tools `sources` add to an agent whose other tools are `functions` and whose
    `OnCondition` handoffs are `handoffs`, built from the recorded `tool_lists` (by source name;
    a source not listed yet adds nothing).

    Raises:
        SkillCompositionError: two sources share a name, or a tool name is offered twice (by
            two sources, a source and a function, or a source and a handoff's transfer tool,
            available now or not).
    """
    owners = {tool_name(f): f"the agent's tool {describe_callable(f)}" for f in functions}
    for rule in handoffs:
        transfer = tool_name(rule.transfer_function())
        owners.setdefault(
            transfer, f"the agent's handoff to agent {rule.target.name!r} (OnCondition)"
        )
    seen: dict[str, ToolSource] = {}
    added: list[Callable[..., Any]] = []
    for source in sources:
        if seen.setdefault(source.name, source) is not source:
            raise SkillCompositionError(
                f"Two tool sources of one agent are named {source.name!r}: {seen[source.name]!r} "
                f"and {source!r}. Give one another name (MCPTools(..., name=...)).",
                name=source.name,
            )
        offered_by: dict[str, str] = {}  # offered name -> the source's own tool name
        for func in source.tools(tool_lists.get(source.name, [])):
            name = tool_name(func)
            own = str(getattr(func, "tool", name))
            if name in offered_by:
                other = offered_by[name]
                raise SkillCompositionError(
                    f"Tool name {name!r} is offered twice by MCP server {source.name!r}: for its "
                    f"tools {other!r} and {own!r} (names are made valid, and long ones "
                    "shortened). Offer one under another name (MCPTools(..., rename="
                    f"{{{own!r}: '<new name>'}})) or leave it out (MCPTools(..., "
                    f"exclude=[{own!r}])).",
                    name=name,
                )
            if name in owners:
                raise SkillCompositionError(
                    f"Tool name {name!r} is offered twice: by MCP server {source.name!r} (its "
                    f"tool {own!r}) and by {owners[name]}. Give the server a prefix "
                    f"(MCPTools(..., prefix=True)), offer the tool under another name "
                    f"(MCPTools(..., rename={{{own!r}: '<new name>'}})) or leave it out "
                    f"(MCPTools(..., exclude=[{own!r}])).",
                    name=name,
                )
            offered_by[name] = own
            added.append(func)
        owners.update(dict.fromkeys(offered_by, f"MCP server {source.name!r}"))
    return added
