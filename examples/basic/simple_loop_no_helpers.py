"""A chat loop written by hand, without `run_demo_loop`: the conversation and agent carry over.

Run: `python examples/basic/simple_loop_no_helpers.py` and type; end with Ctrl-D.
Non-interactively: `--say "My name is Ada" --say "What is my name?"`, or pipe lines on stdin.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import input_lines, last_user_text, make_swarm, parse_args

from durable_swarm import Agent
from durable_swarm.testing import text

my_agent = Agent(
    name="Agent",
    instructions="You are a helpful agent.",
)


def offline_model(messages, tools):
    """The scripted model: it remembers a name said earlier, to show history carries over."""
    said = last_user_text(messages)
    told = re.search(r"my name is (\w+)", said, re.IGNORECASE)
    if told:
        return text(f"Nice to meet you, {told.group(1)}!")
    if re.search(r"what(?:'s| is) my name", said, re.IGNORECASE):
        for message in messages:
            earlier = re.search(r"my name is (\w+)", str(message.get("content")), re.IGNORECASE)
            if message.get("role") == "user" and earlier:
                return text(f"Your name is {earlier.group(1)}.")
        return text("You haven't told me your name yet.")
    return text(f"You said: {said}")


def pretty_print_messages(messages):
    """Print each message that has text as `<sender>: <content>`."""
    for message in messages:
        if message.get("content") is None or message.get("role") != "assistant":
            continue
        print(f"{message['sender']}: {message['content']}")


def main(argv=None):
    """Read a line, run the agent on the whole conversation, print the new messages; repeat."""
    args = parse_args(__doc__.splitlines()[0], argv, interactive=True)
    client = make_swarm(offline_model, args)
    read = input_lines(args) or input
    messages = []
    agent = my_agent
    while True:
        try:
            user_input = read("> ")
        except (EOFError, KeyboardInterrupt):
            print()
            break
        messages.append({"role": "user", "content": user_input})
        response = client.run(agent=agent, messages=messages)
        messages.extend(response.messages)
        agent = response.agent
        pretty_print_messages(response.messages)


if __name__ == "__main__":
    main()
