"""Structured output: a triage agent hands a customer's message to a ticket writer whose answer is
a typed `Ticket` (a pydantic model), validated, and sent back to the model when it does not fit.

Run: `python examples/structured_output.py` (add `--durable` to run it on DurableSwarm, where the
ticket is stored with the run and read back as a `Ticket`; `--json-schema` asks the server for
the shape with `response_format` instead of the `final_answer` tool). The scripted model forgets
the ticket's priority in its first answer, to show the error going back to it.
"""

import json
import sys
from pathlib import Path
from typing import Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/, for `_common`

from _common import make_swarm, parse_args
from pydantic import BaseModel, Field

from durable_swarm import Agent
from durable_swarm.testing import ToolCall, calls, text


class Ticket(BaseModel):
    """A support ticket, as the ticket writer files it."""

    category: Literal["billing", "shipping", "account", "other"]
    priority: Literal["low", "normal", "high"]
    summary: str = Field(description="one line, for the support team")
    order_id: int | None = Field(description="the order number, if the customer gave one")


ticket_writer = Agent(
    name="Ticket Writer",
    instructions="Turn the customer's message into a support ticket.",
    output_type=Ticket,
)


def transfer_to_ticket_writer():
    """Hand the conversation to the agent that files support tickets."""
    return ticket_writer


triage = Agent(
    name="Triage",
    instructions="Send every customer problem to the ticket writer.",
    functions=[transfer_to_ticket_writer],
)

CUSTOMER = "I was charged twice for order 1042, please fix it today!"


def offline_model(messages, tools):
    """The scripted model: triage hands over; the ticket writer answers (in the shape it was
    asked for: the final_answer tool, or JSON text), the first time without a priority."""
    names = [t["function"]["name"] for t in tools or []]
    if "transfer_to_ticket_writer" in names:
        return calls(ToolCall("transfer_to_ticket_writer"))
    said = next(m["content"] for m in messages if m["role"] == "user")  # the customer's
    ticket = {
        "category": "billing",
        "summary": "Charged twice for one order",
        "order_id": int("".join(c for c in said if c.isdigit()) or 0) or None,
    }
    told = messages[-1].get("content") or ""
    if told.startswith("Your answer is not a valid Ticket"):  # the error sent back
        ticket["priority"] = "high"
    if "final_answer" in names:
        return calls(ToolCall("final_answer", ticket))
    return text(json.dumps(ticket))


def main(argv=None):
    """File one ticket and print it."""
    given = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(__doc__.splitlines()[0], [a for a in given if a != "--json-schema"])
    ticket_writer.output_mode = "json_schema" if "--json-schema" in given else "tool"
    swarm = make_swarm(offline_model, args)
    response = swarm.run(triage, [{"role": "user", "content": CUSTOMER}])
    retries = [
        m["content"]
        for m in response.messages
        if str(m.get("content") or "").startswith("Your answer is not a valid")
    ]
    for sent_back in retries:
        print(f"(sent back to the model) {sent_back.splitlines()[1]}")
    ticket = response.output
    if ticket is None:  # the run ended on an agent without an output_type (no handoff)
        answer = response.messages[-1].get("content") if response.messages else ""
        print(f"{response.agent.name} answered without filing a ticket: {answer}")
        return
    print(f"{response.agent.name} filed a {type(ticket).__name__}:")
    for name, value in ticket.model_dump().items():
        print(f"  {name}: {value}")


if __name__ == "__main__":
    main()
