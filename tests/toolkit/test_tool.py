"""`@tool`: the function stays itself, options are checked early, the schema and the executor
honour them. (No `from __future__ import annotations`: the annotations are real objects.)"""

import asyncio
import enum
import inspect
import json
import pickle
import threading
import time
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

from durable_swarm import Agent, Result
from durable_swarm.toolkit import tool
from durable_swarm.tools import (
    TOOL_SPEC_ATTR,
    ToolSpec,
    execute_tool,
    execute_tool_async,
    model_tool_schema,
    tool_spec,
)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


def call(name: str, arguments: Any = None) -> dict[str, Any]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": raw}}


def parameters(func: Any) -> dict[str, Any]:
    return model_tool_schema(func)["function"]["parameters"]


# --- the decorated function is still the function ------------------------------------------------


def test_bare_tool_returns_the_same_function_with_a_default_spec():
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    signature = inspect.signature(add)
    assert tool(add) is add
    assert add(2, 3) == 5
    assert (add.__name__, add.__doc__, inspect.signature(add)) == (
        "add",
        "Add two numbers.",
        signature,
    )
    assert getattr(add, TOOL_SPEC_ATTR) == ToolSpec()
    assert tool_spec(add) == ToolSpec()


def test_tool_with_options_attaches_them():
    @tool(name="lookup", description="Find a thing.", timeout=1.5, retries=2, needs_approval=True)
    def find(query: str) -> str:
        return query

    assert find("x") == "x"
    assert find.__name__ == "find"
    assert tool_spec(find) == ToolSpec(
        name="lookup", description="Find a thing.", timeout=1.5, retries=2, needs_approval=True
    )


def test_needs_approval_defaults_to_false_and_is_carried_in_the_spec():
    @tool
    def read() -> str:
        return ""

    @tool(needs_approval=True)
    def delete() -> str:
        return ""

    assert tool_spec(read).needs_approval is False
    assert tool_spec(delete).needs_approval is True


def test_async_tool_stays_a_coroutine_function():
    @tool(timeout=1)
    async def fetch(url: str) -> str:
        """Fetch a page."""
        return f"page {url}"

    assert inspect.iscoroutinefunction(fetch)
    assert asyncio.run(fetch("u")) == "page u"
    assert tool_spec(fetch).timeout == 1.0


def test_tool_again_replaces_the_options():
    @tool(timeout=3)
    def step() -> str:
        return ""

    tool(retries=1)(step)

    assert tool_spec(step) == ToolSpec(retries=1)


def test_tool_on_a_method_inside_a_class():
    class Shop:
        @tool(name="price_of", needs_approval=True)
        def price(self, item: str) -> str:
            """The price of an item."""
            return f"{item}: 3"

    bound = Shop().price
    assert bound("pear") == "pear: 3"
    assert tool_spec(bound).needs_approval
    assert model_tool_schema(bound)["function"]["name"] == "price_of"
    assert list(parameters(bound)["properties"]) == ["item"]


# --- options are checked when the tool is defined ------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"timeout": -1}, ValueError, "timeout=.*positive"),
        ({"timeout": 0}, ValueError, "timeout=.*positive"),
        ({"timeout": float("inf")}, ValueError, "timeout=.*positive"),
        ({"timeout": float("nan")}, ValueError, "timeout=.*positive"),
        ({"timeout": "5"}, TypeError, "timeout=.*number"),
        ({"timeout": True}, TypeError, "timeout=.*number"),
        ({"retries": -1}, ValueError, r"retries=.*0 or more"),
        ({"retries": 1.5}, TypeError, "retries=.*integer"),
        ({"retries": True}, TypeError, "retries=.*integer"),
        ({"needs_approval": "yes"}, TypeError, "needs_approval=.*True or False"),
        ({"name": 3}, TypeError, "name=.*string"),
        ({"description": ["x"]}, TypeError, "description=.*string"),
    ],
)
def test_bad_options_fail_at_definition(options, error, match):
    with pytest.raises(error, match=match):
        tool(**options)


def test_bad_name_fails_at_definition_and_leaves_the_function_untouched():
    def f() -> str:
        return ""

    with pytest.raises(ValueError, match=r"'has space'.*1 to 64 letters.*@tool\(name=\.\.\.\)"):
        tool(name="has space")(f)
    assert not hasattr(f, TOOL_SPEC_ATTR)
    with pytest.raises(ValueError, match=r"'<lambda>' .* is not valid"):
        tool(lambda: "")
    named = tool(name="ok_name")(lambda: "")
    assert tool_spec(named).name == "ok_name"


def test_non_callables_and_unattachable_callables_are_refused():
    with pytest.raises(TypeError, match=r"decorates a function, got int 3"):
        tool(3)
    with pytest.raises(TypeError, match=r"got str 'name'.*@tool\(name=\.\.\.\)"):
        tool("name")
    with pytest.raises(TypeError, match=r"cannot attach options to .*len.*wrap it in a def"):
        tool(len)
    with pytest.raises(TypeError, match="put @staticmethod above @tool"):
        tool(staticmethod(lambda: ""))


# --- the schema comes from type hints and the docstring ------------------------------------------


@tool(name="plan_trip", description="Plan a trip.")
def rich(
    days: int,
    tags: list[str],
    mode: Literal["car", "train"],
    color: Color,
    start: Point,
    note: Optional[str] = None,  # noqa: UP045 (the typing spelling must work too)
    budget: Annotated[float, "in euros"] = 100.0,
    context_variables: dict | None = None,
    count: int | None = None,
) -> str:
    """Ignored: the description is overridden.

    Args:
        days: how many days.
        tags (list[str]): labels for the trip.
        budget: overridden by the Annotated description.
    """
    return "ok"


def test_rich_types_name_and_description_override():
    schema = model_tool_schema(rich)

    assert schema["function"]["name"] == "plan_trip"
    assert schema["function"]["description"] == "Plan a trip."
    params = schema["function"]["parameters"]
    assert params["required"] == ["days", "tags", "mode", "color", "start"]
    assert params["properties"] == {
        "days": {"type": "integer", "description": "how many days."},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "description": "labels for the trip.",
        },
        "mode": {"type": "string", "enum": ["car", "train"]},
        "color": {"type": "string", "enum": ["red", "blue"]},
        "start": {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
            "required": ["x"],
        },
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "budget": {"type": "number", "description": "in euros"},
        "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    }


def test_sphinx_param_docs_and_docstring_description():
    @tool
    def greet(name: str, loud: bool = False) -> str:
        """Greet someone.

        :param name: who to greet.
        :param bool loud: shout.
        """
        return name

    schema = model_tool_schema(greet)

    assert schema["function"]["name"] == "greet"
    assert schema["function"]["description"].startswith("Greet someone.")
    assert schema["function"]["parameters"]["properties"] == {
        "name": {"type": "string", "description": "who to greet."},
        "loud": {"type": "boolean", "description": "shout."},
    }


def test_rich_arguments_are_validated_and_converted():
    seen: dict[str, Any] = {}

    @tool
    def book(color: Color, start: Point, tags: list[str]) -> str:
        seen.update(color=color, start=start, tags=tags)
        return "booked"

    args = {"color": "blue", "start": {"x": 1}, "tags": ["a"]}
    outcome = execute_tool(book, call("book", args), {})
    assert outcome.message["content"] == "booked"
    assert seen == {"color": Color.BLUE, "start": Point(x=1, y=0), "tags": ["a"]}

    bad = execute_tool(book, call("book", {"color": "green", "start": {}, "tags": "a"}), {})
    assert bad.message["content"].startswith("Error: invalid arguments for tool book: ")
    assert "color" in bad.message["content"] and "start.x" in bad.message["content"]


# --- timeouts, retries and context through the executor ------------------------------------------


def test_timeout_sync_and_async_executors():
    release = threading.Event()

    @tool(timeout=0.05)
    def slow() -> str:
        release.wait(2)
        return "late"

    @tool(timeout=0.05)
    async def slow_async() -> str:
        await asyncio.sleep(2)
        return "late"

    try:
        started = time.monotonic()
        outcome = execute_tool(slow, call("slow"), {})
        assert outcome.message["content"] == "Error: tool slow timed out after 0.05 seconds."
        assert time.monotonic() - started < 1
        for func in (slow, slow_async):
            outcome = asyncio.run(execute_tool_async(func, call(func.__name__), {}))
            assert outcome.message["content"].endswith("timed out after 0.05 seconds.")
    finally:
        release.set()


def _flaky(failures: int, name: str, retries: int) -> tuple[Any, list[int]]:
    attempts: list[int] = []

    @tool(name=name, retries=retries)
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) <= failures:
            raise ConnectionError(f"attempt {len(attempts)} failed")
        return f"ok after {len(attempts)}"

    return flaky, attempts


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_retries(runner):
    def run(func: Any, name: str) -> str:
        if runner == "sync":
            return execute_tool(func, call(name), {}).message["content"]
        return asyncio.run(execute_tool_async(func, call(name), {})).message["content"]

    recovers, attempts = _flaky(2, "recovers", retries=2)
    assert run(recovers, "recovers") == "ok after 3"
    assert len(attempts) == 3

    gives_up, attempts = _flaky(5, "gives_up", retries=1)
    assert (
        run(gives_up, "gives_up") == "Error: tool gives_up raised ConnectionError: attempt 2 failed"
    )
    assert len(attempts) == 2


def test_async_tool_through_sync_executor_with_context_and_result():
    @tool(retries=1)
    async def remember(fact: str, context_variables: dict) -> Result:
        """Remember a fact."""
        return Result(value="remembered", context_variables={"fact": fact})

    assert "context_variables" not in parameters(remember)["properties"]
    outcome = execute_tool(remember, call("remember", {"fact": "sky"}), {"user": "ann"})
    assert outcome.message["content"] == "remembered"
    assert outcome.context_variables == {"user": "ann"}
    assert outcome.updates == {"fact": "sky"}  # the loop merges them after the message's calls


def test_renamed_tool_is_called_by_its_new_name_through_the_loop():
    from durable_swarm import Swarm
    from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

    @tool(name="get_weather")
    def weather_tool(city: str) -> str:
        return f"sunny in {city}"

    client = ScriptedClient([calls(ToolCall("get_weather", {"city": "Oslo"})), text("done")])
    response = Swarm(client).run(
        Agent(functions=[weather_tool]), [{"role": "user", "content": "?"}]
    )

    offered = client.requests[0]["tools"]
    assert [t["function"]["name"] for t in offered] == ["get_weather"]
    assert response.messages[1]["content"] == "sunny in Oslo"
    assert response.messages[1]["tool_name"] == "get_weather"


def test_tool_spec_survives_pickling_of_module_level_tools():
    assert tool_spec(pickle.loads(pickle.dumps(rich))).name == "plan_trip"
