"""The scripted model the personal shopper uses offline: it collects IDs, then calls the tools."""

import re

from _common import has_words, last_user_text, my_tool_result, tool_names

from durable_swarm.testing import ToolCall, calls, text


def said_number(messages, *labels):
    """The latest number the user gave after one of `labels` ("user 2", "item ID: 11", ...)."""
    pattern = rf"\b(?:{'|'.join(labels)})\s*(?:id)?\s*(?:is|=|:|#)?\s*(\d+)"
    for message in reversed(messages):
        found = re.search(pattern, str(message.get("content") or ""), re.IGNORECASE)
        if message.get("role") == "user" and found:
            return int(found.group(1))
    return None


def method(said):
    """The notification method the user asked for, if any."""
    if has_words(said, "email", "e-mail", "mail"):
        return "email"
    if has_words(said, "phone", "text", "sms"):
        return "phone"
    return None


def wants_refund(said):
    """Whether the user talks about a refund or a return."""
    return has_words(said, "refund*", "return*", "money back")


def wants_to_buy(said):
    """Whether the user talks about buying."""
    return has_words(said, "buy*", "order*", "purchas*", "shop*")


def helper(messages, said, result, act, needs):
    """The sales or refunds agent: `act` is its tool, `needs` the ID it needs beside the user."""
    user = said_number(messages, "user")
    last = messages[-1].get("tool_name") if result is not None else None
    if last == "notify_customer":
        return text(f"{result} Anything else?")
    if last == act:
        return text(f"{result} Would you like a notification by email or phone?")
    if method(said) and user:
        return calls(ToolCall("notify_customer", {"user_id": user, "method": method(said)}))
    other = wants_to_buy(said) if act == "refund_item" else wants_refund(said)
    if other and not (wants_refund(said) if act == "refund_item" else wants_to_buy(said)):
        return calls(ToolCall("transfer_back_to_triage"))
    target = said_number(messages, needs)
    if user and target:
        return calls(ToolCall(act, {"user_id": user, f"{needs}_id": target}))
    return text(f"Sure. Please give me your user ID and the {needs} ID, in one message.")


def respond(messages, tools):
    """Answer as whichever agent is speaking (told apart by the tools it is offered)."""
    offered, said = tool_names(tools), last_user_text(messages)
    result = my_tool_result(messages, tools)
    if "transfer_to_refunds_agent" in offered:  # triage
        if wants_refund(said):
            return calls(ToolCall("transfer_to_refunds_agent"))
        if wants_to_buy(said):
            return calls(ToolCall("transfer_to_sales_agent"))
        return text("Would you like to buy something, or to return an item?")
    if "refund_item" in offered:
        return helper(messages, said, result, "refund_item", "item")
    return helper(messages, said, result, "order_item", "product")
