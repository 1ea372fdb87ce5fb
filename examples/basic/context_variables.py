"""Context variables: instructions and functions read (and may update) `context_variables`.

The instructions greet the user by the name in the context; a function that declares a
`context_variables` parameter receives the live dict (and that parameter is hidden from the model).
Run: `python examples/basic/context_variables.py` (add `--durable` to run it on DurableSwarm).
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import has_words, last_user_text, make_swarm, my_tool_result, parse_args

from durable_swarm import Agent
from durable_swarm.testing import ToolCall, calls, text


def instructions(context_variables):
    """The system prompt, built from the context for every model call."""
    name = context_variables.get("name", "User")
    return f"You are a helpful agent. Greet the user by their name ({name})."


def print_account_details(context_variables: dict):
    """Print the user's account details."""
    user_id = context_variables.get("user_id")
    name = context_variables.get("name")
    print(f"Account Details: {name} {user_id}")
    return "Success"


agent = Agent(
    name="Agent",
    instructions=instructions,
    functions=[print_account_details],
)


def offline_model(messages, tools):
    """The scripted model: greets by the name in its instructions, prints details on request."""
    if my_tool_result(messages, tools) is not None:
        return text("Done: your account details are printed above.")
    if has_words(last_user_text(messages), "account", "details"):
        return calls(ToolCall("print_account_details"))
    name = re.search(r"their name \((.*)\)", messages[0]["content"])
    return text(f"Hello {name.group(1) if name else 'there'}! How can I help you today?")


def main(argv=None):
    """Two runs with the same context: a greeting, then a function that reads the context."""
    args = parse_args(__doc__.splitlines()[0], argv)
    client = make_swarm(offline_model, args)
    context_variables = {"name": "James", "user_id": 123}

    response = client.run(
        messages=[{"role": "user", "content": "Hi!"}],
        agent=agent,
        context_variables=context_variables,
    )
    print(response.messages[-1]["content"])

    response = client.run(
        messages=[{"role": "user", "content": "Print my account details!"}],
        agent=agent,
        context_variables=context_variables,
    )
    print(response.messages[-1]["content"])


if __name__ == "__main__":
    main()
