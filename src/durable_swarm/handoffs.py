"""Rule-based handoffs (AG2's swarm rules on Swarm-style agents).

- `OnCondition(target, condition)`: offered to the model as a `transfer_to_<target>` function whose
  description is the condition.
- `OnContextCondition(target, condition)`: checked without the model before the agent's turn;
  `condition` is a context key (truthy) or a `ContextExpression`.
- `AfterWork(target)`: what happens when the agent answers without calling a tool: another agent,
  a callable choosing one, or an `AfterWorkOption` (TERMINATE, REVERT_TO_USER, STAY).
- `available=` on both kinds of condition enables or hides a handoff from the current context.
- `UpdateSystemMessage(template_or_callable)`: instructions re-rendered from context every turn.

Each turn the loop applies, in order: context conditions, the model's tool calls (a function
returning an agent, or an `OnCondition` transfer), the agent's after-work, the swarm's after-work.
"""

from __future__ import annotations

import ast
import enum
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ContextExpressionError, DurableSwarmError
from .tools import is_agent

__all__ = [
    "AFTER_WORK",
    "ON_CONDITION",
    "AfterWork",
    "AfterWorkOption",
    "ContextExpression",
    "ContextExpressionError",
    "OnCondition",
    "OnContextCondition",
    "UpdateSystemMessage",
]


_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Name,
    ast.Load,
    ast.Constant,
)
_VARIABLE = re.compile(r"\$\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")
_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def _to_python(expression: str) -> str:
    """`expression` in Python syntax; quoted strings are kept exactly as written."""
    pieces, start = [], 0
    for literal in _STRING.finditer(expression):
        pieces += [_operators(expression[start : literal.start()]), literal.group()]
        start = literal.end()
    return "".join([*pieces, _operators(expression[start:])])


def _operators(code: str) -> str:
    """Variables and the `&`/`|`/`!`/`true`/`false` spellings of code outside strings."""
    code = _VARIABLE.sub(lambda m: f"__ctx_{m.group(1)}", code)
    code = re.sub(r"(?<![=!<>])!(?!=)", " not ", code)
    code = code.replace("&&", " and ").replace("||", " or ")
    code = code.replace("&", " and ").replace("|", " or ")
    return re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", code))


class ContextExpression:
    """A boolean expression over context variables, e.g. `"${verified} and ${attempts} >= 3"`.

    Variables are written `${name}`; operators: `and`, `or`, `not` (also `&`, `|`, `!`),
    `==`, `!=`, `<`, `<=`, `>`, `>=`, parentheses; literals: numbers, quoted strings,
    `True`/`False` (or `true`/`false`), `None`. A missing variable reads as `None`. The expression
    is parsed when created (a malformed one raises `ContextExpressionError` then) and evaluated by
    walking its syntax tree: no `eval`, no attribute access, no calls.
    """

    def __init__(self, expression: str) -> None:
        if not isinstance(expression, str) or not expression.strip():
            raise ContextExpressionError(
                f"ContextExpression needs a non-empty string, got {expression!r}."
            )
        self.expression = expression
        self.variables = sorted(set(_VARIABLE.findall(_STRING.sub("", expression))))
        try:
            tree = ast.parse(_to_python(expression).strip(), mode="eval")
        except SyntaxError as e:
            raise ContextExpressionError(
                f"Malformed ContextExpression {expression!r}: {e.msg}. Write variables as "
                "${name} and combine them with and/or/not and comparisons, e.g. "
                '"${verified} and ${attempts} >= 3".'
            ) from None
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED_NODES):
                raise ContextExpressionError(
                    f"ContextExpression {expression!r} uses {type(node).__name__}, which is not "
                    "allowed: only ${variables}, literals, comparisons and and/or/not."
                )
            if (
                isinstance(node, ast.Name)
                and not node.id.startswith("__ctx_")
                and node.id not in ("True", "False", "None")
            ):
                raise ContextExpressionError(
                    f"ContextExpression {expression!r} refers to {node.id!r}; write context "
                    f"variables as ${{{node.id}}}."
                )
        self._tree = tree

    def __repr__(self) -> str:
        return f"ContextExpression({self.expression!r})"

    def evaluate(self, context_variables: dict[str, Any]) -> bool:
        """The expression's truth value for `context_variables`."""
        return bool(_evaluate(self._tree.body, context_variables))


_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


def _evaluate(node: ast.AST, context: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id.startswith("__ctx_"):
            return context.get(node.id[len("__ctx_") :])
        return {"True": True, "False": False, "None": None}[node.id]
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, context)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.BoolOp):
        values = (_evaluate(v, context) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, context)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, context)
            try:
                if not _COMPARE[type(op)](left, right):
                    return False
            except TypeError:
                return False
            left = right
        return True
    raise AssertionError(f"unexpected node {type(node).__name__}")


Availability = str | ContextExpression | Callable[..., bool] | None


def call_flexibly(func: Callable[..., Any], *args: Any) -> Any:
    """Call `func` with as many of `args` as it accepts (0 to all)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return func(*args)
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return func(*args)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return func(*args[: len(positional)])


def _check_condition(condition: Any, what: str) -> None:
    if condition is None or isinstance(condition, (str, ContextExpression)) or callable(condition):
        return
    raise DurableSwarmError(
        f"{what} must be a context variable name, a ContextExpression or a callable, got "
        f"{condition!r}."
    )


def holds(condition: Availability, context_variables: dict[str, Any]) -> bool:
    """Whether a context condition or availability test holds (None always holds)."""
    if condition is None:
        return True
    if isinstance(condition, str):
        return bool(context_variables.get(condition))
    if isinstance(condition, ContextExpression):
        return condition.evaluate(context_variables)
    return bool(call_flexibly(condition, context_variables))


class AfterWorkOption(str, enum.Enum):
    """What to do after an agent answers without calling a tool."""

    TERMINATE = "TERMINATE"
    REVERT_TO_USER = "REVERT_TO_USER"
    STAY = "STAY"


def _check_target(target: Any, what: str) -> None:
    if is_agent(target) or isinstance(target, (str, AfterWorkOption)) or callable(target):
        return
    raise DurableSwarmError(
        f"{what} target must be an Agent, an agent name, an AfterWorkOption or a callable, got "
        f"{target!r}."
    )


@dataclass
class OnCondition:
    """Offer the model a transfer to `target`, described by `condition` (LLM-decided handoff)."""

    target: Any
    condition: str = ""
    available: Availability = None

    def __post_init__(self) -> None:
        if not is_agent(self.target):
            raise DurableSwarmError(
                f"OnCondition target must be an Agent, got {self.target!r}; agents hand off to "
                "agents (use AfterWork for options like TERMINATE)."
            )
        _check_condition(self.available, "OnCondition.available")

    def transfer_function(self) -> Callable[[], Any]:
        """The tool offered to the model: `transfer_to_<target>`, returning the target."""
        target = self.target

        def transfer() -> Any:
            return target

        name = re.sub(r"[^A-Za-z0-9_-]", "_", target.name).lower()
        transfer.__name__ = transfer.__qualname__ = f"transfer_to_{name}"
        transfer.__doc__ = self.condition or f"Transfer the conversation to {target.name}."
        return transfer


@dataclass
class OnContextCondition:
    """Hand off to `target` before the agent's turn when `condition` holds (no model call)."""

    target: Any
    condition: str | ContextExpression | Callable[..., bool]
    available: Availability = None

    def __post_init__(self) -> None:
        _check_target(self.target, "OnContextCondition")
        _check_condition(self.condition, "OnContextCondition.condition")
        _check_condition(self.available, "OnContextCondition.available")


@dataclass
class AfterWork:
    """What happens when the agent answers without calling a tool (see `AfterWorkOption`)."""

    agent: Any

    def __post_init__(self) -> None:
        if isinstance(self.agent, str) and self.agent.upper() in AfterWorkOption.__members__:
            self.agent = AfterWorkOption[self.agent.upper()]
        _check_target(self.agent, "AfterWork")


@dataclass
class UpdateSystemMessage:
    """Instructions rebuilt from the context at every turn: a `{key}` template or a callable.

    A template's missing keys read as empty; a callable receives `context_variables` (or the
    agent and the messages, if it takes two parameters).
    """

    content: str | Callable[..., str]
    _fields: list[str] = field(default_factory=list, repr=False)

    def render(
        self, agent: Any, messages: Sequence[dict[str, Any]], context: dict[str, Any]
    ) -> str:
        """The instructions for this turn."""
        if callable(self.content):
            try:
                two = len(inspect.signature(self.content).parameters) == 2
            except (TypeError, ValueError):
                two = False
            return str(self.content(agent, list(messages)) if two else self.content(context))
        return self.content.format_map(_Blank(context))


class _Blank(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return ""


# AG2's old spellings.
ON_CONDITION = OnCondition
AFTER_WORK = AfterWork


def split_handoffs(hand_to: Any) -> tuple[list[Any], Any]:
    """Validate a `handoffs=`/`hand_to=` value: (conditions, AfterWork or None)."""
    items = hand_to if isinstance(hand_to, (list, tuple)) else [hand_to]
    conditions, after_work = [], None
    for item in items:
        if isinstance(item, AfterWork):
            after_work = item
        elif isinstance(item, (OnCondition, OnContextCondition)):
            conditions.append(item)
        else:
            raise DurableSwarmError(
                f"A handoff must be OnCondition, OnContextCondition or AfterWork, got {item!r}."
            )
    return conditions, after_work
