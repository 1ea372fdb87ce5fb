"""Runs that span processes: started in one process and finished by another, and a run's event
stream read by another process while the run goes on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from _support.wait import scaled
from durable_swarm import Agent, Swarm
from durable_swarm.testing import ScriptedClient, ToolCall, calls, text

from . import _scenarios
from ._harness import ScenarioModel, jsonable, processes, scenario_server, wait_for
from ._scenarios import MODEL_AND_TOOL_STEPS, MODEL_CALLS, START_CONTEXT, USER_MESSAGES, executions


def test_run_started_by_one_process_is_finished_by_another(
    zygote, children_database_url, tmp_path, tool_dir
):
    # the uninterrupted transcript (in memory; tool_dir keeps its tool runs apart)
    memory = Swarm(ScriptedClient(_scenarios.reply))
    expected = jsonable(memory.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT))
    work = tmp_path / "work"
    work.mkdir()
    run_id = f"handover-{uuid.uuid4().hex[:10]}"
    model = ScenarioModel()
    with (
        scenario_server(model) as server,
        processes(
            zygote,
            work,
            database_url=children_database_url,
            base_url=server.base_url,
            run_id=run_id,
        ) as procs,
    ):
        # A starts the run and leaves (os._exit, no cleanup) once its first model call and first
        # tool call are checkpointed (it pauses right after them, before the next model call)
        a = procs.start(
            "worker-a",
            action="start_then_exit",
            executor_id=f"worker-a-{uuid.uuid4().hex[:6]}",
            hang="between",
            exit_after_steps=2,
        )
        wait_for(lambda: a.poll() is not None, "worker A to leave")
        assert a.poll() == 0
        # B is another worker (another executor id): it resumes the run A left behind
        result = procs.start(
            "worker-b", action="resume", executor_id=f"worker-b-{uuid.uuid4().hex[:6]}"
        ).finish()

    assert result["status"] == "succeeded"
    assert result["messages"] == expected["messages"]
    assert result["context_variables"] == expected["context_variables"]
    assert result["agent"] == "Sales" and result["agent_is_object"]
    effects = [(kind, name) for _, kind, name in result["steps"] if kind in ("model", "tool")]
    assert effects == MODEL_AND_TOOL_STEPS
    assert server.request_count == MODEL_CALLS  # A's finished model call was not made again
    for tool in ("note", "transfer_to_sales", "charge"):
        assert len(executions(work, tool)) == 1, tool


def test_stream_is_read_by_another_process_while_the_run_goes_on(
    zygote, durable_swarm_factory, database_url, tmp_path, run_id
):
    work = tmp_path / "work"
    work.mkdir()
    readers: dict[str, Any] = {}

    def wait_for_reader() -> str:
        """Wait until the other process has read the first turn's events."""
        reader = readers["child"]
        wait_for(
            lambda: {"delim": "end"} in reader.events(),
            "the other process to read the first turn",
            children=(reader,),
        )
        return "the reader is here"

    agent = Agent(name="Narrator", functions=[wait_for_reader])
    client = ScriptedClient(
        lambda messages, tools: (
            text("And so the story ends, happily.")
            if _scenarios.stage(messages)
            else calls(ToolCall("wait_for_reader", id="c1"))
        )
    )
    swarm = durable_swarm_factory(client)
    threaded: list[Any] = []

    handle = swarm.start(
        agent, [{"role": "user", "content": "tell me"}], stream=True, run_id=run_id
    )
    with (
        processes(
            zygote,
            work,
            database_url=database_url,
            base_url="http://127.0.0.1:9/v1",  # the reader never calls the model
            executor_id=f"reader-{uuid.uuid4().hex[:6]}",
            run_id=run_id,
        ) as procs
    ):
        readers["child"] = reader = procs.start("reader", action="read_events")
        thread = threading.Thread(target=lambda: threaded.extend(swarm.handle(run_id).events()))
        thread.start()
        events = list(handle.events())
        thread.join(timeout=90)
        result = reader.finish()

    other_process = reader.events()
    assert jsonable(events[:-1]) == other_process[:-1] == jsonable(threaded[:-1])
    assert [e for e in other_process if "delim" in e] == [{"delim": "start"}, {"delim": "end"}] * 2
    response = events[-1]["response"]
    assert other_process[-1]["response"]["messages"] == jsonable(response.messages)
    assert result["messages"] == jsonable(response.messages)
    assert response.messages[-1]["content"] == "And so the story ends, happily."
    # and after the run, a new reader still gets every event from the start
    assert jsonable(list(swarm.handle(run_id).events())[:-1]) == other_process[:-1]


def test_a_run_started_but_not_begun_in_a_busy_process_is_not_handed_back(
    children_database_url: str, tmp_path: Path
) -> None:
    # The process's event loop is blocked for 4 x dead_after right after it starts a run: the
    # run's row ages while its task has not begun, and the ownership thread, which gives back
    # runs this process owns but does not run, must count it as this process's own work.
    run_id = f"stalled-{uuid.uuid4().hex[:10]}"
    tool_log = tmp_path / "tool.log"
    script = Path(__file__).with_name("_stalled_start.py")
    done = subprocess.run(
        [sys.executable, str(script), children_database_url, run_id, str(tool_log)],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [line for line in report["said"] if "stopped on a database error" in line], report
    assert report["answer"] == "done" and report["status"] == "succeeded"
    assert report["tool_runs"] == 1
