"""The triage agent's evals: each query must lead to exactly one call of the right function.

Runs with `execute_tools=False`, so only the model's first decision is checked. Offline it checks
the scripted model; with OPENAI_API_KEY or OPENAI_BASE_URL set it checks the real model.
Run: `python examples/triage_agent/evals.py` (exit status 1 if a case fails). The test suite runs
the same cases (tests/examples/test_evals.py).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import make_swarm, parse_args

from triage_agent.agents import triage_agent
from triage_agent.offline_model import respond

TOOL_CALL_CASES = [
    ("I'd like a refund for my order, please.", "transfer_to_refunds"),
    ("Can I talk to someone in sales?", "transfer_to_sales"),
    ("I want to buy a hive of bees!", "transfer_to_sales"),
    ("How do I return the bees I bought?", "transfer_to_refunds"),
]


def run_and_get_tool_calls(client, agent, query):
    """The tool calls of the agent's first answer to `query` (no tool is run)."""
    message = {"role": "user", "content": query}
    response = client.run(agent=agent, messages=[message], execute_tools=False)
    return response.messages[-1].get("tool_calls")


def check_case(client, query, function_name):
    """None if the case passes, else what went wrong."""
    tool_calls = run_and_get_tool_calls(client, triage_agent, query) or []
    names = [call["function"]["name"] for call in tool_calls]
    return None if names == [function_name] else f"expected [{function_name}], got {names}"


def main(argv=None):
    """Run every case and print a report; exit status 1 if any case failed."""
    args = parse_args(__doc__.splitlines()[0], argv)
    client = make_swarm(respond, args)  # Swarm, or DurableSwarm with --durable
    failures = 0
    for query, function_name in TOOL_CALL_CASES:
        problem = check_case(client, query, function_name)
        failures += problem is not None
        print(f"{'FAIL' if problem else 'ok  '} {query!r} -> {problem or function_name}")
    print(f"{len(TOOL_CALL_CASES) - failures}/{len(TOOL_CALL_CASES)} cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
