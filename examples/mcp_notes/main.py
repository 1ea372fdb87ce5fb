"""An agent whose tools come from an MCP server: a notebook server started over stdio.

The agent offers the server's tools to the model with their JSON schemas (`MCPTools`); each call
is a tool call like any other, so with `--durable` each is a checkpoint that a crash never repeats,
and the server receives the call's idempotency key (see `server.py`). The notebook is a JSON
file in a temporary directory (or `--notes FILE`).

Run: `python examples/mcp_notes/main.py` (add `--durable` to run it on DurableSwarm). It needs
the `mcp` extra: `pip install 'durable-swarm[mcp]'`.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import has_words, last_user_text, make_swarm, my_tool_result, parse_args

from durable_swarm import Agent, MCPTools
from durable_swarm.testing import ToolCall, calls, text

SERVER = Path(__file__).with_name("server.py")


def notes_agent(notes_file):
    """The agent, with the notebook server's tools (the server writes to `notes_file`)."""
    notebook = MCPTools(
        command=[sys.executable, str(SERVER)], env={"NOTES_FILE": str(notes_file)}, name="notes"
    )
    return Agent(
        name="Notebook",
        instructions="You keep the user's notes with the notebook tools.",
        functions=[notebook],
    )


def offline_model(messages, tools):
    """The scripted model: saves what it is told to remember, reads the notebook when asked."""
    result = my_tool_result(messages, tools)
    if result is not None:
        return text(result)
    said = last_user_text(messages)
    if has_words(said, "what", "list", "show"):
        return calls(ToolCall("list_notes"))
    if has_words(said, "remember", "note"):
        note = said.split(" that ", 1)[-1].rstrip(".")
        return calls(ToolCall("add_note", {"text": note}))
    return text("Tell me what to remember, or ask what I remember.")


def main(argv=None):
    """Save a note through the MCP server, then read the notebook back."""
    args = parse_args(__doc__.splitlines()[0], argv)
    swarm = make_swarm(offline_model, args)
    with tempfile.TemporaryDirectory() as scratch:
        agent = notes_agent(Path(scratch) / "notes.json")
        try:
            for line in [
                "Remember that the staging server moved to Oslo.",
                "What do you remember?",
            ]:
                response = swarm.run(agent=agent, messages=[{"role": "user", "content": line}])
                print(f"User: {line}")
                print(f"{response.agent.name}: {response.messages[-1]['content']}")
        finally:
            agent.functions[0].close()  # stops the server (it would also stop at exit)


if __name__ == "__main__":
    main()
