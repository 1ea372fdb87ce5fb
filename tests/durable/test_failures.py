"""Model failures (transient and permanent), resume, cancel and fork of durable runs."""

from __future__ import annotations

import logging
import threading
import uuid

import openai
import pytest

from _support.wait import scaled
from durable_swarm import (
    Agent,
    Budget,
    BudgetExceededError,
    DurableSwarmError,
    ModelCallError,
    Swarm,
)
from durable_swarm.testing import FakeOpenAIServer, Fault, ScriptedClient, ToolCall, calls, text

from . import _scenarios
from ._harness import ScenarioModel, processes, scenario_server
from ._scenarios import (
    MODEL_CALLS,
    STAGE_NOTE,
    STAGE_TRANSFER,
    START_CONTEXT,
    USER_MESSAGES,
    executions,
)


def expected_response(tool_dir):
    """The scenario's uninterrupted result (in memory), leaving the tool logs as they were."""
    logs = {p: p.read_text() for p in tool_dir.iterdir()}
    response = Swarm(ScriptedClient(_scenarios.reply)).run(
        _scenarios.triage, USER_MESSAGES, START_CONTEXT
    )
    for p in tool_dir.iterdir():
        p.unlink()
    for p, content in logs.items():
        p.write_text(content)
    return response


def test_transient_500s_are_retried_then_fail_and_resume_finishes(
    durable_swarm_factory, run_id, tool_dir
):
    model = ScenarioModel()
    model.break_from(STAGE_TRANSFER, Fault.status(500))
    with scenario_server(model) as server:
        # the client's own retries are not used in durable runs: the step's are the only ones
        swarm = durable_swarm_factory(server.client(max_retries=2))

        with pytest.raises(ModelCallError, match="model:Triage"):
            swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)

        assert model.arrived(STAGE_TRANSFER) == 4  # the step's 4 attempts, not 4 x 3
        info = swarm.get_run(run_id)
        assert info.status == "failed"
        assert "model:Triage" in (info.error or "")
        assert [s.kind for s in info.steps if s.error is None] == ["model", "tool"]
        assert info.context_variables["notes"] == ["hello"]  # kept from the finished tool

        model.repair()
        response = swarm.resume(run_id).result()

    assert response.messages == expected_response(tool_dir).messages
    assert swarm.get_run(run_id).status == "succeeded"
    assert model.arrived(STAGE_NOTE) == 1  # the finished model call was not made again
    assert server.request_count == 4 + MODEL_CALLS
    assert len(executions(tool_dir, "note")) == 1  # the finished tool did not run again


def test_exhausted_retries_record_the_model_error(backend, durable_swarm_factory, run_id, tool_dir):
    if backend == "postgres":
        pytest.skip("the recorded error text does not depend on the database (3 s of retries)")
    model = ScenarioModel()
    model.break_from(STAGE_NOTE, Fault.status(500, "the model is down"))
    with scenario_server(model) as server:
        swarm = durable_swarm_factory(server.client(max_retries=0))
        with pytest.raises(Exception):  # noqa: B017
            swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)

    assert "the model is down" in (swarm.get_run(run_id).error or "")


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, openai.BadRequestError), (401, openai.AuthenticationError)],
)
def test_permanent_error_fails_at_once_and_resume_finishes(
    durable_swarm_factory, run_id, tool_dir, status, error
):
    model = ScenarioModel()
    model.break_from(STAGE_TRANSFER, Fault.status(status, "permanent trouble"))
    with scenario_server(model) as server:
        swarm = durable_swarm_factory(server.client())

        with pytest.raises(ModelCallError, match=f"after 1 request: {error.__name__}"):
            swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)

        assert model.arrived(STAGE_TRANSFER) == 1  # not retried
        info = swarm.get_run(run_id)
        assert info.status == "failed"
        assert "permanent trouble" in (info.error or "")
        assert error.__name__ in (info.error or "")
        failed = [s for s in info.steps if s.error is not None]
        assert [(s.kind, s.name) for s in failed] == [("model", "Triage")]
        assert "permanent trouble" in (failed[0].error or "")

        model.repair()
        response = swarm.resume(run_id).result()

    assert response.messages == expected_response(tool_dir).messages
    assert response.agent is _scenarios.sales
    assert model.arrived(STAGE_NOTE) == 1
    assert server.request_count == 1 + MODEL_CALLS
    assert len(executions(tool_dir, "note")) == 1
    assert swarm.get_run(run_id).status == "succeeded"


@pytest.mark.parametrize("faults", [2, 3], ids=["two-faults", "three-faults"])
def test_429_then_success(durable_swarm_factory, run_id, tool_dir, faults):
    with scenario_server() as server:
        expected = Swarm(server.client()).run(_scenarios.triage, USER_MESSAGES, START_CONTEXT)
        server.reset()
        # The step makes up to 4 requests (the client's max_retries is not used in durable
        # runs): 2 or 3 faults are absorbed by its retries.
        server.inject(Fault.status(429), times=faults)
        swarm = durable_swarm_factory(server.client(max_retries=2))

        response = swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)

    assert response.messages == expected.messages
    assert response.context_variables == expected.context_variables
    assert server.stats["faults"] == faults
    assert server.request_count == faults + MODEL_CALLS
    info = swarm.get_run(run_id)
    assert info.status == "succeeded"
    assert [s.kind for s in info.steps].count("model") == MODEL_CALLS
    assert all(s.error is None for s in info.steps)


def test_cancel_a_run_in_a_slow_tool_then_resume(durable_swarm_factory, run_id):
    entered, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def slow(context_variables: dict) -> str:
        """A slow tool."""
        runs.append(1)
        context_variables["slow"] = "done"
        entered.set()
        release.wait(60)
        return "slow done"

    agent = Agent(name="Sloth", functions=[slow])
    client = ScriptedClient(
        lambda messages, tools: (
            text("finished") if _scenarios.stage(messages) else calls(ToolCall("slow", id="c1"))
        )
    )
    swarm = durable_swarm_factory(client)

    handle = swarm.start(agent, [{"role": "user", "content": "go"}], run_id=run_id)
    assert entered.wait(60)
    pending = swarm.get_run(run_id)
    assert pending.status == "pending"
    assert [s.kind for s in pending.steps] == ["model"]
    assert pending.messages[-1]["tool_calls"][0]["function"]["name"] == "slow"

    swarm.cancel(run_id)
    assert swarm.get_run(run_id).status == "cancelled"
    release.set()
    with pytest.raises(Exception, match="cancel"):
        handle.result()
    assert swarm.get_run(run_id).status == "cancelled"

    response = swarm.resume(run_id).result()

    assert [m["role"] for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.messages[1]["content"] == "slow done"
    assert response.messages[-1]["content"] == "finished"
    assert response.context_variables == {"slow": "done"}
    assert client.call_count == 2  # the finished model call was not made again
    assert 1 <= len(runs) <= 2  # the tool was in flight: at least once
    assert swarm.get_run(run_id).status == "succeeded"


def test_fork_copies_the_steps_before_the_fork_point(durable_swarm_factory, run_id, tool_dir):
    client = ScriptedClient(_scenarios.reply)
    swarm = durable_swarm_factory(client)
    original = swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)
    steps = swarm.get_run(run_id).steps
    at = next(s.step for s in steps if (s.kind, s.name) == ("model", "Sales"))

    fork = swarm.fork(run_id, at)
    response = fork.result()

    assert fork.run_id != run_id
    info = swarm.get_run(fork.run_id)
    assert info.forked_from == run_id
    assert info.status == "succeeded"
    copied = [(s.step, s.kind, s.name, s.output) for s in info.steps if s.step < at]
    assert copied == [(s.step, s.kind, s.name, s.output) for s in steps if s.step < at]
    assert client.call_count == 4 + 2  # only Sales' two model calls were made again
    assert [len(executions(tool_dir, t)) for t in ("note", "transfer_to_sales", "charge")] == [
        1,
        1,
        2,
    ]
    assert response.messages == original.messages
    assert response.agent is _scenarios.sales
    assert response.context_variables == original.context_variables


def test_fork_outside_the_steps_is_refused(durable_swarm_factory, run_id, tool_dir):
    swarm = durable_swarm_factory(ScriptedClient(_scenarios.reply))
    swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)
    last = swarm.get_run(run_id).steps[-1].step

    for step in (0, last + 2):
        with pytest.raises(DurableSwarmError, match=f"step {step}"):
            swarm.fork(run_id, step)


def test_resume_of_a_succeeded_run_is_refused(durable_swarm_factory, run_id, tool_dir):
    swarm = durable_swarm_factory(ScriptedClient(_scenarios.reply))
    swarm.run(_scenarios.triage, USER_MESSAGES, START_CONTEXT, run_id=run_id)

    with pytest.raises(DurableSwarmError, match="already succeeded"):
        swarm.resume(run_id)


@pytest.mark.parametrize("where", ["tool", "model"])
def test_tool_raising_keyboard_interrupt_fails_the_run_and_spares_the_process(
    zygote, children_database_url, tmp_path, where
):
    work = tmp_path / "work"
    work.mkdir()
    with (
        processes(
            zygote,
            work,
            database_url=children_database_url,
            base_url="http://127.0.0.1:9/v1",  # the model is scripted in the child
            executor_id=f"interrupt-{uuid.uuid4().hex[:6]}",
            run_id=f"interrupt-{uuid.uuid4().hex[:8]}",
        ) as procs
    ):
        result = procs.start("interrupted", action=f"{where}_interrupt").finish()

    assert result["status"] == "failed"
    assert "KeyboardInterrupt" in (result["error"] or "")
    assert result["next"] == "ok"


def test_resume_of_a_run_in_flight_starts_no_second_execution(durable_swarm_factory, run_id):
    # DBOS's own resume puts a pending run back on a queue even while it executes: the queue
    # would start it again beside the first execution, and the tool in flight would run twice.
    entered, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow_note(text: str) -> str:
        """Note something, slowly."""
        runs.append(text)
        entered.set()
        release.wait(scaled(60))
        return "noted"

    agent = Agent(name="Noter", functions=[slow_note])
    client = ScriptedClient([calls(ToolCall("slow_note", {"text": "x"})), text("done")])
    swarm = durable_swarm_factory(client)
    handle = swarm.start(agent, [{"role": "user", "content": "note x"}], run_id=run_id)
    assert entered.wait(scaled(60))
    assert swarm.resume(run_id).run_id == run_id  # pending: nothing to resume
    assert swarm.get_run(run_id).status == "pending"
    release.set()
    assert handle.result().messages[-1]["content"] == "done"
    assert runs == ["x"]
    assert len(client.requests) == 2


def test_a_streamed_turn_retried_after_a_429_starts_once(durable_swarm_factory, run_id):
    """The turn's `{"delim": "start"}` goes out with its first chunk: a request refused before
    any chunk and retried by the step leaves readers the same events as one that was not."""
    agent = Agent(name="Speaker")
    user = [{"role": "user", "content": "hi"}]
    with FakeOpenAIServer(lambda messages, tools: text("one two three")) as server:
        expected = list(Swarm(server.client()).run(agent, user, stream=True))
        server.reset()
        server.inject(Fault.status(429), times=1)
        swarm = durable_swarm_factory(server.client())

        events = list(swarm.run(agent, user, stream=True, run_id=run_id))

    assert server.stats["faults"] == 1
    assert [e for e in events if "delim" in e] == [{"delim": "start"}, {"delim": "end"}]
    assert events[:-1] == expected[:-1]
    assert events[-1]["response"].messages == expected[-1]["response"].messages


def test_a_failed_run_says_so_on_the_runs_log(durable_swarm_factory, run_id, caplog):
    """`durable_swarm.runs` (a worker prints it) has a line for a run that fails here, as for
    one that succeeds, with the error's type and first line."""
    swarm = durable_swarm_factory(ScriptedClient([text("never")]))
    capped = Budget(max_model_calls=0)

    user = [{"role": "user", "content": "hi"}]
    logged = caplog.at_level(logging.INFO, logger="durable_swarm.runs")
    with logged, pytest.raises(BudgetExceededError):
        swarm.run(Agent(name="Capped"), user, run_id=run_id, budget=capped)

    assert f"run {run_id} failed: BudgetExceededError: " in caplog.text
