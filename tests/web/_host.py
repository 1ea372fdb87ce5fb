"""The process that runs the agents while the console answers about them (a test child).

    python _host.py DATABASE_URL

Launches a `DurableSwarm` on DATABASE_URL, with the real `openai` client on a fake OpenAI server,
prints `ready`, then reads run-id prefixes on stdin, one per line. For each PREFIX it starts:

* PREFIX-ok: asks the weather; a tool call (get_weather) then a final answer: succeeds;
* PREFIX-ask: asks about an order; waits for input (ask_user), then answers with it;
* PREFIX-pay: asks for a refund; waits for approval of refund(amount=42, order="A-17");
* PREFIX-sub: asks for research; delegates to the Researcher sub-agent (run PREFIX-sub-sub1);

and prints `started PREFIX`. Every user message holds PREFIX, so a search finds one batch. The
process keeps the runs going (answers and approvals resume them here) until stdin closes.
"""

from __future__ import annotations

import sys
from typing import Any

from durable_swarm import Agent, DurableSwarm, ask_user
from durable_swarm.testing import FakeOpenAIServer, ToolCall, calls, text
from durable_swarm.toolkit import tool


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny and 21°C in {city}"


@tool(needs_approval=True)
def refund(amount: int, order: str) -> str:
    """Refund an order (a person must approve it)."""
    return f"Refunded ${amount} on order {order}"


researcher = Agent(name="Researcher", instructions="You research facts.")
support = Agent(name="Support", functions=[get_weather, ask_user, refund, researcher.as_tool()])


def script(messages: list[dict[str, Any]], tools: Any) -> Any:
    """The model: decides from the conversation alone, so replays get the same answers."""
    last = messages[-1]
    said = next((str(m["content"]) for m in messages if m["role"] == "user"), "")
    if last["role"] == "tool":
        if last.get("tool_name") == "ask_user":
            return text(f"Thanks! Order {last['content']} is on its way.")
        return text(f"Done: {last['content']}")
    if said.startswith("Find facts"):
        return text("Octopuses have three hearts.")
    if "weather" in said:
        return calls(ToolCall("get_weather", {"city": "Paris"}))
    if "order" in said:
        return calls(ToolCall("ask_user", {"question": "What is your order number?"}))
    if "refund" in said:
        return calls(ToolCall("refund", {"amount": 42, "order": "A-17"}))
    if "research" in said:
        return calls(ToolCall("delegate_to_researcher", {"task": "Find facts about octopuses"}))
    return text("Hello!")


QUESTIONS = {
    "ok": "What is the weather in Paris?",
    "ask": "Where is my order?",
    "pay": "I want a refund, please.",
    "sub": "Please research octopuses.",
}


def main() -> None:
    with FakeOpenAIServer(script) as server:
        swarm = DurableSwarm(server.client(max_retries=0), database_url=sys.argv[1])
        swarm.launch()
        print("ready", flush=True)
        for line in sys.stdin:
            prefix = line.strip()
            if not prefix:
                continue
            for name, question in QUESTIONS.items():
                content = f"{question} [{prefix}]"
                swarm.start(
                    support, [{"role": "user", "content": content}], run_id=f"{prefix}-{name}"
                )
            print(f"started {prefix}", flush=True)


if __name__ == "__main__":
    main()
