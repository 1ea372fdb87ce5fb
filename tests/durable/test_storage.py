"""What a tool step stores: the changes the tool made to the context, not the whole context, so a
long run's log grows linearly with its length; replay and `get_run` rebuild the context."""

from __future__ import annotations

import json
from typing import Any

from durable_swarm import Agent, Result
from durable_swarm.durable._log import context_after, context_changes, context_snapshot
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

ENTRY = "n" * 100


def note(i: int) -> Result:
    """Take note number i (one more context variable)."""
    return Result(value=f"noted {i}", context_variables={f"note{i}": ENTRY})


NOTES = Agent(name="storage-notes", instructions="Note.", functions=[note])


def notes_script(turns: int) -> Any:
    def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
        done = sum(1 for m in messages if m.get("role") == "tool")
        return calls(ToolCall("note", {"i": done})) if done < turns else text("All noted.")

    return reply


def test_each_tool_step_stores_only_what_it_changed(durable_swarm_factory, run_id):
    turns = 30
    swarm = durable_swarm_factory(ScriptedClient(notes_script(turns)))

    response = swarm.run(NOTES, [{"role": "user", "content": "go"}], run_id=run_id)

    expected = {f"note{i}": ENTRY for i in range(turns)}
    assert response.context_variables == expected
    info = swarm.get_run(run_id)
    assert info.context_variables == expected
    tool_steps = [s for s in info.steps if s.kind == "tool"]
    assert len(tool_steps) == turns
    for i, step in enumerate(tool_steps):
        assert step.output["updates"] == {f"note{i}": ENTRY}  # the Result's; no other change
        assert "context_changes" not in step.output
        # the same size at the first and the last step: the log grows linearly
        assert len(json.dumps(step.output)) < 2 * len(ENTRY) + 200


def rename(context_variables: dict[str, Any]) -> str:
    """Move `a` to `b` in place."""
    context_variables["b"] = context_variables.pop("a") + 1
    return "renamed"


def look() -> str:
    """Change nothing."""
    return "looked"


EDITOR = Agent(name="storage-editor", instructions="Edit.", functions=[rename, look])
EDIT_SCRIPT = [
    calls(ToolCall("rename", {})),
    calls(ToolCall("look", {})),
    text("edited"),
]


def test_replay_rebuilds_the_context_from_the_stored_changes(durable_swarm_factory, run_id):
    swarm = durable_swarm_factory(ScriptedClient(list(EDIT_SCRIPT)))
    response = swarm.run(
        EDITOR, [{"role": "user", "content": "go"}], {"a": 1, "keep": [1]}, run_id=run_id
    )
    assert response.context_variables == {"keep": [1], "b": 2}
    steps = swarm.get_run(run_id).steps
    rename_step, look_step = (s for s in steps if s.kind == "tool")
    assert rename_step.output["context_changes"] == {"set": {"b": 2}, "removed": ["a"]}
    assert "context_changes" not in look_step.output

    # a fork copies the tool steps and replays them (the tools do not run again): the context
    # it rebuilds from their changes is the one the tools made
    last_model = max(s.step for s in steps if s.kind == "model")
    swarm = durable_swarm_factory(ScriptedClient([text("edited again")]))
    forked = swarm.fork(run_id, last_model).result()
    assert forked.context_variables == {"keep": [1], "b": 2}
    assert forked.messages[-1]["content"] == "edited again"


def test_context_changes_round_trip_and_old_logs_still_read():
    before = {"a": 1, "nested": {"x": [1]}, "gone": True}
    snapshot = context_snapshot(before)
    after = {"a": 1, "nested": {"x": [1, 2]}, "new": "v"}
    changes = context_changes(snapshot, after)
    assert changes == {"set": {"nested": {"x": [1, 2]}, "new": "v"}, "removed": ["gone"]}
    assert context_after(dict(before), {"context_changes": changes}) == after
    assert context_changes(context_snapshot(after), after) is None
    # a log written before changes were stored holds the whole context after the step
    assert context_after({"a": 1}, {"context_variables": {"b": 2}}) == {"b": 2}
