"""Tool arguments are checked against the function's signature and converted to its types."""

from __future__ import annotations

import enum
from typing import Literal

import pydantic
import pytest

from durable_swarm import Agent

from ._mock import calling, completion, mock_client, tool_call


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


class Opaque:
    """A plain class pydantic has no schema for."""


class Item(pydantic.BaseModel):
    name: str
    quantity: int = 1


def _call(make_swarm, func, arguments):
    """Run one call of `func` with `arguments`; return the tool message's content."""
    client = mock_client(calling(tool_call(func.__name__, arguments)), completion("done"))
    response = make_swarm(client).run(agent=Agent(functions=[func]), messages=[])
    return response.messages[1]["content"]


def test_numeric_string_coerced_to_int(make_swarm):
    seen = []

    def f(n: int) -> str:
        seen.append(n)
        return "ok"

    _call(make_swarm, f, {"n": "42"})

    assert seen == [42] and type(seen[0]) is int


def test_number_coerced_to_str(make_swarm):
    seen = []

    def f(code: str) -> str:
        seen.append(code)
        return "ok"

    _call(make_swarm, f, {"code": 1234})

    assert seen == ["1234"]


def test_enum_literal_list_optional_converted(make_swarm):
    seen = {}

    def f(size: Size, mode: Literal["a", "b"], tags: list[str], note: str | None) -> str:
        seen.update(size=size, mode=mode, tags=tags, note=note)
        return "ok"

    _call(make_swarm, f, {"size": "large", "mode": "b", "tags": ["x", "y"], "note": None})

    assert seen == {"size": Size.LARGE, "mode": "b", "tags": ["x", "y"], "note": None}


def test_null_for_a_parameter_defaulting_to_none(make_swarm):
    """`x: str = None` is how much Swarm code spells an optional parameter: null passes."""
    seen = []

    def f(city: str, unit: str = None, days: int = None) -> str:  # type: ignore[assignment]  # noqa: RUF013
        seen.append((city, unit, days))
        return "ok"

    content = _call(make_swarm, f, {"city": "Oslo", "unit": None, "days": None})

    assert content == "ok"
    assert seen == [("Oslo", None, None)]


def test_pydantic_model_argument_built(make_swarm):
    seen = []

    def f(item: Item) -> str:
        seen.append(item)
        return "ok"

    _call(make_swarm, f, {"item": {"name": "pen"}})

    assert seen == [Item(name="pen", quantity=1)]


def test_missing_optional_arguments_use_function_defaults(make_swarm):
    seen = []
    sentinel = object()

    def f(a: int, b: object = sentinel, c: list | None = None) -> str:
        seen.append((a, b, c))
        return "ok"

    _call(make_swarm, f, {"a": 1})

    assert seen == [(1, sentinel, None)]


def test_var_keyword_function_accepts_extra_arguments(make_swarm):
    seen = []

    def f(a: int, **rest) -> str:
        seen.append((a, rest))
        return "ok"

    _call(make_swarm, f, {"a": "2", "extra": "x"})

    assert seen == [(2, {"extra": "x"})]


def test_untyped_arguments_passed_as_given(make_swarm):
    seen = []

    def f(a, b=None) -> str:
        seen.append((a, b))
        return "ok"

    _call(make_swarm, f, {"a": {"nested": [1, 2]}, "b": 3})

    assert seen == [({"nested": [1, 2]}, 3)]


def test_argument_of_type_pydantic_cannot_check_passed_as_given(make_swarm):
    seen = []

    def f(thing: Opaque, n: int) -> str:
        seen.append((thing, n))
        return "ok"

    assert _call(make_swarm, f, {"thing": "raw", "n": 1}) == "ok"
    assert seen == [("raw", 1)]


def test_argument_of_unresolvable_annotation_passed_as_given(make_swarm):
    class LocalOnly:  # the string annotation "LocalOnly" cannot be resolved from module globals
        pass

    seen = []

    def f(thing: LocalOnly) -> str:
        seen.append(thing)
        return "ok"

    assert _call(make_swarm, f, {"thing": {"k": "v"}}) == "ok"
    assert seen == [{"k": "v"}]


@pytest.mark.parametrize(
    ("arguments", "mentions"),
    [
        ({"size": "medium", "item": {"name": "pen"}}, "size"),
        ({"size": "small", "item": {"quantity": 2}}, "item.name"),
        ({"size": "small", "item": {"name": "pen", "quantity": "lots"}}, "item.quantity"),
    ],
)
def test_invalid_arguments_named_in_error(make_swarm, arguments, mentions):
    calls = []

    def order(size: Size, item: Item) -> str:
        calls.append(1)
        return "ok"

    content = _call(make_swarm, order, arguments)

    assert content.startswith("Error")
    assert "order" in content and mentions in content
    assert calls == []
