"""The airline's tools. They are mocks: each says what a real system would have done."""


def escalate_to_agent(reason=None):
    """Hand the case to a human agent, with the reason if there is one."""
    return f"Escalating to agent: {reason}" if reason else "Escalating to agent"


def valid_to_change_flight():
    """Check that the customer's flight can be changed."""
    return "Customer is eligible to change flight"


def change_flight():
    """Change the customer's flight."""
    return "Flight was successfully changed!"


def initiate_refund():
    """Refund the customer's cancelled flight."""
    return "Refund initiated"


def initiate_flight_credits():
    """Give the customer flight credits for their cancelled flight."""
    return "Successfully initiated flight credits"


def case_resolved():
    """Close the case once the customer's request is handled."""
    return "Case resolved. No further questions."


def initiate_baggage_search():
    """Start a search for the customer's lost bag."""
    return "Baggage was found!"
