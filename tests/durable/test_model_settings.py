"""Model settings and honest model failures of durable runs: the swarm's default model (and
`DURABLE_SWARM_MODEL`) recorded per call, one retry budget per model step, and one error that
names the run, step, model, base URL and cause and says how to resume."""

from __future__ import annotations

import logging

import pytest

from durable_swarm import Agent, DurableSwarm, ModelCallError, Swarm
from durable_swarm.testing import FakeOpenAIServer, Fault, ScriptedClient, text

USER = [{"role": "user", "content": "hello"}]


def shown_chain(error: BaseException) -> list[BaseException]:
    """The exceptions a traceback of `error` prints (its explicit or implicit causes)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None:
        chain.append(current)
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return chain


def _agent(name: str) -> Agent:
    return Agent(name=name, instructions="Be brief.", model="agent-model")


def test_swarm_model_overrides_each_agents_model():
    with FakeOpenAIServer() as server:
        Swarm(server.client(), model="swarm-model").run(_agent("Plain"), USER)
        Swarm(server.client(), model="swarm-model").run(
            _agent("Plain"), USER, model_override="run-model"
        )
        Swarm(server.client()).run(_agent("Plain"), USER)
        models = [r["model"] for r in server.requests]
    assert models == ["swarm-model", "run-model", "agent-model"]


def test_environment_names_the_default_model(monkeypatch):
    monkeypatch.setenv("DURABLE_SWARM_MODEL", "env-model")
    with FakeOpenAIServer() as server:
        Swarm(server.client()).run(_agent("Plain"), USER)
        Swarm(server.client(), model="argument-model").run(_agent("Plain"), USER)
        models = [r["model"] for r in server.requests]
    assert models == ["env-model", "argument-model"]
    assert DurableSwarm(ScriptedClient([text("x")])).model == "env-model"


def test_durable_runs_record_the_model_of_every_call(durable_swarm_factory, run_id, monkeypatch):
    monkeypatch.delenv("DURABLE_SWARM_MODEL", raising=False)
    with FakeOpenAIServer() as server:
        swarm = durable_swarm_factory(server.client(), model="small-local-model")
        swarm.run(_agent("Recorder"), USER, run_id=run_id)
        swarm.run(_agent("Recorder"), USER, run_id=run_id + "-own", model_override="other")
        assert [r["model"] for r in server.requests] == ["small-local-model", "other"]
    steps = [s for s in swarm.get_run(run_id).steps if s.kind == "model"]
    assert [s.output["model"] for s in steps] == ["small-local-model"]
    own = [s for s in swarm.get_run(run_id + "-own").steps if s.kind == "model"]
    assert [s.output["model"] for s in own] == ["other"]


@pytest.mark.parametrize("retries", [3, 1])
def test_a_hanging_endpoint_costs_one_retry_budget_then_one_clear_error(
    durable_swarm_factory, run_id, caplog, retries
):
    caplog.set_level(logging.WARNING, logger="dbos")
    with FakeOpenAIServer(latency=60) as server:
        # the client would retry twice itself; in a durable run only the step's budget counts
        client = server.client(timeout=0.2, max_retries=2)
        kwargs = {} if retries == 3 else {"model_retries": retries}
        swarm = durable_swarm_factory(client, model="tiny", **kwargs)
        with pytest.raises(ModelCallError) as caught:
            swarm.run(_agent("Hanging"), USER, run_id=run_id)
        assert server.request_count == retries + 1

    error = caught.value
    text_ = str(error)
    for part in (
        f"Run {run_id!r}",
        "step 1 (model:Hanging)",
        "model 'tiny'",
        server.base_url,
        f"after {retries + 1} requests",
        "APITimeoutError: Request timed out",
        f"durable-swarm runs resume {run_id}",
        f"resume({run_id!r})",
    ):
        assert part in text_, part
    assert (error.run_id, error.step, error.agent, error.model) == (run_id, 1, "Hanging", "tiny")
    assert shown_chain(error) == [error]  # no chained DBOS or "no running event loop" noise
    info = swarm.get_run(run_id)
    assert info.status == "failed"
    assert info.error == text_
    records = [r for r in caplog.records if r.name == "dbos" and run_id in r.getMessage()]
    assert len(records) == retries + 1  # one line per failed attempt, the last one the run's
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in records)


def test_a_refused_request_fails_at_once_and_resume_continues(durable_swarm_factory, run_id):
    with FakeOpenAIServer() as server:
        swarm = durable_swarm_factory(server.client(api_key="k"), model="tiny")
        server.inject(Fault.status(404, "model 'tiny' not found"))
        with pytest.raises(ModelCallError, match="after 1 request: NotFoundError") as caught:
            swarm.run(_agent("Refused"), USER, run_id=run_id)
        assert server.request_count == 1
        assert "model 'tiny' not found" in str(caught.value)
        response = swarm.resume(run_id).result()
        assert server.request_count == 2
    assert response.messages[-1]["role"] == "assistant"
    assert swarm.get_run(run_id).status == "succeeded"


def test_model_retries_must_be_a_count():
    with pytest.raises(Exception, match="model_retries must be a whole number"):
        DurableSwarm(ScriptedClient([text("x")]), model_retries=-1)
