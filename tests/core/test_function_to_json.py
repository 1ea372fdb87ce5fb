"""SPEC "`function_to_json(func)`": Swarm's exact output for simple signatures, richer schemas
for richer annotations. (No `from __future__ import annotations` here: like Swarm's own tests,
the annotations are real objects; string annotations have their own test.)"""

import enum
from typing import Annotated, Any, Literal, Optional

import pydantic

from durable_swarm.toolkit import tool
from durable_swarm.tools import model_tool_schema
from durable_swarm.util import function_to_json


def _parameters(func):
    return function_to_json(func)["function"]["parameters"]


def test_function_to_json_simple_exact():
    def basic_function(arg1, arg2):
        return arg1 + arg2

    assert function_to_json(basic_function) == {
        "type": "function",
        "function": {
            "name": "basic_function",
            "description": "",
            "parameters": {
                "type": "object",
                "properties": {"arg1": {"type": "string"}, "arg2": {"type": "string"}},
                "required": ["arg1", "arg2"],
            },
        },
    }


def test_function_to_json_typed_exact():
    def complex_function_with_types_and_descriptions(
        arg1: int, arg2: str, arg3: float = 3.14, arg4: bool = False
    ):
        """This is a complex function with a docstring."""

    assert function_to_json(complex_function_with_types_and_descriptions) == {
        "type": "function",
        "function": {
            "name": "complex_function_with_types_and_descriptions",
            "description": "This is a complex function with a docstring.",
            "parameters": {
                "type": "object",
                "properties": {
                    "arg1": {"type": "integer"},
                    "arg2": {"type": "string"},
                    "arg3": {"type": "number"},
                    "arg4": {"type": "boolean"},
                },
                "required": ["arg1", "arg2"],
            },
        },
    }


def test_function_to_json_type_names():
    def all_types(s: str, i: int, f: float, b: bool, items: list, mapping: dict, n: None, u=1):
        pass

    assert _parameters(all_types)["properties"] == {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "f": {"type": "number"},
        "b": {"type": "boolean"},
        "items": {"type": "array"},
        "mapping": {"type": "object"},
        "n": {"type": "null"},
        "u": {"type": "string"},
    }


def test_function_to_json_description_is_raw_docstring():
    def documented(x: int):
        """First line.

        More text, kept as is.
        """

    assert function_to_json(documented)["function"]["description"] == documented.__doc__


def test_function_to_json_required_is_parameters_without_default():
    def f(a, b: int, c: str = "x", d=None):
        pass

    assert _parameters(f)["required"] == ["a", "b"]


def test_function_to_json_keeps_context_variables_model_schema_hides_it():
    def uses_context(city: str, context_variables: dict):
        pass

    assert "context_variables" in _parameters(uses_context)["properties"]
    assert _parameters(uses_context)["required"] == ["city", "context_variables"]
    hidden = model_tool_schema(uses_context)["function"]["parameters"]
    assert hidden == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


def test_function_to_json_string_annotations_resolved():
    def f(a: "int", b: "list[str]"):
        pass

    assert _parameters(f)["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "array", "items": {"type": "string"}},
    }


# --- richer annotations ------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str
    zip_code: int = 0


class Order(pydantic.BaseModel):
    item: str
    ship_to: Address


def test_schema_optional():
    def f(a: Optional[int], b: Optional[str] = None, c: int | None = None):  # noqa: UP045
        pass

    params = _parameters(f)
    nullable_int = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert params["properties"]["a"] == nullable_int
    assert params["properties"]["b"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert params["properties"]["c"] == nullable_int
    assert params["required"] == ["a"]


def test_schema_list_of_str():
    def f(tags: list[str], scores: dict[str, int]):
        pass

    assert _parameters(f)["properties"] == {
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "object", "additionalProperties": {"type": "integer"}},
    }


def test_schema_literal():
    def f(mode: Literal["fast", "slow"]):
        pass

    assert _parameters(f)["properties"]["mode"] == {"type": "string", "enum": ["fast", "slow"]}


def test_schema_enum():
    def f(color: Color):
        pass

    assert _parameters(f)["properties"]["color"] == {"type": "string", "enum": ["red", "blue"]}


def test_schema_pydantic_model_inlined():
    def f(order: Order):
        pass

    schema = _parameters(f)["properties"]["order"]
    assert schema == {
        "type": "object",
        "properties": {
            "item": {"type": "string"},
            "ship_to": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip_code": {"type": "integer", "default": 0},
                },
                "required": ["street"],
            },
        },
        "required": ["item", "ship_to"],
    }
    assert "$ref" not in str(schema) and "$defs" not in str(schema)


def test_schema_annotated_description():
    def f(city: Annotated[str, "The city to look up"], days: Annotated[int, "How many days"] = 1):
        pass

    assert _parameters(f)["properties"] == {
        "city": {"type": "string", "description": "The city to look up"},
        "days": {"type": "integer", "description": "How many days"},
    }
    assert _parameters(f)["required"] == ["city"]


def test_plain_function_with_documented_parameters_exact():
    """Swarm's schema, byte for byte: the docstring is the description, parameters get none."""

    def forecast(city: str, days: int = 1):
        """Forecast.

        Args:
            city: The city to look up.
        """

    assert function_to_json(forecast) == {
        "type": "function",
        "function": {
            "name": "forecast",
            "description": forecast.__doc__,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }


def test_schema_docstring_param_descriptions_google_style():
    @tool
    def f(city: str, days: int = 1):
        """Forecast.

        Args:
            city: The city to look up.
            days (int): How many days ahead.
        """

    assert _parameters(f)["properties"] == {
        "city": {"type": "string", "description": "The city to look up."},
        "days": {"type": "integer", "description": "How many days ahead."},
    }


def test_schema_docstring_param_descriptions_sphinx_style():
    @tool
    def f(city: str):
        """Forecast.

        :param city: The city to look up.
        """

    assert _parameters(f)["properties"]["city"] == {
        "type": "string",
        "description": "The city to look up.",
    }


def test_schema_annotated_description_wins_over_docstring():
    @tool
    def f(city: Annotated[str, "From Annotated"]):
        """Args:
        city: From the docstring.
        """

    assert _parameters(f)["properties"]["city"]["description"] == "From Annotated"


def test_schema_type_pydantic_cannot_describe_reads_as_string():
    class Opaque:
        pass

    def f(thing: Opaque, anything: Any):
        pass

    assert _parameters(f)["properties"] == {
        "thing": {"type": "string"},
        "anything": {"type": "string"},
    }


def test_schema_skips_star_args():
    def f(a: int, *args, **kwargs):
        pass

    assert _parameters(f) == {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
    }


def test_schema_of_callable_object():
    class Tool:
        __name__ = "tool_object"

        def __call__(self, x: int) -> str:
            return str(x)

    assert function_to_json(Tool())["function"]["name"] == "tool_object"
    assert _parameters(Tool())["properties"] == {"x": {"type": "integer"}}
