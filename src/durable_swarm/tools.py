"""Tools: JSON schema from signatures, argument checking, context injection, result coercion.

`function_schema` is byte-for-byte Swarm's `function_to_json` for simple signatures (`str`, `int`,
`float`, `bool`, `list`, `dict`, `None`, unannotated) and uses pydantic for richer annotations
(`Optional[X]`, `list[str]`, `Literal`, `Enum`, pydantic models, `Annotated[X, "description"]`).
`execute_tool` runs one tool call and never raises for the model's mistakes: unknown tools, bad
arguments and exceptions in the tool become an error message the model can read.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import copy
import functools
import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from ._aio import in_thread, run_coroutine
from ._messages import tool_message
from .errors import ToolUnavailableError
from .human import AskUser

__all__ = [
    "CONTEXT_VARIABLES",
    "IDEMPOTENCY_KEY",
    "TOOL_SPEC_ATTR",
    "ToolOutcome",
    "ToolSource",
    "ToolSpec",
    "coerce_result",
    "execute_tool",
    "execute_tool_async",
    "function_schema",
    "is_agent",
    "model_tool_schema",
    "tool_message",
    "tool_name",
    "tool_spec",
    "unknown_tool",
]

CONTEXT_VARIABLES = "context_variables"
IDEMPOTENCY_KEY = "idempotency_key"
# Parameters the library fills in itself; they are never shown to the model.
INJECTED = (CONTEXT_VARIABLES, IDEMPOTENCY_KEY)

_SIMPLE_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
    type(None): "null",
    None: "null",
    inspect.Parameter.empty: "string",
    Any: "string",
}


def is_agent(obj: Any) -> bool:
    """True for this library's `Agent` and for agents of the `swarm` package (same fields)."""
    return all(hasattr(obj, a) for a in ("name", "instructions", "functions", "model")) and (
        isinstance(obj, BaseModel)
    )


def _is_result(obj: Any) -> bool:
    """True for this library's `Result`, the `swarm` package's, and subclasses of either (as
    Swarm's own `isinstance` check), told by class name: the `swarm` package is optional."""
    return (
        isinstance(obj, BaseModel)
        and any(c.__name__ in ("Result", "SwarmResult") for c in type(obj).__mro__)
        and all(hasattr(obj, a) for a in ("value", "agent", "context_variables"))
    )


@dataclass(frozen=True)
class ToolSpec:
    """Options a tool function carries (set by the `@tool` decorator; all optional).

    Attributes:
        name: the name offered to the model (default: the function's `__name__`).
        description: the description offered to the model (default: the docstring).
        timeout: seconds one attempt may take; then the model gets an error message as the
            tool's result (a timed-out call is not retried). A sync tool is not stopped: it
            goes on in its thread until it returns, and its result is dropped. An `async def`
            tool is cancelled in async runs (`arun`, durable runs); in `Swarm.run` it goes on
            in its thread like a sync tool.
        retries: how many more times a call that raised is tried before it becomes an error.
        needs_approval: the run pauses before each call until a person approves or rejects it.
        delegate: an agent this tool hands a task to as a sub-agent (see `Agent.as_tool`): it
            runs as a run of its own (a child workflow in durable runs) and its answer is the
            tool's result.
        parameters: the JSON schema of the arguments, offered to the model instead of one built
            from the signature (for tools described by someone else, such as an MCP server's).
            Arguments are then only checked to be a JSON object; the tool checks the rest.
        key_parameter: the keyword argument that receives the call's idempotency key when the
            tool takes it (MCP tools take another, so that a server's parameter named
            `idempotency_key` is the model's to fill).
        guardrails: guardrails of this tool alone, checked with the agent's `tool_guardrails`
            (see `durable_swarm.guardrails`).
    """

    name: str | None = None
    description: str | None = None
    timeout: float | None = None
    retries: int = 0
    needs_approval: bool = False
    delegate: Any = None
    parameters: dict[str, Any] | None = None
    key_parameter: str = IDEMPOTENCY_KEY
    guardrails: tuple[Any, ...] = ()


class ToolSource(abc.ABC):
    """A bundle of tools that are only known at run time (an MCP server: `toolkit.MCPTools`).

    It goes in an agent's `functions`. The first time an agent with it takes a turn, the loop asks
    for its tool list once (a `ListTools` effect: a step of its own in durable runs), keeps that
    list for the rest of the run, and offers the tools `tools(listing)` builds from it.
    Subclasses set `name` (unique per agent) and implement the three methods.
    """

    name: str

    @abc.abstractmethod
    def list_tools(self) -> list[dict[str, Any]]:
        """The tools offered now, as JSON (the listing a run records)."""

    @abc.abstractmethod
    async def alist_tools(self) -> list[dict[str, Any]]:
        """`list_tools` for async code."""

    @abc.abstractmethod
    def tools(self, listing: list[dict[str, Any]]) -> list[Callable[..., Any]]:
        """The tool functions for a recorded `listing`."""


TOOL_SPEC_ATTR = "__durable_swarm_tool__"


def tool_spec(func: Callable[..., Any]) -> ToolSpec:
    """The `ToolSpec` of a function (defaults for a plain function)."""
    spec = getattr(func, TOOL_SPEC_ATTR, None)
    return spec if isinstance(spec, ToolSpec) else ToolSpec()


def tool_name(func: Callable[..., Any]) -> str:
    """The name a function is offered to the model under."""
    name = tool_spec(func).name or getattr(func, "__name__", None) or type(func).__name__
    return str(name)


def _param_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style `Args:` section or `:param x:` lines."""
    found = dict(re.findall(r":param\s+(?:\w+\s+)?(\w+):\s*(.+)", doc))
    section = re.search(r"^\s*(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.M)
    if section:
        for line in section.group(1).splitlines():
            m = re.match(r"\s+(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)", line)
            if m:
                found.setdefault(m.group(1), m.group(2).strip())
    return found


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    description = None
    if get_origin(annotation) is Annotated:
        annotation, *meta = get_args(annotation)
        description = next((m for m in meta if isinstance(m, str)), None)
    simple = _SIMPLE_TYPES.get(annotation) if _hashable(annotation) else None
    if simple is not None:
        schema: dict[str, Any] = {"type": simple}
    else:
        try:
            schema = _strip_titles(TypeAdapter(annotation).json_schema())
        except Exception:  # a type pydantic cannot describe reads as "string", as in Swarm
            schema = {"type": "string"}
        defs = schema.pop("$defs", None)
        if defs:
            schema = _inline_refs(schema, defs)
    if description:
        schema["description"] = description
    return schema


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _inline_refs(schema: Any, defs: dict[str, Any]) -> Any:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline_refs(defs[ref.split("/")[-1]], defs)
        return {k: _inline_refs(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline_refs(v, defs) for v in schema]
    return schema


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:
        return {}


def function_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI tool schema of `func` (Swarm's `function_to_json`, extended)."""
    spec = tool_spec(func)
    if spec.parameters is not None:
        return {
            "type": "function",
            "function": {
                "name": tool_name(func),
                "description": spec.description or "",
                "parameters": copy.deepcopy(spec.parameters),
            },
        }
    try:
        signature = inspect.signature(func)
    except ValueError as e:
        raise ValueError(f"Failed to get signature for function {tool_name(func)}: {e}") from e
    hints = _hints(func)
    # Parameter descriptions from the docstring for `@tool` functions and this library's own
    # tools only: a user's plain function gets Swarm's schema, byte for byte (its docstring is
    # the tool's description, nothing more).
    declared = isinstance(getattr(func, TOOL_SPEC_ATTR, None), ToolSpec)
    ours = str(getattr(func, "__module__", "")).startswith("durable_swarm.")
    docs = _param_docs(func.__doc__ or "") if declared or ours else {}
    properties: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = _annotation_schema(hints.get(param.name, param.annotation))
        if param.name in docs and "description" not in prop:
            prop["description"] = docs[param.name]
        properties[param.name] = prop
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return {
        "type": "function",
        "function": {
            "name": tool_name(func),
            "description": tool_spec(func).description or func.__doc__ or "",
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


@functools.lru_cache(maxsize=4096)
def _model_schema_json(func: Callable[..., Any], name: str | None, description: str | None) -> str:
    """`model_tool_schema` as JSON, cached per function (and its `@tool` name/description): it
    is asked for at every model call, and reading signatures and type hints is not cheap."""
    schema = function_schema(func)
    params = schema["function"]["parameters"]
    for injected in INJECTED if tool_spec(func).parameters is None else ():
        params["properties"].pop(injected, None)
        if injected in params["required"]:
            params["required"].remove(injected)
    return json.dumps(schema)


def model_tool_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """`function_schema` without the parameters the library injects (what the model sees)."""
    spec = tool_spec(func)
    try:
        cached = _model_schema_json(func, spec.name, spec.description)
    except TypeError:  # an unhashable callable: no cache
        cached = _model_schema_json.__wrapped__(func, spec.name, spec.description)
    result: dict[str, Any] = json.loads(cached)
    return result


_ARGS_CONFIG = ConfigDict(coerce_numbers_to_str=True)


@functools.lru_cache(maxsize=1024)
def _arguments_model(func: Callable[..., Any]) -> tuple[type[BaseModel], bool]:
    """A pydantic model of `func`'s parameters, and whether it accepts **kwargs."""
    signature = inspect.signature(func)
    hints = _hints(func)
    fields: dict[str, Any] = {}
    var_kw = False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            var_kw = True
            continue
        if param.kind is param.VAR_POSITIONAL or param.name in INJECTED:
            continue
        annotation = hints.get(param.name, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        if default is None:  # `x: str = None`: the model may send null, as Swarm passes it on
            annotation = Optional[annotation]  # noqa: UP045 (a runtime type, not an annotation)
        fields[param.name] = (annotation, default)
    config = ConfigDict(**_ARGS_CONFIG, extra="allow" if var_kw else "forbid")
    return create_model(f"{tool_name(func)}_arguments", __config__=config, **fields), var_kw


def parse_arguments(func: Callable[..., Any], raw: str) -> dict[str, Any]:
    """Check the model's JSON `raw` against `func`'s signature; raise ValueError if it won't do."""
    try:
        args = json.loads(raw) if raw and raw.strip() else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"the arguments are not valid JSON ({e.msg} at position {e.pos})") from e
    if not isinstance(args, dict):
        raise ValueError(f"the arguments must be a JSON object, got {type(args).__name__}")
    # the library fills these in, whatever the model sent (as Swarm)
    for injected in (CONTEXT_VARIABLES, tool_spec(func).key_parameter):
        if injected in args and injected in _parameters(func):
            del args[injected]
    if tool_spec(func).parameters is not None:
        return args
    try:
        model, _ = _arguments_model(func)
    except Exception:  # signatures pydantic cannot model are passed through as Swarm does
        return args
    try:
        validated = model.model_validate(args)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in e.errors()
        )
        raise ValueError(problems) from e
    except Exception:  # e.g. annotations naming types that cannot be resolved: passed through
        return args
    values = {name: getattr(validated, name) for name in validated.model_fields_set}
    values.update(validated.model_extra or {})
    return values


def _parameters(func: Callable[..., Any]) -> Any:
    """`func`'s parameters (read at every call of a tool: cached per function)."""
    try:
        return _signature_parameters(func)
    except TypeError:  # an unhashable callable: no cache
        return _signature_parameters.__wrapped__(func)


@functools.lru_cache(maxsize=1024)
def _signature_parameters(func: Callable[..., Any]) -> Any:
    try:
        return inspect.signature(func).parameters
    except (TypeError, ValueError):
        return {}


@dataclass
class ToolOutcome:
    """The result of one tool call: its tool message, a handoff target, the context after it
    (the tool's own changes to the live dict), and the context updates of a returned `Result`,
    which the loop merges once every tool call of the message has run (as Swarm does: the
    message's later tool calls do not see them)."""

    message: dict[str, Any]
    context_variables: dict[str, Any]
    agent: Any = None
    ask: str | None = None
    updates: dict[str, Any] = field(default_factory=dict)


def coerce_result(value: Any) -> tuple[str, Any, dict[str, Any]]:
    """A tool's return value as (text for the model, handoff agent or None, context updates)."""
    if _is_result(value):
        return str(value.value), value.agent, dict(value.context_variables or {})
    if is_agent(value):
        return json.dumps({"assistant": value.name}), value, {}
    try:
        return str(value), None, {}
    except Exception as e:
        raise TypeError(
            f"Failed to cast response to string: {value!r}. Make sure agent functions return a "
            f"string or Result object. Error: {e}"
        ) from e


def _arguments(
    func: Callable[..., Any],
    call: dict[str, Any],
    context_variables: dict[str, Any],
    idempotency_key: str | None,
) -> dict[str, Any] | ToolOutcome:
    """The keyword arguments for `func`, or the error outcome the model reads instead."""
    try:
        args = parse_arguments(func, call["function"].get("arguments") or "")
    except ValueError as e:
        name = call["function"]["name"]
        text = f"Error: invalid arguments for tool {name}: {e}. Call it again with valid arguments."
        return ToolOutcome(tool_message(call, text), context_variables)
    parameters = _parameters(func)
    if CONTEXT_VARIABLES in parameters:
        args[CONTEXT_VARIABLES] = context_variables
    key_parameter = tool_spec(func).key_parameter
    if key_parameter in parameters:
        args[key_parameter] = idempotency_key
    return args


def unknown_tool(call: dict[str, Any], context_variables: dict[str, Any]) -> ToolOutcome:
    """The outcome of a call to a tool the agent does not have (Swarm's exact message)."""
    name = call["function"]["name"]
    return ToolOutcome(tool_message(call, f"Error: Tool {name} not found."), context_variables)


def _finish(call: dict[str, Any], context_variables: dict[str, Any], value: Any) -> ToolOutcome:
    if isinstance(value, AskUser):
        return ToolOutcome(tool_message(call, ""), context_variables, ask=value.question)
    text, agent, updates = coerce_result(value)
    return ToolOutcome(tool_message(call, text), context_variables, agent, updates=updates)


# what a timed-out attempt raises (one class since Python 3.11; three in 3.10)
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError)


def _after_error(
    error: Exception,
    retries_left: int,
    call: dict[str, Any],
    context_variables: dict[str, Any],
    timeout: float | None,
) -> ToolOutcome | None:
    """The outcome of a tool call whose attempt raised `error`, or None to try it again. A
    timed-out attempt is not retried; a `ToolUnavailableError` is raised (it fails the run)."""
    name = call["function"]["name"]
    if isinstance(error, ToolUnavailableError):
        raise error
    if isinstance(error, _TIMEOUTS):
        text = f"Error: tool {name} timed out after {timeout} seconds."
    elif retries_left:
        return None
    else:
        text = f"Error: tool {name} raised {type(error).__name__}: {error}"
    return ToolOutcome(tool_message(call, text), context_variables)


def execute_tool(
    func: Callable[..., Any],
    call: dict[str, Any],
    context_variables: dict[str, Any],
    *,
    idempotency_key: str | None = None,
) -> ToolOutcome:
    """Run one tool call synchronously (an `async def` tool is run to completion).

    `context_variables` is the run's live dict: the tool's in-place changes land in it, and it
    is returned as `ToolOutcome.context_variables`; a returned `Result`'s context updates are
    `ToolOutcome.updates` (the loop merges them after the message's last tool call). A tool with
    an `idempotency_key` parameter receives `idempotency_key` (stable across retries and crash
    recovery in durable runs: run id and step number), so it can make its effect exactly once.
    A `ToolUnavailableError` (the tool could not reach its server) is raised, not told the model.
    """
    args = _arguments(func, call, context_variables, idempotency_key)
    if isinstance(args, ToolOutcome):
        return args
    spec = tool_spec(func)

    def attempt() -> Any:
        value = func(**args)
        return run_coroutine(value) if inspect.isawaitable(value) else value

    for remaining in range(spec.retries, -1, -1):
        try:
            if spec.timeout is None:
                return _finish(call, context_variables, attempt())
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
            try:
                value = pool.submit(attempt).result(timeout=spec.timeout)
            finally:
                pool.shutdown(wait=False)
            return _finish(call, context_variables, value)
        except Exception as e:
            if outcome := _after_error(e, remaining, call, context_variables, spec.timeout):
                return outcome
    raise AssertionError("unreachable")


async def execute_tool_async(
    func: Callable[..., Any],
    call: dict[str, Any],
    context_variables: dict[str, Any],
    *,
    idempotency_key: str | None = None,
) -> ToolOutcome:
    """`execute_tool` for async code: `async def` tools are awaited, others run in a thread of
    `_aio.blocking_executor()`."""
    args = _arguments(func, call, context_variables, idempotency_key)
    if isinstance(args, ToolOutcome):
        return args
    spec = tool_spec(func)

    async def attempt() -> Any:
        if inspect.iscoroutinefunction(func):
            return await func(**args)
        value = await in_thread(func, **args)
        return await value if inspect.isawaitable(value) else value

    for remaining in range(spec.retries, -1, -1):
        try:
            value = await asyncio.wait_for(attempt(), spec.timeout)
            return _finish(call, context_variables, value)
        except Exception as e:
            if outcome := _after_error(e, remaining, call, context_variables, spec.timeout):
                return outcome
    raise AssertionError("unreachable")
