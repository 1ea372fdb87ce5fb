"""The personal shopper's agents and tools: triage, sales and refunds, over the shop database.

Swarm's version imported a `create_triage_agent` helper that never existed, so it could not run.
`make_triage_agent` below is that helper: a triage agent with one transfer function per agent,
and (with `add_backlinks`) a way back to triage from each of them.
"""

import datetime
import re

from durable_swarm import Agent
from personal_shopper import database


def refund_item(user_id, item_id):
    """Refund an item the user bought. Needs both the user ID and the item ID."""
    with database.get_connection() as conn:
        row = conn.execute(
            "SELECT amount, refunded FROM purchases WHERE user_id = ? AND item_id = ?",
            (user_id, item_id),
        ).fetchone()
        if row is None:
            return f"No purchase found for user ID {user_id} and item ID {item_id}."
        if row[1]:
            return f"Item ID {item_id} was already refunded."
        conn.execute("UPDATE purchases SET refunded = 1 WHERE item_id = ?", (item_id,))
    print(f"Refunding ${row[0]:.2f} to user ID {user_id} for item ID {item_id}.")
    return f"Refund initiated: ${row[0]:.2f} to user ID {user_id} for item ID {item_id}."


def notify_customer(user_id, method):
    """Notify a customer by their preferred method, "email" or "phone"."""
    with database.get_connection() as conn:
        user = conn.execute(
            "SELECT email, phone FROM users WHERE user_id = ?", (user_id,)
        ).fetchone()
    if user is None:
        return f"User ID {user_id} not found."
    email, phone = user
    if method == "email" and email:
        return f"Emailed customer {email} a notification."
    if method == "phone" and phone:
        return f"Texted customer {phone} a notification."
    return f"No {method} contact available for user ID {user_id}."


def order_item(user_id, product_id):
    """Order a product for the user. Needs both the user ID and the product ID."""
    with database.get_connection() as conn:
        product = conn.execute(
            "SELECT product_name, price FROM products WHERE product_id = ?", (product_id,)
        ).fetchone()
    if product is None:
        return f"Product {product_id} not found."
    name, price = product
    today = datetime.date.today().isoformat()
    item_id = database.add_purchase(user_id, today, product_id, price)
    print(f"Ordering {name} for user ID {user_id}. The price is ${price:.2f}.")
    return f"Ordered {name} for user ID {user_id} at ${price:.2f}; its item ID is {item_id}."


def transfer_function(agent, name=None):
    """A function the model can call to hand the conversation to `agent`."""

    def transfer():
        return agent

    transfer.__name__ = name or "transfer_to_" + re.sub(r"\W+", "_", agent.name.lower()).strip("_")
    transfer.__doc__ = f"Transfer the conversation to the {agent.name}."
    return transfer


def make_triage_agent(name, instructions, agents, add_backlinks=True):
    """A triage agent that can transfer to each of `agents`; with `add_backlinks`, each of them
    can transfer back to it (`transfer_back_to_triage`)."""
    triage = Agent(name=name, instructions=instructions)
    for agent in agents:
        triage.functions.append(transfer_function(agent))
        if add_backlinks:
            agent.functions.append(transfer_function(triage, "transfer_back_to_triage"))
    return triage


refunds_agent = Agent(
    name="Refunds Agent",
    instructions=(
        "You handle refunds of items the user bought. Ask for the user ID and the item ID "
        "together, in one message, then refund the item. If the user wants to be notified, ask "
        "how (email or phone) and notify them."
    ),
    functions=[refund_item, notify_customer],
)

sales_agent = Agent(
    name="Sales Agent",
    instructions=(
        "You place orders. Whatever the user wants to buy, you need both their user ID and the "
        "product ID: ask for both in one message. If the user wants to be notified, ask how "
        "(email or phone) and notify them."
    ),
    functions=[order_item, notify_customer],
)

triage_agent = make_triage_agent(
    name="Triage Agent",
    instructions=(
        "You triage the user's request and transfer them to the right agent: orders and "
        "purchases go to the Sales Agent, refunds and returns to the Refunds Agent. If you "
        "cannot tell, ask one direct question. Do not share your reasoning."
    ),
    agents=[sales_agent, refunds_agent],
)
