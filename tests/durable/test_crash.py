"""Crash tests: a real child process runs the scenario and is killed with SIGKILL at a chosen
point; a new process on the same database recovers the run (DBOS recovers the pending runs of
its executor at launch) and must end with the same transcript and context as an uninterrupted
run, with every finished model call made exactly once (counted at the fake server, which runs
in this process so its counts survive the children) and every finished tool run exactly once.

The children run `tests/durable/_child.py`; the scenario is in `_scenarios.py`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from durable_swarm.testing import FakeOpenAIServer

from . import _scenarios
from ._harness import (
    Child,
    Processes,
    ScenarioModel,
    Zygote,
    jsonable,
    processes,
    scenario_server,
    wait_for,
)
from ._scenarios import (
    GHOST_TEXT,
    MODEL_AND_TOOL_STEPS,
    MODEL_CALLS,
    STAGE_CHARGE,
    STAGE_FINAL,
    STAGE_NOTE,
    STAGE_TRANSFER,
    START_CONTEXT,
    USER_MESSAGES,
    executions,
)

pytestmark = pytest.mark.crash

TOOLS = ("note", "transfer_to_sales", "charge")


@pytest.fixture
def uninterrupted(durable_swarm_factory, tmp_path, monkeypatch) -> Callable[..., dict[str, Any]]:
    """The scenario run durably without interruption, in this process (on another database)."""

    def run(stream: bool = False) -> dict[str, Any]:
        tools = tmp_path / "uninterrupted-tools"
        tools.mkdir()
        monkeypatch.setenv(_scenarios.WORK_DIR_ENV, str(tools))
        with scenario_server() as server:
            swarm = durable_swarm_factory(server.client())
            run_id = f"uninterrupted-{uuid.uuid4().hex[:8]}"
            result = swarm.run(
                _scenarios.triage, USER_MESSAGES, START_CONTEXT, stream=stream, run_id=run_id
            )
            events = list(result) if stream else []
            response = events[-1]["response"] if stream else result
            requests = server.request_count
        return {
            "messages": jsonable(response.messages),
            "context_variables": jsonable(response.context_variables),
            "agent": response.agent.name,
            "requests": requests,
            "executions": {t: len(executions(tools, t)) for t in TOOLS},
            "events": jsonable(events[:-1]),
        }

    return run


@contextmanager
def crash_setup(
    zygote: Zygote, tmp_path: Path, database_url: str, model: ScenarioModel
) -> Iterator[tuple[Processes, FakeOpenAIServer, str]]:
    """Children sharing one executor id (so a new one recovers the old one's runs)."""
    work = tmp_path / "work"
    work.mkdir()
    run_id = f"crash-{uuid.uuid4().hex[:10]}"
    with (
        scenario_server(model) as server,
        processes(
            zygote,
            work,
            database_url=database_url,
            base_url=server.base_url,
            executor_id=f"crash-executor-{uuid.uuid4().hex[:8]}",
            run_id=run_id,
        ) as procs,
    ):
        yield procs, server, run_id


def crash_then_recover(
    procs: Processes, kill_when: Callable[[Child], Any], what: str, **config: Any
) -> tuple[Child, dict[str, Any]]:
    """Run the scenario in a child, SIGKILL it once `kill_when(child)` holds, then start a second
    child with the same executor id, which recovers the run; return the second one's result."""
    first = procs.start("first", action="run", **config)
    wait_for(lambda: kill_when(first), what, children=(first,))
    first.kill()
    assert first.poll() == -9
    assert not first.result_path.exists()  # it did not get to finish
    second = procs.start("second", action="recover", stream=config.get("stream", False))
    return first, second.finish()


def crash_at_hang_point(procs: Processes, point: str, what: str) -> tuple[Child, dict[str, Any]]:
    """`crash_then_recover` with the first child stopped at `point` (see `_scenarios.hang_if`)
    and killed once it has written `<point>.reached`."""
    return crash_then_recover(
        procs, lambda _: (procs.work / f"{point}.reached").exists(), what, hang=point
    )


def assert_same_as_uninterrupted(result: dict[str, Any], expected: dict[str, Any]) -> None:
    assert result["status"] == "succeeded"
    assert result["messages"] == expected["messages"]
    assert result["context_variables"] == expected["context_variables"]
    assert result["agent"] == expected["agent"] == "Sales"
    assert result["agent_is_object"]  # the recovered run ends on the Agent object, not a name
    assert result["info_context_variables"] == expected["context_variables"]
    effects = [(kind, name) for _, kind, name in result["steps"] if kind in ("model", "tool")]
    assert effects == MODEL_AND_TOOL_STEPS


def tool_runs(work: Path) -> dict[str, int]:
    return {tool: len(executions(work, tool)) for tool in TOOLS}


def assert_each_model_call_made_once(model: ScenarioModel, except_stage: int | None) -> None:
    for stage in range(MODEL_CALLS):
        expected = 2 if stage == except_stage else 1  # the call in flight is made again
        assert model.arrived(stage) == expected, f"model call {stage}"


@pytest.mark.parametrize(
    "stage",
    [STAGE_NOTE, STAGE_TRANSFER],
    ids=["first-call", "after-a-tool"],
)
def test_kill_inside_a_model_call(
    zygote, children_database_url, tmp_path, uninterrupted, stage
) -> None:
    expected = uninterrupted()
    model = ScenarioModel()
    model.hold(stage)  # the first request of this model call waits at the server
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, _):
        _, result = crash_then_recover(procs, lambda _: model.arrived(stage), f"model call {stage}")

    assert_same_as_uninterrupted(result, expected)
    assert server.request_count == expected["requests"] + 1  # + the one in flight
    assert_each_model_call_made_once(model, except_stage=stage)
    assert tool_runs(procs.work) == expected["executions"]  # finished tools never ran again


def test_kill_inside_a_tool_call(zygote, children_database_url, tmp_path, uninterrupted) -> None:
    expected = uninterrupted()
    model = ScenarioModel()
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, _):
        _, result = crash_at_hang_point(procs, "note", "the note tool")

    assert_same_as_uninterrupted(result, expected)
    assert server.request_count == expected["requests"] == MODEL_CALLS
    assert_each_model_call_made_once(model, except_stage=None)
    # the tool was in flight: it runs again (at least once), but its first, unfinished
    # execution's in-place change to the context is not applied twice
    assert executions(procs.work, "note") == ["hello", "hello"]
    assert result["context_variables"]["notes"] == ["hello"]
    assert tool_runs(procs.work) == {**expected["executions"], "note": 2}


def test_kill_between_steps(zygote, children_database_url, tmp_path, uninterrupted) -> None:
    expected = uninterrupted()
    model = ScenarioModel()
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, _):
        _, result = crash_at_hang_point(procs, "between", "the pause after the note step")

    assert_same_as_uninterrupted(result, expected)
    assert server.request_count == expected["requests"] == MODEL_CALLS
    assert_each_model_call_made_once(model, except_stage=None)
    assert tool_runs(procs.work) == expected["executions"]
    # the note tool changed the context in place and finished before the kill: kept
    assert result["context_variables"]["notes"] == ["hello"]


def _final_turn_started(child: Child) -> bool:
    events = child.events()
    starts = [i for i, e in enumerate(events) if e == {"delim": "start"}]
    return len(starts) == MODEL_CALLS and any(e.get("content") for e in events[starts[-1] :])


def _without_interrupted_turns(events: list[Any]) -> list[Any]:
    """The events minus any turn that has a start but no end (cut short by the kill)."""
    kept: list[Any] = []
    turn: list[Any] = []
    for event in events:
        if event == {"delim": "start"}:
            turn = [event]
        elif turn:
            turn.append(event)
            if event == {"delim": "end"}:
                kept += turn
                turn = []
        else:
            kept.append(event)
    return kept


def test_kill_during_a_streamed_turn(
    zygote, children_database_url, tmp_path, uninterrupted
) -> None:
    expected = uninterrupted(stream=True)
    model = ScenarioModel()
    model.slow_stream(STAGE_FINAL, chunk_delay=0.6)
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, _):
        first, result = crash_then_recover(
            procs, _final_turn_started, "the last streamed turn to begin", stream=True
        )
        seen_before_kill = first.events()
        replayed = procs.children[1].events()

    assert_same_as_uninterrupted(result, expected)
    assert server.request_count == expected["requests"] + 1
    assert_each_model_call_made_once(model, except_stage=STAGE_FINAL)
    assert tool_runs(procs.work) == expected["executions"]
    # a reader that reconnects reads the run's events from the start: what the killed process
    # saw, then the interrupted turn started again
    assert replayed[: len(seen_before_kill)] == seen_before_kill
    assert replayed[-1]["response"]["messages"] == expected["messages"]
    assert [e for e in replayed if e == {"delim": "start"}] == [{"delim": "start"}] * 5
    assert _without_interrupted_turns(replayed[:-1]) == expected["events"]


def test_kill_after_a_handoff(zygote, children_database_url, tmp_path, uninterrupted) -> None:
    expected = uninterrupted()
    model = ScenarioModel()
    model.hold(STAGE_CHARGE)  # Sales' first model call, after the handoff step
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, _):
        _, result = crash_then_recover(
            procs, lambda _: model.arrived(STAGE_CHARGE), "Sales' first model call"
        )

    assert_same_as_uninterrupted(result, expected)
    kinds = [kind for _, kind, _ in result["steps"]]
    assert "handoff" in kinds
    assert server.request_count == expected["requests"] + 1
    assert_each_model_call_made_once(model, except_stage=STAGE_CHARGE)
    assert tool_runs(procs.work) == expected["executions"]


def test_idempotency_key_is_the_same_when_a_tool_reruns_after_a_crash(
    zygote, children_database_url, tmp_path, uninterrupted
) -> None:
    expected = uninterrupted()
    model = ScenarioModel()
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, run_id):
        _, result = crash_at_hang_point(procs, "charge", "the charge tool")

    assert_same_as_uninterrupted(result, expected)
    charge_step = next(step for step, kind, name in result["steps"] if name == "charge")
    assert executions(procs.work, "charge") == [f"{run_id}:{charge_step}"] * 2
    assert server.request_count == MODEL_CALLS
    assert tool_runs(procs.work) == {**expected["executions"], "charge": 2}


def test_agent_missing_at_recovery_keeps_the_run_pending_until_defined(
    zygote, children_database_url, tmp_path
) -> None:
    model = ScenarioModel()
    model.hold(0)
    with crash_setup(zygote, tmp_path, children_database_url, model) as (procs, server, _):
        first = procs.start("first", action="run", agent="Ghost")
        wait_for(lambda: model.arrived(0), "Ghost's model call", children=(first,))
        first.kill()
        result = procs.start("second", action="ghost_recover").finish()

    missing = result["while_missing"]
    assert missing["status"] == "pending"
    assert "'Ghost'" in missing["problem"]
    assert "import" in missing["problem"].lower()  # it says what to do
    assert any("'Ghost'" in line for line in missing["logged"])
    # once the agent's code was imported, the run went on and finished
    assert result["status"] == "succeeded"
    assert result["agent"] == "Ghost"
    assert [m["content"] for m in result["messages"]] == [GHOST_TEXT]
    assert result["messages"][0]["sender"] == "Ghost"
    assert server.request_count == 2  # the call in flight at the kill, made again
