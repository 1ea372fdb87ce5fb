"""Airline customer service: triage, then a routine agent for each case, following its policy.

Run: `python examples/airline/main.py` and chat (Ctrl-D ends), or non-interactively:
`python examples/airline/main.py --say "I want to cancel my flight" --say "A refund, please"`.
Add `--durable` to run every turn on DurableSwarm.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import input_lines, make_swarm, parse_args

from airline.agents import triage_agent
from airline.offline_model import respond
from durable_swarm.repl import run_demo_loop

context_variables = {
    "customer_context": """Here is what you know about the customer:
1. CUSTOMER_ID: customer_12345
2. NAME: John Doe
3. PHONE_NUMBER: (123) 456-7890
4. EMAIL: johndoe@example.com
5. STATUS: Premium
6. ACCOUNT_STATUS: Active
7. BALANCE: $0.00
8. LOCATION: 1234 Main St, San Francisco, CA 94123, USA
""",
    "flight_context": """The customer has an upcoming flight from LGA (LaGuardia) in NYC to LAX in
Los Angeles. The flight # is 1919. The flight departs at 3pm ET on 5/21/2024.""",
}


def main(argv=None):
    """Chat with the airline's triage agent, with the customer's and flight's context."""
    args = parse_args(__doc__.splitlines()[0], argv, interactive=True)
    swarm = make_swarm(respond, args)
    run_demo_loop(
        triage_agent,
        context_variables=context_variables,
        stream=args.stream,
        swarm=swarm,
        input_fn=input_lines(args),
    )


if __name__ == "__main__":
    main()
