"""The airline's agents: triage, then flight modification (cancel or change), or lost baggage."""

from airline.policies import (
    FLIGHT_CANCELLATION_POLICY,
    FLIGHT_CHANGE_POLICY,
    LOST_BAGGAGE_POLICY,
    STARTER_PROMPT,
)
from airline.tools import (
    case_resolved,
    change_flight,
    escalate_to_agent,
    initiate_baggage_search,
    initiate_flight_credits,
    initiate_refund,
    valid_to_change_flight,
)
from durable_swarm import Agent


def transfer_to_flight_modification():
    """Transfer to the agent for cancelling or changing a flight."""
    return flight_modification


def transfer_to_flight_cancel():
    """Transfer to the agent that cancels flights."""
    return flight_cancel


def transfer_to_flight_change():
    """Transfer to the agent that changes flights."""
    return flight_change


def transfer_to_lost_baggage():
    """Transfer to the agent for lost or delayed baggage."""
    return lost_baggage


def transfer_to_triage():
    """Call this when the customer asks about something the current agent and its policy do not
    handle, so triage can send them to the right agent."""
    return triage_agent


def triage_instructions(context_variables):
    """Triage's system prompt, with what is known about the customer and their flight."""
    return (
        "You triage the customer's request: work out its topic and call the tool that transfers "
        "to the right agent. You do not need the details, only the topic. If you cannot tell the "
        "topic, ask one direct question, without explaining why. Never share your reasoning, and "
        "do not make assumptions on the customer's behalf.\n"
        f"{context_variables.get('customer_context', '')}\n"
        f"{context_variables.get('flight_context', '')}"
    )


def routine(policy):
    """A routine agent's instructions: the shared preamble with the context filled in, then
    `policy`."""

    def instructions(context_variables):
        preamble = STARTER_PROMPT.format(
            customer_context=context_variables.get("customer_context", ""),
            flight_context=context_variables.get("flight_context", ""),
        )
        return preamble + policy

    return instructions


triage_agent = Agent(
    name="Triage Agent",
    instructions=triage_instructions,
    functions=[transfer_to_flight_modification, transfer_to_lost_baggage],
)

flight_modification = Agent(
    name="Flight Modification Agent",
    instructions=(
        "You handle requests to modify a flight. Read the conversation to tell whether the "
        "customer wants to cancel their flight or to change it; if you cannot tell, ask them. "
        "As soon as you know, call the matching transfer function. Every answer either asks "
        "that question or calls one of your functions."
    ),
    functions=[transfer_to_flight_cancel, transfer_to_flight_change],
    parallel_tool_calls=False,
)

flight_cancel = Agent(
    name="Flight cancel traversal",
    instructions=routine(FLIGHT_CANCELLATION_POLICY),
    functions=[
        escalate_to_agent,
        initiate_refund,
        initiate_flight_credits,
        transfer_to_triage,
        case_resolved,
    ],
)

flight_change = Agent(
    name="Flight change traversal",
    instructions=routine(FLIGHT_CHANGE_POLICY),
    functions=[
        escalate_to_agent,
        change_flight,
        valid_to_change_flight,
        transfer_to_triage,
        case_resolved,
    ],
)

lost_baggage = Agent(
    name="Lost baggage traversal",
    instructions=routine(LOST_BAGGAGE_POLICY),
    functions=[
        escalate_to_agent,
        initiate_baggage_search,
        transfer_to_triage,
        case_resolved,
    ],
)
