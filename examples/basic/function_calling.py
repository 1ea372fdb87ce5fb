"""Function calling: the agent calls a Python function and answers from its result.

Run: `python examples/basic/function_calling.py` (add `--durable` to run it on DurableSwarm).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import has_words, last_user_text, make_swarm, my_tool_result, parse_args, place_in

from durable_swarm import Agent
from durable_swarm.testing import ToolCall, calls, text


def get_weather(location) -> str:
    """Get the current weather in a location."""
    return json.dumps({"location": location, "temp": 67, "unit": "F"})


agent = Agent(
    name="Agent",
    instructions="You are a helpful agent.",
    functions=[get_weather],
)


def offline_model(messages, tools):
    """The scripted model: calls get_weather for weather questions, then reads its result."""
    result = my_tool_result(messages, tools)
    if result is not None:
        weather = json.loads(result)
        return text(f"It's {weather['temp']}°{weather['unit']} in {weather['location']} right now.")
    said = last_user_text(messages)
    if has_words(said, "weather", "temperature", "warm", "cold") and place_in(said):
        return calls(ToolCall("get_weather", {"location": place_in(said)}))
    return text("I can look up the weather anywhere: just ask.")


def main(argv=None):
    """Ask for the weather and print the answer."""
    args = parse_args(__doc__.splitlines()[0], argv)
    client = make_swarm(offline_model, args)
    messages = [{"role": "user", "content": "What's the weather in NYC?"}]
    response = client.run(agent=agent, messages=messages)
    print(response.messages[-1]["content"])


if __name__ == "__main__":
    main()
