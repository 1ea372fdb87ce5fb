"""The app a test worker serves: `python _serve.py CONFIG` runs `run_worker("_app:swarm", ...)`.

Agents `Helper`, `Closer` and `Asker` (a sub-agent of `Helper` that asks the person); the model
is the test's FakeOpenAIServer (`DSW_FAKE_URL`). Tools append one line per execution to
`<DSW_WORK_DIR>/<tool>.log`, and importing this module appends this process's pid to
`<DSW_WORK_DIR>/imported.log`, so a test can tell which processes ran or even imported any tool
code (a thin client must not).
"""

from __future__ import annotations

import os
from pathlib import Path

import openai

from durable_swarm import Agent, DurableSwarm
from durable_swarm.human import ask_user
from durable_swarm.toolkit import tool

WORK_DIR = Path(os.environ["DSW_WORK_DIR"])


def _log(name: str, line: str) -> None:
    with open(WORK_DIR / f"{name}.log", "a") as f:
        f.write(line + "\n")


_log("imported", str(os.getpid()))


def record(tag: str) -> str:
    """Record a piece of work."""
    _log("record", f"{tag} {os.getpid()}")
    return f"recorded {tag}"


@tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund an amount of dollars (a person approves it first)."""
    _log("refund", str(amount))
    return f"refunded {amount}"


def transfer_to_closer() -> Agent:
    """Hand the conversation to the closer."""
    return closer


asker = Agent(name="Asker", instructions="You ask.", functions=[ask_user])
helper = Agent(
    name="Helper",
    instructions="You help.",
    functions=[record, refund, ask_user, transfer_to_closer, asker.as_tool()],
)
closer = Agent(name="Closer", instructions="You close.")

swarm = DurableSwarm(
    client=openai.OpenAI(base_url=os.environ["DSW_FAKE_URL"], api_key="fake", max_retries=0)
)
