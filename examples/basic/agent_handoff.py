"""Handoff: an English-speaking agent passes a Spanish-speaking user to a Spanish agent.

A function that returns an Agent is a handoff: the run goes on with that agent.
Run: `python examples/basic/agent_handoff.py` (add `--durable` to run it on DurableSwarm).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/, for `_common`

from _common import has_words, last_user_text, make_swarm, parse_args, tool_names

from durable_swarm import Agent
from durable_swarm.testing import ToolCall, calls, text

english_agent = Agent(
    name="English Agent",
    instructions="You speak English only. Hand Spanish speakers over to the Spanish agent.",
)

spanish_agent = Agent(
    name="Spanish Agent",
    instructions="Hablas solo español. You speak Spanish only.",
)


def transfer_to_spanish_agent():
    """Hand the conversation to the Spanish agent as soon as the user writes in Spanish."""
    return spanish_agent


english_agent.functions.append(transfer_to_spanish_agent)


def looks_spanish(said: str) -> bool:
    """A rough guess, good enough for the offline model."""
    return "¿" in said or "¡" in said or has_words(said, "hola", "gracias", "estás", "como")


def offline_model(messages, tools):
    """The scripted model: the English agent hands Spanish over; the Spanish agent answers."""
    said = last_user_text(messages)
    if "transfer_to_spanish_agent" in tool_names(tools) and looks_spanish(said):
        return calls(ToolCall("transfer_to_spanish_agent"))
    if "español" in messages[0]["content"]:
        return text("¡Hola! Estoy muy bien, gracias. ¿En qué puedo ayudarte hoy?")
    return text("Hello! I'm doing well, thank you. How can I help you today?")


def main(argv=None):
    """Greet the English agent in Spanish and print who answered, and how."""
    args = parse_args(__doc__.splitlines()[0], argv)
    client = make_swarm(offline_model, args)
    messages = [{"role": "user", "content": "Hola. ¿Cómo estás?"}]
    response = client.run(agent=english_agent, messages=messages)
    print(f"{response.agent.name}: {response.messages[-1]['content']}")


if __name__ == "__main__":
    main()
