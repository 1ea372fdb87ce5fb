"""A run belongs to the swarm that started it, across crashes: real child processes build two
swarms, `DurableSwarm(client_a, name="a")` then `DurableSwarm(client_b, name="b")`, each talking
to its own fake server (in this process, so the counts survive the children); a run started on
"a" is killed with SIGKILL inside a tool, and whichever process goes on with it (the same
executor id recovering it at launch, or a new process taking it over) makes the remaining model
calls to server A only. A process that has no swarm "a" leaves the run pending, saying which
swarm to create, and never calls a model for it. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from durable_swarm import DurableClient, Swarm
from durable_swarm.testing import FakeOpenAIServer, ScriptedClient

from . import _scenarios
from ._harness import Processes, ScenarioModel, Zygote, jsonable, processes, scenario_server
from ._harness import wait_for as wait_for_child
from ._scenarios import MODEL_AND_TOOL_STEPS, MODEL_CALLS, START_CONTEXT, USER_MESSAGES, executions

pytestmark = pytest.mark.crash


@pytest.fixture
def expected(tool_dir: Path) -> dict[str, Any]:
    """The scenario's transcript uninterrupted (in memory; `tool_dir` keeps its tool runs)."""
    memory = Swarm(ScriptedClient(_scenarios.reply))
    return dict(jsonable(memory.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT)))


@contextmanager
def two_servers(
    zygote: Zygote, tmp_path: Path, database_url: str
) -> Iterator[tuple[Processes, dict[str, ScenarioModel], dict[str, FakeOpenAIServer]]]:
    """Children building swarms "a" and "b" (in that order), one fake server each; they share
    an executor id unless a child is given another."""
    work = tmp_path / "work"
    work.mkdir()
    models = {"a": ScenarioModel(), "b": ScenarioModel()}
    with (
        scenario_server(models["a"]) as server_a,
        scenario_server(models["b"]) as server_b,
        processes(
            zygote,
            work,
            database_url=database_url,
            base_url=server_b.base_url,
            swarms={"a": server_a.base_url, "b": server_b.base_url},
            executor_id=f"two-swarms-{uuid.uuid4().hex[:8]}",
            run_id=f"two-swarms-{uuid.uuid4().hex[:10]}",
        ) as procs,
    ):
        yield procs, models, {"a": server_a, "b": server_b}


def start_on_a_and_kill_in_a_tool(procs: Processes) -> None:
    """The first child runs the scenario on swarm "a" and is killed inside the `note` tool."""
    first = procs.start("first", action="run", run_on="a", hang="note")
    reached = procs.work / "note.reached"
    wait_for_child(reached.exists, "the note tool", children=(first,))
    first.kill()
    assert first.poll() == -9
    assert not first.result_path.exists()


def assert_finished_on_a(
    result: dict[str, Any],
    expected: dict[str, Any],
    models: dict[str, ScenarioModel],
    servers: dict[str, FakeOpenAIServer],
) -> None:
    assert result["status"] == "succeeded"
    assert result["messages"] == expected["messages"]
    assert result["context_variables"] == expected["context_variables"]
    effects = [(kind, name) for _, kind, name in result["steps"] if kind in ("model", "tool")]
    assert effects == MODEL_AND_TOOL_STEPS
    assert servers["b"].request_count == 0  # never the other swarm's client
    assert servers["a"].request_count == MODEL_CALLS  # the finished call was not made again
    assert [models["a"].arrived(stage) for stage in range(MODEL_CALLS)] == [1] * MODEL_CALLS


@pytest.mark.parametrize("path", ["same-executor", "takeover"])
def test_a_recovered_run_uses_the_client_of_the_swarm_that_started_it(
    zygote, children_database_url, tmp_path, expected, path
) -> None:
    with two_servers(zygote, tmp_path, children_database_url) as (procs, models, servers):
        start_on_a_and_kill_in_a_tool(procs)
        # The second process acts with swarm "b" (built last); the run must still use "a".
        if path == "same-executor":  # recovers its executor id's runs at launch
            result = procs.start("second", action="recover").finish()
        else:  # another process, which takes over the dead one's runs
            other = f"two-swarms-other-{uuid.uuid4().hex[:8]}"
            result = procs.start("second", action="resume", executor_id=other).finish()

    assert_finished_on_a(result, expected, models, servers)
    # the tool was in flight at the kill: it ran again (at least once)
    assert executions(procs.work, "note") == ["hello", "hello"]


def test_a_process_without_the_swarm_leaves_the_run_pending_until_one_has_it(
    zygote, children_database_url, tmp_path, expected
) -> None:
    with two_servers(zygote, tmp_path, children_database_url) as (procs, models, servers):
        start_on_a_and_kill_in_a_tool(procs)
        # A process with swarm "b" only recovers the run: it waits, saying what to create.
        lacking = procs.start(
            "lacking", action="swarm_missing", swarms={"b": servers["b"].base_url}
        )
        missing = lacking.finish()
        assert servers["a"].request_count == 1 and servers["b"].request_count == 0
        # A process with swarm "a" (same executor id) recovers it: it finishes on "a".
        result = procs.start("having", action="recover").finish()

    assert missing["status"] == "pending"
    problem = missing["problem"]
    assert problem.startswith("waiting for swarm \"a\": create DurableSwarm(..., name='a')")
    assert "Swarm 'a' is needed by run" in problem
    assert "it has 'b'" in problem  # what this process has
    assert_finished_on_a(result, expected, models, servers)
    assert executions(procs.work, "note") == ["hello", "hello"]  # not in the lacking process


def test_a_thin_clients_run_executes_on_the_swarm_it_names(
    zygote, children_database_url, tmp_path, expected
) -> None:
    queue = f"two-swarms-{uuid.uuid4().hex[:6]}"
    with two_servers(zygote, tmp_path, children_database_url) as (procs, models, servers):
        worker = procs.start("worker", action="serve", queue=queue)
        wait_for_child(lambda: "serving queue" in worker.output(), "the worker", children=(worker,))
        with DurableClient(children_database_url) as client:
            on_a = client.start("Triage", USER_MESSAGES, START_CONTEXT, queue=queue, swarm="a")
            answer = on_a.result(timeout=120)
            assert answer.messages == expected["messages"]
            assert answer.context_variables == expected["context_variables"]
            assert servers["b"].request_count == 0
            assert servers["a"].request_count == MODEL_CALLS
            assert [models["a"].arrived(s) for s in range(MODEL_CALLS)] == [1] * MODEL_CALLS
            # a swarm no worker has: the run waits, pending, saying which swarm to create
            lost = client.start("Triage", USER_MESSAGES, START_CONTEXT, queue=queue, swarm="c")
            problem = wait_for_child(
                lambda: client.get_run(lost.run_id).problem, "the problem", children=(worker,)
            )
            assert problem.startswith("waiting for swarm \"c\": create DurableSwarm(..., name='c')")
            assert client.get_run(lost.run_id).status == "pending"
            client.cancel(lost.run_id)
    assert servers["a"].request_count == MODEL_CALLS and servers["b"].request_count == 0
