"""No user value can be mistaken for an internal marker: a context value shaped like a stored
error (`{"__error__": ...}`), given as input or set by a tool, comes back exactly as it was, in
the result, in the log, and when the run is replayed from its log (a fork). SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

from durable_swarm import Agent
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "hi"}]
LOOKALIKE = {
    "__error__": {"type": "durable_swarm.errors.RunNotFoundError", "fields": {"run_id": "x"}},
}
DEEPER = {"___error__": 1, "nested": [{"__error__": None}, {"____error__": "four"}]}


def test_values_shaped_like_markers_come_back_exactly(durable_swarm_factory, run_id):
    def keep(context_variables: dict) -> str:
        """Keep a look-alike."""
        context_variables["from_tool"] = dict(LOOKALIKE)
        return "kept"

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        return text("done") if messages[-1]["role"] == "tool" else calls(ToolCall("keep"))

    swarm = durable_swarm_factory(ScriptedClient(script))
    agent = Agent(name="Markers", functions=[keep])
    given = {"input": LOOKALIKE, "deeper": DEEPER}
    expected = {**given, "from_tool": LOOKALIKE}

    response = swarm.run(agent, USER, given, run_id=run_id)

    assert response.context_variables == expected
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert info.context_variables == expected
    tool_step = next(s for s in info.steps if s.kind == "tool")
    assert tool_step.output["context_changes"] == {"set": {"from_tool": LOOKALIKE}}
    # Replayed from the log: the copied tool step's output is read back, not run again.
    fork = swarm.fork(run_id, tool_step.step + 1).result()
    assert fork.context_variables == expected
    assert fork.messages[-1]["content"] == "done"
