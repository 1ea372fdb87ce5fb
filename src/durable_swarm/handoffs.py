"""Rule-based handoffs (AG2's swarm rules on Swarm-style agents).

- `OnCondition(target, condition)`: offered to the model as a `transfer_to_<target>` function whose
  description is the condition (`<target>`: the agent's name lowercased, each character other
  than a letter, digit, `_` or `-` made `_`: `transfer_to_refund_specialist` for "Refund
  Specialist").
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

import enum
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._lazy import warn_moved
from .errors import ContextExpressionError, DurableSwarmError
from .tools import is_agent

__all__ = [
    "AfterWork",
    "AfterWorkOption",
    "ContextExpression",
    "ContextExpressionError",
    "OnCondition",
    "OnContextCondition",
    "UpdateSystemMessage",
]


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<variable>\$\{\s*(?P<var>[A-Za-z_][A-Za-z0-9_]*)\s*\})
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<operator>==|!=|<=|>=|&&|\|\||[<>&|!()-])
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<other>\S)
    )""",
    re.VERBOSE,
)
_WORDS = {"and": "and", "or": "or", "not": "not", "true": True, "True": True, "false": False}
_WORDS.update({"False": False, "None": None})
_SPELLINGS = {"&&": "and", "&": "and", "||": "or", "|": "or", "!": "not"}
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_LITERAL, _NAME = "literal", "variable"


def _unquote(literal: str) -> str:
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append({"n": "\n", "t": "\t"}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


class _Parser:
    """Recursive descent over the tokens of an expression, at most `MAX_DEPTH` levels deep.

    Grammar: or := and ("or" and)* ; and := not ("and" not)* ; not := "not" not | compare ;
    compare := sign (op sign)* ; sign := "-" sign | atom ; atom := variable | literal | "(" or ")".
    Nodes are tuples: ("variable", name), ("literal", value), ("-", node), ("not", node),
    ("and"/"or", [nodes]), ("compare", first, [(op, node), ...]).
    """

    def __init__(self, expression: str, max_depth: int) -> None:
        self.expression = expression
        self.max_depth = max_depth
        self.tokens: list[tuple[str, Any]] = []
        for match in _TOKEN.finditer(expression):
            kind = match.lastgroup
            text = match.group(kind) if kind else ""
            if kind == "variable":
                self.tokens.append((_NAME, match.group("var")))
            elif kind == "string":
                self.tokens.append((_LITERAL, _unquote(text)))
            elif kind == "number":
                number = float(text) if any(c in text for c in ".eE") else int(text)
                self.tokens.append((_LITERAL, number))
            elif kind == "operator":
                self.tokens.append(("op", _SPELLINGS.get(text, text)))
            elif kind == "word" and text in _WORDS:
                value = _WORDS[text]
                self.tokens.append(
                    ("op", value) if text in ("and", "or", "not") else (_LITERAL, value)
                )
            elif kind == "word":
                raise self.error(f"refers to {text!r}; write context variables as ${{{text}}}.")
            elif text:
                raise self.error(
                    f"uses {text!r}, which is not allowed: only ${{variables}}, literals "
                    "(numbers, quoted strings, true/false, None), comparisons, a minus sign, "
                    "parentheses and and/or/not."
                )
        self.position = 0

    def error(self, problem: str) -> ContextExpressionError:
        return ContextExpressionError(f"ContextExpression {self.expression!r} {problem}")

    def malformed(self, what: str) -> ContextExpressionError:
        return self.error(
            f"is malformed: {what}. Write variables as ${{name}} and combine them with "
            'and/or/not and comparisons, e.g. "${verified} and ${attempts} >= 3".'
        )

    def peek(self) -> Any:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else None

    def is_op(self, *ops: str) -> bool:
        if self.position >= len(self.tokens):
            return False
        kind, value = self.tokens[self.position]
        return kind == "op" and value in ops

    def parse(self) -> tuple[Any, ...]:
        if not self.tokens:
            raise self.malformed("it is empty")
        tree = self.boolean("or", 0)
        if self.position < len(self.tokens):
            raise self.malformed(f"unexpected {self.shown()} after a complete expression")
        return tree

    def shown(self) -> str:
        kind, value = self.tokens[self.position]
        return f"${{{value}}}" if kind == _NAME else repr(value)

    def deeper(self, depth: int) -> int:
        if depth >= self.max_depth:
            raise self.error(
                f"nests more than {self.max_depth} levels deep (parentheses, not and minus "
                "signs); write it flatter."
            )
        return depth + 1

    def boolean(self, op: str, depth: int) -> tuple[Any, ...]:
        parts = [self.boolean("and", depth) if op == "or" else self.negation(depth)]
        while self.is_op(op):
            self.position += 1
            parts.append(self.boolean("and", depth) if op == "or" else self.negation(depth))
        return parts[0] if len(parts) == 1 else (op, parts)

    def negation(self, depth: int) -> tuple[Any, ...]:
        if self.is_op("not"):
            self.position += 1
            return ("not", self.negation(self.deeper(depth)))
        first = self.sign(depth)
        rest = []
        while self.is_op(*_COMPARE):
            op = self.peek()
            self.position += 1
            rest.append((op, self.sign(depth)))
        return ("compare", first, rest) if rest else first

    def sign(self, depth: int) -> tuple[Any, ...]:
        if self.is_op("-"):
            self.position += 1
            return ("-", self.sign(self.deeper(depth)))
        if self.position >= len(self.tokens):
            raise self.malformed("it ends where a value was expected")
        kind, value = self.tokens[self.position]
        self.position += 1
        if kind in (_NAME, _LITERAL):
            return (kind, value)
        if value == "(":
            inner = self.boolean("or", self.deeper(depth))
            if not self.is_op(")"):
                raise self.malformed("a '(' is never closed")
            self.position += 1
            return inner
        self.position -= 1
        raise self.malformed(f"unexpected {self.shown()} where a value was expected")


class ContextExpression:
    """A boolean expression over context variables, e.g. `"${verified} and ${attempts} >= 3"`.

    Variables are written `${name}`; operators: `and`, `or`, `not` (also `&`/`&&`, `|`/`||`,
    `!`), `==`, `!=`, `<`, `<=`, `>`, `>=` (chained as in Python: `1 < ${n} <= 3`), a minus sign,
    parentheses; literals: numbers, quoted strings, `True`/`False` (or `true`/`false`), `None`.
    Nothing else is allowed: no calls, attributes, indexing, arithmetic or comments.

    The expression is parsed when created into a small syntax tree, at most `MAX_LENGTH`
    characters long and `MAX_DEPTH` levels deep; a malformed one raises `ContextExpressionError`
    then. Evaluation walks the tree (no `eval`): a missing variable reads as `None`; `and`/`or`
    behave as in Python; an ordering comparison between values that cannot be ordered (a missing
    variable, a string and a number) is False; a minus sign before something that is not a number
    raises `ContextExpressionError`, which fails the run with a message naming the variable.
    """

    MAX_LENGTH = 2000
    MAX_DEPTH = 50

    def __init__(self, expression: str) -> None:
        if not isinstance(expression, str) or not expression.strip():
            raise ContextExpressionError(
                f"ContextExpression needs a non-empty string, got {expression!r:.100}."
            )
        if len(expression) > self.MAX_LENGTH:
            raise ContextExpressionError(
                f"ContextExpression {expression[:60]!r}... is {len(expression)} characters long, "
                f"over the {self.MAX_LENGTH}-character limit; split it into several conditions."
            )
        self.expression = expression
        self._tree = _Parser(expression, self.MAX_DEPTH).parse()
        self.variables = sorted(set(_variables(self._tree)))

    def __repr__(self) -> str:
        return f"ContextExpression({self.expression!r})"

    def evaluate(self, context_variables: dict[str, Any]) -> bool:
        """The expression's truth value for `context_variables`.

        Raises:
            ContextExpressionError: a minus sign stands before a value that is not a number.
        """
        return bool(self._evaluate(self._tree, context_variables))

    def _evaluate(self, node: tuple[Any, ...], context: dict[str, Any]) -> Any:
        kind = node[0]
        if kind == _LITERAL:
            return node[1]
        if kind == _NAME:
            return context.get(node[1])
        if kind == "not":
            return not self._evaluate(node[1], context)
        if kind == "-":
            value = self._evaluate(node[1], context)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                what = f"${{{node[1][1]}}}" if node[1][0] == _NAME else "its operand"
                raise ContextExpressionError(
                    f"ContextExpression {self.expression!r}: a minus sign needs a number, but "
                    f"{what} is {_describe(value)}. Set it to a number in context_variables, or "
                    "change the expression."
                )
            return -value
        if kind in ("and", "or"):
            value = None
            for part in node[1]:
                value = self._evaluate(part, context)
                if bool(value) is (kind == "or"):
                    return value
            return value
        left = self._evaluate(node[1], context)
        for op, right_node in node[2]:
            right = self._evaluate(right_node, context)
            try:
                if not _COMPARE[op](left, right):
                    return False
            except TypeError:
                return False
            left = right
        return True


def _describe(value: Any) -> str:
    if value is None:
        return "None (not set, or set to None)"
    return f"{type(value).__name__} {value!r:.60}"


def _variables(node: tuple[Any, ...]) -> list[str]:
    kind = node[0]
    if kind == _NAME:
        return [node[1]]
    if kind in ("not", "-"):
        return _variables(node[1])
    if kind in ("and", "or"):
        return [name for part in node[1] for name in _variables(part)]
    if kind == "compare":
        return [*_variables(node[1]), *(n for _, part in node[2] for n in _variables(part))]
    return []


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
        """The tool offered to the model, returning the target: `transfer_to_<name>`, `<name>`
        the target's name lowercased, other characters than letters, digits, `_` and `-` as
        `_`."""
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


def __getattr__(name: str) -> Any:
    """AG2's `ON_CONDITION` and `AFTER_WORK`, moved to `durable_swarm.ag2` (with a warning)."""
    old_spellings = {"ON_CONDITION": OnCondition, "AFTER_WORK": AfterWork}
    if name in old_spellings:
        warn_moved(__name__, name, "durable_swarm.ag2")
        return old_spellings[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
