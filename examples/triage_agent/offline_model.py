"""The scripted model the triage example uses offline: it reads the conversation like an agent."""

import re

from _common import has_words, last_user_text, my_tool_result, tool_names

from durable_swarm.testing import ToolCall, calls, text


def wants_refund(said):
    """Whether the user talks about a refund or a return."""
    return has_words(said, "refund*", "return*", "money back")


def wants_to_buy(said):
    """Whether the user talks about buying."""
    return has_words(said, "buy*", "sales", "purchase*", "bees", "shop*")


def item_id(messages):
    """The latest item id (item_...) the user gave in the conversation."""
    for message in reversed(messages):
        found = re.search(r"\bitem_\w+", str(message.get("content") or ""))
        if message.get("role") == "user" and found:
            return found.group(0)
    return None


def respond(messages, tools):
    """Answer as whichever agent is speaking (told apart by the tools it is offered)."""
    offered, said = tool_names(tools), last_user_text(messages)
    result = my_tool_result(messages, tools)
    if "transfer_to_refunds" in offered:  # the triage agent
        if wants_refund(said):
            return calls(ToolCall("transfer_to_refunds"))
        if wants_to_buy(said):
            return calls(ToolCall("transfer_to_sales"))
        return text("Happy to help! Are you looking to buy bees, or to get a refund?")
    if "process_refund" in offered:  # the refunds agent
        if result is not None and messages[-1]["tool_name"] == "apply_discount":
            return text(f"{result} for you. Would you still like the refund?")
        if result is not None:
            return text(f"Your refund for {item_id(messages)} is processed. Anything else?")
        if wants_to_buy(said) and not wants_refund(said):
            return calls(ToolCall("transfer_back_to_triage"))
        item = item_id(messages)
        if has_words(said, "expensive", "pricey", "too much") and "11%" not in str(messages):
            return calls(ToolCall("apply_discount"))
        if item and (has_words(said, "insist", "yes", "still", "broken", "damaged", "wrong")):
            reason = "too expensive" if "expensive" in str(messages) else said
            return calls(ToolCall("process_refund", {"item_id": item, "reason": reason}))
        if item:
            return text(f"Sorry to hear that. Why would you like a refund for {item}?")
        return text("I can help with that. What is the item ID? It looks like item_...")
    if wants_refund(said):  # the sales agent
        return calls(ToolCall("transfer_back_to_triage"))
    return text("Bees! 🐝 Wonderful choice. Our hives are buzzing: how many would you like?")
