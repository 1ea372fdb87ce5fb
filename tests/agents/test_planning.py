"""Plan-then-execute agents (`durable_swarm.planning`): the planning tools, the agent they make,
and a whole run with the scripted model, in memory and durably (SQLite and PostgreSQL).

The scripted run: plan three items; ask the person who the report is for; look the topic up in
the archive, which fails (the tool raises); the model reads the error, marks the item failed and
revises the plan (look it up in the encyclopedia instead); look it up there; have a writer
sub-agent write the report; answer with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from _support.logs import read_lines
from _support.wait import wait_for
from durable_swarm import Agent, Result, Skill, Swarm
from durable_swarm.loop import RunState, build_request
from durable_swarm.planning import (
    PLAN_KEY,
    TodoItem,
    create_durable_agent,
    render_plan,
    update_todo,
    write_todos,
)
from durable_swarm.testing import Reply, ScriptedClient, ToolCall, calls, text
from durable_swarm.tools import model_tool_schema

from . import _fanout

TASK = [{"role": "user", "content": "Write a short report on water on the Moon."}]
QUESTION = "Who is the report for?"
AUDIENCE = "the science club"
FACTS = "The Moon has water ice in its shadowed polar craters."
ARCHIVE_ERROR = "Error: tool lookup raised ConnectionError: the archive is offline"
FIRST_PLAN = [
    "Ask who the report is for",
    "Look the topic up in the archive",
    "Have the report written",
]
REVISED_PLAN = [
    FIRST_PLAN[0],
    FIRST_PLAN[1],
    "Look the topic up in the encyclopedia",
    "Have the report written",
]


def lookup(source: str) -> str:
    """Look the topic up in a source.

    Args:
        source: "archive" or "encyclopedia".
    """
    with open(Path(os.environ[_fanout.WORK_DIR_ENV]) / "lookup.log", "a") as f:
        f.write(source + "\n")
    if source == "archive":
        raise ConnectionError("the archive is offline")
    return FACTS


writer = Agent(name="PlanWriter", instructions="You are PlanWriter. Write reports.")
planner = create_durable_agent(
    model="test-model",
    tools=[lookup],
    sub_agents=[writer],
    system_prompt="You are Planner. You write short reports.",
    name="Planner",
)


def todo(index: int, status: str, note: str = "") -> Reply:
    return calls(ToolCall("update_todo", {"index": index, "status": status, "note": note}))


def planner_model(messages: list[dict[str, Any]], tools: Any) -> Reply:
    """The model of the scenario, one tool call per message: a function of the request."""
    system = str(messages[0]["content"])
    if system.startswith("You are PlanWriter"):
        return text(f"REPORT: {messages[-1]['content']}")
    results = [str(m["content"]) for m in messages if m.get("role") == "tool"]
    last = results[-1] if results else ""
    step = len(results)
    if step == 0:
        return calls(ToolCall("write_todos", {"todos": [{"content": c} for c in FIRST_PLAN]}))
    if step == 1:
        return todo(1, "in_progress")
    if step == 2:
        return calls(ToolCall("ask_user", {"question": QUESTION}))
    if step == 3:
        return todo(1, "done", f"for {last}")
    if step == 4:
        return todo(2, "in_progress")
    if step == 5:
        return calls(ToolCall("lookup", {"source": "archive"}))
    if step == 6:  # the model reads the tool's result: an error, so the item failed
        if not last.startswith("Error:"):
            return text("The archive worked.")
        return todo(2, "failed", last)
    if step == 7:
        plan = [
            {"content": FIRST_PLAN[0], "status": "done", "note": f"for {results[2]}"},
            {"content": FIRST_PLAN[1], "status": "failed", "note": results[5]},
            {"content": REVISED_PLAN[2]},
            {"content": REVISED_PLAN[3]},
        ]
        return calls(ToolCall("write_todos", {"todos": plan}))
    if step == 8:
        return calls(ToolCall("lookup", {"source": "encyclopedia"}))
    if step == 9:
        return todo(3, "done", last)
    if step == 10:
        task = f"Write two lines for {results[2]} from: {results[8]}"
        return calls(ToolCall("delegate_to_planwriter", {"task": task}))
    if step == 11:
        return todo(4, "done")
    return text(results[10])


FINAL_ANSWER = f"REPORT: Write two lines for {AUDIENCE} from: {FACTS}"


def statuses(plan: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["content"], item["status"]) for item in plan]


def lookups(work_dir: Path) -> list[str]:
    return read_lines(work_dir / "lookup.log")


def assert_finished_as_planned(messages: list[dict[str, Any]], context: dict[str, Any]) -> None:
    assert messages[-1]["content"] == FINAL_ANSWER
    tool_results = [m["content"] for m in messages if m.get("role") == "tool"]
    assert ARCHIVE_ERROR in tool_results  # the failing tool became an observation
    assert tool_results[2] == AUDIENCE  # the person's answer
    plan = context[PLAN_KEY]
    assert statuses(plan) == list(
        zip(REVISED_PLAN, ["done", "failed", "done", "done"], strict=True)
    )
    assert plan[1]["note"] == ARCHIVE_ERROR
    assert plan[0]["note"] == f"for {AUDIENCE}"


# --- the planning tools --------------------------------------------------------------------


def test_write_todos_saves_the_plan_in_context_variables():
    result = write_todos([TodoItem(content="a"), {"content": " b ", "status": "done"}], {})

    assert isinstance(result, Result)
    assert result.context_variables == {
        PLAN_KEY: [
            {"content": "a", "status": "pending", "note": ""},
            {"content": "b", "status": "done", "note": ""},
        ]
    }
    assert result.value == "Saved the plan (2 items):\n1. [pending] a\n2. [done] b"
    json.dumps(result.context_variables)  # JSON, so it is stored with the step


def test_write_todos_again_revises():
    first = write_todos([{"content": "a"}], {})
    assert isinstance(first, Result)

    again = write_todos([{"content": "b"}], dict(first.context_variables))

    assert isinstance(again, Result)
    assert again.value.startswith("Revised the plan (1 item)")
    assert again.context_variables[PLAN_KEY][0]["content"] == "b"


@pytest.mark.parametrize(
    ("todos", "message"),
    [
        ([], "Error: the plan is empty. Send at least one item"),
        ([{"content": "  "}], "Error: the plan was not saved: 0.content: String should have"),
        ([{"content": "a", "status": "started"}], "0.status: Input should be 'pending'"),
        ([{"status": "done"}], "0.content: Field required"),
    ],
)
def test_write_todos_refuses_a_malformed_plan_with_a_clear_message(todos, message):
    answer = write_todos(todos, {})

    assert isinstance(answer, str)
    assert message in answer
    assert answer.startswith("Error:")


def test_update_todo_marks_an_item():
    context = {PLAN_KEY: [{"content": "a", "status": "pending", "note": ""}] * 2}

    result = update_todo(2, "failed", "no access", context)

    assert isinstance(result, Result)
    assert statuses(result.context_variables[PLAN_KEY]) == [("a", "pending"), ("a", "failed")]
    assert result.context_variables[PLAN_KEY][1]["note"] == "no access"
    assert "Revise the plan with write_todos" in result.value
    # the live context too: the message's next call sees the plan before the Result is merged
    assert context[PLAN_KEY] == result.context_variables[PLAN_KEY]


def test_two_updates_of_the_plan_in_one_message_both_hold(make_swarm):
    """The model marks item 1 done and starts item 2 in one message: the second call sees the
    first's plan (a Result's updates are merged only after the message's last call)."""

    def model(messages: list[dict[str, Any]], tools: Any) -> Reply:
        answered = sum(1 for m in messages if m.get("role") == "tool")
        if answered == 0:
            return calls(ToolCall("write_todos", {"todos": [{"content": "a"}, {"content": "b"}]}))
        if answered == 1:
            return calls(
                ToolCall("update_todo", {"index": 1, "status": "done"}),
                ToolCall("update_todo", {"index": 2, "status": "in_progress"}),
            )
        return text("ok")

    agent = Agent(name="planner-two-updates", functions=[write_todos, update_todo])
    response = make_swarm(ScriptedClient(model)).run(agent, [{"role": "user", "content": "go"}])

    plan = response.context_variables[PLAN_KEY]
    assert statuses(plan) == [("a", "done"), ("b", "in_progress")]


def test_update_todo_without_a_plan_or_out_of_range_says_what_to_do():
    assert update_todo(1, "done", context_variables={}) == (
        "Error: there is no plan yet. Call write_todos with the whole plan first."
    )
    context = {PLAN_KEY: [{"content": "a", "status": "pending", "note": ""}]}
    answer = update_todo(3, "done", context_variables=context)
    assert answer == "Error: there is no item 3; the plan has items 1 to 1:\n1. [pending] a"


def test_planning_tool_schemas_hide_the_context():
    todos = model_tool_schema(write_todos)["function"]["parameters"]
    update = model_tool_schema(update_todo)["function"]["parameters"]

    assert list(todos["properties"]) == ["todos"]
    item = todos["properties"]["todos"]["items"]
    assert item["required"] == ["content"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "done", "failed"]
    assert list(update["properties"]) == ["index", "status", "note"]
    assert update["required"] == ["index", "status"]


# --- the agent -----------------------------------------------------------------------------


def test_create_durable_agent_composes_tools_sub_agents_and_skills():
    def cite(source: str) -> str:
        """Cite a source."""
        return source

    style = Skill("style", "Write plainly.", [cite])
    helper = Agent(name="Helper")
    agent = create_durable_agent(
        "gpt-4o-mini",
        tools=[lookup],
        skills=[style],
        sub_agents=[writer, helper.as_tool(name="ask_helper")],
        system_prompt="You are Planner.",
        name="Composed",
        parallel_tool_calls=False,
    )

    request = build_request(RunState(agent, [], {}), None, False)
    names = [t["function"]["name"] for t in request["tools"]]
    assert names == [
        "write_todos",
        "update_todo",
        "lookup",
        "delegate_to_planwriter",
        "ask_helper",
        "ask_user",
        "cite",
    ]
    system = request["messages"][0]["content"]
    assert system.startswith("You are Planner.\n\nWork in four phases:\n1. Plan:")
    assert "4. Answer:" in system
    assert "delegate_to_..." in system and "ask_user" in system
    assert "No plan yet: call write_todos first." in system
    assert system.endswith("## style\nWrite plainly.")
    assert (agent.model, agent.parallel_tool_calls) == ("gpt-4o-mini", False)


def test_the_system_prompt_shows_the_plan_as_it_goes():
    plan = [
        {"content": "a", "status": "done", "note": "ok"},
        {"content": "b", "status": "in_progress", "note": ""},
    ]

    system = build_request(RunState(planner, [], {PLAN_KEY: plan}), None, False)["messages"][0]

    assert system["content"].endswith(f"The plan so far:\n{render_plan(plan)}")
    assert render_plan(plan) == "1. [done] a — ok\n2. [in_progress] b"


def test_create_durable_agent_without_ask_user_or_sub_agents():
    agent = create_durable_agent(name="Quiet", ask_user=False)

    assert [f.__name__ for f in agent.functions] == ["write_todos", "update_todo"]
    text_ = agent.instructions({})
    assert "ask_user" not in text_ and "delegate_to_" not in text_


def test_create_durable_agent_refuses_clashing_tool_names_and_unknown_options():
    def write_todos(todos: list) -> str:
        """A clash."""
        return ""

    with pytest.raises(ValueError, match="two tools are named 'write_todos'"):
        create_durable_agent(tools=[write_todos])
    with pytest.raises(TypeError, match="unknown option"):
        create_durable_agent(instructions="no")
    with pytest.raises(TypeError, match="sub_agents must be agents"):
        create_durable_agent(sub_agents=["Writer"])


def test_agents_differing_only_in_their_prompt_have_different_fingerprints():
    from durable_swarm._registry import fingerprint

    one = create_durable_agent(name="Twin", system_prompt="one")
    two = create_durable_agent(name="Twin", system_prompt="two")

    assert fingerprint(one) != fingerprint(two)


# --- whole runs ----------------------------------------------------------------------------


def test_malformed_planning_calls_are_observations_the_model_corrects():
    def model(messages: list[dict[str, Any]], tools: Any) -> Reply:
        results = [m["content"] for m in messages if m.get("role") == "tool"]
        if not results:
            return calls(ToolCall("write_todos", '{"todos": [{"content": "a"'))  # cut short
        if len(results) == 1:
            return calls(ToolCall("write_todos", {"todos": [{"content": "a", "status": "new"}]}))
        if len(results) == 2:
            return calls(ToolCall("update_todo", {"index": 2, "status": "done"}))
        if len(results) == 3:
            return calls(ToolCall("write_todos", {"todos": [{"content": "a"}]}))
        if len(results) == 4:
            return todo(1, "done")
        return text("done")

    agent = create_durable_agent(name="Sloppy", ask_user=False)
    response = Swarm(ScriptedClient(model)).run(agent, TASK)

    results = [m["content"] for m in response.messages if m.get("role") == "tool"]
    assert results[0].startswith("Error: invalid arguments for tool write_todos: the arguments")
    assert "not valid JSON" in results[0]
    assert results[1].startswith("Error: invalid arguments for tool write_todos: todos.0.status")
    assert results[2] == "Error: there is no plan yet. Call write_todos with the whole plan first."
    assert results[3].startswith("Saved the plan")
    assert statuses(response.context_variables[PLAN_KEY]) == [("a", "done")]
    assert response.messages[-1]["content"] == "done"


def test_plan_then_execute_in_memory(work_dir):
    client = ScriptedClient(planner_model)
    asked: list[str] = []

    def answer(prompt: str) -> str:
        asked.append(prompt)
        return AUDIENCE

    response = Swarm(client, input_fn=answer).run(planner, TASK)

    assert_finished_as_planned(response.messages, response.context_variables)
    assert asked == [QUESTION]
    assert lookups(work_dir) == ["archive", "encyclopedia"]
    # the model saw the plan's state in its system prompt as it went
    assert (
        "2. [failed] Look the topic up in the archive"
        in (client.requests[-1]["messages"][0]["content"])
    )


def test_plan_then_execute_durably(durable_swarm_factory, run_id, work_dir):
    client = ScriptedClient(planner_model)
    swarm = durable_swarm_factory(client)

    handle = swarm.start(planner, TASK, run_id=run_id)
    waiting = wait_for(
        lambda: (info := swarm.get_run(run_id)).status == "waiting_for_input" and info,
        "the run to ask the person",
        timeout=60,
    )

    # mid-run, the plan and its progress are in the run's context
    assert waiting.waiting_for is not None and waiting.waiting_for["prompt"] == QUESTION
    assert statuses(waiting.context_variables[PLAN_KEY]) == list(
        zip(FIRST_PLAN, ["in_progress", "pending", "pending"], strict=True)
    )
    swarm.send_input(run_id, AUDIENCE)
    response = handle.result()

    assert_finished_as_planned(response.messages, response.context_variables)
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert info.context_variables == response.context_variables
    assert lookups(work_dir) == ["archive", "encyclopedia"]  # each tool step ran once
    # the tool steps' outputs show the plan as it went: item 2 started, failed, then revised
    snapshots = [
        s.output["context_changes"]["set"][PLAN_KEY]
        for s in info.steps
        if s.kind == "tool" and PLAN_KEY in s.output.get("context_changes", {}).get("set", {})
    ]
    sizes = [len(p) for p in snapshots]
    assert sizes[0] == 3 and sizes[-1] == 4 and sizes == sorted(sizes)
    item_two = [p[1]["status"] for p in snapshots]
    assert list(dict.fromkeys(item_two)) == ["pending", "in_progress", "failed"]
    failed_step = next(
        s
        for s in info.steps
        if s.kind == "tool" and s.name == "lookup" and "Error" in s.output["message"]["content"]
    )
    assert failed_step.error is None  # an observation for the model, not a failed step
    # the writer ran as a child run
    assert info.children == [f"{run_id}-sub1"]
    child = swarm.get_run(info.children[0])
    assert (child.agent, child.parent, child.status) == ("PlanWriter", run_id, "succeeded")
    assert child.messages[-1]["content"] == FINAL_ANSWER
