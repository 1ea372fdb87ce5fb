"""A `ContextExpression` that cannot be evaluated fails its run with a clear, recorded error, on
SQLite and PostgreSQL (and in memory), never with a bare TypeError."""

from __future__ import annotations

import pytest

from durable_swarm import (
    Agent,
    ContextExpression,
    ContextExpressionError,
    OnContextCondition,
    Swarm,
)
from durable_swarm.testing import ScriptedClient, text

USER = [{"role": "user", "content": "hi"}]
MESSAGE = (
    "ContextExpression '-${missing} < 0': a minus sign needs a number, but ${missing} is None "
    "(not set, or set to None). Set it to a number in context_variables, or change the "
    "expression."
)


def _agents() -> Agent:
    target = Agent(name="ExprTarget")
    rule = OnContextCondition(target, ContextExpression("-${missing} < 0"))
    return Agent(name="ExprSource", handoffs=[rule])


def test_in_memory_the_run_raises_the_expression_error() -> None:
    with pytest.raises(ContextExpressionError) as info:
        Swarm(ScriptedClient([text("never")])).run(_agents(), USER)
    assert str(info.value) == MESSAGE


def test_a_durable_run_fails_with_the_expression_error_recorded(durable_swarm_factory, run_id):
    client = ScriptedClient([text("never")])
    swarm = durable_swarm_factory(client)

    with pytest.raises(ContextExpressionError) as info:
        swarm.run(_agents(), USER, run_id=run_id)

    assert str(info.value) == MESSAGE
    run = swarm.get_run(run_id)
    assert run.status == "failed"
    assert MESSAGE in (run.error or "")
    assert client.requests == []  # the rule is checked before any model call
    with pytest.raises(ContextExpressionError):  # and reading the result again says the same
        swarm.run(_agents(), USER, run_id=run_id)
