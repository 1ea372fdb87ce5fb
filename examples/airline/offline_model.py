"""The scripted model the airline example uses offline: it follows each agent's policy."""

import re

from _common import has_words, last_user_text, my_tool_result, tool_names

from durable_swarm.testing import ToolCall, calls, text

CANCEL = ("cancel*",)
CHANGE = ("change*", "earlier", "later", "reschedul*", "rebook*", "move")
BAGGAGE = ("bag", "bags", "baggage", "luggage", "suitcase")


def call(name, **arguments):
    """A reply that calls one tool."""
    return calls(ToolCall(name, arguments))


def flight_number(messages):
    """The flight number in the agent's instructions, if any."""
    found = re.search(r"flight # is (\d+)", str(messages[0].get("content")))
    return f"flight {found.group(1)}" if found else "your flight"


def triage(said):
    """Route by topic; ask when the topic is unclear."""
    if has_words(said, *BAGGAGE):
        return call("transfer_to_lost_baggage")
    if has_words(said, *CANCEL, *CHANGE):
        return call("transfer_to_flight_modification")
    return text("I'm sorry to hear that. What can I help you with: a flight, or your baggage?")


def modification(said):
    """Cancel or change? Ask until it is clear."""
    if has_words(said, *CANCEL):
        return call("transfer_to_flight_cancel")
    if has_words(said, *CHANGE):
        return call("transfer_to_flight_change")
    return text("Would you like to cancel your flight, or change it to another date?")


def cancel(messages, said, result):
    """The cancellation policy: refund or credits, then resolve."""
    last = messages[-1].get("tool_name") if result is not None else None
    if last == "initiate_refund":
        return text("Your refund is on its way: it takes 5 to 7 business days. Anything else?")
    if last == "initiate_flight_credits":
        return text("Your flight credits are ready and valid for a year. Anything else?")
    if last == "case_resolved":
        return text("Thank you for flying with us. Goodbye!")
    if has_words(said, "refund*", "money"):
        return call("initiate_refund")
    if has_words(said, "credit*", "voucher"):
        return call("initiate_flight_credits")
    if has_words(said, "no", "nothing", "that's all", "thanks", "thank you"):
        return call("case_resolved")
    return text(
        f"I can cancel {flight_number(messages)}. Would you like a refund or flight credits?"
    )


def change(messages, said, result):
    """The change policy: check, change, confirm, resolve."""
    last = messages[-1].get("tool_name") if result is not None else None
    if last == "valid_to_change_flight":
        return call("change_flight")
    if last == "change_flight":
        return text(f"Done: {flight_number(messages)} is changed as you asked. Anything else?")
    if last == "case_resolved":
        return text("Thank you for flying with us. Goodbye!")
    if has_words(said, "no", "nothing", "that's all", "thanks", "thank you"):
        return call("case_resolved")
    return call("valid_to_change_flight")


def baggage(messages, said, result):
    """The lost baggage policy: search, tell, resolve."""
    last = messages[-1].get("tool_name") if result is not None else None
    if last == "initiate_baggage_search":
        return text(
            "Good news: we found your bag. It will be delivered to your address. Anything else?"
        )
    if last == "case_resolved":
        return text("Thank you for flying with us. Goodbye!")
    if has_words(said, "no", "nothing", "that's all", "thanks", "thank you"):
        return call("case_resolved")
    return call("initiate_baggage_search")


def off_topic(offered, said, result):
    """Whether a routine agent hears about another routine's topic (then triage takes over)."""
    if result is not None or "transfer_to_triage" not in offered:
        return False
    if "initiate_baggage_search" in offered:
        return has_words(said, *CANCEL, *CHANGE)
    return has_words(said, *BAGGAGE)


def respond(messages, tools):
    """Answer as whichever agent is speaking (told apart by the tools it is offered)."""
    offered, said = tool_names(tools), last_user_text(messages)
    result = my_tool_result(messages, tools)
    if off_topic(offered, said, result):
        return call("transfer_to_triage")
    if "transfer_to_lost_baggage" in offered:
        return triage(said)
    if "transfer_to_flight_cancel" in offered:
        return modification(said)
    if "initiate_refund" in offered:
        return cancel(messages, said, result)
    if "change_flight" in offered:
        return change(messages, said, result)
    return baggage(messages, said, result)
