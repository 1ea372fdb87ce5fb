"""The run log's versions: payloads carry the schema version this library writes, a newer one is
refused with an error that says to upgrade, and a run logged in schema 1 (a tool step stored the
whole context after the tool) still reads and continues. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dbos._dbos import _get_dbos_instance

from durable_swarm import Agent, Result
from durable_swarm.durable._log import SCHEMA_VERSION, JsonSerializer, context_after
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "go"}]


def note() -> Result:
    """Take a note."""
    return Result(value="noted", context_variables={"note": "from the tool"})


NOTER = Agent(name="log-format-noter", instructions="Note.", functions=[note])

# A tool step's output as the schema-1 library stored it: the whole context after the tool and
# every field, empty ones included.
SCHEMA_1_TOOL_STEP = json.dumps(
    {
        "schema_version": 1,
        "value": {
            "message": {"role": "tool", "tool_call_id": "call_1", "content": "noted"},
            "context_variables": {"kept": 1, "note": "as schema 1 stored it"},
            "handoff": None,
            "ask": None,
        },
    }
)


def test_payloads_carry_the_schema_version_this_library_writes() -> None:
    stored = json.loads(JsonSerializer().serialize({"a": (1, 2)}))
    assert stored == {"schema_version": SCHEMA_VERSION, "value": {"a": [1, 2]}}
    assert SCHEMA_VERSION == 3


def test_payload_keys_and_values_of_every_kind_are_stored_as_before() -> None:
    # the serializer's fast path (exact str/int/float/bool/None, dict, list) and its general one
    # (subclasses, tuples, other keys, marker-like keys) store the same text as they always did
    class Text(str):
        pass

    value = {
        "plain": ["s", 1, 2.5, True, None, [], {}],
        "__error__": 1,
        "x__error__": {"____error__": "four"},
        "kinds": {5: "int", 1.5: "float", True: "bool", None: "none", Text("t"): Text("v")},
        "tuple": (1, ("a", None)),
    }
    stored = json.loads(JsonSerializer().serialize(value))["value"]
    assert stored == {
        "plain": ["s", 1, 2.5, True, None, [], {}],
        "___error__": 1,
        "x__error__": {"_____error__": "four"},
        "kinds": {"5": "int", "1.5": "float", "True": "bool", "None": "none", "t": "v"},
        "tuple": [1, ["a", None]],
    }
    assert JsonSerializer().deserialize(JsonSerializer().serialize(value))["x__error__"] == {
        "____error__": "four"
    }


def test_a_payload_of_a_newer_schema_is_refused_with_what_to_do() -> None:
    newer = json.dumps({"schema_version": SCHEMA_VERSION + 1, "value": {}})
    with pytest.raises(ValueError, match=r"written by a newer durable-swarm .* upgrade"):
        JsonSerializer().deserialize(newer)


def _collect(context_variables: dict) -> Result:
    items = context_variables.setdefault("items", [])
    items.append("a")
    return Result(value="a", context_variables={"items": items})


def _append(context_variables: dict) -> str:
    context_variables["items"].append("b")
    return "b"


def test_result_updates_replay_as_they_ran(durable_swarm_factory: Any, run_id: str) -> None:
    """A Result's updates are stored as they were when its tool returned, and that is what the
    run merges, live as on a replay (a later call changing the same list in place does not
    reach them), so a recovered run goes on with the context it had."""
    agent = Agent(name="log-format-collector", functions=[_collect, _append])
    script = [calls(ToolCall("_collect", {}), ToolCall("_append", {})), text("done")]
    swarm = durable_swarm_factory(ScriptedClient(script))

    live = swarm.run(agent, USER, run_id=run_id).context_variables

    last_model = max(s.step for s in swarm.get_run(run_id).steps if s.kind == "model")
    replayed = durable_swarm_factory(ScriptedClient([text("done")])).fork(run_id, last_model)
    assert replayed.result().context_variables == live == {"items": ["a"]}


def test_a_schema_1_tool_step_decodes_to_the_whole_context() -> None:
    output = JsonSerializer().deserialize(SCHEMA_1_TOOL_STEP)
    assert context_after({"kept": 1}, output) == {"kept": 1, "note": "as schema 1 stored it"}


def test_a_run_logged_in_schema_1_still_reads_and_continues(
    durable_swarm_factory: Any, run_id: str
) -> None:
    swarm = durable_swarm_factory(ScriptedClient([calls(ToolCall("note", {})), text("done")]))
    swarm.run(NOTER, USER, context_variables={"kept": 1}, run_id=run_id)
    tool = next(s for s in swarm.get_run(run_id).steps if s.kind == "tool")
    # Schema 3: a returned Result's context updates apart from the tool's own changes.
    assert tool.output["updates"] == {"note": "from the tool"}
    assert "context_changes" not in tool.output

    # The same run as the schema-1 library logged it.
    sys_db = _get_dbos_instance()._sys_db
    op = sys_db.tables.operation_outputs
    with sys_db.engine.begin() as conn:
        conn.execute(
            op.update()
            .where(op.c.workflow_uuid == run_id, op.c.function_id == tool.step)
            .values(output=SCHEMA_1_TOOL_STEP)
        )

    info = swarm.get_run(run_id)
    assert info.steps[tool.step - 1].output["context_variables"]["note"] == "as schema 1 stored it"
    # A fork after the tool step replays it from the schema-1 output (the tool does not run).
    last_model = max(s.step for s in info.steps if s.kind == "model")
    forked = durable_swarm_factory(ScriptedClient([text("again")])).fork(run_id, last_model)
    response = forked.result()
    assert response.context_variables == {"kept": 1, "note": "as schema 1 stored it"}
    assert response.messages[-1]["content"] == "again"
