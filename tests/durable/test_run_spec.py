"""The run spec (a run's workflow input, its replay contract) and the swarm a run belongs to.

Specs written by earlier releases (plain dicts, copied here as they wrote them) still read and
run, on the default swarm; a spec names its swarm, and a run uses that swarm's client, model,
retries, budget, prices and limits in this process, however many swarms were built since; a run
whose swarm this process lacks waits, pending, saying which swarm to create. The crash tests of
the same rules, across real processes, are in `test_swarm_crash.py`. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import gc
import inspect
import logging
import uuid
from typing import Any

import openai
import pytest
from dbos import DBOS, SetWorkflowID

from _support.wait import wait_for
from durable_swarm import Agent, Budget, DurableClient, DurableSwarm, Swarm
from durable_swarm.durable._log import spec_of
from durable_swarm.durable._spec import SPEC_VERSION, RunSpec, agent_ref
from durable_swarm.durable._swarms import SwarmSettings, registry
from durable_swarm.durable._workflow import HOST, run_workflow
from durable_swarm.errors import DurableSwarmError, SwarmNotFoundError
from durable_swarm.loop import RunRequest
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

USER = [{"role": "user", "content": "hi"}]

# The workflow input as the release before run specs wrote it, key for key: `DurableSwarm`...
EARLIER_SWARM_SPEC: dict[str, Any] = {
    "agent": {"name": "spec-agent", "fingerprint": "6f1e0c5d2a9b4e7f"},
    "messages": [{"role": "user", "content": "hi"}],
    "context_variables": {"customer": "ada"},
    "model_override": None,
    "model_retries": 2,
    "stream": False,
    "debug": False,
    "max_turns": None,
    "execute_tools": True,
    "after_work": None,
    "agents": [],
    "budget": None,
    "prices": {},
    "max_result_chars": 4000000,
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
}
# ... `DurableClient.start` (no model_retries, prices, max_result_chars; budget only if given) ...
EARLIER_CLIENT_SPEC: dict[str, Any] = {
    "agent": {"name": "spec-agent", "fingerprint": None},
    "messages": [{"role": "user", "content": "hi"}],
    "context_variables": {},
    "model_override": "gpt-4o-mini",
    "stream": True,
    "debug": False,
    "max_turns": 5,
    "execute_tools": True,
    "after_work": None,
    "agents": [],
    "budget": {"max_model_calls": 3, "max_total_tokens": None, "max_cost_usd": None},
}
# ... and a sub-agent started by a delegating run.
EARLIER_SUBAGENT_SPEC: dict[str, Any] = {
    "agent": {"name": "spec-helper", "fingerprint": "0123456789abcdef"},
    "messages": [{"role": "user", "content": "find it"}],
    "context_variables": {},
    "parent": "parent-run",
    "tool_call_id": "call_1",
    "model_retries": 4,
    "prices": {"m": {"input": 1.0, "output": 2.0}},
    "traceparent": None,
    "budget": None,
}


def test_specs_written_by_earlier_releases_read_as_runs_of_the_default_swarm() -> None:
    swarm_spec = RunSpec.from_json(EARLIER_SWARM_SPEC)
    assert swarm_spec.schema_version == 1
    assert swarm_spec.swarm == "default"
    assert swarm_spec.agent == EARLIER_SWARM_SPEC["agent"]
    assert swarm_spec.messages == EARLIER_SWARM_SPEC["messages"]
    assert swarm_spec.context_variables == {"customer": "ada"}
    assert (swarm_spec.model_retries, swarm_spec.prices) == (2, {})
    assert swarm_spec.max_result_chars == 4000000
    assert swarm_spec.max_turns is None and swarm_spec.execute_tools and not swarm_spec.stream
    assert swarm_spec.traceparent == EARLIER_SWARM_SPEC["traceparent"]
    assert swarm_spec.budget == Budget()  # it stored None for "no budget": still none

    client_spec = RunSpec.from_json(EARLIER_CLIENT_SPEC)
    assert client_spec.swarm == "default"
    assert client_spec.agent == {"name": "spec-agent", "fingerprint": None}
    assert (client_spec.model_override, client_spec.stream, client_spec.max_turns) == (
        "gpt-4o-mini",
        True,
        5,
    )
    assert client_spec.budget == Budget(max_model_calls=3)
    # what the thin client left out is its swarm's
    assert client_spec.model_retries is None and client_spec.prices is None
    assert client_spec.max_result_chars is None
    assert RunSpec.from_json({**EARLIER_CLIENT_SPEC, "budget": None}).budget == Budget()
    without = {k: v for k, v in EARLIER_CLIENT_SPEC.items() if k != "budget"}
    assert RunSpec.from_json(without).budget is None  # the swarm's default budget

    child = RunSpec.from_json(EARLIER_SUBAGENT_SPEC)
    assert (child.parent, child.tool_call_id, child.swarm) == ("parent-run", "call_1", "default")
    assert (child.model_retries, child.prices) == (4, {"m": {"input": 1.0, "output": 2.0}})
    assert child.model_override is None and child.after_work is None and child.agents == ()


def test_a_spec_round_trips_and_records_its_swarm() -> None:
    agent = Agent(name="spec-round-trip")
    other = Agent(name="spec-round-trip-other")
    run = RunRequest(agent, USER, {"k": [1]}, max_turns=3.5, agents=[other], budget=Budget(1))
    spec = RunSpec.of_request(
        run,
        swarm="support",
        model="m-1",
        model_retries=5,
        budget=None,
        prices={"m-1": {"input": 0.5, "output": 1.5}},
        max_result_chars=1000,
    )
    stored = spec.to_json()
    assert stored["schema_version"] == 2 and SPEC_VERSION == 3  # 3: with a session
    assert stored["swarm"] == "support"
    assert stored["agent"] == agent_ref(agent)
    assert stored["max_turns"] == 4
    assert stored["model_override"] == "m-1"
    assert stored["budget"] == Budget(1).to_json()
    assert RunSpec.from_json(stored) == spec
    # the caller's objects are copied, not kept
    run.context_variables["k"].append(2)  # type: ignore[index]
    assert spec.context_variables == {"k": [1]}
    # options a thin client leaves to the swarm are not written
    by_name = RunSpec.by_name("spec-agent", USER, None, swarm="support").to_json()
    assert by_name["swarm"] == "support"
    for key in ("model_retries", "prices", "max_result_chars", "budget", "parent"):
        assert key not in by_name


def test_bad_specs_and_names_are_refused_with_what_to_do() -> None:
    with pytest.raises(DurableSwarmError, match=r"newer durable-swarm .* Upgrade"):
        RunSpec.from_json({**EARLIER_CLIENT_SPEC, "schema_version": SPEC_VERSION + 1})
    with pytest.raises(DurableSwarmError, match="not one durable-swarm wrote: agent"):
        RunSpec.from_json({"messages": USER})
    with pytest.raises(DurableSwarmError, match=r"swarm's name must be a non-empty str, not ''"):
        DurableSwarm(name="")
    with pytest.raises(DurableSwarmError, match="swarm's name must be a non-empty str"):
        RunSpec.by_name("spec-agent", USER, None, swarm=None)  # type: ignore[arg-type]


def test_the_latest_live_swarm_of_a_name_serves_it(tmp_path, caplog) -> None:
    url = str(tmp_path / "unused.sqlite")  # never launched: swarms are made lazily
    a = openai.OpenAI(base_url="http://127.0.0.1:9/a/v1", api_key="fake")
    b = openai.OpenAI(base_url="http://127.0.0.1:9/b/v1", api_key="fake")
    first = DurableSwarm(a, name="spec-twice", database_url=url)
    with caplog.at_level(logging.WARNING, logger="durable_swarm"):
        second = DurableSwarm(b, name="spec-twice", database_url=url)
    assert "A second DurableSwarm named 'spec-twice'" in caplog.text
    assert "give each its own name" in caplog.text
    assert registry.settings("spec-twice").client is second.client
    second.close()
    assert registry.settings("spec-twice").client is first.client
    first.name = "spec-renamed"  # settable: the swarm now serves its new name only
    assert registry.settings("spec-renamed").client is first.client
    with pytest.raises(SwarmNotFoundError, match=r"Swarm 'spec-twice' is needed"):
        registry.settings("spec-twice")
    del first
    gc.collect()
    with pytest.raises(SwarmNotFoundError, match=r"DurableSwarm\(\.\.\., name='spec-renamed'\)"):
        registry.settings("spec-renamed")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="durable_swarm"):
        same = ScriptedClient([])
        DurableSwarm(same, name="spec-same", database_url=url)
        kept = DurableSwarm(same, name="spec-same", database_url=url)
    assert "A second DurableSwarm" not in caplog.text  # the same settings: nothing to say
    assert registry.settings("spec-same").client is kept.client
    with caplog.at_level(logging.WARNING, logger="durable_swarm"):  # a notebook cell run again
        once = DurableSwarm(openai.OpenAI(base_url="http://127.0.0.1:9/a/v1", api_key="fake"),
                            name="spec-again", database_url=url)  # fmt: skip
        again = DurableSwarm(openai.OpenAI(base_url="http://127.0.0.1:9/a/v1", api_key="fake"),
                             name="spec-again", database_url=url)  # fmt: skip
    assert "A second DurableSwarm" not in caplog.text  # a client for the same endpoint
    assert registry.settings("spec-again").client is again.client is not once.client


def _start_spec(spec: RunSpec | dict[str, Any]) -> str:
    """Start a run from `spec` as its starter does (the workflow and its stored input)."""
    run_id = f"spec-{uuid.uuid4().hex[:8]}"
    stored = spec.to_json() if isinstance(spec, RunSpec) else spec
    with SetWorkflowID(run_id):
        DBOS.start_workflow(run_workflow, stored)
    return run_id


def _answer(swarm: DurableSwarm, run_id: str) -> str:
    return str(swarm.handle(run_id).result().messages[-1]["content"])


def test_a_run_logged_by_an_earlier_release_runs_on_the_default_swarm(
    durable_swarm_factory,
) -> None:
    agent = Agent(name="spec-earlier")
    default = durable_swarm_factory(ScriptedClient([text("from default")])).launch()
    other = durable_swarm_factory(ScriptedClient([text("from other")]), name="spec-other")
    earlier = {**EARLIER_SWARM_SPEC, "agent": agent_ref(agent), "traceparent": None}
    run_id = _start_spec(earlier)
    assert _answer(default, run_id) == "from default"
    assert default.get_run(run_id).swarm == "default"
    assert other.client.requests == []


def test_runs_use_their_own_swarm_however_many_came_after(durable_swarm_factory) -> None:
    agent = Agent(name="spec-own-swarm")
    a = durable_swarm_factory(ScriptedClient([text("from a")] * 3), name="spec-a").launch()
    b = durable_swarm_factory(ScriptedClient([text("from b")] * 3), name="spec-b")
    # a run started on "a" after "b" was built
    on_a = f"spec-on-a-{uuid.uuid4().hex[:8]}"
    assert a.run(agent, USER, run_id=on_a).messages[-1]["content"] == "from a"
    assert b.get_run(on_a).swarm == "spec-a"  # the run says which swarm it belongs to
    assert {r.run_id: r.swarm for r in b.list_runs(agent=agent.name)}[on_a] == "spec-a"
    # a run of "a" that this process did not start (recovered, dequeued): found by name
    assert _answer(b, _start_spec(RunSpec.by_name(agent.name, USER, None, swarm="spec-a"))) == (
        "from a"
    )
    # two live swarms of one name: each one's own runs keep its client
    a2 = durable_swarm_factory(ScriptedClient([text("from a2")] * 2), name="spec-a")
    assert a.run(agent, USER).messages[-1]["content"] == "from a"
    assert a2.run(agent, USER).messages[-1]["content"] == "from a2"
    assert b.client.requests == []
    assert len(a.client.requests) == 3 and len(a2.client.requests) == 1


def test_a_thin_clients_run_takes_its_swarms_model_retries_budget_and_prices(
    durable_swarm_factory,
) -> None:
    agent = Agent(name="spec-limited", model="agent-model", functions=[])
    script = [calls(ToolCall("nothing", {})), text("never")]
    swarm = durable_swarm_factory(
        ScriptedClient(script),
        name="spec-limits",
        model="swarm-model",
        model_retries=0,
        budget=Budget(max_model_calls=1),
        prices={"swarm-model": {"input": 1.0, "output": 1.0}},
    ).launch()
    run_id = _start_spec(RunSpec.by_name(agent.name, USER, None, swarm="spec-limits"))
    with pytest.raises(Exception, match="max_model_calls"):
        swarm.handle(run_id).result()
    assert [r["model"] for r in swarm.client.requests] == ["swarm-model"]
    info = swarm.get_run(run_id)
    assert info.status == "failed"
    assert info.usage is not None and info.usage.model_calls == 1


def test_a_run_whose_swarm_is_missing_waits_then_runs_on_it(durable_swarm_factory) -> None:
    agent = Agent(name="spec-waiting")
    here = durable_swarm_factory(ScriptedClient([text("wrong swarm")]), name="spec-here")
    here.launch()
    run_id = _start_spec(RunSpec.by_name(agent.name, USER, None, swarm="spec-later"))
    problem = wait_for(lambda: here.get_run(run_id).problem, what="the run's problem")
    assert problem.startswith(
        "waiting for swarm \"spec-later\": create DurableSwarm(..., name='spec-later') in a "
        "worker (or the process that runs this run); the run stays pending and loses nothing."
    )
    assert here.get_run(run_id).status == "pending"
    assert here.client.requests == []
    later = durable_swarm_factory(ScriptedClient([text("right swarm")]), name="spec-later")
    assert _answer(later, run_id) == "right swarm"
    assert here.get_run(run_id).problem is None
    assert here.client.requests == []


def test_a_thin_client_names_the_swarm_of_its_run(durable_swarm_factory, database_url) -> None:
    durable_swarm_factory().launch()  # the database exists
    with DurableClient(database_url) as client:
        with pytest.raises(DurableSwarmError, match="swarm's name must be a non-empty str"):
            client.start("spec-agent", USER, swarm="")
        handle = client.start("spec-agent", USER, swarm="spec-queued", queue="spec-nobody")
        stored = spec_of(client.runs.source.get_workflow_status(handle.run_id))
        client.cancel(handle.run_id)
    assert stored["swarm"] == "spec-queued"
    assert stored["schema_version"] == 2  # no session, no token budget: what releases read


SWARM_RUN = [
    ("agent", inspect.Parameter.empty),
    ("messages", inspect.Parameter.empty),
    ("context_variables", None),
    ("model_override", None),
    ("stream", False),
    ("debug", False),
    ("max_turns", float("inf")),
    ("execute_tools", True),
]


def _parameters(method: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.default, p.kind) for p in inspect.signature(method).parameters.values()]


def test_the_run_methods_keep_swarms_signature_written_once() -> None:
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    keyword = inspect.Parameter.KEYWORD_ONLY
    swarm_run = [("self", inspect.Parameter.empty, positional)] + [
        (name, default, positional) for name, default in SWARM_RUN
    ]
    handoffs = [("after_work", None, keyword), ("agents", (), keyword)]
    sessions = [("session", None, keyword), ("compact_at", None, keyword)]
    assert _parameters(Swarm.run) == _parameters(Swarm.arun) == swarm_run + handoffs + sessions
    durable = [("run_id", None, keyword), *handoffs, ("budget", None, keyword), *sessions]
    for method in (DurableSwarm.run, DurableSwarm.start, DurableSwarm.arun, DurableSwarm.astart):
        assert _parameters(method) == swarm_run + durable, method.__name__
    without_stream = [p for p in swarm_run if p[0] != "stream"]
    assert _parameters(Swarm.run_and_stream) == without_stream
    assert _parameters(DurableSwarm.run_and_stream) == [
        *without_stream, ("run_id", None, keyword), *sessions,
    ]  # fmt: skip
    assert inspect.iscoroutinefunction(DurableSwarm.arun)
    assert inspect.iscoroutinefunction(Swarm.arun) and not inspect.iscoroutinefunction(Swarm.run)
    assert DurableSwarm.run.__doc__.startswith("Swarm's `run`, durably")  # type: ignore[union-attr]
    memory = Swarm(ScriptedClient([text("hello")] * 2))
    with pytest.raises(TypeError, match=r"^Swarm\.run\(\) got an unexpected keyword argument 'x'"):
        memory.run(Agent(), USER, x=1)
    with pytest.raises(TypeError, match=r"^Swarm\.run\(\) missing a required argument"):
        memory.run(Agent())
    # positionally, in Swarm's order, and by keyword
    assert memory.run(Agent(), USER, {}, None, False, False, 2, True).messages[-1]["content"] == (
        "hello"
    )
    assert memory.run(messages=USER, agent=Agent(), max_turns=1).messages[-1]["content"] == "hello"


def test_a_sub_agent_runs_on_its_parents_swarm_and_bindings_end_with_runs(
    durable_swarm_factory,
) -> None:
    helper = Agent(name="spec-helper-agent", model="helper-model")
    lead = Agent(name="spec-lead", functions=[helper.as_tool()])

    def script(messages: list[dict[str, Any]], tools: Any) -> Any:
        if messages[-1]["content"] == "find it":  # the sub-agent's task
            return text("found it")
        if messages[-1]["role"] == "tool":
            return text(f"lead says: {messages[-1]['content']}")
        return calls(ToolCall("delegate_to_spec-helper-agent", {"task": "find it"}))

    parent = durable_swarm_factory(ScriptedClient(script), name="spec-parent", model="lead-model")
    durable_swarm_factory(ScriptedClient([]), name="spec-not-parent")  # built later
    run_id = f"spec-parent-{uuid.uuid4().hex[:8]}"
    answer = parent.run(lead, USER, run_id=run_id)
    assert answer.messages[-1]["content"] == "lead says: found it"
    # the child used the parent's client, with its own agent's model (as in memory)
    assert [r["model"] for r in parent.client.requests] == [
        "lead-model",
        "helper-model",
        "lead-model",
    ]
    (child,) = parent.get_run(run_id).children
    assert parent.get_run(child).swarm == "spec-parent"
    assert run_id not in HOST.bound and child not in HOST.bound  # nothing kept once they end


def test_a_swarm_without_a_client_never_takes_another_swarms(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")
    given = ScriptedClient([])
    monkeypatch.setattr(HOST, "default_client", given)  # what a worker pointed at a client sets
    assert registry.client_of(SwarmSettings("default")) is given
    own = registry.client_of(SwarmSettings("spec-without-client"))
    assert own is not given and type(own).__name__ == "OpenAI"
