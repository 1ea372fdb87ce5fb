"""Plan-then-execute agents: write a todo list, work through it, revise it, answer.

`create_durable_agent(...)` returns an ordinary `Agent` whose instructions make it work in four
phases: **plan** (write a todo list with `write_todos`), **execute** (work through the items with
its tools, its sub-agents and, when only the person knows, `ask_user`, marking each item with
`update_todo`), **revise** (an item that failed is marked `failed` with the reason, and the plan is
rewritten with `write_todos`), **answer** (a final message without tool calls ends the run).

The plan lives in `context_variables["plan"]` as JSON (a list of `TodoItem` dicts), so in a
`DurableSwarm` it is part of every planning step's checkpoint: `get_run(run_id).context_variables`
and the CLI show it, and its progress, while the run goes on. The agent also sees the current plan
in its system prompt every turn.

Mistakes become observations the model can correct, never exceptions: the turn loop answers an
unknown tool, arguments that are not JSON and a tool that raised with an `"Error: ..."` tool
message, and the planning tools answer a malformed plan, a missing plan or a wrong item number the
same way, saying what to send instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from .human import ask_user as _ask_user
from .tools import is_agent, tool_name
from .types import Agent, Result

__all__ = [
    "PLAN_KEY",
    "TodoItem",
    "create_durable_agent",
    "render_plan",
    "update_todo",
    "write_todos",
]

PLAN_KEY = "plan"
"""The key of `context_variables` that holds the plan: a list of `TodoItem` dicts."""

Status = Literal["pending", "in_progress", "done", "failed"]


class TodoItem(BaseModel):
    """One item of a plan: what to do, how far it is, and what came of it."""

    model_config = ConfigDict(extra="ignore")

    content: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="one concrete step, e.g. 'Find three sources on X'"
    )
    status: Status = Field(
        "pending", description="pending, in_progress (being worked on), done or failed"
    )
    note: str = Field("", description="the outcome, or why the item failed")


_TODOS = TypeAdapter(list[TodoItem])


def render_plan(plan: Sequence[dict[str, Any]]) -> str:
    """The plan as numbered lines, e.g. `2. [done] Find sources — found three`."""
    lines = []
    for number, item in enumerate(plan, 1):
        status = item.get("status", "pending")
        note = f" — {item['note']}" if item.get("note") else ""
        lines.append(f"{number}. [{status}] {item.get('content')}{note}")
    return "\n".join(lines)


def _problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'todos'}: {e['msg']}" for e in error.errors()
    )


def write_todos(
    todos: list[TodoItem], context_variables: dict[str, Any] | None = None
) -> Result | str:
    """Write the plan, or rewrite it: the whole todo list, in order.

    Call it first, before any other tool, and again to revise the plan after an item failed or
    you learned something that changes it. A revision replaces the whole list: keep the items
    already done or failed (with their status and note) and add or change the rest.

    Args:
        todos: every item of the plan in order, each with content, status and an optional note.
    """
    try:
        items = _TODOS.validate_python(
            [t.model_dump() if isinstance(t, TodoItem) else t for t in todos]
        )
    except ValidationError as e:
        return f"Error: the plan was not saved: {_problems(e)}. Send the whole list again."
    if not items:
        return (
            "Error: the plan is empty. Send at least one item, e.g. "
            '[{"content": "Find sources on the topic"}].'
        )
    plan = [item.model_dump() for item in items]
    verb = "Revised" if (context_variables or {}).get(PLAN_KEY) else "Saved"
    size = f"{len(plan)} item{'' if len(plan) == 1 else 's'}"
    text = f"{verb} the plan ({size}):\n{render_plan(plan)}"
    return _saved(plan, text, context_variables)


def update_todo(
    index: int, status: Status, note: str = "", context_variables: dict[str, Any] | None = None
) -> Result | str:
    """Mark one item of the plan: in_progress when you start it, done when it is finished, failed
    (with the reason in `note`) when it cannot be done.

    Args:
        index: the item's number as shown in the plan (1 is the first item).
        status: pending, in_progress, done or failed.
        note: the outcome in a few words, or why the item failed.
    """
    plan = [dict(item) for item in (context_variables or {}).get(PLAN_KEY) or []]
    if not plan:
        return "Error: there is no plan yet. Call write_todos with the whole plan first."
    if not 1 <= index <= len(plan):
        return (
            f"Error: there is no item {index}; the plan has items 1 to {len(plan)}:\n"
            f"{render_plan(plan)}"
        )
    plan[index - 1] = {**plan[index - 1], "status": status, "note": note or plan[index - 1]["note"]}
    text = f"Item {index} is {status}. The plan now:\n{render_plan(plan)}"
    if status == "failed":
        text += "\nRevise the plan with write_todos: keep what is done and find another way."
    return _saved(plan, text, context_variables)


def _saved(plan: list[dict[str, Any]], text: str, context: dict[str, Any] | None) -> Result:
    """The `Result` carrying the plan, also written into the run's live context: a `Result`'s
    updates are merged after the message's last call, and the message's next call (the model
    often marks one item done and starts the next at once) must see this plan."""
    if context is not None:
        context[PLAN_KEY] = plan
    return Result(value=text, context_variables={PLAN_KEY: plan})


_PLAN_PHASE = """\
1. Plan: before anything else, call write_todos with a short todo list (usually 2 to 6 items),
   each item one concrete step towards the user's goal."""
_EXECUTE_PHASE = """\
2. Execute: take the items in order. Call update_todo(index, "in_progress") when you start one,
   and update_todo(index, "done", note) with the outcome in a few words when it is finished.
   Do the work with your tools."""
_DELEGATE = """\
   Hand self-contained work to a sub-agent with its delegate_to_... tool; it does not see this
   conversation, so put every detail it needs in the task. Sub-agents called in the same message
   work in parallel."""
_ASK = """\
   Ask the user with ask_user only for what only they know."""
_REVISE_AND_ANSWER_PHASES = """\
3. Revise: when a tool answers "Error: ...", read the message and fix the call, or mark the item
   update_todo(index, "failed", note) with the reason and call write_todos with a revised plan
   (keep the items already done or failed, change or add the rest). Never pretend a step worked.
4. Answer: when every item is done or failed, write the final answer to the user as a message
   without tool calls: what you found or made, and what could not be done and why."""


class PlanInstructions:
    """The planning agent's system prompt: the given prompt, the workflow, the current plan.

    A callable of the run's `context_variables`, so the model sees the plan's latest state every
    turn. Its `repr` carries a digest of the text, which makes agents that differ only in their
    prompt distinguishable in a run's log (the agent's fingerprint)."""

    def __init__(self, system_prompt: str, *, delegates: bool, asks: bool) -> None:
        steps = [
            _PLAN_PHASE,
            _EXECUTE_PHASE,
            *([_DELEGATE] if delegates else []),
            *([_ASK] if asks else []),
            _REVISE_AND_ANSWER_PHASES,
        ]
        workflow = "Work in four phases:\n" + "\n".join(steps)
        self.text = "\n\n".join(p for p in (system_prompt.strip(), workflow) if p)

    def __call__(self, context_variables: dict[str, Any]) -> str:
        plan = context_variables.get(PLAN_KEY)
        state = render_plan(plan) if plan else "No plan yet: call write_todos first."
        return f"{self.text}\n\nThe plan so far:\n{state}"

    def __repr__(self) -> str:
        digest = hashlib.sha256(self.text.encode()).hexdigest()[:12]
        return f"PlanInstructions({digest})"


_MANAGED = {"name", "model", "instructions", "functions", "skills"}


def create_durable_agent(
    model: str = "gpt-4o",
    tools: Sequence[Callable[..., Any]] = (),
    skills: Sequence[Any] = (),
    sub_agents: Sequence[Any] = (),
    system_prompt: str = "",
    *,
    name: str = "DurableAgent",
    ask_user: bool = True,
    **agent_options: Any,
) -> Agent:
    """A plan-then-execute `Agent`: it plans with a todo list, executes, revises, and answers.

    Run it like any agent, with `Swarm` or (durably) `DurableSwarm`; the plan and its progress
    are in `context_variables["plan"]` (see the module docstring).

    Args:
        model: the model name every request of this agent uses.
        tools: the agent's tools (plain functions or `@tool` functions).
        skills: `Skill`s: their tools are added and their instructions appended to the prompt.
        sub_agents: agents to delegate to (each offered as `delegate_to_<name>(task)`, see
            `Agent.as_tool`), or tools made with `agent.as_tool(name, description)`. In a
            `DurableSwarm` each delegation is a child run; several in one message run in parallel.
        system_prompt: what the agent is for; the planning workflow is added after it.
        name: the agent's name (unique per app: durable runs find agents by name).
        ask_user: offer the `ask_user` tool, so the agent can ask the person (a durable wait in a
            `DurableSwarm`).
        agent_options: other `Agent` fields, such as `handoffs` or `parallel_tool_calls`.

    Raises:
        TypeError: an unknown option, or a sub-agent that is neither an agent nor a tool.
        ValueError: two tools share a name.
    """
    unknown = sorted(set(agent_options) - (set(Agent.model_fields) - _MANAGED))
    if unknown:
        raise TypeError(
            f"create_durable_agent() got unknown option(s) {', '.join(unknown)}; it accepts "
            "the Agent fields other than name, model, instructions, functions and skills."
        )
    delegations = []
    for sub in sub_agents:
        if is_agent(sub):
            delegations.append(sub.as_tool())
        elif callable(sub):
            delegations.append(sub)
        else:
            raise TypeError(
                f"create_durable_agent(): sub_agents must be agents or tools made with "
                f"Agent.as_tool(), got {type(sub).__name__} {sub!r}"
            )
    functions = [
        write_todos,
        update_todo,
        *tools,
        *delegations,
        *([_ask_user] if ask_user else []),
    ]
    seen: dict[str, Callable[..., Any]] = {}
    for func in functions:
        other = seen.setdefault(tool_name(func), func)
        if other is not func:
            raise ValueError(
                f"create_durable_agent(): two tools are named {tool_name(func)!r}; tool names "
                "must be unique per agent (rename one with @tool(name=...) or "
                "agent.as_tool(name=...))."
            )
    return Agent(
        name=name,
        model=model,
        instructions=PlanInstructions(system_prompt, delegates=bool(delegations), asks=ask_user),
        functions=functions,
        skills=list(skills),
        **agent_options,
    )
