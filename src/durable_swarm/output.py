"""Structured output: an agent's typed final answer (`Agent(output_type=...)`).

An agent with an `output_type` (a pydantic model, a dataclass, a `TypedDict`, or a plain type such
as `int` or `list[str]`) is asked for that shape in one of two ways (`Agent.output_mode`):

- `"tool"` (the default, works with any server that calls tools): the request offers a tool named
  `final_answer` whose parameters are the type's JSON schema, and `tool_choice` is `"required"`
  unless the agent sets its own; the model answers by calling it.
- `"json_schema"`: the request carries `response_format={"type": "json_schema", ...}` and the
  model answers with the JSON text (for servers that support OpenAI's structured outputs).

A type whose schema is not an object (`int`, `list[str]`, a union) is wrapped as
`{"response": <value>}`, as both ways require an object. `OUTPUT_TOOL` is the tool's name,
`OUTPUT_MODES` the two modes. The schema is sent `strict` when it is valid as a strict schema
(every property required, no free-form dicts, only the keywords strict mode knows).

`check` validates an answer (pydantic's `TypeAdapter`) and says what the loop appends: nothing,
or the tool message that answers the `final_answer` call; for an invalid answer, the validation
error as a message the model reads before it answers again. Everything here is deterministic:
the loop runs it on the recorded answer, so a durable run's replay rebuilds the same output and
the same retry messages without asking the model again.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError, create_model

from ._messages import ACCEPTED, OUTPUT_TOOL, tool_message
from .errors import DurableSwarmError

__all__ = [
    "OUTPUT_MODES",
    "OUTPUT_TOOL",
    "Checked",
    "OutputShape",
    "ask_for_output",
    "check",
    "from_json",
    "shape_of",
    "to_json",
]

OUTPUT_MODES = ("tool", "json_schema")
NOT_RUN = "Not run: the final answer was given in the same message."
_WRAPPER_KEY = "response"
# The keywords OpenAI's strict structured outputs accept (others make the schema non-strict).
_STRICT_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "$ref", "$defs", "description", "title", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
    }
)  # fmt: skip
_STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class OutputShape:
    """What an output type asks of the model and how its answers are validated.

    `schema` is the object schema sent (the type's own, or `{"response": ...}` when `wrapped`);
    `strict` says whether it is valid as a strict schema; `name` is the type's name as the model
    and the error messages see it."""

    type: Any
    name: str
    schema: dict[str, Any]
    strict: bool
    wrapped: bool
    adapter: TypeAdapter[Any] = field(repr=False)
    validator: TypeAdapter[Any] = field(repr=False)

    def validate_json(self, text: str) -> Any:
        """The typed value of a JSON answer; raises pydantic's `ValidationError`."""
        value = self.validator.validate_json(text)
        return getattr(value, _WRAPPER_KEY) if self.wrapped else value


def _type_name(output_type: Any) -> str:
    name = getattr(output_type, "__name__", None)
    return str(name) if isinstance(name, str) and name else repr(output_type)


def _closed(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object schema that lists properties
    and says nothing about others (the model must not add any; validation ignores them anyway)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {k: _closed(v) for k, v in schema.items()}
    if "properties" in closed and "additionalProperties" not in closed:
        closed["additionalProperties"] = False
    return closed


def _strict_valid(schema: Any, keyword_level: bool = True) -> bool:
    """Whether `schema` (with `_closed` applied) is valid as an OpenAI strict schema."""
    if isinstance(schema, list):
        return all(_strict_valid(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if not keyword_level:  # a mapping of names to schemas (`properties`, `$defs`)
        return all(_strict_valid(s) for s in schema.values())
    if set(schema) - _STRICT_KEYWORDS:
        return False
    if "$ref" in schema and len(schema) > 1:  # strict mode takes a reference with nothing beside
        return False
    if "format" in schema and schema["format"] not in _STRICT_FORMATS:
        return False
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required") or ()) != set(schema.get("properties") or {}):
            return False
    return all(
        _strict_valid(value, keyword_level=key not in ("properties", "$defs"))
        for key, value in schema.items()
        if key in ("properties", "$defs", "items", "anyOf")
    )


@functools.lru_cache(maxsize=256)
def _shape(output_type: Any) -> OutputShape:
    adapter: TypeAdapter[Any] = TypeAdapter(output_type)
    inner = adapter.json_schema()
    name = _type_name(output_type)
    wrapped = inner.get("type") != "object"
    validator = adapter
    if wrapped:
        defs = inner.pop("$defs", None)
        inner = {
            "type": "object",
            "properties": {_WRAPPER_KEY: inner},
            "required": [_WRAPPER_KEY],
            **({"$defs": defs} if defs else {}),
        }
        model = create_model("FinalAnswer", response=(output_type, ...))
        validator = TypeAdapter(model)
    schema = _closed(inner)
    return OutputShape(
        output_type, name, schema, _strict_valid(schema), wrapped, adapter, validator
    )


def shape_of(output_type: Any, agent_name: str = "") -> OutputShape:
    """The `OutputShape` of `output_type` (computed once per type). A type pydantic cannot
    validate raises `DurableSwarmError` naming the agent and the type."""
    try:
        try:
            return _shape(output_type)
        except TypeError:  # unhashable (e.g. Annotated with a dict): computed each time
            return _shape.__wrapped__(output_type)
    except Exception as e:  # pydantic's PydanticSchemaGenerationError, PydanticUserError...
        problem: Exception = e
    who = f"Agent {agent_name!r}: " if agent_name else ""
    cause = (str(problem).splitlines() or [""])[0].rstrip(".")
    raise DurableSwarmError(
        f"{who}output_type {output_type!r} cannot be used as a structured output: {cause}. "
        "Use a pydantic model, a dataclass, a TypedDict "
        "(typing_extensions.TypedDict before Python 3.12) or a type pydantic validates."
    ) from problem


def _shape_of_agent(agent: Any) -> OutputShape | None:
    output_type = getattr(agent, "output_type", None)
    return None if output_type is None else shape_of(output_type, agent.name)


def _mode(agent: Any) -> str:
    return str(getattr(agent, "output_mode", None) or "tool")


def _schema_name(shape: OutputShape) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", shape.name)[:64] or "output"


def ask_for_output(agent: Any, request: dict[str, Any]) -> dict[str, Any]:
    """`request` (the `chat.completions.create` parameters of `agent`'s turn) asking for the
    agent's output type, if it has one: a `final_answer` tool, or `response_format`."""
    shape = _shape_of_agent(agent)
    if shape is None:
        return request
    if _mode(agent) == "json_schema":
        json_schema: dict[str, Any] = {"name": _schema_name(shape), "schema": shape.schema}
        if shape.strict:
            json_schema["strict"] = True
        return {**request, "response_format": {"type": "json_schema", "json_schema": json_schema}}
    tools = list(request.get("tools") or [])
    if any((t.get("function") or {}).get("name") == OUTPUT_TOOL for t in tools):
        raise DurableSwarmError(
            f"Agent {agent.name!r} has a tool named {OUTPUT_TOOL!r}, the name of the tool that "
            "takes its structured answer (output_type); rename that tool, or use "
            "output_mode='json_schema'."
        )
    function: dict[str, Any] = {
        "name": OUTPUT_TOOL,
        "description": f"Give your final answer, a {shape.name}, once you have it.",
        "parameters": shape.schema,
    }
    if shape.strict:
        function["strict"] = True
    request = {**request, "tools": [*tools, {"type": "function", "function": function}]}
    if request.get("tool_choice") is None:
        request["tool_choice"] = "required"
    request.setdefault("parallel_tool_calls", agent.parallel_tool_calls)
    return request


@dataclass
class Checked:
    """An answer checked against the agent's output type: `value` when `ok`, else `error` (what
    did not validate). `replies` are the messages the loop appends after the answer: the tool
    messages answering its calls (tool mode), and for an invalid answer the error the model
    reads before it answers again."""

    ok: bool
    value: Any = None
    error: str = ""
    replies: list[dict[str, Any]] = field(default_factory=list)


def _problems(error: ValidationError, wrapped: bool) -> str:
    lines = []
    for item in error.errors(include_url=False):
        loc = list(item.get("loc") or ())
        if wrapped and loc[:1] == [_WRAPPER_KEY]:
            loc = loc[1:]
        where = ".".join(str(p) for p in loc) or "the value"
        got = item.get("input")
        shown = json.dumps(got, default=repr)[:80] if item.get("type") != "missing" else None
        lines.append(f"- {where}: {item.get('msg')}" + (f" (got {shown})" if shown else ""))
    return "\n".join(lines)


def _validate(shape: OutputShape, text: Any) -> tuple[bool, Any, str]:
    if not isinstance(text, str) or not text.strip():
        return False, None, "- the answer is empty"
    fenced = _FENCE.match(text)
    try:
        return True, shape.validate_json(fenced.group(1) if fenced else text), ""
    except ValidationError as e:
        return False, None, _problems(e, shape.wrapped)


def _tool_reply(call: Mapping[str, Any], content: str) -> dict[str, Any]:
    return tool_message(dict(call), content)


def check(agent: Any, message: Mapping[str, Any]) -> Checked | None:
    """Check `agent`'s answer `message` against its output type. None when there is nothing to
    check: the agent has no output type, or the message calls tools other than `final_answer`
    (the turn goes on as usual: tools run, handoffs happen)."""
    shape = _shape_of_agent(agent)
    if shape is None:
        return None
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    tool_mode = _mode(agent) == "tool"
    final = [c for c in calls if (c.get("function") or {}).get("name") == OUTPUT_TOOL]
    if calls and not (tool_mode and final):
        return None
    if final:  # tool mode: the arguments of the (first) final_answer call are the answer
        ok, value, problems = _validate(shape, final[0]["function"].get("arguments"))
        how = f"call {OUTPUT_TOOL} again with arguments that fit its schema"
        first = _tool_reply(final[0], ACCEPTED if ok else _retry_text(shape, problems, how))
        rest = [_tool_reply(c, NOT_RUN) for c in calls if c is not final[0]]
        return Checked(ok, value, problems, [first, *rest])
    refusal = message.get("refusal")
    if refusal:
        ok, value, problems = False, None, f"- the model refused: {refusal}"
    else:
        ok, value, problems = _validate(shape, message.get("content"))
    if ok:
        return Checked(True, value)
    how = (
        f"call the {OUTPUT_TOOL} tool with your answer"
        if tool_mode
        else "reply with only the JSON value, as the response format says"
    )
    retry = {"role": "user", "content": _retry_text(shape, problems, how)}
    return Checked(False, None, problems, [retry])


def _retry_text(shape: OutputShape, problems: str, how: str) -> str:
    return f"Your answer is not a valid {shape.name}:\n{problems}\nPlease {how}."


def to_json(agent: Any, value: Any) -> Any:
    """`value` (an output of `agent`'s type) as JSON data, as a durable run stores it."""
    shape = _shape_of_agent(agent)
    if shape is None:
        raise DurableSwarmError(f"Agent {agent.name!r} has no output_type to store a value of.")
    return shape.adapter.dump_python(value, mode="json")


def from_json(agent: Any, data: Any) -> Any:
    """The typed value stored as `data` (by `to_json`), rebuilt through `agent`'s output type:
    the stored data names no type, so nothing is imported from the log. Raises pydantic's
    `ValidationError` when the data no longer fits the type (the agent's code changed)."""
    shape = _shape_of_agent(agent)
    if shape is None:
        return data
    return shape.adapter.validate_json(json.dumps(data))
