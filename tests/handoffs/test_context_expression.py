"""`ContextExpression`: the little language of context conditions, its errors at definition, and
the constructs it refuses."""

from __future__ import annotations

import pickle
import re
from typing import Any

import pytest

from durable_swarm import (
    Agent,
    ContextExpression,
    ContextExpressionError,
    DurableSwarmError,
    OnCondition,
    OnContextCondition,
)

CTX = {
    "verified": True,
    "blocked": False,
    "attempts": 3,
    "score": 2.5,
    "tier": "gold",
    "empty": "",
    "none": None,
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # variables alone: truthiness; a missing variable reads as None
        ("${verified}", True),
        ("${blocked}", False),
        ("${empty}", False),
        ("${missing}", False),
        ("${ verified }", True),
        # and / or / not, and their symbols
        ("${verified} and ${attempts} >= 3", True),
        ("${verified} and ${blocked}", False),
        ("${blocked} or ${verified}", True),
        ("not ${blocked}", True),
        ("not ${verified} or ${blocked}", False),
        ("${verified} & ${blocked}", False),
        ("${verified} && ${attempts}", True),
        ("${blocked} | ${verified}", True),
        ("${blocked} || ${blocked}", False),
        ("!${blocked}", True),
        ("!${verified} & ${verified}", False),
        ("!(${verified} & ${blocked})", True),
        ("(${blocked} or ${verified}) and not ${missing}", True),
        # comparisons
        ("${attempts} == 3", True),
        ("${attempts} != 3", False),
        ("${attempts} > 2", True),
        ("${attempts} < 3", False),
        ("${attempts} <= 3", True),
        ("1 < ${attempts} <= 3", True),
        ("1 < ${attempts} < 3", False),
        ("${attempts} >= -1", True),
        # numbers
        ("${score} > 2", True),
        ("${score} == 2.5", True),
        ("${attempts} == 3.0", True),
        # strings
        ('${tier} == "gold"', True),
        ("${tier} == 'gold'", True),
        ('${tier} != "silver"', True),
        ('${empty} == ""', True),
        # booleans and None
        ("${verified} == True", True),
        ("${verified} == true", True),
        ("${blocked} == false", True),
        ("${blocked} == False", True),
        ("${none} == None", True),
        ("${missing} == None", True),
        # comparing a missing variable (or mismatched types) is False, never an error mid-run
        ("${missing} > 3", False),
        ("${tier} > 3", False),
        ("not (${missing} >= 0)", True),
    ],
)
def test_expression_evaluates(expression: str, expected: bool) -> None:
    assert ContextExpression(expression).evaluate(CTX) is expected


@pytest.mark.parametrize(
    ("expression", "context", "expected"),
    [
        ('${flag} == "true"', {"flag": "true"}, True),
        ('${flag} == "false"', {"flag": "false"}, True),
        ('${name} == "A&B"', {"name": "A&B"}, True),
        ('${name} == "a|b"', {"name": "a|b"}, True),
        ('${name} == "hi!"', {"name": "hi!"}, True),
        ("${name} == 'not me'", {"name": "not me"}, True),
        ('${name} == "${x}"', {"name": "${x}", "x": "y"}, True),
    ],
)
def test_string_literals_are_taken_as_written(
    expression: str, context: dict[str, Any], expected: bool
) -> None:
    """Operators and boolean words inside a quoted string are text, not operators."""
    assert ContextExpression(expression).evaluate(context) is expected


def test_expression_lists_its_variables_and_reads_them_at_each_evaluation() -> None:
    expression = ContextExpression("${b} and ${a} > 1 or ${b}")
    assert expression.variables == ["a", "b"]
    assert repr(expression) == "ContextExpression('${b} and ${a} > 1 or ${b}')"
    assert expression.evaluate({"a": 2, "b": True})
    assert not expression.evaluate({"a": 2, "b": False})


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "   ",
        "${verified} and",
        "${attempts} >",
        "(${verified}",
        "${verified})",
        "${attempts} = 3",
        "${attempts} === 3",
        "${}",
        "${verified} ${blocked}",
        "'unterminated",
    ],
)
def test_malformed_expressions_raise_when_defined(expression: str) -> None:
    with pytest.raises(ContextExpressionError) as info:
        ContextExpression(expression)
    assert repr(expression.strip()) in str(info.value) or "non-empty" in str(info.value)


@pytest.mark.parametrize(
    ("expression", "construct"),
    [
        ("len(${items}) > 1", "refers to 'len'"),
        ("__import__('os').system('true')", "refers to '__import__'"),
        ("${user}.name == 'x'", "uses '.'"),
        ("${items}[0]", "uses '['"),
        ("${attempts} + 1 > 2", "uses '+'"),
        ("${tier} in ['gold']", "refers to 'in'"),
        ("lambda: 1", "refers to 'lambda'"),
        ("${a} if ${b} else ${c}", "refers to 'if'"),
        ("[x for x in ${items}]", "uses '['"),
        ("{'a': 1}", "uses '{'"),
        ("${a} # == 1", "uses '#'"),
        ("${a} == 1 ; ${b}", "uses ';'"),
        ("${a} = 1", "uses '='"),
    ],
)
def test_forbidden_constructs_are_refused(expression: str, construct: str) -> None:
    with pytest.raises(ContextExpressionError, match=re.escape(construct)):
        ContextExpression(expression)


@pytest.mark.parametrize("expression", ["verified", "verified and ${attempts}", "os"])
def test_bare_names_are_refused_with_the_right_spelling(expression: str) -> None:
    name = expression.split()[0]
    with pytest.raises(ContextExpressionError, match=rf"write context variables as \$\{{{name}\}}"):
        ContextExpression(expression)


def test_a_malformed_expression_fails_where_the_rule_or_agent_is_defined_not_mid_run() -> None:
    target = Agent(name="Target")
    with pytest.raises(ContextExpressionError):
        OnContextCondition(target, ContextExpression("${verified} and and"))
    with pytest.raises(ContextExpressionError):
        OnCondition(target, "to target", available=ContextExpression("${open} ="))
    with pytest.raises(ContextExpressionError):
        Agent(
            name="Source",
            handoffs=[OnContextCondition(target, ContextExpression("len(${x})"))],
        )


def test_context_expression_error_is_a_value_error_and_pickles() -> None:
    with pytest.raises(ContextExpressionError) as info:
        ContextExpression("${a} >")
    error = info.value
    assert isinstance(error, ValueError)
    assert isinstance(error, DurableSwarmError)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ContextExpressionError
    assert str(again) == str(error)
    assert "${name}" in str(error)  # says how to write it


# --- hostile and edge cases -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "context", "expected"),
    [
        ("-${n} < 0", {"n": 2}, True),
        ("-${n} == -2.5", {"n": 2.5}, True),
        ("--${n} == 2", {"n": 2}, True),
        ("${n} > -1", {"n": 0}, True),
        ("-(${n}) >= -3", {"n": 3}, True),
        ("not not ${n}", {"n": 1}, True),
        ("(${a} or 7) == 7", {}, True),  # and/or give a value, as in Python
        ("(${a} and 7) == None", {}, True),
        ('"#" == ${s}', {"s": "#"}, True),
        ("'it\\'s' == ${s}", {"s": "it's"}, True),
    ],
)
def test_minus_signs_and_values(expression: str, context: dict[str, Any], expected: bool) -> None:
    assert ContextExpression(expression).evaluate(context) is expected


@pytest.mark.parametrize(
    ("expression", "context", "named"),
    [
        ("-${missing}", {}, "${missing} is None (not set, or set to None)"),
        ("-${flag} < 0", {"flag": True}, "${flag} is bool True"),
        ("-${tier} < 0", {"tier": "gold"}, "${tier} is str 'gold'"),
        ("-(${a} or 'x') < 0", {}, "its operand is str 'x'"),
    ],
)
def test_a_minus_sign_before_a_non_number_is_a_context_expression_error(
    expression: str, context: dict[str, Any], named: str
) -> None:
    compiled = ContextExpression(expression)
    with pytest.raises(ContextExpressionError) as info:
        compiled.evaluate(context)
    assert str(info.value) == (
        f"ContextExpression {expression!r}: a minus sign needs a number, but {named}. Set it to "
        "a number in context_variables, or change the expression."
    )


@pytest.mark.parametrize("opener", ["not ", "!", "-", "(", "not (", "- ("])
def test_deep_nesting_is_refused_when_defined(opener: str) -> None:
    closer = ")" * opener.count("(")
    expression = opener * 2000 + "${a}" + closer * 2000
    with pytest.raises(ContextExpressionError, match="nests more than 50 levels deep"):
        ContextExpression(expression[: ContextExpression.MAX_LENGTH])
    with pytest.raises(ContextExpressionError):  # over the length limit, or too deep
        ContextExpression(expression)
    fine = opener * 10 + "${a}" + closer * 10
    assert isinstance(ContextExpression(fine).evaluate({"a": 1}), bool)


def test_long_expressions_are_refused_when_defined() -> None:
    longest = " or ".join(["${a}"] * 400)  # 3196 characters
    with pytest.raises(ContextExpressionError, match="over the 2000-character limit"):
        ContextExpression(longest)
    assert ContextExpression(" or ".join(["${a}"] * 200)).evaluate({"a": 1}) is True
    with pytest.raises(ContextExpressionError, match="over the 2000-character limit"):
        ContextExpression("${a} == '" + "x" * 100_000 + "'")


@pytest.mark.parametrize("expression", ["${a} ==", "-", "()", "not", "${a} ${b}", "(${a}))"])
def test_malformed_expressions_name_what_is_wrong(expression: str) -> None:
    with pytest.raises(ContextExpressionError, match="is malformed: "):
        ContextExpression(expression)
