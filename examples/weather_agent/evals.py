"""The weather agent's evals: weather questions call get_weather once; other questions do not.

Runs with `execute_tools=False`, so only the model's first decision is checked. Offline it checks
the scripted model; with OPENAI_API_KEY or OPENAI_BASE_URL set it checks the real model.
Run: `python examples/weather_agent/evals.py` (exit status 1 if a case fails). The test suite runs
the same cases (tests/examples/test_evals.py).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import make_swarm, parse_args

from weather_agent.agents import weather_agent
from weather_agent.offline_model import respond

CALLS_WEATHER = [
    "What's the weather like in Paris?",
    "Tell me the temperature in London.",
    "Should I take an umbrella? I'm in chicago.",
]
DOES_NOT_CALL_WEATHER = [
    "Who wrote Pride and Prejudice?",
    "What time is it right now?",
    "Hi!",
]


def run_and_get_tool_calls(client, agent, query):
    """The tool calls of the agent's first answer to `query` (no tool is run)."""
    message = {"role": "user", "content": query}
    response = client.run(agent=agent, messages=[message], execute_tools=False)
    return response.messages[-1].get("tool_calls")


def check_case(client, query, expect_weather):
    """None if the case passes, else what went wrong."""
    tool_calls = run_and_get_tool_calls(client, weather_agent, query) or []
    names = [call["function"]["name"] for call in tool_calls]
    if expect_weather and names != ["get_weather"]:
        return f"expected one get_weather call, got {names}"
    if not expect_weather and names:
        return f"expected no tool call, got {names}"
    return None


def main(argv=None):
    """Run every case and print a report; exit status 1 if any case failed."""
    args = parse_args(__doc__.splitlines()[0], argv)
    client = make_swarm(respond, args)  # Swarm, or DurableSwarm with --durable
    cases = [(q, True) for q in CALLS_WEATHER] + [(q, False) for q in DOES_NOT_CALL_WEATHER]
    failures = 0
    for query, expect_weather in cases:
        problem = check_case(client, query, expect_weather)
        failures += problem is not None
        expected = "get_weather" if expect_weather else "no tool call"
        print(f"{'FAIL' if problem else 'ok  '} {query!r} -> {problem or expected}")
    print(f"{len(cases) - failures}/{len(cases)} cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
