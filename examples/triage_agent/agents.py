"""The triage example's agents: a triage agent that routes to sales or refunds, and back."""

from durable_swarm import Agent


def process_refund(item_id, reason="NOT SPECIFIED"):
    """Refund an item. The item_id looks like item_... Ask the user to confirm before refunding."""
    print(f"[mock] Refunding item {item_id} because {reason}...")
    return "Success!"


def apply_discount():
    """Apply a discount to the user's cart."""
    print("[mock] Applying discount...")
    return "Applied a discount of 11%"


triage_agent = Agent(
    name="Triage Agent",
    instructions=(
        "Work out which agent suits the user's request best and transfer the conversation to it. "
        "Ask a short question first if the request is unclear."
    ),
)
sales_agent = Agent(
    name="Sales Agent",
    instructions="You sell bees, and you love it: be enthusiastic about every bee.",
)
refunds_agent = Agent(
    name="Refunds Agent",
    instructions=(
        "Help the user get a refund. If they found the item too expensive, offer a discount "
        "first; if they still want the refund, process it."
    ),
    functions=[process_refund, apply_discount],
)


def transfer_back_to_triage():
    """Call this if the user asks about something the current agent does not handle."""
    return triage_agent


def transfer_to_sales():
    """Transfer the user to sales (buying bees)."""
    return sales_agent


def transfer_to_refunds():
    """Transfer the user to refunds."""
    return refunds_agent


triage_agent.functions = [transfer_to_sales, transfer_to_refunds]
sales_agent.functions.append(transfer_back_to_triage)
refunds_agent.functions.append(transfer_back_to_triage)
