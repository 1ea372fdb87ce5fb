"""The smallest Swarm program: one agent, one message, print the answer.

Run: `python examples/basic/bare_minimum.py` (add `--durable` to run it on DurableSwarm).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import last_user_text, make_swarm, parse_args

from durable_swarm import Agent
from durable_swarm.testing import text

agent = Agent(
    name="Agent",
    instructions="You are a helpful agent.",
)


def offline_model(messages, tools):
    """The scripted model: a friendly greeting, or a plain answer to anything else."""
    said = last_user_text(messages).strip().rstrip("!.?").lower()
    if said in ("hi", "hello", "hey", "hola"):
        return text("Hello! How can I assist you today?")
    return text(
        f"You asked: {last_user_text(messages)!r}. I am a small offline model, but happy to help!"
    )


def main(argv=None):
    """Say hi to the agent and print its answer."""
    args = parse_args(__doc__.splitlines()[0], argv)
    client = make_swarm(offline_model, args)
    messages = [{"role": "user", "content": "Hi!"}]
    response = client.run(agent=agent, messages=messages)
    print(response.messages[-1]["content"])


if __name__ == "__main__":
    main()
