"""A guardrailed refund agent: a tool guardrail holds back refunds over a limit, an input
guardrail stops abusive messages before the model sees them.

Run: `python examples/guardrailed_refund.py` (add `--durable` to run it on DurableSwarm: each
guardrail verdict is then a step of the run, shown by `durable-swarm runs show RUN_ID`).

Three customers write in:
1. a small refund: the guardrail `refund_limit` lets it through, the refund is made;
2. a large refund: `refund_limit` blocks the call, `issue_refund` never runs, and the model
   reads why and tells the customer a manager will follow up;
3. an abusive message: `no_abuse` trips and the run ends with `GuardrailTripped`, before any
   model call.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/, for `_common`

from _common import last_user_text, make_swarm, my_tool_result, parse_args

from durable_swarm import Agent, GuardrailResult, GuardrailTripped, guardrail
from durable_swarm.testing import ToolCall, calls, text

REFUND_LIMIT = 200  # dollars an agent may refund on its own


@guardrail
def refund_limit(arguments, tool):
    """Refunds over the limit wait for a manager: the call is blocked, the model reads why."""
    if tool == "issue_refund" and float(arguments.get("amount", 0)) > REFUND_LIMIT:
        return GuardrailResult.trip(
            f"refunds over ${REFUND_LIMIT} need a manager's approval; tell the customer a "
            "manager will follow up within a day"
        )
    return GuardrailResult.passed()


ABUSE = re.compile(r"\b(idiot|stupid|useless)\b", re.I)


@guardrail
def no_abuse(text):
    """Abusive messages end the run before the model sees them (a reason string trips)."""
    return "abusive language" if ABUSE.search(text) else None


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order.

    Args:
        order_id: the order to refund.
        amount: how many dollars to refund.
    """
    print(f"  [bank] refunded ${amount:.2f} for order {order_id}")
    return f"Refunded ${amount:.2f} for order {order_id}."


refund_agent = Agent(
    name="Refund Agent",
    instructions="You refund orders. Call issue_refund with the order id and the amount.",
    functions=[issue_refund],
    input_guardrails=[no_abuse],
    tool_guardrails=[refund_limit],
)

ORDER = re.compile(r"\border\s+([A-Z0-9-]+)", re.I)
AMOUNT = re.compile(r"\$\s*(\d+(?:\.\d+)?)")


def offline_model(messages, tools):
    """The scripted model: refunds the order and amount the customer names, then reports."""
    result = my_tool_result(messages, tools)
    if result is not None and result.startswith("Error:"):
        return text("I can't refund that much myself: a manager will follow up within a day.")
    if result is not None:
        return text(f"Done! {result}")
    said = last_user_text(messages)
    order, amount = ORDER.search(said), AMOUNT.search(said)
    if order and amount:
        args = {"order_id": order.group(1), "amount": float(amount.group(1))}
        return calls(ToolCall("issue_refund", args))
    return text("Which order, and how much should I refund?")


CUSTOMERS = [
    "Please refund order A-100, $40: it arrived broken.",
    "Refund order B-200 in full, $900.",
    "You useless idiot, refund order C-300 now!",
]


def main(argv=None):
    """Serve three customers and print what happened to each."""
    args = parse_args(__doc__.splitlines()[0], argv)
    swarm = make_swarm(offline_model, args)
    for said in CUSTOMERS:
        print(f"> {said}")
        try:
            response = swarm.run(refund_agent, [{"role": "user", "content": said}])
        except GuardrailTripped as stopped:
            print(f"Stopped by guardrail {stopped.guardrail}: {stopped.reason}")
            continue
        for message in response.messages:
            if message["role"] == "tool" and message["content"].startswith("Error:"):
                print(f"  [guardrail] {message['content']}")
        print(f"{response.agent.name}: {response.messages[-1]['content']}")


if __name__ == "__main__":
    main()
