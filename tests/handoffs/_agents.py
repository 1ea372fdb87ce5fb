"""Agents, tools and deterministic model scripts shared by the test process and its children.

Three scenarios, each defined here once so that a child process that recovers a run finds the
same agents (by name and fingerprint) as the process that started it:

* `cashier`: pays with `pay`, a tool that needs a person's approval before each call.
* AG2's refund example: `customer_service` asks for the passport number (`ask_user`), verifies
  it and hands over (an `OnCondition` transfer available only once verified) to
  `refund_specialist`, who approves the refund and names `PaymentProcessor` as the next agent;
  `payment_processor` pays, and an `OnContextCondition` sends the chat on, without a model call,
  to `satisfaction_surveyor`, who asks for a rating (after-work `REVERT_TO_USER`), records it and
  ends the chat (a callable after-work that terminates once a rating is in the context).
* `echo`: a REPL partner that numbers its answers.

Tools append one line per execution to `<work dir>/<tool>.log` and the scripts one line per model
request to `<work dir>/model.log` (work dir from `HANDOFFS_TEST_WORK_DIR`), so a test can count
executions across processes. The scripts are pure functions of the request, so a request made
again after a crash gets the same answer (and the same tool call ids).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from _support.logs import append_line, read_lines
from durable_swarm import (
    AfterWork,
    AfterWorkOption,
    Agent,
    ContextExpression,
    OnCondition,
    OnContextCondition,
    Result,
    UpdateSystemMessage,
    ask_user,
)
from durable_swarm.testing import Reply, ToolCall, calls, text
from durable_swarm.toolkit import tool

WORK_DIR_ENV = "HANDOFFS_TEST_WORK_DIR"


def record(name: str, line: str) -> None:
    """Append one line to `<work dir>/<name>.log` (flushed to disk before returning)."""
    append_line(Path(os.environ[WORK_DIR_ENV]) / f"{name}.log", line)


def lines(directory: Path, name: str) -> list[str]:
    """The lines written to `<directory>/<name>.log` so far."""
    return read_lines(directory / f"{name}.log")


def _tool_results(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Tool name -> content of its latest result in the conversation."""
    names = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            names[call["id"]] = call["function"]["name"]
    return {
        names.get(m.get("tool_call_id"), "?"): m.get("content") or ""
        for m in messages
        if m.get("role") == "tool"
    }


# --- tool approval ------------------------------------------------------------------------

PAY_ARGUMENTS = {"amount": 30, "to": "Bob"}


@tool(needs_approval=True)
def pay(amount: int, to: str, idempotency_key: str | None = None) -> str:
    """Pay `amount` euros to `to`."""
    record("pay", f"{amount} {to} {idempotency_key}")
    return f"paid {amount} to {to}"


cashier = Agent(name="Cashier", instructions="You are the cashier.", functions=[pay])


def cashier_model(messages: list[dict[str, Any]], tools: Any) -> Reply:
    record("model", "Cashier")
    results = [m for m in messages if m.get("role") == "tool"]
    if not results:
        return calls(ToolCall("pay", PAY_ARGUMENTS))
    return text(f"Done: {results[-1]['content']}")


# --- AG2's refund example -------------------------------------------------------------------

PASSPORT_QUESTION = "To verify your identity, what is your passport number?"
RATING_QUESTION = "Your refund is paid. How would you rate our service from 1 to 5?"
PASSPORT = "AB123456"
RATING = "5"
REFUND_REQUEST = "I want a refund for my order ORD-42, please."
REFUND_CONTEXT = {"order_id": "ORD-42", "amount": 120, "customer_name": "Ada"}


def verify_passport(passport_number: str, context_variables: dict[str, Any]) -> str:
    """Check the customer's passport number."""
    record("verify_passport", passport_number)
    if not re.fullmatch(r"[A-Z]{2}\d{6}", passport_number.strip()):
        return "That is not a valid passport number."
    context_variables["passport_verified"] = True
    context_variables["passport_number"] = passport_number.strip()
    return "Passport verified."


def approve_refund(order_id: str, context_variables: dict[str, Any]) -> Result:
    """Approve the refund of an order."""
    record("approve_refund", order_id)
    return Result(
        value=f"Refund of {order_id} approved.",
        agent="PaymentProcessor",
        context_variables={"refund_approved": True},
    )


def process_refund_payment(order_id: str, amount: int, context_variables: dict[str, Any]) -> str:
    """Pay the approved refund back to the customer's card."""
    record("payments", f"{order_id} {amount}")
    context_variables["refund_paid"] = True
    return f"Paid {amount} EUR back for {order_id}."


def record_rating(rating: int, context_variables: dict[str, Any]) -> str:
    """Record the customer's rating of the service."""
    record("record_rating", str(rating))
    context_variables["rating"] = rating
    return f"Rating {rating} recorded."


def survey_after_work(agent: Any, messages: list[dict[str, Any]], context: dict[str, Any]) -> Any:
    """Ask the person until a rating is recorded, then end the chat."""
    return AfterWorkOption.TERMINATE if context.get("rating") else AfterWorkOption.REVERT_TO_USER


satisfaction_surveyor = Agent(
    name="SatisfactionSurveyor",
    instructions="You are the satisfaction surveyor. Ask for a rating from 1 to 5 and record it.",
    functions=[record_rating],
    handoffs=[AfterWork(survey_after_work)],
)
payment_processor = Agent(
    name="PaymentProcessor",
    instructions="You are the payment processor. Pay approved refunds.",
    functions=[process_refund_payment],
    handoffs=[
        OnContextCondition(
            satisfaction_surveyor, ContextExpression("${refund_paid} == true and not ${rating}")
        )
    ],
)
refund_specialist = Agent(
    name="RefundSpecialist",
    instructions=UpdateSystemMessage(
        "You are the refund specialist. Customer {customer_name}, order {order_id}, "
        "amount {amount} EUR, passport {passport_number}."
    ),
    functions=[approve_refund],
)
customer_service = Agent(
    name="CustomerService",
    instructions="You are the customer service agent. Verify the customer's passport number.",
    functions=[ask_user, verify_passport],
)
customer_service.register_hand_off(
    [
        OnCondition(
            refund_specialist,
            "Transfer to the refund specialist once the passport is verified.",
            available="passport_verified",
        ),
        AfterWork(AfterWorkOption.REVERT_TO_USER),
    ]
)
REFUND_AGENTS = [customer_service, refund_specialist, payment_processor, satisfaction_surveyor]


def refund_model(messages: list[dict[str, Any]], tools: Any) -> Reply:
    """The model of the refund example: decides from the agent (system message) and the chat."""
    system = messages[0]["content"]
    record("model", system.split(".")[0])
    offered = {t["function"]["name"] for t in tools or []}
    done = _tool_results(messages)
    if system.startswith("You are the customer service"):
        if "transfer_to_refundspecialist" in offered:
            return calls(ToolCall("transfer_to_refundspecialist"))
        if "ask_user" not in done:
            return calls(ToolCall("ask_user", {"question": PASSPORT_QUESTION}))
        return calls(ToolCall("verify_passport", {"passport_number": done["ask_user"]}))
    if system.startswith("You are the refund specialist"):
        assert "passport AB123456" in system, system  # the template saw the updated context
        return calls(ToolCall("approve_refund", {"order_id": "ORD-42"}))
    if system.startswith("You are the payment processor"):
        return calls(ToolCall("process_refund_payment", {"order_id": "ORD-42", "amount": 120}))
    if system.startswith("You are the satisfaction surveyor"):
        if "record_rating" in done:
            return text("Thank you for your rating. Goodbye!")
        last = messages[-1]
        if last.get("role") == "user" and last.get("content", "").strip().isdigit():
            return calls(ToolCall("record_rating", {"rating": int(last["content"])}))
        return text(RATING_QUESTION)
    raise AssertionError(f"unexpected agent: {system!r}")


# The model turns of an uninterrupted refund chat, in order (agent, what it does).
REFUND_MODEL_TURNS = [
    "You are the customer service agent",  # ask_user (the passport)
    "You are the customer service agent",  # verify_passport
    "You are the customer service agent",  # transfer_to_refundspecialist
    "You are the refund specialist",  # approve_refund -> "PaymentProcessor"
    "You are the payment processor",  # process_refund_payment; context condition -> surveyor
    "You are the satisfaction surveyor",  # the rating question (REVERT_TO_USER)
    "You are the satisfaction surveyor",  # record_rating
    "You are the satisfaction surveyor",  # thanks (after-work: TERMINATE)
]
REFUND_TRANSITIONS = [
    ("tool", "CustomerService", "RefundSpecialist"),
    ("tool", "RefundSpecialist", "PaymentProcessor"),
    ("context_condition", "PaymentProcessor", "SatisfactionSurveyor"),
    ("after_work", "SatisfactionSurveyor", None),  # REVERT_TO_USER
    ("after_work", "SatisfactionSurveyor", None),  # TERMINATE
]
REFUND_FINAL_CONTEXT = {
    **REFUND_CONTEXT,
    "passport_verified": True,
    "passport_number": PASSPORT,
    "refund_approved": True,
    "refund_paid": True,
    "rating": 5,
}


# --- an agent whose system message is a callable ---------------------------------------------


def greeter_instructions(context_variables: dict[str, Any]) -> str:
    return f"You are Greeter. Greet {context_variables.get('name', 'the user')}."


greeter = Agent(name="Greeter", instructions=UpdateSystemMessage(greeter_instructions))
FINGERPRINTED = [greeter, refund_specialist, customer_service, cashier]


# --- the REPL ----------------------------------------------------------------------------

echo = Agent(name="Echo", instructions="You are Echo. Repeat what the user says.")


def echo_model(messages: list[dict[str, Any]], tools: Any) -> Reply:
    said = [m["content"] for m in messages if m.get("role") == "user"]
    record("model", f"Echo {len(said)}")
    return text(f"[{len(said)}] You said: {said[-1]}")
