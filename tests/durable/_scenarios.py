"""Agents, tools and a deterministic model script shared by the test process and its children.

The main scenario is a two-agent conversation with a handoff; each model call and each tool call
is a checkpoint (the handoff is recorded as a step of its own too):

    model:Triage -> note(text="hello")        tool:note appends to context["notes"] in place
    model:Triage -> transfer_to_sales()       tool:transfer_to_sales hands off to Sales
    model:Sales  -> charge(amount=5)          tool:charge sets context["charged"] in place and
                                                         records its idempotency key
    model:Sales  -> FINAL_TEXT

Tools append one line per execution to `<work dir>/<tool>.log` (the work dir comes from the
environment variable `DSWARM_TEST_WORK_DIR`), so a test can count executions across processes.
`DSWARM_TEST_HANG=<point>` makes the process stop at a chosen point ("note", "charge": inside that
tool, after its effect; "between": after the note step is checkpointed and before the next model
call starts), after writing `<work dir>/<point>.reached`, so a test can kill it exactly there.

The model side is `reply(messages, tools)`: a pure function of the request, so a request retried
after a crash gets the same answer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from _support.logs import append_line, read_lines
from durable_swarm import Agent
from durable_swarm.testing import Reply, ToolCall, calls, text

WORK_DIR_ENV = "DSWARM_TEST_WORK_DIR"
HANG_ENV = "DSWARM_TEST_HANG"
USER_MESSAGES = [{"role": "user", "content": "I want to buy the blue one, please."}]
START_CONTEXT = {"customer": "ada"}
FINAL_TEXT = "All done: your order of the blue one is charged and noted, thank you for waiting."
GHOST_TEXT = "Boo, I am back."

# The stages of the main scenario, by how many tool results the request already holds.
STAGE_NOTE, STAGE_TRANSFER, STAGE_CHARGE, STAGE_FINAL = range(4)
MODEL_CALLS = 4
# The model and tool steps of the scenario, in order (kind, name).
MODEL_AND_TOOL_STEPS = [
    ("model", "Triage"),
    ("tool", "note"),
    ("model", "Triage"),
    ("tool", "transfer_to_sales"),
    ("model", "Sales"),
    ("tool", "charge"),
    ("model", "Sales"),
]


def work_dir() -> Path:
    return Path(os.environ[WORK_DIR_ENV])


def record(tool: str, line: str) -> None:
    """Append one line to `<work dir>/<tool>.log` (one line per tool execution)."""
    append_line(work_dir() / f"{tool}.log", line)


def executions(directory: Path, tool: str) -> list[str]:
    """The lines a tool wrote, one per execution, in `directory`."""
    return read_lines(directory / f"{tool}.log")


def hang_if(point: str) -> None:
    """Stop here (for a test to kill the process) when `DSWARM_TEST_HANG` names this point."""
    if os.environ.get(HANG_ENV) == point:
        (work_dir() / f"{point}.reached").write_text(str(os.getpid()))
        time.sleep(600)


def note(text: str, context_variables: dict[str, Any]) -> str:
    """Write a note about the customer."""
    record("note", text)
    context_variables.setdefault("notes", []).append(text)
    hang_if("note")
    return f"noted {text}"


def transfer_to_sales() -> Agent:
    """Hand the customer over to sales."""
    record("transfer_to_sales", "")
    return sales


def charge(amount: int, context_variables: dict[str, Any], idempotency_key: str | None) -> str:
    """Charge the customer."""
    record("charge", str(idempotency_key))  # None when run by the in-memory Swarm
    context_variables["charged"] = amount
    hang_if("charge")
    return f"charged {amount}"


def triage_instructions(context_variables: dict[str, Any]) -> str:
    if context_variables["notes"] and not context_variables["charged"]:
        hang_if("between")  # runs in workflow code: the note step is checkpointed, step 3 not begun
    return f"You are Triage. Help {context_variables['customer']}."


triage = Agent(name="Triage", instructions=triage_instructions, functions=[note, transfer_to_sales])
sales = Agent(name="Sales", instructions="You are Sales. Charge the customer.", functions=[charge])


def stage(messages: list[dict[str, Any]]) -> int:
    """Which model call of the scenario a request is (0-3)."""
    return sum(1 for m in messages if m.get("role") == "tool")


def reply(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Reply:
    """The model of the scenario: a pure function of the request."""
    if messages and "Ghost" in str(messages[0].get("content")):
        return text(GHOST_TEXT)
    return [
        calls(ToolCall("note", {"text": "hello"})),
        calls(ToolCall("transfer_to_sales")),
        calls(ToolCall("charge", {"amount": 5})),
        text(FINAL_TEXT),
    ][min(stage(messages), STAGE_FINAL)]


def define_ghost() -> Agent:
    """An agent defined only when a process asks for it (to test a missing agent at recovery)."""
    return Agent(name="Ghost", instructions="You are Ghost. Say boo.")
