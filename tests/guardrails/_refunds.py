"""Agents, guardrails and a model for the guardrail tests, shared by the test process and the
children of the crash test.

`Refunder` refunds orders (`refund`, `card_on_file`) behind four guardrails: `screen` (input:
trips on abuse), `limit` (tool, before: trips on refunds over 100), `redact` (tool, after: trips
on a card number in a result) and `polite` (output: trips on a rude answer). `Moderated` has
the agent `Moderator` as its input guardrail; `Hasty` has `screen` run in parallel with its
first model call.

Every guardrail and tool appends one line per execution to `<work dir>/<name>.log` (the
directory comes from `DSWARM_GUARDRAILS_WORK_DIR`), so a test counts executions across
processes. `refund` waits while `<work dir>/hold` exists (a crash test kills the process then).

`reply(messages, tools)` is the model: a pure function of the request (the first user message
and how many tool results the request holds), so a request made again after a crash gets the
same answer.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from _support.logs import append_line, read_lines
from durable_swarm import Agent, GuardrailResult, guardrail, tool
from durable_swarm.testing import Reply, ToolCall, calls, text

WORK_DIR_ENV = "DSWARM_GUARDRAILS_WORK_DIR"
LIMIT = 100


def _work() -> Path:
    return Path(os.environ[WORK_DIR_ENV])


def executions(directory: Path, name: str) -> list[str]:
    """What `name` (a guardrail or tool) was run on in `directory`, one line per execution."""
    return read_lines(directory / f"{name}.log")


def _note(name: str, value: Any) -> None:
    append_line(_work() / f"{name}.log", value if isinstance(value, str) else json.dumps(value))


@guardrail
def screen(text: str) -> GuardrailResult:
    """Stops abusive input."""
    _note("screen", text)
    if "idiot" in text:
        return GuardrailResult.trip("abusive language")
    return GuardrailResult.passed()


parallel_screen = guardrail(screen.check, name="screen", run_in_parallel=True)


@guardrail
def limit(arguments: dict[str, Any], context_variables: dict[str, Any], tool: str) -> str | None:
    """Refunds over the limit need a manager."""
    _note("limit", arguments)
    if tool == "refund" and arguments.get("amount", 0) > context_variables.get("limit", LIMIT):
        return f"refunds over {context_variables.get('limit', LIMIT)} need a manager"
    return None


@guardrail(when="after")
async def redact(result: str) -> bool:
    """A card number never reaches the model (an async guardrail; True trips)."""
    _note("redact", result)
    return "4111" in result


@guardrail
def polite(answer: str, agent: Any) -> str:
    """The final answer is never rude (a reason string trips, an empty one passes)."""
    _note("polite", answer)
    return f"{agent.name} was rude" if "stupid" in answer else ""


def refund(amount: int) -> str:
    """Refund the customer.

    Args:
        amount: how much to refund.
    """
    _note("refund", str(amount))
    while (_work() / "hold").exists():
        time.sleep(0.05)
    return f"refunded {amount}"


def card_on_file() -> str:
    """The customer's card on file."""
    _note("card_on_file", "")
    return "card 4111 1111 1111 1111"


@tool(guardrails=[guardrail(lambda arguments: arguments.get("order") == "X-1", name="frozen")])
def cancel(order: str) -> str:
    """Cancel an order (order X-1 is frozen by the tool's own guardrail).

    Args:
        order: the order id.
    """
    _note("cancel", order)
    return f"cancelled {order}"


refunder = Agent(
    name="Refunder",
    instructions="You refund orders.",
    functions=[refund, card_on_file, cancel],
    input_guardrails=[screen],
    output_guardrails=[polite],
    tool_guardrails=[limit, redact],
)
hasty = Agent(
    name="Hasty", instructions="You refund orders, fast.", functions=[refund],
    input_guardrails=[parallel_screen],
)  # fmt: skip
moderator = Agent(name="Moderator", instructions="You moderate what customers write.")
moderated = Agent(
    name="Moderated", instructions="You refund orders.", functions=[refund],
    input_guardrails=[moderator],
)  # fmt: skip


def _user_text(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")


def key(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """A request as (first user message, how many tool results it holds)."""
    return _user_text(messages), sum(1 for m in messages if m.get("role") == "tool")


def reply(messages: list[dict[str, Any]], tools: Any) -> Reply:
    """The model of every agent here (see the module docstring)."""
    said, stage = key(messages)
    if said.startswith("Check this"):  # the Moderator, as a guardrail agent
        rude = "idiot" in said
        return text(json.dumps({"tripped": rude, "reason": "rude" if rude else "fine"}))
    if "rude" in said:
        return text("That is a stupid question.")
    last = messages[-1]
    if "twice" in said:  # two refunds in one message, then a rude answer
        if stage == 0:
            return calls(ToolCall("refund", {"amount": 50}), ToolCall("refund", {"amount": 500}))
        return text("Refunded what I could, stupid.")
    if stage == 0:
        for word, call in (
            ("refund", ToolCall("refund", {"amount": _amount(said)})),
            ("card", ToolCall("card_on_file", {})),
            ("cancel", ToolCall("cancel", {"order": said.split()[-1]})),
        ):
            if word in said:
                return calls(call)
        return text("How can I help?")
    return text(f"Done: {last.get('content')}")


def _amount(said: str) -> int:
    return next((int(w) for w in said.split() if w.isdigit()), 10)
